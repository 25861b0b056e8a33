//! The playground's private PKI: a CA, the API server's serving certificate, client certificates for
//! the admin user and the controller manager, and the service-account signing key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use crate::{Error, Result};

/// Paths of the PEM files under `DIR/pki`.
#[derive(Debug, Clone)]
pub struct PkiPaths {
    /// CA certificate.
    pub ca_cert: PathBuf,
    /// CA private key.
    pub ca_key: PathBuf,
    /// API server serving certificate.
    pub server_cert: PathBuf,
    /// API server serving key.
    pub server_key: PathBuf,
    /// Admin client certificate (group `system:masters`).
    pub admin_cert: PathBuf,
    /// Admin client key.
    pub admin_key: PathBuf,
    /// Service-account token signing key.
    pub sa_key: PathBuf,
    /// Its public half, which the API server verifies tokens with.
    pub sa_pub: PathBuf,
}

impl PkiPaths {
    /// The layout under `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            server_cert: dir.join("apiserver.crt"),
            server_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        }
    }

    fn all_exist(&self) -> bool {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.server_cert,
            &self.server_key,
            &self.admin_cert,
            &self.admin_key,
            &self.sa_key,
            &self.sa_pub,
        ]
        .iter()
        .all(|p| p.exists())
    }
}

/// Create the PKI under `dir` unless it already exists (certificates survive `down`/`up`).
pub fn ensure(dir: &Path) -> Result<PkiPaths> {
    let paths = PkiPaths::new(dir);
    if paths.all_exist() {
        return Ok(paths);
    }
    std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("capstan-playground-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])?;
    server.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    server.subject_alt_names.push(SanType::IpAddress([10, 96, 0, 1].into()));
    server.distinguished_name = name("kube-apiserver", None);
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &ca)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::default();
    admin.distinguished_name = name("capstan-admin", Some("system:masters"));
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let sa_key = KeyPair::generate()?;

    write(&paths.ca_cert, &ca.pem())?;
    write(&paths.ca_key, &ca_key_pem(&ca))?;
    write(&paths.server_cert, &server_cert.pem())?;
    write(&paths.server_key, &server_key.serialize_pem())?;
    write(&paths.admin_cert, &admin_cert.pem())?;
    write(&paths.admin_key, &admin_key.serialize_pem())?;
    write(&paths.sa_key, &sa_key.serialize_pem())?;
    write(&paths.sa_pub, &sa_key.public_key_pem())?;
    Ok(paths)
}

fn ca_key_pem(ca: &CertifiedIssuer<'_, KeyPair>) -> String {
    ca.key().serialize_pem()
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

/// Write `contents` to `path` readable by its owner only (mode 0600), also when the file existed
/// with a wider mode: keys, and the kubeconfig that embeds one.
pub(crate) fn write(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(Error::io(format!("writing {}", path.display())))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io(format!("restricting {}", path.display())))?;
    file.write_all(contents.as_bytes())
        .map_err(Error::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_once_and_keeps_existing_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = ensure(dir.path()).expect("pki");
        let ca = std::fs::read_to_string(&paths.ca_cert).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            std::fs::read_to_string(&paths.sa_key)
                .expect("sa")
                .contains("PRIVATE KEY")
        );
        let again = ensure(dir.path()).expect("pki again");
        assert_eq!(
            std::fs::read_to_string(&again.ca_cert).expect("ca"),
            ca,
            "CA must not be regenerated"
        );
    }
}
