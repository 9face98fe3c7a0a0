//! The f32 backward with points in lanes (`gaussian_backward_lanes_f32`, see
//! `crate::kernels::gaussian::backward` and its `lanes` kernel docs): loading the kernel (built-in
//! or a `PTXFLOW_GAUSS_BWD_LANES` variant), its split of the work and its launch. It reads the
//! expanded forward's records (`super::fast::stage`) and writes the same partial sums as
//! `gaussian_backward_f32` (per-point rows per Gaussian chunk, per-Gaussian rows per point
//! block), so the finishing kernels are shared.
//!
//! The f32 default (`PTXFLOW_GAUSS_BACKWARD=unit` for the unit kernel): on the H100, 10000 x
//! 100000, same process, backward 1484-1494 us against the unit kernel's 1587-1598 us, forward
//! plus backward 1984-1992 us against 2087-2097 us (session 11, GPU run 3). A field runs it only where no Gaussian takes the compensated solve and
//! every record's point-term constants N = (w c 2^o) M^T are finite ([`records_fit`]); otherwise
//! the unit kernel.

use super::fast_backward::{load_with_carveout, BackwardKind};
use super::launch::{config, BackwardBuffers, BackwardPlan, Problem};
use super::{GpuGaussianField, GpuReal};
use crate::gaussian::Real;
use crate::kernels::gaussian::backward::{
    self, LanesOptions, LANES_BLOCK, LANES_OPTIONS, LANES_TILE,
};
use crate::kernels::gaussian::forward_fast::FAST_STRIDE;
use crate::kernels::KernelId;
use crate::runtime::{ArgElem, Gpu, LoadedKernel};
use crate::Result;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use std::sync::Arc;

/// The kernel's build options: the variant `PTXFLOW_GAUSS_BWD_LANES` names
/// (`backward::lanes_variant_options`), else the built-in ones.
pub fn options() -> LanesOptions {
    std::env::var("PTXFLOW_GAUSS_BWD_LANES")
        .ok()
        .and_then(|n| backward::lanes_variant_options(&n))
        .unwrap_or(LANES_OPTIONS)
}

/// Resident waves of blocks the plan aims at: `PTXFLOW_GAUSS_LANES_WAVES` (1 to 16), else
/// [`WAVES`].
pub fn waves() -> u32 {
    std::env::var("PTXFLOW_GAUSS_LANES_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|w| (1..=16).contains(w))
        .unwrap_or(WAVES)
}

/// The plan aims at this many resident waves of blocks.
pub const WAVES: u32 = 1;

/// [`BackwardKind::Auto`] runs the lanes kernel from this many points up: every block then
/// holds at least ~89% of its 1536 point slots (measured on an H100: 100000 points 1487 us
/// against the unit kernel's 1586; 500 points 34.9 against 26.3 us with 1000 Gaussians, 56.2
/// each with 10000; sizes in between not measured).
pub const LANES_MIN_POINTS: usize = 8192;

/// Whether every expanded record (`super::fast::stage`, `FAST_STRIDE` scalars each) has finite
/// constants and a finite N = (w c 2^o) M^T, each product as the kernel rounds it, at most 2^100
/// in magnitude (then a pair beyond the cutoff adds exactly 0 through the kernel's selects).
pub fn records_fit<T: Real>(records: &[T]) -> bool {
    let limit = 2f64.powi(100);
    records.chunks_exact(FAST_STRIDE as usize).all(|r| {
        let wn = r[9];
        r[..10].iter().all(|v| v.to_f64().is_finite())
            && r[..6].iter().all(|&m| (wn * m).to_f64().abs() <= limit)
    })
}

/// The loaded kernel with its resident-block capacity and points per thread.
#[derive(Clone, Debug)]
pub struct LanesBackward {
    /// The kernel.
    pub kernel: LoadedKernel,
    /// Resident blocks per SM times the SM count, times [`waves`].
    pub slots: u32,
    /// Points per thread.
    pub k: u32,
    /// Threads per block.
    pub block: u32,
    /// Points per block.
    pub points_per_block: u32,
    /// The kernel is `gaussian_backward_tc_f32` (`super::tc_backward`), same parameters.
    pub tc: bool,
    /// The most Gaussians per chunk of a grouped tc build (`super::tc_backward::plan_grouped`),
    /// 0 for the other kernels.
    pub chunk_cap: u32,
}

impl LanesBackward {
    /// Loads the kernel `id` (`gaussian_backward_lanes_f32`) with [`options`].
    ///
    /// Errors: loading the module or querying its occupancy failed.
    pub fn load(gpu: &Gpu, id: KernelId) -> Result<Self> {
        let o = options();
        // Shared memory (34 KB per block) must not set the resident-block count before the
        // registers do: `load_with_carveout` asks for the largest carveout.
        let custom = (o != LANES_OPTIONS).then(|| {
            (
                backward::build_lanes(crate::ptx::Target::Sm75, o),
                id.name(),
            )
        });
        let (kernel, per_sm) = load_with_carveout(gpu, id, custom, LANES_BLOCK)?;
        Ok(LanesBackward {
            kernel,
            slots: per_sm.max(1) * gpu.facts().sm_count.max(1) * waves(),
            k: o.k,
            block: LANES_BLOCK,
            points_per_block: LANES_BLOCK * o.k,
            tc: false,
            chunk_cap: 0,
        })
    }

    /// The split of `b` points x `n_pad` Gaussians in the field's terms: `gauss_blocks` =
    /// Gaussian chunks (rows of per-point partials), `chunks` = point blocks (rows of
    /// per-Gaussian partials), `chunk_len` = Gaussians per chunk (a multiple of the tile).
    pub fn plan(&self, n_pad: u32, b: u32) -> BackwardPlan {
        if self.chunk_cap > 0 {
            return super::tc_backward::plan_grouped(
                n_pad,
                b,
                self.slots,
                self.points_per_block,
                self.chunk_cap,
            );
        }
        plan_blocks(n_pad, b, self.slots, self.points_per_block)
    }

    /// Enqueues the kernel on `stream` for `plan` (from [`Self::plan`]); `fast` holds the records
    /// of `super::fast::stage` for the same `n_pad` Gaussians and `origin` its origin.
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
        let cfg = config((plan.chunks, plan.gauss_blocks), self.block)?;
        // SAFETY: (argument types and the .reqntid block are checked against the kernel's
        // contract) n_pad and chunk_len are multiples of the kernel's tile, so every staged
        // Gaussian exists in prep and fast (n_pad records each); points and grad_values hold 3b
        // and b scalars and only i < b is read; partial_points holds gauss_blocks * 3b scalars
        // (rows per Gaussian chunk) and partial_gauss chunks * n_pad * 10 (rows per point block;
        // checked by the caller).
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
                .arg(&origin[0])
                .arg(&origin[1])
                .arg(&origin[2])
                .launch()
        }
    }
}

