//! [`RawGaussianKernels`]: the GPU Gaussian field's kernels launched on device memory and a stream
//! that the caller owns (a PyTorch tensor's storage and PyTorch's current stream, say), with no
//! allocation, transfer or synchronisation of its own.
//!
//! [`super::GpuGaussianField`] owns its buffers and does its own host-side preparation; this is
//! the layer under it for a caller that keeps everything on the device. The caller provides:
//! - `prep`: the prepared Gaussians in the device layout of `crate::kernels::gaussian::common`
//!   (12 scalars per Gaussian, padded with zero Gaussians to [`RawPlan::n_pad`]);
//! - `comp` (backward only): the compensation constants (8 per Gaussian, same padding; all zero
//!   is valid and means "never compensate");
//!
//!   both made on the device from packed Gaussians by [`RawGaussianKernels::prepare`]
//!   (`gaussian_prepare`, rounded as the host's `layout::prepare`);
//! - the points (3 per point), and output and scratch buffers of the lengths in [`RawPlan`].
//!
//! Every buffer is a [`RawSlice`] (device address and length in scalars); lengths and alignment
//! are checked against the plan before anything is launched, so a wrong length is an
//! [`Error::Shape`], never an out-of-bounds access. What cannot be checked (that the addresses
//! are live device memory of this context, that no other work races on them) is the caller's
//! promise, stated in each method's `# Safety`.

use super::launch::{self, config, BackwardPlan, ForwardPlan};
use super::raw_prepare::Current;
use super::GpuReal;
use crate::gaussian::layout::STRIDE;
use crate::kernels::gaussian::{backward, common, forward, reduce};
use crate::runtime::Gpu;
use crate::runtime::LoadedKernel;
use crate::{Error, Result};
pub use cudarc::driver::sys::CUstream;
use cudarc::driver::CudaStream;
use std::marker::PhantomData;
use std::sync::Arc;

/// Alignment (bytes) every [`RawSlice`] must have: the kernels load the prepared Gaussians and
/// store gradients with vector instructions.
pub const RAW_ALIGN: u64 = 16;

/// A device array: its address (`CUdeviceptr`) and its length in scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawSlice {
    /// Device address of the first scalar.
    pub ptr: u64,
    /// Length in scalars.
    pub len: usize,
}

/// Sizes of every buffer of one problem (N Gaussians, B points), in scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPlan {
    /// N.
    pub n: usize,
    /// B.
    pub b: usize,
    /// N rounded up to the kernels' padding (at least one pad).
    pub n_pad: usize,
    /// `prep`: n_pad * 12.
    pub prep_len: usize,
    /// `comp`: n_pad * 8.
    pub comp_len: usize,
    /// Forward scratch (partial rows; 0 when the forward needs none).
    pub forward_scratch_len: usize,
    /// Backward per-point partials.
    pub partial_points_len: usize,
    /// Backward per-Gaussian partials.
    pub partial_gauss_len: usize,
    /// How the forward splits.
    pub forward: ForwardPlan,
    /// How the backward splits.
    pub backward: BackwardPlan,
}

/// The Gaussian kernels of one float type on one device, for caller-owned memory and streams.
pub struct RawGaussianKernels<T: GpuReal> {
    pub(super) gpu: Arc<Gpu>,
    slots: (u32, u32),
    /// The five kernels, looked up once (a launch then takes no lock).
    pub(super) funcs: Funcs,
    _scalar: PhantomData<T>,
}

/// The kernels of one float type, loaded.
pub(super) struct Funcs {
    pub(super) prepare: LoadedKernel,
    forward: LoadedKernel,
    pub(super) backward: LoadedKernel,
    reduce_rows: LoadedKernel,
    pub(super) finish: LoadedKernel,
}

