//! Age X25519 identities, parsed from the text of an age key file.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use crate::error::SopsError;

/// The age X25519 identities a file may be decrypted with. Its `Debug` shows only public recipients.
pub struct Identities {
    keys: Vec<age::x25519::Identity>,
}

impl Identities {
    /// Parses the text of an age key file: one `AGE-SECRET-KEY-1...` per line; blank lines and `#`
    /// comments are ignored. An error names the line number, never its content.
    pub fn parse(text: &str) -> Result<Self, SopsError> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = age::x25519::Identity::from_str(line).map_err(|_| SopsError::BadIdentity { line: i + 1 })?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SopsError::NoIdentities);
        }
        Ok(Self { keys })
    }

    /// The public recipients (`age1...`) of these identities.
    pub fn recipients(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.to_public().to_string()).collect()
    }

    /// Decrypts an armored age message (a SOPS `enc` field). `None` when no identity matches.
    pub(crate) fn decrypt_armored(&self, armored: &str) -> Result<Option<Vec<u8>>, SopsError> {
        let reader = age::armor::ArmoredReader::new(armored.as_bytes());
        let decryptor = age::Decryptor::new(reader)
            .map_err(|e| crate::error::malformed(format!("age: the encrypted data key is not an age message ({e})")))?;
        if decryptor.is_scrypt() {
            return Err(crate::error::malformed(
                "age: the data key is passphrase-encrypted, not for a recipient",
            ));
        }
        let mut reader = match decryptor.decrypt(self.keys.iter().map(|k| k as &dyn age::Identity)) {
            Ok(r) => r,
            Err(age::DecryptError::NoMatchingKeys) => return Ok(None),
            Err(e) => return Err(crate::error::malformed(format!("age: {e}"))),
        };
        let mut out = Vec::new();
        reader
            .read_to_end(&mut out)
            .map_err(|e| crate::error::malformed(format!("age: reading the data key: {e}")))?;
        Ok(Some(out))
    }
}

impl fmt::Debug for Identities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identities")
            .field("recipients", &self.recipients())
            .finish()
    }
}
