//! The f32 backward with each Gaussian's sums on the FP64 tensor cores
//! (`gaussian_backward_tc_f32`, see `crate::kernels::gaussian::backward` and its `tc` kernel
//! docs): its build options and loading. It takes the points-in-lanes kernel's parameters,
//! records and partial sums (`super::lanes_backward`, whose launch and plan it shares) and is
//! built at run time (sm_80: `mma.sync` in f64), outside the kernel table.
//!
//! Opt-in: `PTXFLOW_GAUSS_BACKWARD=tc` ([`super::BackwardKind::Tc`]), on sets that allow the
//! lanes kernel (`super::lanes_backward::records_fit`, none compensated); `PTXFLOW_GAUSS_BWD_TC`
//! names a variant (`backward::tc_variant_options`). On the H100 (10000 x 100000, same process,
//! session 12 GPU run 4) it is twice as slow as the lanes kernel: backward 2965-2972 us against
//! 1483-1488 us, forward plus backward 3463-3473 us against 1983-1992 us (the kernel docs give
//! the ncu figures and what binds it).

use super::fast_backward::load_with_carveout;
use super::lanes_backward::{waves, LanesBackward};
use super::launch::BackwardPlan;
use crate::kernels::gaussian::backward::{self, TcOptions, TC_OPTIONS, TC_TILE};
use crate::kernels::KernelId;
use crate::runtime::Gpu;
use crate::Result;

/// The kernel's entry point.
pub const ENTRY: &str = "gaussian_backward_tc_f32";

/// The kernel's build options: the variant `PTXFLOW_GAUSS_BWD_TC` names
/// (`backward::tc_variant_options`), else the default ones.
pub fn options() -> TcOptions {
    std::env::var("PTXFLOW_GAUSS_BWD_TC")
        .ok()
        .and_then(|n| backward::tc_variant_options(&n))
        .unwrap_or(TC_OPTIONS)
}

/// Builds and loads the kernel with [`options`] (largest shared-memory carveout).
///
/// Errors: the device is older than sm_80, or loading the module or querying its occupancy
/// failed.
pub fn load(gpu: &Gpu) -> Result<LanesBackward> {
    let mut o = options();
    // `m16n8k4` in f64 needs sm_90; older devices take `m8n8k4` (same sums).
    if gpu.facts().compute_capability.0 < 9 {
        o.m16 = false;
    }
    let module = backward::build_tc(o.target(), o);
    // The table id only names the kernel in errors and picks nothing: `custom` is loaded.
    let (kernel, per_sm) = load_with_carveout(
        gpu,
        KernelId::GaussianBackwardLanesF32,
        Some((module, ENTRY)),
        o.block(),
    )?;
    Ok(LanesBackward {
        kernel,
        slots: per_sm.max(1) * gpu.facts().sm_count.max(1) * waves(),
        k: o.k,
        block: o.block(),
        points_per_block: o.points_per_block(),
        tc: true,
        chunk_cap: o.cap,
    })
}

/// The split for a grouped build (chunks of at most `cap` Gaussians, a multiple of the tile):
/// `gauss_blocks` chunks of `chunk_len` Gaussians, and as many point sets (`chunks`, each block
/// taking ceil(b / (chunks per_block)) groups of `per_block` points in turn) as fill the
/// `slots` beside them.
pub fn plan_grouped(n_pad: u32, b: u32, slots: u32, per_block: u32, cap: u32) -> BackwardPlan {
    let chunk_len = cap.min(n_pad.next_multiple_of(TC_TILE)).max(TC_TILE);
    let gauss_blocks = n_pad.div_ceil(chunk_len).max(1);
    let sets = (slots / gauss_blocks).clamp(1, b.div_ceil(per_block).max(1));
    BackwardPlan {
        gauss_blocks,
        chunks: sets,
        chunk_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_plan_covers_every_gaussian_and_point() {
        for (n_pad, b) in [(512, 1), (1024, 500), (10240, 500), (10_240, 100_000)] {
            for (per_block, cap) in [(128, 256), (64, 128), (256, 512)] {
                let p = plan_grouped(n_pad, b, 264, per_block, cap);
                assert!(
                    p.chunk_len <= cap && p.chunk_len.is_multiple_of(TC_TILE),
                    "{p:?}"
                );
                assert!(p.gauss_blocks * p.chunk_len >= n_pad, "{p:?}");
                assert!((p.gauss_blocks - 1) * p.chunk_len < n_pad, "{p:?}");
                let groups = b.div_ceil(p.chunks * per_block);
                assert!(p.chunks * groups * per_block >= b, "{p:?}");
            }
        }
    }
}
