//! Which build of `ndt_derivatives` the pipeline runs, and its grid: the table's kernel for the
//! hash, run-time [`Variant`]s for the dense cell table and the experiments. Every variant sums
//! the same terms in the same order, so their records are equal bit for bit (`tests/ndt_sim.rs`
//! checks this in the interpreter); they differ only in speed. Environment variables, read when
//! a pipeline is created (`1` on, `0` off, unset: the default):
//! - `PTXFLOW_NDT_COMPACT`: the dense probes' hits compacted per thread before pairing;
//! - `PTXFLOW_NDT_PREFETCH` (implies compaction): the next hit's voxel record loaded ahead;
//! - `PTXFLOW_NDT_LINEAR`: dense probes of interior cells by table offset, without bounds;
//! - `PTXFLOW_NDT_SHARED_ACC`: the 28 accumulators in shared memory instead of registers;
//! - `PTXFLOW_NDT_SMALL_PREFETCH`: rounds of at most one block per SM (one alignment) run the
//!   prefetching variant whatever the others say;
//! - `PTXFLOW_NDT_SPLIT`: batches run as two groups in flight (`pipeline/split.rs`);
//! - `PTXFLOW_NDT_MIN_BLOCKS=n`: `.minnctapersm n` (an occupancy experiment);
//! - `PTXFLOW_NDT_BLOCKS_PER_SM=n`: the grid's aim in blocks per SM (default 8).
//!
//! The switches are off by default: none has run on a GPU yet (session 6 had no device time).
//! What is known without one: the variants' records equal the hash kernel's bit for bit in the
//! interpreter; with them all off the dense kernel's PTX is byte-identical to before; ptxas 13.0
//! for sm_90 gives the dense kernel 160 registers (3 blocks of 128 threads per SM), with shared
//! accumulators 96 (5 blocks; 34 KB of shared memory a block), with shared accumulators,
//! compaction and linear probes 128 (4 blocks), with linear probes alone 196 and with
//! prefetching 229, all without spills. `.gpu-17n/go.sh` (see the session-6 report) measures
//! and verifies them in one call.

use crate::kernels::ndt::derivatives::{build_variant, Variant};
use crate::kernels::KernelId;
use crate::ptx::Target;
use crate::runtime::{Gpu, LoadedKernel};
use crate::Result;

/// Defaults of the switches above.
const COMPACT: bool = false;
const PREFETCH: bool = false;
const SHARED_ACC: bool = false;
const LINEAR: bool = false;
const SMALL_PREFETCH: bool = false;
/// Default of `PTXFLOW_NDT_SPLIT` (see `pipeline/split.rs`).
pub(super) const SPLIT: bool = false;

/// Whether the switch `name` is on (`1`), off (`0`) or, unset, `default`.
pub(super) fn env_switch(name: &str, default: bool) -> bool {
    match std::env::var(name).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => default,
    }
}

/// The variant for the dense table (`dense`) or the hash, for any round or (`small`) for rounds
/// of at most one block per SM.
pub(super) fn variant_from_env(dense: bool, small: bool) -> Variant {
    let prefetch = dense
        && (env_switch("PTXFLOW_NDT_PREFETCH", PREFETCH)
            || (small && env_switch("PTXFLOW_NDT_SMALL_PREFETCH", SMALL_PREFETCH)));
    Variant {
        dense,
        min_blocks_per_sm: std::env::var("PTXFLOW_NDT_MIN_BLOCKS")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|n| (1..=16).contains(n)),
        compact: prefetch || (dense && env_switch("PTXFLOW_NDT_COMPACT", COMPACT)),
        prefetch,
        linear: dense && env_switch("PTXFLOW_NDT_LINEAR", LINEAR),
        shared_acc: env_switch("PTXFLOW_NDT_SHARED_ACC", SHARED_ACC),
    }
}

/// Loads `variant`: the table's `ndt_derivatives` for the default, else built at run time.
pub(super) fn derivative_kernel(gpu: &Gpu, variant: Variant) -> Result<LoadedKernel> {
    if variant == Variant::default() {
        gpu.kernel(KernelId::NdtDerivatives)
    } else {
        gpu.load_module(&build_variant(Target::Sm75, variant), "ndt_derivatives")
    }
}

/// Blocks per SM a round's grid aims for when it has enough points: 8 (two waves at 4
/// resident), or `PTXFLOW_NDT_BLOCKS_PER_SM` (1..=64).
pub fn blocks_per_sm_from_env() -> usize {
    std::env::var("PTXFLOW_NDT_BLOCKS_PER_SM")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(8)
}
