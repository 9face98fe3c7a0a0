//! [`RawGaussianKernels::prepare`]: the prepared device layout and compensation records made on
//! the device (`gaussian_prepare`) from packed Gaussians that never leave it; and [`Current`],
//! the caller's current context kept across every raw launch.

use super::launch::config;
use super::raw::{check, RawGaussianKernels, RawPlan, RawSlice};
use super::GpuReal;
use crate::gaussian::layout::STRIDE;
use crate::gaussian::ops::FieldOptions;
use crate::gaussian::validate;
use crate::kernels::gaussian::prepare;
use crate::Error;
use crate::Result;
use cudarc::driver::sys::{CUcontext, CUstream};

/// The context that was current on the calling thread when it was another device's: put back
/// on drop. A caller such as PyTorch reads its current device from the current context, so a
/// call on `cuda:1` from a thread working on `cuda:0` must not move it (the launches bind this
/// device's context). Nothing to do (one `cuCtxGetCurrent`) when this device's is current.
pub(super) struct Current(Option<CUcontext>);

impl Current {
    pub(super) fn keep(ours: CUcontext) -> Result<Current> {
        let now =
            cudarc::driver::result::ctx::get_current().map_err(Error::driver("cuCtxGetCurrent"))?;
        Ok(Current(now.filter(|&c| c != ours)))
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            // SAFETY: `c` was the thread's current context when the call began; the caller
            // keeps it alive across the call (it is its own context). A failure leaves this
            // device's context current, as before this guard existed, so it is ignored.
            let _ = unsafe { cudarc::driver::result::ctx::set_current(c) };
        }
    }
}

impl<T: GpuReal> RawGaussianKernels<T> {
    /// Enqueues `gaussian_prepare` on `stream`: `prep` and `comp` from `packed` (the `plan.n`
    /// Gaussians, 10 scalars each, layout of [`crate::gaussian::layout`]) with `FieldOptions`' meaning of
    /// `normalised` and `diag_eps`, rounded as the host's preparation. Values are not checked
    /// (that would need a synchronisation): non-finite input or a non-positive diagonal gives
    /// inf or NaN in the results.
    ///
    /// Errors: `diag_eps` negative or non-finite; lengths or alignment as [`Self::forward`];
    /// launch failures.
    ///
    /// # Safety
    /// As [`Self::forward`], for `packed` (read), `prep` and `comp` (written).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn prepare(
        &self,
        stream: CUstream,
        plan: &RawPlan,
        normalised: bool,
        diag_eps: f64,
        packed: RawSlice,
        prep: RawSlice,
        comp: RawSlice,
    ) -> Result<()> {
        validate::check_options(&FieldOptions {
            normalised,
            diag_eps,
        })?;
        check("packed Gaussians", packed, plan.n * STRIDE)?;
        check("prepared Gaussians", prep, plan.prep_len)?;
        check("compensation constants", comp, plan.comp_len)?;
        let (stream, _current) = self.stream(stream)?;
        let eps = T::from_f64(diag_eps);
        let (eps64, scale) = (eps.to_f64(), T::exp_scale());
        let (n, n_pad) = (plan.n as u32, plan.n_pad as u32);
        let flag = u32::from(normalised);
        let func = &self.funcs.prepare;
        let blocks = n_pad
            .div_ceil(prepare::BLOCK)
            .clamp(1, self.sm_count() * 16);
        let cfg = config((blocks, 1), prepare::BLOCK)?;
        // SAFETY: parameters (packed, num_gaussians, n_pad, normalised, diag_eps, diag_eps_f64,
        // exp_scale, prep, comp), checked by the launch; lengths checked above: packed
        // n * 10, prep n_pad * 12, comp n_pad * 8 (16-byte aligned); grid-stride over j < n_pad,
        // reading packed only for j < n.
        unsafe {
            func.launch(&stream, cfg)
                .arg(&packed.ptr)
                .arg(&n)
                .arg(&n_pad)
                .arg(&flag)
                .arg(&eps)
                .arg(&eps64)
                .arg(&scale)
                .arg(&prep.ptr)
                .arg(&comp.ptr)
                .launch()
        }?;
        Ok(())
    }
}
