//! SOPS files for tests: age keys generated with the `age` crate, files encrypted by the real `sops`
//! binary (built by `bash scripts/setup.sh`, step `sops`) in a clean environment.

use std::path::PathBuf;
use std::process::Command;

use age::secrecy::ExposeSecret;
use anyhow::{Context, bail};

/// An age key pair: the identity file's text and its public recipient.
#[derive(Clone)]
pub struct AgeKey {
    /// `AGE-SECRET-KEY-1…` with a comment line, as `age-keygen` writes it.
    pub identity: String,
    /// `age1…`.
    pub recipient: String,
}

impl AgeKey {
    /// A fresh X25519 key pair.
    pub fn generate() -> AgeKey {
        let id = age::x25519::Identity::generate();
        AgeKey {
            identity: format!("# created for a test\n{}\n", id.to_string().expose_secret()),
            recipient: id.to_public().to_string(),
        }
    }
}

/// The `sops` binary in Capstan's tool cache.
pub fn sops_bin() -> anyhow::Result<PathBuf> {
    let bin = capstan_playground::binaries::cache_dir().join("bin/sops");
    if !bin.is_file() {
        bail!(
            "{} is missing: run `bash scripts/setup.sh` (step sops) first",
            bin.display()
        );
    }
    Ok(bin)
}

/// `plain` encrypted as a file named `name` (the name chooses YAML, JSON or dotenv) for
/// `recipients` by the real sops, with `extra` arguments (`--encrypted-regex`, …).
pub fn encrypt(name: &str, plain: &str, recipients: &[&AgeKey], extra: &[&str]) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(name);
    std::fs::write(&path, plain)?;
    let recipients: Vec<&str> = recipients.iter().map(|k| k.recipient.as_str()).collect();
    let out = Command::new(sops_bin()?)
        .env_clear()
        .env("HOME", dir.path())
        .env("PATH", "/usr/bin:/bin")
        .current_dir(dir.path())
        .args(["--disable-version-check", "encrypt", "--age"])
        .arg(recipients.join(","))
        .args(extra)
        .arg(&path)
        .output()
        .context("running sops")?;
    if !out.status.success() {
        bail!("sops encrypt {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}
