//! The host side of [`GpuRsvd`]'s small step: the Gram route's finish, the downloads and checked
//! synchronisation it shares with the factor route, the factors' upload, and the switches that
//! pick the route and the GEMM kernels.

use super::round_up;
use super::rsvd::{GpuRsvd, OrthMode, FINAL_PASSES, GEMM_BLOCKS_PER_SM, GEMM_BLOCKS_PER_SM_R8, WW};
use crate::kernels::rnn::gemm::tc::KC;
use crate::kernels::rnn::gemm::{BK, BM};
use crate::kernels::rnn::orth::WIDTH;
use crate::rnn::rsvd::{gram_factors, small_eigen, small_factors};
use crate::runtime::Gpu;
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::Arc;
use std::time::Instant;

/// Split-K of one product: `splits` inner ranges of `k_per_split` (a multiple of BK).
#[derive(Clone, Copy, Debug)]
pub(super) struct GemmPlan {
    pub splits: u32,
    pub k_per_split: u32,
}

/// The split-K of an `m x k` by `k x 48` product for `blocks_per_sm` blocks per SM.
pub(super) fn plan(gpu: &Gpu, m: usize, k: usize, blocks_per_sm: u32) -> GemmPlan {
    let tiles = (m / BM as usize).max(1);
    let target = (blocks_per_sm * gpu.facts().sm_count) as usize;
    let s = (target / tiles).clamp(1, k / BK as usize);
    let kps = round_up(k.div_ceil(s), BK as usize);
    GemmPlan {
        splits: k.div_ceil(kps) as u32,
        k_per_split: kps as u32,
    }
}

/// Default split-K targets (nn, tn) of the 3xTF32 tensor-core kernels (`rnn_gemm_*_tc` and
/// `_tca`, 128 threads): two blocks per SM (256 blocks at 4096^2; on an H100 the `_tca` kernels
/// took 48.1 / 47.7 us at 2, 50.0 / 50.5 at 3 and 63.5 / 57.7 at 4 blocks per SM).
pub const GEMM_BLOCKS_PER_SM_TC: (u32, u32) = (2, 2);

/// The split-K of an `m x k` by `k x 48` product on the tensor-core kernels: like
/// [`plan`], with the inner split a multiple of their staged chunk `KC` (k is a multiple of 128).
pub(super) fn plan_tc(gpu: &Gpu, m: usize, k: usize, blocks_per_sm: u32) -> GemmPlan {
    let tiles = (m / BM as usize).max(1);
    let target = (blocks_per_sm * gpu.facts().sm_count) as usize;
    let s = (target / tiles).clamp(1, k / KC as usize);
    let kps = round_up(k.div_ceil(s), KC as usize);
    GemmPlan {
        splits: k.div_ceil(kps) as u32,
        k_per_split: kps as u32,
    }
}

/// Host-side times of the last [`GpuRsvd::run_device`], in seconds. Factor route: waiting for
/// B^T's Gram, the eigenproblem (overlapping B^T's CholQR), blocked in the final
/// synchronisation, the small factors. Gram route: waiting for B^T's Gram, the eigenproblem,
/// `V`'s factor and its check, then the fallback (zero unless the check failed).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostTimes {
    /// From the last enqueue until B^T's Gram is on the host.
    pub gram_wait_s: f64,
    /// The small eigenproblem on the CPU.
    pub eigen_s: f64,
    /// Factor route: blocked in the final synchronisation after the eigenproblem (GPU work not
    /// hidden). Gram route: `Z_k Sigma_k^-1` and its check.
    pub sync_wait_s: f64,
    /// Factor route: the small factors (`W_k`, or the SVD fallback). Gram route: the fallback.
    pub factors_s: f64,
}

impl HostTimes {
    /// The four spans between five instants: `t0..t1`, `t1..t2`, `t2..t3`, `t3..now`.
    pub(super) fn from_instants(t0: Instant, t1: Instant, t2: Instant, t3: Instant) -> Self {
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        HostTimes {
            gram_wait_s: secs(t0, t1),
            eigen_s: secs(t1, t2),
            sync_wait_s: secs(t2, t3),
            factors_s: t3.elapsed().as_secs_f64(),
        }
    }
}

impl GpuRsvd {
    /// The Gram route's host part: waits for B^T's Gram, solves its eigenproblem and forms
    /// `V = B^T Z_k Sigma_k^-1` directly; only when that fails its check is B^T factored
    /// (`FINAL_PASSES` CholQR passes) for the SVD of its triangular factor.
    pub(super) fn finish_gram_route(&mut self, st: &Arc<CudaStream>) -> Result<Vec<f64>> {
        self.bar_host.download(st, self.bar.slice(), 0)?;
        let t0 = Instant::now();
        self.sync_checked(st)?;
        let t1 = Instant::now();
        let (w, l, k) = (WIDTH as usize, self.l, self.opts.rank);
        let g = self.gram_host.as_slice()?;
        let eig = small_eigen(g, w, l, k)?;
        let t2 = Instant::now();
        let fast = match &eig {
            Some(e) => gram_factors(e, g, w, l, k)?,
            None => None,
        };
        let t3 = Instant::now();
        let (s, zk, wk) = match fast {
            Some(f) => f,
            None => {
                self.orth(st, false, FINAL_PASSES, OrthMode::Full)?;
                self.download_factor(st)?;
                self.sync_checked(st)?;
                let rt = self.rt_host.as_slice()?;
                small_factors(eig.as_ref(), rt, w, l, k)?
            }
        };
        self.host = HostTimes::from_instants(t0, t1, t2, t3);
        self.upload_and_apply(st, &zk, &wk)?;
        Ok(s)
    }

