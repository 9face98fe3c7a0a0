//! The f32 backward with the expanded solve (`gaussian_backward_fast_f32`, see
//! `crate::kernels::gaussian::backward` and its `fast` kernel docs): which backward a field runs,
//! loading the kernel (built-in or a `PTXFLOW_GAUSS_BWD_FAST` variant) and its launch. It reads
//! the expanded forward's records (`super::fast::stage`) and writes the same partial sums as
//! `gaussian_backward_f32`, so the finishing kernels are shared.
//!
//! Opt-in (`PTXFLOW_GAUSS_BACKWARD=expanded`): on the H100 it is not faster. 10000 x 100000,
//! same process (session 10, GPU runs 2 and 3): backward 1693-1749 us against the unit kernel's
//! 1571-1667 us. ncu: 33.8 instructions per pair (unit kernel 35.1), but 182 registers (2 warps
//! per scheduler, 8 per SM, as the unit kernel's 255) with 4 Gaussians per thread, issue slots
//! 66.8% (unit 71.4%); 8 Gaussians per thread (the unit kernel's amortisation of the per-point
//! work) spill.

use super::launch::{config, BackwardBuffers, BackwardPlan, Problem};
use crate::kernels::gaussian::backward::{self, FastOptions, FAST_OPTIONS};
use crate::kernels::KernelId;
use crate::runtime::{ArgElem, Gpu, LoadedKernel};
use crate::Result;
use cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// Which f32 backward kernel `GpuGaussianField` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardKind {
    /// `gaussian_backward_<T>`: the unit-triangular per-pair form.
    Unit,
    /// `gaussian_backward_fast_f32`: the expanded solve with deferred transforms (f32 only; f64
    /// runs the unit kernel).
    Expanded,
    /// `gaussian_backward_lanes_f32`: the expanded solve with points in lanes and Gaussians
    /// broadcast (f32 only, where the set allows it; see `super::lanes_backward`), at any size.
    Lanes,
    /// `gaussian_backward_tc_f32`: the lanes kernel's inputs and outputs with each Gaussian's
    /// sums on the FP64 tensor cores (f32 only, sm_80 and later, where the set allows the lanes
    /// kernel; see `super::lanes_backward`), at any size. Opt-in.
    Tc,
    /// The default: [`BackwardKind::Lanes`] from `super::lanes_backward::LANES_MIN_POINTS`
    /// points up, the unit kernel below (where the lanes kernel's 12 points per thread leave
    /// most lanes empty: 1000 Gaussians x 500 points took 34.9 us against the unit kernel's 26.3
    /// on an H100, `gpu-results/s11/F11/F11-bench.log`).
    Auto,
}

impl BackwardKind {
    /// The default: [`BackwardKind::Auto`] (f32 sets that allow the lanes kernel and are large
    /// enough; others run the unit kernel), or [`BackwardKind::Unit`] where
    /// `PTXFLOW_GAUSS_BACKWARD=unit`, [`BackwardKind::Expanded`] where it is `expanded`,
    /// [`BackwardKind::Lanes`] where it is `lanes`, [`BackwardKind::Tc`] where it is `tc`.
    pub fn from_env() -> Self {
        match std::env::var("PTXFLOW_GAUSS_BACKWARD").as_deref() {
            Ok("expanded") => BackwardKind::Expanded,
            Ok("unit") => BackwardKind::Unit,
            Ok("lanes") => BackwardKind::Lanes,
            Ok("tc") => BackwardKind::Tc,
            _ => BackwardKind::Auto,
        }
    }
}

/// Loads the table's kernel `id`, or `custom` (a module built at run time and its entry: the
/// same kernel with other options, or one outside the table), with the largest shared-memory carveout, so that shared memory does not set the
/// resident-block count before the registers do; returns it with its resident blocks of `block`
/// threads per SM. Shared by the expanded and the points-in-lanes backward.
///
/// Errors: loading the module, setting the carveout or querying the occupancy failed.
pub(super) fn load_with_carveout(
    gpu: &Gpu,
    id: KernelId,
    custom: Option<(crate::ptx::Module, &str)>,
    block: u32,
) -> Result<(LoadedKernel, u32)> {
    let kernel = match custom {
        None => gpu.kernel(id)?,
        Some((module, entry)) => gpu.load_module(&module, entry)?,
    };
    kernel
        .function()
        .set_attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
        .map_err(crate::Error::driver("cuFuncSetAttribute(carveout)"))?;
    let per_sm = kernel
        .function()
        .occupancy_max_active_blocks_per_multiprocessor(block, 0, None)
        .map_err(crate::Error::driver(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        ))?;
    Ok((kernel, per_sm))
}