pub(super) fn check(what: &str, s: RawSlice, len: usize) -> Result<()> {
    if s.len != len {
        return Err(Error::Shape {
            what: format!("gaussian {what}"),
            expected: format!("{len} scalars"),
            got: format!("{} scalars", s.len),
        });
    }
    if len > 0 && (s.ptr == 0 || !s.ptr.is_multiple_of(RAW_ALIGN)) {
        return Err(Error::input(format!(
            "gaussian {what}: device address {:#x} is null or not {RAW_ALIGN}-byte aligned",
            s.ptr
        )));
    }
    Ok(())
}

/// `out[m] = scale * sum_{r < rows} partial[r * stride + m]` for m < len, on device addresses.
pub(super) struct RawRowSum<T> {
    pub(super) partial: u64,
    pub(super) rows: u32,
    pub(super) stride: u32,
    pub(super) len: u32,
    pub(super) scale: T,
    pub(super) out: u64,
}

impl<T: GpuReal> RawGaussianKernels<T> {
    /// Loads the kernels on `gpu` and reads the forward's and backward's occupancy.
    ///
    /// Errors: module load or occupancy query failures.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self> {
        let slots = (
            launch::resident_slots(&gpu, T::FORWARD, forward::BLOCK)?,
            launch::resident_slots(&gpu, T::BACKWARD, backward::BLOCK)?,
        );
        let funcs = Funcs {
            prepare: gpu.kernel(T::PREPARE)?,
            forward: gpu.kernel(T::FORWARD)?,
            backward: gpu.kernel(T::BACKWARD)?,
            reduce_rows: gpu.kernel(T::REDUCE_ROWS)?,
            finish: gpu.kernel(T::FINISH)?,
        };
        Ok(RawGaussianKernels {
            gpu,
            slots,
            funcs,
            _scalar: PhantomData,
        })
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// `2^o`, the factor the prepared `w c` and `c` carry (see `kernels::gaussian::common`).
    pub fn exp_scale() -> f64 {
        T::exp_scale()
    }

    /// Buffer sizes for `n` Gaussians and `b` points.
    ///
    /// Errors: [`Error::Capacity`] when a size exceeds the kernels' 32-bit indexing.
    pub fn plan(&self, n: usize, b: usize) -> Result<RawPlan> {
        let pad = common::GAUSSIAN_PAD as usize;
        let n_pad = n.div_ceil(pad).max(1) * pad;
        launch::to_u32(
            n_pad * common::PREP_STRIDE as usize,
            "gaussian prepared scalars",
        )?;
        launch::to_u32(3 * b, "gaussian point scalars per launch")?;
        let f = launch::forward_plan(
            n_pad as u32,
            b as u32,
            self.slots.0,
            T::FORWARD_POINTS_PER_BLOCK,
        );
        let g = launch::backward_plan(
            n_pad as u32,
            b as u32,
            self.slots.1,
            T::GAUSSIANS_PER_THREAD,
        );
        let forward_scratch_len = if f.chunks > 1 {
            f.chunks as usize * b
        } else {
            0
        };
        let plan = RawPlan {
            n,
            b,
            n_pad,
            prep_len: n_pad * common::PREP_STRIDE as usize,
            comp_len: n_pad * common::COMP_STRIDE as usize,
            forward_scratch_len,
            partial_points_len: g.gauss_blocks as usize * 3 * b,
            partial_gauss_len: g.chunks as usize * n_pad * STRIDE,
            forward: f,
            backward: g,
        };
        launch::to_u32(plan.partial_gauss_len, "gaussian per-Gaussian partial sums")?;
        launch::to_u32(plan.partial_points_len, "gaussian per-point partial sums")?;
        Ok(plan)
    }