    /// Enqueues the downloads of the final `R_total` and the barrier words.
    pub(super) fn download_factor(&mut self, st: &Arc<CudaStream>) -> Result<()> {
        let slot = ((FINAL_PASSES - 1) % 2) as usize;
        let rt = self.rt.slice().slice(slot * WW..(slot + 1) * WW);
        self.rt_host.download(st, &rt, 0)?;
        self.bar_host.download(st, self.bar.slice(), 0)
    }

    /// Synchronises and checks `rnn_orth`'s grid-barrier status word (downloaded before).
    pub(super) fn sync_checked(&mut self, st: &Arc<CudaStream>) -> Result<()> {
        st.synchronize()
            .map_err(Error::driver("synchronizing the rSVD"))?;
        let status = self.bar_host.as_slice()?[2];
        if status != 0 {
            return Err(Error::Kernel { kernel: "rnn_orth", code: status, detail: "grid barrier timed out: the blocks were not all resident (another cooperative kernel running concurrently?)".into() });
        }
        Ok(())
    }

    /// Uploads Z_k and W_k and enqueues `U = Q Z_k`, `V = X W_k` (X: Q_b or B^T in `z`).
    pub(super) fn upload_and_apply(
        &mut self,
        st: &Arc<CudaStream>,
        zk: &[f64],
        wk: &[f64],
    ) -> Result<()> {
        self.zw_host.write(0, zk)?;
        self.zw_host.write(WW, wk)?;
        self.zw_host.upload(st, 0..2 * WW, self.zw.slice_mut())?;
        self.apply(st)
    }

    /// Chooses the GEMM kernels: `rows` 4 (`rnn_gemm_nn`/`rnn_gemm_tn`, 256 threads of 4 x 6) or
    /// 8 (the default: `rnn_gemm_nn_r8`/`rnn_gemm_tn_r8`, 128 threads of 8 x 6), and re-plans the split-K
    /// for that shape's default target ([`GEMM_BLOCKS_PER_SM`], [`GEMM_BLOCKS_PER_SM_R8`]).
    /// Both shapes sum each split's inner range in the same order: with the same split, the
    /// results are identical.
    pub fn set_gemm_rows(&mut self, rows: u32) -> Result<()> {
        let (nn, tn) = match rows {
            4 => (GEMM_BLOCKS_PER_SM, GEMM_BLOCKS_PER_SM),
            8 => GEMM_BLOCKS_PER_SM_R8,
            _ => {
                return Err(Error::input(format!(
                    "GEMM rows per thread {rows} must be 4 or 8"
                )))
            }
        };
        self.gemm_rows = rows;
        self.gemm_tc = false;
        self.gemm_ring = false;
        self.nn = plan(&self.gpu, self.mp, self.np, nn);
        self.tn = plan(&self.gpu, self.np, self.mp, tn);
        Ok(())
    }

    /// Chooses the 3xTF32 tensor-core GEMMs (`rnn_gemm_nn_tc`/`rnn_gemm_tn_tc`, sm_80 and
    /// later; `PTXFLOW_RSVD_GEMM=tc` at construction) and plans their split-K for
    /// [`GEMM_BLOCKS_PER_SM_TC`]; [`GpuRsvd::set_gemm_rows`] goes back to the f32 FMA kernels.
    /// Their products differ from the FMA kernels' in the last bits (split-precision TF32,
    /// another summation order).
    pub fn set_gemm_tensor(&mut self) -> Result<()> {
        let (major, minor) = self.gpu.facts().compute_capability;
        if major < 8 {
            return Err(Error::input(format!(
                "the tensor-core GEMMs need compute capability 8.0 or later (device {major}.{minor})"
            )));
        }
        let (nn, tn) = GEMM_BLOCKS_PER_SM_TC;
        self.gemm_tc = true;
        self.gemm_ring = false;
        self.nn = plan_tc(&self.gpu, self.mp, self.np, nn);
        self.tn = plan_tc(&self.gpu, self.np, self.mp, tn);
        Ok(())
    }

    /// [`GpuRsvd::set_gemm_tensor`] with the kernels that stream A through a `cp.async` ring
    /// (`rnn_gemm_nn_tca`/`rnn_gemm_tn_tca`; `PTXFLOW_RSVD_GEMM=tca`): the same products, bit for
    /// bit, with the same plan.
    pub fn set_gemm_tensor_ring(&mut self) -> Result<()> {
        self.set_gemm_tensor()?;
        self.gemm_ring = true;
        Ok(())
    }

    /// Full CholQR launches use `rnn_orth_skip` (`on`) or `rnn_orth` (the default): the former
    /// skips a pass after the first when its Gram is the identity to f32 epsilon
    /// (`crate::kernels::rnn::orth::SKIP_TOL`), i.e. the final Q's second pass when the first
    /// already left Q orthonormal to rounding. `PTXFLOW_RSVD_ORTH_SKIP=1` turns it on at
    /// construction.
    pub fn set_orth_skip(&mut self, on: bool) {
        self.orth_skip = on;
    }

    /// Runs the small step on the host by one of its routes: `true` takes
    /// `V = B^T Z_k Sigma_k^-1` from B^T's Gram (no CholQR of B^T unless the check fails),
    /// `false` factors B^T first (`V = Q_b W_k`). Either turns the device small step off
    /// ([`GpuRsvd::set_small_on_device`] turns it back on).
    pub fn set_gram_route(&mut self, on: bool) {
        self.gram_route = on;
        self.small_device = false;
    }
}
