//! [`Tool`]: which renderer a source's path calls for (Helm, Kustomize or a plain directory), as
//! Argo CD chooses it, and the file names that make a directory a kustomization.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The file names Kustomize accepts, in its order of preference.
pub const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// The kustomization file in `dir`, if any.
pub fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILES.iter().map(|f| dir.join(f)).find(|p| p.is_file())
}

/// How a source was rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Tool {
    /// A plain directory of YAML/JSON manifests.
    Directory,
    /// `kustomize build`.
    Kustomize,
    /// `helm template`.
    Helm,
}

impl Tool {
    /// `Directory`, `Kustomize` or `Helm`, as Argo CD names source types.
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Directory => "Directory",
            Tool::Kustomize => "Kustomize",
            Tool::Helm => "Helm",
        }
    }

    /// The tool a directory calls for: `Chart.yaml` → Helm, a kustomization file → Kustomize, otherwise
    /// a plain directory.
    pub fn detect(dir: &Path) -> Tool {
        if dir.join("Chart.yaml").is_file() {
            Tool::Helm
        } else if kustomization_file(dir).is_some() {
            Tool::Kustomize
        } else {
            Tool::Directory
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_detection() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Directory);
        std::fs::write(dir.path().join("Kustomization"), "resources: []\n").unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Kustomize);
        std::fs::write(dir.path().join("Chart.yaml"), "name: x\n").unwrap();
        assert_eq!(Tool::detect(dir.path()), Tool::Helm);
    }
}
