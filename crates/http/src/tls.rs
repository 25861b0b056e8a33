//! The rustls configuration of a client: the ring provider, its safe default protocol versions
//! (TLS 1.2 and 1.3), and as trust anchors the system's roots plus the caller's CA certificates —
//! or, with `insecure`, no certificate verification at all.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::TlsError;
use crate::insecure::AcceptAny;

/// The configuration trusting the system's roots and every certificate of `extra_ca` (PEM text,
/// which must hold at least one, all usable), or nothing at all when `insecure` (then `extra_ca`
/// is not read).
pub(crate) fn config(extra_ca: Option<&str>, insecure: bool) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Protocols)?;
    if insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = extra_ca {
        add_pem(&mut roots, pem)?;
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Add every certificate of `pem` to `roots`.
fn add_pem(roots: &mut rustls::RootCertStore, pem: &str) -> Result<(), TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(TlsError::Pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let (_, refused) = roots.add_parsable_certificates(certs);
    if refused > 0 {
        return Err(TlsError::Refused(refused));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_text_must_hold_usable_certificates() {
        let mut roots = rustls::RootCertStore::empty();
        assert!(matches!(add_pem(&mut roots, ""), Err(TlsError::NoCertificate)));
        assert!(matches!(
            add_pem(&mut roots, "not a certificate\n"),
            Err(TlsError::NoCertificate)
        ));
        let cut = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        assert!(
            matches!(add_pem(&mut roots, cut), Err(TlsError::Pem(_))),
            "a PEM without its end"
        );
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(matches!(add_pem(&mut roots, garbage), Err(TlsError::Refused(1))));
        assert!(roots.is_empty());
    }

    #[test]
    fn insecure_reads_no_ca() {
        assert!(config(Some("not a certificate"), true).is_ok());
        assert!(config(Some("not a certificate"), false).is_err());
        assert!(config(None, false).is_ok());
    }
}
