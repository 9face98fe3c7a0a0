//! Shared helpers for integration tests: the GPU-or-skip rule and the data directory.
#![allow(dead_code)]

use ptxflow::runtime::Gpu;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// True when `PTXFLOW_REQUIRE_GPU=1`: a missing GPU is then a failure, not a skip.
pub fn gpu_required() -> bool {
    std::env::var("PTXFLOW_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The GPU, or `None` after printing why the test skips. Panics when a GPU is required.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    match Gpu::open_default() {
        Ok(g) => Some(g),
        Err(e) => {
            if gpu_required() {
                panic!("{test}: PTXFLOW_REQUIRE_GPU=1 but no GPU: {e}");
            }
            // Straight to stderr so the harness's capture does not hide the reason.
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
            None
        }
    }
}

/// The shared data directory (`PTXFLOW_DATA_DIR`, default `../shared/data`).
pub fn data_dir() -> PathBuf {
    std::env::var_os("PTXFLOW_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")))
}

/// A file under the data directory, or `None` after printing why the test skips.
pub fn data_file_or_skip(test: &str, rel: &str) -> Option<PathBuf> {
    let p = data_dir().join(rel);
    if p.exists() {
        Some(p)
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: data file {} not found",
            p.display()
        );
        None
    }
}
