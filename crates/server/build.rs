//! Embeds the web UI: every file under `ui/` becomes an entry of `ASSETS` (path relative to `ui/`,
//! bytes), except what only the type check reads (`*.d.ts` declarations and `tsconfig.json`, see
//! `make lint-ui`). Written by hand (a dozen lines) rather than with an embedding crate, to keep the
//! dependency tree and compile time small.

use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if served(&path) {
            out.push(path);
        }
    }
}

/// Whether the browser may load the file: declarations and the type checker's settings are not.
fn served(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    !name.ends_with(".ts") && name != "tsconfig.json"
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut code =
        String::from("/// The UI's files: path below `ui/`, content.\npub static ASSETS: &[(&str, &[u8])] = &[\n");
    for f in files {
        let rel = f.strip_prefix(&root).unwrap_or(&f).to_string_lossy().replace('\\', "/");
        code.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            f.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("ui_assets.rs");
    if let Err(e) = std::fs::write(&out, code) {
        panic!("writing {}: {e}", out.display());
    }
}