impl<T: GpuReal> GpuGaussianField<T> {
    /// The points-in-lanes backward (loaded on first use), when this type has one, it is chosen
    /// ([`BackwardKind::Lanes`], or [`BackwardKind::Auto`] with at least [`LANES_MIN_POINTS`]
    /// points) and the staged Gaussians allow it (`lanes_fit`).
    pub(super) fn lanes_backward(&mut self) -> Result<Option<LanesBackward>> {
        let chosen = match self.backward_kind {
            BackwardKind::Lanes | BackwardKind::Tc => true,
            BackwardKind::Auto => self.b >= LANES_MIN_POINTS,
            BackwardKind::Unit | BackwardKind::Expanded => false,
        } && self.lanes_fit;
        let Some(id) = T::BACKWARD_LANES.filter(|_| chosen) else {
            return Ok(None);
        };
        if self.backward_kind == BackwardKind::Tc {
            if self.tc_backward.is_none() {
                self.tc_backward = Some(super::tc_backward::load(&self.gpu)?);
            }
            return Ok(self.tc_backward.clone());
        }
        if self.lanes_backward.is_none() {
            self.lanes_backward = Some(LanesBackward::load(&self.gpu, id)?);
        }
        Ok(self.lanes_backward.clone())
    }
}

/// [`LanesBackward::plan`] for a kernel with `slots` resident blocks and `k` points per thread:
/// as many Gaussian chunks as fill the slots beside the point blocks.
pub fn plan(n_pad: u32, b: u32, slots: u32, k: u32) -> BackwardPlan {
    plan_blocks(n_pad, b, slots, LANES_BLOCK * k)
}

/// [`plan`] for blocks of `per_block` points (a tile of `LANES_TILE` Gaussians, the lanes and
/// tc kernels' tile).
pub fn plan_blocks(n_pad: u32, b: u32, slots: u32, per_block: u32) -> BackwardPlan {
    let point_blocks = b.div_ceil(per_block).max(1);
    let want = (slots / point_blocks).clamp(1, (n_pad / LANES_TILE).max(1));
    let chunk_len = n_pad.div_ceil(want).next_multiple_of(LANES_TILE);
    BackwardPlan {
        gauss_blocks: n_pad.div_ceil(chunk_len).max(1),
        chunks: point_blocks,
        chunk_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_gaussian_and_point() {
        for (n_pad, b) in [(512, 1), (1024, 500), (10240, 500), (100_352, 10_000)] {
            for k in [8, 16] {
                let p = plan(n_pad, b, 132 * 2, k);
                assert_eq!(p.chunk_len % LANES_TILE, 0, "{p:?}");
                assert!(p.gauss_blocks * p.chunk_len >= n_pad, "{p:?}");
                assert!((p.gauss_blocks - 1) * p.chunk_len < n_pad, "{p:?}");
                assert!(p.chunks * LANES_BLOCK * k >= b, "{p:?}");
            }
        }
    }
}
