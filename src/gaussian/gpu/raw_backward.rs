//! [`RawGaussianKernels::backward`] and [`RawGaussianKernels::backward_some`]: the fused backward
//! and its reductions on caller-owned memory and streams (see [`super::raw`]).

use super::launch::config;
use super::raw::{check, RawGaussianKernels, RawPlan, RawRowSum, RawSlice};
use super::GpuReal;
use crate::gaussian::layout::STRIDE;
use crate::kernels::gaussian::{backward, reduce};
use crate::Result;
use cudarc::driver::sys::CUstream;

impl<T: GpuReal> RawGaussianKernels<T> {
    /// Enqueues the backward on `stream` for `grad_values` (dLoss/df, `plan.b`): dLoss/dx into
    /// `grad_points` (3 per point) and the packed per-Gaussian gradient into `grad_gaussians`
    /// (10 per Gaussian). `normalised` must be the value `prep` was prepared with.
    ///
    /// Errors: as [`Self::forward`].
    ///
    /// # Safety
    /// As [`Self::forward`]; `comp` must hold n_pad compensation records (zero is valid).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn backward(
        &self,
        stream: CUstream,
        plan: &RawPlan,
        normalised: bool,
        prep: RawSlice,
        comp: RawSlice,
        points: RawSlice,
        grad_values: RawSlice,
        partial_points: RawSlice,
        partial_gauss: RawSlice,
        grad_points: RawSlice,
        grad_gaussians: RawSlice,
    ) -> Result<()> {
        let inputs = [prep, comp, points, grad_values];
        let partials = [partial_points, partial_gauss];
        // SAFETY: this function's contract.
        unsafe {
            self.backward_some(
                stream,
                plan,
                normalised,
                inputs,
                partials,
                Some(grad_points),
                Some(grad_gaussians),
            )
        }
    }

    /// As [`Self::backward`] (`inputs`: prep, comp, points, grad_values; `partials`: per-point
    /// and per-Gaussian partial sums), writing only the gradients asked for: without
    /// `grad_points` the per-point reduction is not launched, without `grad_gaussians` the
    /// per-Gaussian one (a caller whose points need no gradient saves a launch).
    ///
    /// # Safety
    /// As [`Self::backward`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn backward_some(
        &self,
        stream: CUstream,
        plan: &RawPlan,
        normalised: bool,
        [prep, comp, points, grad_values]: [RawSlice; 4],
        [partial_points, partial_gauss]: [RawSlice; 2],
        grad_points: Option<RawSlice>,
        grad_gaussians: Option<RawSlice>,
    ) -> Result<()> {
        check("prepared Gaussians", prep, plan.prep_len)?;
        check("compensation constants", comp, plan.comp_len)?;
        check("points", points, 3 * plan.b)?;
        check("grad_values", grad_values, plan.b)?;
        check(
            "per-point partial sums",
            partial_points,
            plan.partial_points_len,
        )?;
        check(
            "per-Gaussian partial sums",
            partial_gauss,
            plan.partial_gauss_len,
        )?;
        if let Some(gp) = grad_points {
            check("point gradients", gp, 3 * plan.b)?;
        }
        if let Some(gg) = grad_gaussians {
            check("Gaussian gradients", gg, plan.n * STRIDE)?;
        }
        if plan.b == 0 || plan.n == 0 || (grad_points.is_none() && grad_gaussians.is_none()) {
            return Ok(());
        }
        let (stream, _current) = self.stream(stream)?;
        let g = plan.backward;
        let (n, n_pad, b) = (plan.n as u32, plan.n_pad as u32, plan.b as u32);
        let func = &self.funcs.backward;
        let cfg = config((g.gauss_blocks, g.chunks), backward::BLOCK)?;
        // SAFETY: parameters (prep, n_pad, points, grad_values, num_points, chunk_len,
        // partial_points, partial_gauss, comp), checked by the launch; n_pad is a
        // multiple of BLOCK * q (padding to GAUSSIAN_PAD); lengths checked above against the
        // plan: partial_points gauss_blocks * 3b, partial_gauss chunks * n_pad * 10.
        unsafe {
            func.launch(&stream, cfg)
                .arg(&prep.ptr)
                .arg(&n_pad)
                .arg(&points.ptr)
                .arg(&grad_values.ptr)
                .arg(&b)
                .arg(&g.chunk_len)
                .arg(&partial_points.ptr)
                .arg(&partial_gauss.ptr)
                .arg(&comp.ptr)
                .launch()
        }?;
        if let Some(gp) = grad_points {
            let pts3 = 3 * b;
            let rows = g.gauss_blocks;
            let sum = RawRowSum {
                partial: partial_points.ptr,
                rows,
                stride: pts3,
                len: pts3,
                scale: -T::ONE,
                out: gp.ptr,
            };
            self.reduce_rows(&stream, sum)?;
        }
        let Some(gg) = grad_gaussians else {
            return Ok(());
        };
        let func = &self.funcs.finish;
        let blocks = n.div_ceil(reduce::BLOCK).clamp(1, self.sm_count() * 16);
        let cfg = config((blocks, 1), reduce::BLOCK)?;
        let flag = u32::from(normalised);
        // SAFETY: parameters (partial, rows, n_pad, prep, num_gaussians, normalised, out), checked
        // by the launch; partial holds chunks * n_pad * 10, prep n_pad * 12, out
        // n * 10 scalars (checked above); grid-stride loop over j < n.
        unsafe {
            func.launch(&stream, cfg)
                .arg(&partial_gauss.ptr)
                .arg(&g.chunks)
                .arg(&n_pad)
                .arg(&prep.ptr)
                .arg(&n)
                .arg(&flag)
                .arg(&gg.ptr)
                .launch()
        }?;
        Ok(())
    }
}
