//! The admin kubeconfig written to `DIR/kubeconfig` (mode 0600: it embeds the admin's key), with the
//! certificates embedded so the file can be copied elsewhere.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::pki::PkiPaths;
use crate::{Error, Result};

/// Write a kubeconfig for `server` authenticating as the playground's admin.
pub fn write(path: &Path, server: &str, context: &str, pki: &PkiPaths) -> Result<()> {
    let read = |p: &Path| -> Result<String> {
        let bytes = std::fs::read(p).map_err(Error::io(format!("reading {}", p.display())))?;
        Ok(STANDARD.encode(bytes))
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": context,
            "cluster": {"server": server, "certificate-authority-data": read(&pki.ca_cert)?},
        }],
        "users": [{
            "name": format!("{context}-admin"),
            "user": {
                "client-certificate-data": read(&pki.admin_cert)?,
                "client-key-data": read(&pki.admin_key)?,
            },
        }],
        "contexts": [{
            "name": context,
            "context": {"cluster": context, "user": format!("{context}-admin"), "namespace": "default"},
        }],
        "current-context": context,
    });
    let yaml = serde_saphyr::to_string(&config).map_err(|e| Error::Format {
        context: format!("writing {}", path.display()),
        message: e.to_string(),
    })?;
    // It holds the admin's private key: readable by its owner only.
    crate::pki::write(path, &yaml)
}

/// A kube client for the kubeconfig at `path`.
pub async fn client(path: &Path) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Format {
        context: format!("reading {}", path.display()),
        message: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::Format {
            context: format!("loading {}", path.display()),
            message: e.to_string(),
        })?;
    kube::Client::try_from(config).map_err(Error::kube(format!("creating a client from {}", path.display())))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_kubeconfig_is_readable_by_its_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = crate::pki::ensure(&dir.path().join("pki")).expect("pki");
        let path = dir.path().join("kubeconfig");
        // Also when an older playground left it world-readable.
        std::fs::write(&path, "old").expect("an old kubeconfig");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        super::write(&path, "https://127.0.0.1:6443", "local", &pki).expect("kubeconfig");
        let mode = std::fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "mode {mode:o}");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("client-key-data"), "{text}");
    }
}
