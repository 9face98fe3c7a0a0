//! The f32 backward with each Gaussian's sums on the FP64 tensor cores
//! (`gaussian_backward_tc_f32`, see `crate::kernels::gaussian::backward` and its `tc` kernel
//! docs): its build options and loading. It takes the points-in-lanes kernel's parameters,
//! records and partial sums (`super::lanes_backward`, whose launch and plan it shares) and is
//! built at run time (sm_80: `mma.sync` in f64), outside the kernel table.
//!
//! Opt-in: `PTXFLOW_GAUSS_BACKWARD=tc` ([`super::BackwardKind::Tc`]), on sets that allow the
//! lanes kernel (`super::lanes_backward::records_fit`, none compensated).

use super::fast_backward::load_with_carveout;
use super::lanes_backward::{waves, LanesBackward};
use crate::kernels::gaussian::backward::{self, TcOptions, TC_OPTIONS};
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
    let o = options();
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
    })
}
