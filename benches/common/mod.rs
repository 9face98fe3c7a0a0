//! Bench helpers: the GPU-or-skip rule and event-timed loops.
#![allow(dead_code)]

use ptxflow::runtime::{CudaStream, Gpu, GpuTimer};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The GPU, or `None` after saying why GPU benches are skipped (panics under PTXFLOW_REQUIRE_GPU=1).
pub fn gpu_or_skip() -> Option<Arc<Gpu>> {
    match Gpu::open_default() {
        Ok(g) => {
            eprintln!(
                "bench device: {} ({} SMs, peak DRAM {:.0} GB/s)",
                g.facts().name,
                g.facts().sm_count,
                g.facts().peak_dram_gbs()
            );
            Some(g)
        }
        Err(e) if std::env::var("PTXFLOW_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("PTXFLOW_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            eprintln!("GPU benches skipped: {e}");
            None
        }
    }
}

/// Runs `f` `iters` times between two CUDA events on `stream`; device time of the whole batch.
pub fn event_timed(stream: &Arc<CudaStream>, iters: u64, mut f: impl FnMut()) -> Duration {
    let timer = GpuTimer::new(stream).expect("create timing events");
    timer.start(stream).expect("record start");
    for _ in 0..iters {
        f();
    }
    Duration::from_secs_f64(timer.stop(stream).expect("record end"))
}

/// Median of `reps` event-timed single runs of `f`, in seconds (after one warm-up run).
pub fn median_secs(stream: &Arc<CudaStream>, reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| event_timed(stream, 1, &mut f).as_secs_f64())
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median host wall time of `reps` runs of `f` (after one warm-up), in seconds: for whole round
/// trips (host work, copies and synchronization included), where CUDA events would miss the host.
pub fn wall_median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The shared data directory (`PTXFLOW_DATA_DIR`, default `../shared/data`).
pub fn data_dir() -> PathBuf {
    std::env::var_os("PTXFLOW_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")))
}
