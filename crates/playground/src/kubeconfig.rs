//! The admin kubeconfig written to `DIR/kubeconfig`, with the certificates embedded so the file can
//! be copied elsewhere.

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
    std::fs::write(path, yaml).map_err(Error::io(format!("writing {}", path.display())))
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
