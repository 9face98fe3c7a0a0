//! [`GpuGaussianField`]: the Gaussian field on a CUDA device, behind the same
//! [`GaussianFieldOps`] trait as the CPU reference, for f32 and f64.
//!
//! Each call validates exactly like the CPU field (the shared [`layout`](super::layout) and [`validate`](super::validate) code),
//! then uploads, enqueues the kernels of `crate::kernels::gaussian` on the device's work stream
//! and downloads the results (which synchronises). `set_gaussians` uploads the prepared device
//! layout (12 scalars per Gaussian, padded with zero Gaussians to a multiple of `common::GAUSSIAN_PAD` = 512; see
//! `kernels::gaussian::common`) and the f32 backward's compensation constants (8 per Gaussian:
//! two-term diagonal and the flag of `layout::Prepared::compensated`), and for f32 the records
//! of the expanded forward ([`fast`]: 12 per Gaussian and one origin). Forward: fused kernel per
//! (point block, Gaussian chunk), in f32 `gaussian_forward_f32` or `gaussian_forward_fast_f32`
//! ([`ForwardKind`], [`GpuGaussianField::set_forward_kind`]), then an ordered sum of the chunk
//! rows (the expanded kernel adds them itself: the last block of each point block, in row
//! order; its Gaussian chunks shorten towards the end of the grid, [`fast_schedule`]). Backward: fused kernel per (Gaussian block, point chunk), in f32 `gaussian_backward_f32`
//! or `gaussian_backward_fast_f32` (the expanded solve on the same records), or per (point block,
//! Gaussian chunk) `gaussian_backward_lanes_f32` (the same maths with points in lanes;
//! [`BackwardKind`], [`GpuGaussianField::set_backward_kind`]; sets with compensated Gaussians
//! keep the first), then
//! ordered sums into dLoss/dx and the packed per-Gaussian gradient. Device and host buffers grow
//! to the largest problem seen and are reused, so a training loop does not allocate per step.
//! Results are bit-identical from run to run on a given device (no float atomics: the expanded
//! forward's integer counter only picks which block adds the rows, always in the same order).
//!
//! Files: [`field`] the field and its device-resident enqueueing, `ops` the [`GaussianFieldOps`]
//! implementation and staging, [`fast`] the expanded forward's records, `fast_kernel` its
//! plan and launch, [`fast_schedule`] its chunk schedule, [`fast_backward`] the expanded backward's
//! launch, [`lanes_backward`] the points-in-lanes backward's, `slot` its growable device buffers, [`launch`] the launch geometry
//! and launches, [`raw`] the same kernels on caller-owned memory and streams (the PyTorch
//! binding), `raw_prepare` the on-device preparation for it.
//!
//! [`GaussianFieldOps`]: super::GaussianFieldOps

use super::real::Real;
use crate::kernels::gaussian::{backward, common, forward};
use crate::kernels::KernelId;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

pub mod fast;
pub mod fast_backward;
mod fast_kernel;
pub mod fast_schedule;
pub mod field;
pub mod lanes_backward;
pub mod launch;
mod ops;
pub mod raw;
mod raw_backward;
mod raw_prepare;
mod slot;
pub mod tc_backward;

pub use fast::ForwardKind;
pub use fast_backward::BackwardKind;
pub use field::GpuGaussianField;
pub use ops::stage_prepared;

/// A float type with GPU kernels for the Gaussian field.
pub trait GpuReal: Real + DeviceRepr + ValidAsZeroBits + crate::runtime::ArgElem {
    /// Distance-matrix kernel.
    const DISTANCES: KernelId;
    /// Fused forward kernel.
    const FORWARD: KernelId;
    /// Fused forward with the expanded solve (`fast`), where the type has one.
    const FORWARD_FAST: Option<KernelId>;
    /// Fused backward kernel.
    const BACKWARD: KernelId;
    /// Fused backward with the expanded solve (`fast_backward`), where the type has one.
    const BACKWARD_FAST: Option<KernelId>;
    /// Fused backward with points in lanes (`lanes_backward`), where the type has one.
    const BACKWARD_LANES: Option<KernelId>;
    /// Ordered row sums.
    const REDUCE_ROWS: KernelId;
    /// Per-Gaussian gradient finish.
    const FINISH: KernelId;
    /// On-device preparation of packed Gaussians (see `gpu_raw`).
    const PREPARE: KernelId;
    /// Gaussians per thread in the backward kernel.
    const GAUSSIANS_PER_THREAD: u32;
    /// Points per block of the forward kernel.
    const FORWARD_POINTS_PER_BLOCK: u32;
    /// 2^o, the kernel exponential's offset folded into w c and c (see `common`).
    fn exp_scale() -> f64;
}

impl GpuReal for f32 {
    const DISTANCES: KernelId = KernelId::GaussianDistancesF32;
    const FORWARD: KernelId = KernelId::GaussianForwardF32;
    const FORWARD_FAST: Option<KernelId> = Some(KernelId::GaussianForwardFastF32);
    const BACKWARD: KernelId = KernelId::GaussianBackwardF32;
    const BACKWARD_FAST: Option<KernelId> = Some(KernelId::GaussianBackwardFastF32);
    const BACKWARD_LANES: Option<KernelId> = Some(KernelId::GaussianBackwardLanesF32);
    const REDUCE_ROWS: KernelId = KernelId::GaussianReduceRowsF32;
    const FINISH: KernelId = KernelId::GaussianFinishF32;
    const PREPARE: KernelId = KernelId::GaussianPrepareF32;
    const GAUSSIANS_PER_THREAD: u32 = backward::GAUSSIANS_PER_THREAD_F32;
    const FORWARD_POINTS_PER_BLOCK: u32 = forward::BLOCK * forward::POINTS_PER_THREAD_F32;
    fn exp_scale() -> f64 {
        common::f32_exp_scale()
    }
}

impl GpuReal for f64 {
    const DISTANCES: KernelId = KernelId::GaussianDistancesF64;
    const FORWARD: KernelId = KernelId::GaussianForwardF64;
    const FORWARD_FAST: Option<KernelId> = None;
    const BACKWARD: KernelId = KernelId::GaussianBackwardF64;
    const BACKWARD_FAST: Option<KernelId> = None;
    const BACKWARD_LANES: Option<KernelId> = None;
    const REDUCE_ROWS: KernelId = KernelId::GaussianReduceRowsF64;
    const FINISH: KernelId = KernelId::GaussianFinishF64;
    const PREPARE: KernelId = KernelId::GaussianPrepareF64;
    const GAUSSIANS_PER_THREAD: u32 = backward::GAUSSIANS_PER_THREAD_F64;
    const FORWARD_POINTS_PER_BLOCK: u32 = forward::BLOCK * forward::POINTS_PER_THREAD_F64;
    fn exp_scale() -> f64 {
        1.0
    }
}