/// The expanded backward's build options: the variant `PTXFLOW_GAUSS_BWD_FAST` names
/// (`backward::fast_variant_options`), else the built-in ones.
pub fn options() -> FastOptions {
    std::env::var("PTXFLOW_GAUSS_BWD_FAST")
        .ok()
        .and_then(|n| backward::fast_variant_options(&n))
        .unwrap_or(FAST_OPTIONS)
}

/// Resident waves of blocks the expanded backward's plan aims at: `PTXFLOW_GAUSS_BWD_WAVES` (1
/// to 16), else [`WAVES`].
pub fn waves() -> u32 {
    std::env::var("PTXFLOW_GAUSS_BWD_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|w| (1..=16).contains(w))
        .unwrap_or(WAVES)
}

/// The expanded backward's plan aims at this many resident waves (more, shorter point chunks):
/// warps that take the subtract or guarded body run longer than the others, and with one wave
/// their blocks set the kernel's end.
pub const WAVES: u32 = 1;

/// The loaded expanded backward with its resident-block capacity and Gaussians per thread.
#[derive(Clone, Debug)]
pub struct FastBackward {
    /// The kernel.
    pub kernel: LoadedKernel,
    /// Resident blocks per SM times the SM count, times [`waves`] (the plan's capacity).
    pub slots: u32,
    /// Gaussians per thread (the backward plan's `q`).
    pub q: u32,
}

impl FastBackward {
    /// Loads the kernel `id` (`gaussian_backward_fast_f32`) with [`options`].
    ///
    /// Errors: loading the module or querying its occupancy failed.
    pub fn load(gpu: &Gpu, id: KernelId) -> Result<Self> {
        let o = options();
        // The 17.5 KiB of shared memory per block never set the resident-block count (H100, 182
        // registers: the registers do, at 8 one-warp blocks per SM, two per scheduler's 16
        // K-register file; ncu, GPU run 2 of session 10).
        let custom = (o != FAST_OPTIONS)
            .then(|| (backward::build_fast(crate::ptx::Target::Sm75, o), id.name()));
        let (kernel, per_sm) = load_with_carveout(gpu, id, custom, backward::BLOCK)?;
        Ok(FastBackward {
            kernel,
            slots: per_sm.max(1) * gpu.facts().sm_count.max(1) * waves(),
            q: o.q,
        })
    }

    /// Enqueues the kernel on `stream` for `plan` (made with [`Self::q`]); `fast` holds the
    /// records of `super::fast::stage` for the same `n_pad` Gaussians and `origin` its origin.
    ///
    /// Errors: the launch failed (or its arguments do not fit the kernel's contract).
    pub fn backward<T: DeviceRepr + ArgElem>(
        &self,
        stream: &Arc<CudaStream>,
        p: &Problem<'_, T>,
        fast: &CudaSlice<T>,
        origin: &[T; 3],
        plan: &BackwardPlan,
        bufs: BackwardBuffers<'_, T>,
    ) -> Result<()> {
        let cfg = config((plan.gauss_blocks, plan.chunks), backward::BLOCK)?;
        // SAFETY: (argument types and the .reqntid block are checked against the kernel's
        // contract) n_pad is a multiple of BLOCK * q, so every thread's Gaussians exist in prep
        // (n_pad records), fast (n_pad records) and comp (n_pad * COMP_STRIDE); points and
        // grad_values hold 3b and b scalars; the partial buffers gauss_blocks * 3b and chunks *
        // n_pad * 10 scalars (checked by the caller).
        unsafe {
            self.kernel
                .launch(stream, cfg)
                .arg(p.prep)
                .arg(fast)
                .arg(&p.n_pad)
                .arg(p.points)
                .arg(bufs.grad_values)
                .arg(&p.b)
                .arg(&plan.chunk_len)
                .arg(bufs.partial_points)
                .arg(bufs.partial_gauss)
                .arg(bufs.comp)
                .arg(&origin[0])
                .arg(&origin[1])
                .arg(&origin[2])
                .launch()
        }
    }
}
