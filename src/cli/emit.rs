//! `ptxflow emit --out DIR [--target sm_XX]`: writes each kernel's PTX for review or use elsewhere.

use ptxflow::kernels::ALL_KERNELS;
use ptxflow::ptx::Target;
use ptxflow::Error;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct EmitArgs {
    /// Directory to write `<kernel>.ptx` files into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Build every kernel for this target (sm_75, sm_80, sm_86, sm_89, sm_90) instead of the
    /// targets each kernel ships.
    #[arg(long)]
    target: Option<String>,
}

pub fn run(args: EmitArgs) -> ptxflow::Result<()> {
    let forced = match &args.target {
        Some(t) => Some(Target::parse(t).ok_or_else(|| {
            Error::input(format!(
                "unknown target `{t}` (expected one of sm_75, sm_80, sm_86, sm_89, sm_90)"
            ))
        })?),
        None => None,
    };
    std::fs::create_dir_all(&args.out).map_err(|source| Error::Io {
        path: args.out.clone(),
        source,
    })?;
    let mut written = 0;
    for &id in ALL_KERNELS {
        let targets: Vec<Target> = match forced {
            Some(t) => vec![t],
            None => id.targets().to_vec(),
        };
        for t in targets {
            let (stem, ptx) = match (forced, ptxflow::embedded::ptx(id, t)) {
                (None, Some(p)) => (id.file_stem(t), p.to_string()),
                _ => {
                    let ptx = id
                        .build(t)
                        .emit()
                        .map_err(|e| Error::input(format!("{}: {e}", id.name())))?;
                    (id.name().to_string(), ptx)
                }
            };
            let path = args.out.join(format!("{stem}.ptx"));
            // Through a temporary file: a failed run never leaves a half-written .ptx behind.
            super::output::write_atomic(&path, ptx.as_bytes())?;
            written += 1;
        }
    }
    println!("wrote {written} PTX files to {}", args.out.display());
    Ok(())
}
