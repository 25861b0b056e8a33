//! SOPS decryption at render time (`spec.decryption`): a scratch copy of a checkout in which every
//! SOPS-encrypted YAML, JSON or dotenv file is replaced by its plaintext, so plain directories,
//! Kustomize (encrypted resources and `secretGenerator` env files) and Helm (encrypted value files,
//! `$ref` ones included) all read decrypted files. The shared checkout is never written; the copy is
//! deleted when the render ends. Plaintext stays in memory only as rendered objects of the render
//! cache, as any rendered Secret does.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capstan_sops::{Format, Identities};

use crate::RenderError;
use crate::paths::{copy_tree, display_rel};

/// The identities a render decrypts with, and what identifies them in render cache keys.
#[derive(Clone)]
pub struct Decryption {
    /// The age identities.
    pub identities: Arc<Identities>,
    /// A stable identifier of the key set (never key material): a new key set renders again.
    pub id: String,
}

impl std::fmt::Debug for Decryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decryption")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Files larger than this are not looked into (SOPS files are small; a large file is data).
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Copy the canonical checkout `root` to `dst` and decrypt the SOPS files in the copy. Returns how
/// many files were decrypted.
pub(crate) fn decrypted_copy(root: &Path, dst: &Path, identities: &Identities) -> Result<usize, RenderError> {
    copy_tree(root, dst)?;
    let mut decrypted = 0;
    let mut queue = VecDeque::from([dst.to_path_buf()]);
    while let Some(dir) = queue.pop_front() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| RenderError::io(format!("cannot list {}", dir.display()), e))?;
            let path = entry.path();
            let file_type = entry
                .file_type()
                .map_err(|e| RenderError::io(format!("cannot inspect {}", path.display()), e))?;
            if file_type.is_dir() {
                queue.push_back(path);
            } else if file_type.is_file() && decrypt_file(dst, &path, identities)? {
                decrypted += 1;
            }
        }
    }
    Ok(decrypted)
}

/// Decrypt `path` in place if it is a SOPS file. A file that names a top-level `sops` entry but is
/// not a valid SOPS file is an error, not rendered as it is.
fn decrypt_file(copy_root: &Path, path: &Path, identities: &Identities) -> Result<bool, RenderError> {
    let Some(format) = candidate_format(path) else {
        return Ok(false);
    };
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > MAX_FILE_BYTES {
        return Ok(false);
    }
    let bytes = std::fs::read(path).map_err(|e| RenderError::io(format!("cannot read {}", path.display()), e))?;
    if !mentions_sops(&bytes, format) {
        return Ok(false);
    }
    let file = display_rel(copy_root, path);
    let plaintext = capstan_sops::decrypt(&bytes, format, identities).map_err(|source| RenderError::Decrypt {
        file: file.clone(),
        source,
    })?;
    std::fs::write(path, plaintext).map_err(|e| RenderError::io(format!("cannot write {file}"), e))?;
    tracing::debug!(%file, "decrypted a SOPS file for the render");
    Ok(true)
}

/// The SOPS store a file would be read with, for the files tools read as data: YAML, JSON, dotenv.
fn candidate_format(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?;
    let format = Format::from_path(name);
    (format != Format::Binary).then_some(format)
}

/// Whether the file carries SOPS metadata at its top level: `sops:` at the start of a line (YAML),
/// a `"sops"` key (JSON), `sops_mac=` (dotenv). A cheap filter before parsing; `decrypt` decides.
fn mentions_sops(bytes: &[u8], format: Format) -> bool {
    let text = String::from_utf8_lossy(bytes);
    match format {
        Format::Yaml => text.lines().any(|l| l.starts_with("sops:")),
        Format::Json => text.contains("\"sops\"") && has_json_sops(bytes),
        Format::Dotenv => text.lines().any(|l| l.starts_with("sops_")),
        Format::Binary => false,
    }
}

/// A JSON object with a top-level `sops` key.
fn has_json_sops(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(bytes).is_ok_and(|m| m.contains_key("sops"))
}

/// The decrypted copies of one render: the source's checkout and the `$ref` sources' checkouts.
pub(crate) struct DecryptedRoots {
    _scratch: tempfile::TempDir,
    /// The source's checkout, decrypted.
    pub root: PathBuf,
    /// `(ref name, decrypted checkout)`.
    pub refs: Vec<(String, PathBuf)>,
}

/// Decrypted copies of `root` and of each `(name, root)` of `refs`, in one scratch directory.
pub(crate) fn decrypt_roots(
    root: &Path,
    refs: &[(String, PathBuf)],
    identities: &Identities,
) -> Result<DecryptedRoots, RenderError> {
    let scratch = tempfile::Builder::new()
        .prefix("capstan-decrypt-")
        .tempdir()
        .map_err(|e| RenderError::io("cannot create a scratch directory", e))?;
    let copy = scratch.path().join("source");
    decrypted_copy(root, &copy, identities)?;
    let mut out_refs = Vec::with_capacity(refs.len());
    for (i, (name, ref_root)) in refs.iter().enumerate() {
        let ref_copy = scratch.path().join(format!("ref-{i}"));
        let canonical = std::fs::canonicalize(ref_root)
            .map_err(|e| RenderError::io(format!("cannot open {}", ref_root.display()), e))?;
        decrypted_copy(&canonical, &ref_copy, identities)?;
        out_refs.push((name.clone(), ref_copy));
    }
    let root = std::fs::canonicalize(&copy).map_err(|e| RenderError::io("cannot open the decrypted copy", e))?;
    Ok(DecryptedRoots {
        _scratch: scratch,
        root,
        refs: out_refs,
    })
}
