//! The check of a file's MAC: the `sops.mac` value is itself an `ENC[]` value, encrypted with the data
//! key and `lastmodified` (as written) as additional data; its plaintext must equal the MAC computed
//! over the decrypted values (upper-case hex SHA-512, sops `Tree.Decrypt`).

use crate::error::SopsError;
use crate::metadata::Metadata;
use crate::tree::Node;
use crate::value::{self, Plain};

pub(crate) fn verify(meta: &Metadata, key: &[u8; 32], computed: &str) -> Result<(), SopsError> {
    let stored = match value::decrypt(&meta.mac, key, &meta.lastmodified, "sops.mac") {
        Ok(Plain::Value(Node::Str(s))) => s,
        Ok(_) => return Err(SopsError::TamperedMac),
        Err(SopsError::TamperedValue { .. }) => return Err(SopsError::TamperedMac),
        Err(SopsError::Malformed { .. }) => {
            return Err(SopsError::NotSops {
                reason: "sops.mac is not an ENC[AES256_GCM,…] value".into(),
            });
        }
        Err(e) => return Err(e),
    };
    if stored.eq_ignore_ascii_case(computed) {
        Ok(())
    } else {
        Err(SopsError::MacMismatch)
    }
}
