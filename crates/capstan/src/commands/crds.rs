//! `capstan crds --out DIR`: write the CRDs generated from the Rust types (used by `make crds`).

use crate::output::{out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `capstan crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Directory to write the CRD files to (printed to stdout when absent).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Write or print every CRD.
pub fn run(args: CrdsArgs) -> anyhow::Result<ExitCode> {
    for (file, crd) in capstan_api::crd::all() {
        let yaml = capstan_api::crd::to_yaml(&crd).context("serialising a CRD")?;
        match &args.out {
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(file);
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                outln!("wrote {}", path.display());
            }
            None => out!("---\n{yaml}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