    /// The caller's `stream`, and a guard that puts the caller's current context back when the
    /// launches (which make this device's context current) are done.
    pub(super) fn stream(&self, stream: CUstream) -> Result<(Arc<CudaStream>, Current)> {
        let current = Current::keep(self.gpu.ctx().cu_ctx())?;
        // SAFETY: the callers' `# Safety` sections require `stream` to be a live stream of this
        // device's primary context (the context `self.gpu` holds) that outlives the call; the
        // wrapper does not destroy it, and we enqueue on it only inside the call.
        let stream = unsafe { self.gpu.ctx().wrap_borrowed_stream(stream) };
        Ok((stream, current))
    }

    /// Enqueues the forward on `stream`: `values[i]` = f_i for the `plan.b` points.
    ///
    /// Errors: a buffer whose length differs from `plan` or that is misaligned ([`RAW_ALIGN`]);
    /// launch failures.
    ///
    /// # Safety
    /// Every slice must be device memory of this device's primary context, valid for its length,
    /// not freed or written by other work until the launches enqueued on `stream` have run;
    /// `prep` must hold `plan.n` prepared Gaussians followed by zero Gaussians; `stream` must be a
    /// live stream of that context. `plan` must come from [`Self::plan`] of this object.
    pub unsafe fn forward(
        &self,
        stream: CUstream,
        plan: &RawPlan,
        prep: RawSlice,
        points: RawSlice,
        scratch: RawSlice,
        values: RawSlice,
    ) -> Result<()> {
        check("prepared Gaussians", prep, plan.prep_len)?;
        check("points", points, 3 * plan.b)?;
        check("forward scratch", scratch, plan.forward_scratch_len)?;
        check("values", values, plan.b)?;
        if plan.b == 0 {
            return Ok(());
        }
        let (stream, _current) = self.stream(stream)?;
        let f = plan.forward;
        let (n_pad, b) = (plan.n_pad as u32, plan.b as u32);
        let out = if f.chunks == 1 {
            values.ptr
        } else {
            scratch.ptr
        };
        let func = &self.funcs.forward;
        let cfg = config((f.point_blocks, f.chunks), forward::BLOCK)?;
        // SAFETY: parameters (prep, n_pad, chunk_len, points, num_points, out) (device addresses as u64;
        // count, types and block shape checked by the launch); n_pad and chunk_len are multiples of
        // CHUNK_ALIGN (forward_plan); lengths checked above: prep n_pad * 12, points 3b, out
        // chunks * b (values when one chunk, else the scratch); the kernel touches only i < b.
        unsafe {
            func.launch(&stream, cfg)
                .arg(&prep.ptr)
                .arg(&n_pad)
                .arg(&f.chunk_len)
                .arg(&points.ptr)
                .arg(&b)
                .arg(&out)
                .launch()
        }?;
        if f.chunks > 1 {
            let sum = RawRowSum {
                partial: scratch.ptr,
                rows: f.chunks,
                stride: b,
                len: b,
                scale: T::ONE,
                out: values.ptr,
            };
            self.reduce_rows(&stream, sum)?;
        }
        Ok(())
    }

    pub(super) fn sm_count(&self) -> u32 {
        self.gpu.facts().sm_count.max(1)
    }

    /// Enqueues `sum`; the callers checked that partial holds rows * stride and out len scalars.
    pub(super) fn reduce_rows(&self, stream: &Arc<CudaStream>, sum: RawRowSum<T>) -> Result<()> {
        let RawRowSum {
            partial,
            rows,
            stride,
            len,
            scale,
            out,
        } = sum;
        let func = &self.funcs.reduce_rows;
        let blocks = len.div_ceil(reduce::BLOCK).clamp(1, self.sm_count() * 16);
        let cfg = config((blocks, 1), reduce::BLOCK)?;
        // SAFETY: parameters (partial, rows, stride, len, scale, out), checked by the
        // launch; lengths as stated above; grid-stride loop over m < len.
        unsafe {
            func.launch(stream, cfg)
                .arg(&partial)
                .arg(&rows)
                .arg(&stride)
                .arg(&len)
                .arg(&scale)
                .arg(&out)
                .launch()
        }?;
        Ok(())
    }
}
