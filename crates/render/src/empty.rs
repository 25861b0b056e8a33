//! No silent empty renders: when a source renders no object and the request does not allow it, the
//! error says what the source's directory holds — the files a plain directory skipped (the first ten
//! and a count), that it holds no file at all, or that Helm or Kustomize printed nothing — so that a
//! layout Capstan does not read never looks like an empty desired state.

use crate::kind::Tool;
use crate::paths::{normalise_app_path, resolve_in_repo};
use crate::request::RenderRequest;
use crate::task::blocking;
use crate::{RenderError, directory};

/// Most skipped files an [`RenderError::EmptyRender`] names.
const SKIPPED_NAMED: usize = 10;

/// Why `req`'s source rendered nothing: the files a directory skipped, or the tool that printed nothing.
pub(crate) async fn empty_render(req: &RenderRequest<'_>, tool: Tool) -> RenderError {
    let path = normalise_app_path(&req.source.path);
    let (root, options) = (req.repo_root.to_path_buf(), req.source.directory.clone());
    let rel = path.clone();
    let listing = blocking(move || {
        let root = std::fs::canonicalize(&root).map_err(|e| RenderError::io("cannot open the checkout", e))?;
        let dir = resolve_in_repo(&root, &root, &rel)?;
        directory::skipped_files(&dir, options.as_ref())
    })
    .await;
    let detail = match (tool, listing) {
        (Tool::Directory, Ok((_, 0))) => "the directory contains no files".to_string(),
        (Tool::Directory, Ok((skipped, _))) if skipped.is_empty() => {
            "its manifest and Jsonnet files declare no objects".to_string()
        }
        (Tool::Directory, Ok((skipped, _))) => {
            let named: Vec<&str> = skipped.iter().take(SKIPPED_NAMED).map(String::as_str).collect();
            let more = skipped.len().saturating_sub(SKIPPED_NAMED);
            format!(
                "{} skipped file{} (not YAML, JSON or .jsonnet, or left out by include/exclude): {}{}",
                skipped.len(),
                if skipped.len() == 1 { "" } else { "s" },
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        }
        (Tool::Directory, Err(e)) => format!("its files cannot be listed: {e}"),
        (Tool::Helm, _) => "helm template printed no objects".to_string(),
        (Tool::Kustomize, _) => "kustomize build printed no objects".to_string(),
    };
    RenderError::EmptyRender { path, tool, detail }
}
