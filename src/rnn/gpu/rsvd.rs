//! [`GpuRsvd`]: the randomized truncated SVD on the GPU (algorithm: `crate::rnn::rsvd`). The
//! products run in `rnn_gemm_nn`/`rnn_gemm_tn` (f32, split-K), the sketch in `rnn_gaussian`, every
//! orthonormalisation in `rnn_orth` (CholeskyQR with f64 Gram and factors: [`MID_PASSES`] after
//! intermediate products, [`FINAL_PASSES`] for the last Q and for B^T), the l x l SVD of B^T's
//! triangular factor on the CPU (nalgebra, f64), and `U = Q Z_k`, `V = Q_b W_k` in
//! `rnn_apply_small`. A is held zero-padded to multiples of 128 in both dimensions; the sketch
//! width is padded to 48 (so rank + oversampling <= 48 on the GPU).

use super::{cfg, cooperative_capacity, round_up, u32_of, zeros};
use crate::kernels::rnn::gemm::{BK, BM, BN, THREADS as GEMM_THREADS};
use crate::kernels::rnn::orth::{SLAB, THREADS as ORTH_THREADS, WIDTH};
use crate::kernels::KernelId;
use crate::rnn::rsvd::small_svd;
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::{LowRank, RsvdOptions};
use crate::runtime::{DeviceBuffer, Gpu, PinnedBuffer, PinnedKind};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, PushKernelArg};
use std::sync::Arc;

/// CholQR passes after the intermediate products: only their range matters there, and one
/// shifted pass reaches the f64 reference's error (`rsvd_model` in tests/rnn_cpu.rs; measured
/// with 1 and 2 passes on exponential, harmonic, flat and low-rank spectra).
pub const MID_PASSES: u32 = 1;
/// CholQR passes for the final Q and for B^T (orthonormal to rounding).
pub const FINAL_PASSES: u32 = 2;
const WW: usize = (WIDTH * WIDTH) as usize;

#[derive(Clone, Copy, Debug)]
struct GemmPlan {
    splits: u32,
    k_per_split: u32,
}

/// Default GEMM split-K target: blocks per SM of `rnn_gemm_*` over the whole device.
pub const GEMM_BLOCKS_PER_SM: u32 = 2;
/// Largest target [`GpuRsvd::set_gemm_blocks_per_sm`] accepts (the partials are sized for it).
pub const MAX_GEMM_BLOCKS_PER_SM: u32 = 4;

fn plan(gpu: &Gpu, m: usize, k: usize, blocks_per_sm: u32) -> GemmPlan {
    let tiles = (m / BM as usize).max(1);
    let target = (blocks_per_sm * gpu.facts().sm_count) as usize;
    let s = (target / tiles).clamp(1, k / BK as usize);
    let kps = round_up(k.div_ceil(s), BK as usize);
    GemmPlan { splits: k.div_ceil(kps) as u32, k_per_split: kps as u32 }
}

/// A randomized SVD of `m x n` matrices with fixed options; buffers allocated once.
pub struct GpuRsvd {
    gpu: Arc<Gpu>,
    m: usize,
    n: usize,
    mp: usize,
    np: usize,
    l: usize,
    opts: RsvdOptions,
    nn: GemmPlan,
    tn: GemmPlan,
    a: DeviceBuffer<f32>,
    omega: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    z: DeviceBuffer<f32>,
    gemm_partial: DeviceBuffer<f32>,
    counters: DeviceBuffer<u32>,
    orth_partial: DeviceBuffer<f64>,
    gram: DeviceBuffer<f64>,
    rt: DeviceBuffer<f64>,
    bar: DeviceBuffer<u32>,
    zw: DeviceBuffer<f64>,
    rt_host: PinnedBuffer<f64>,
    bar_host: PinnedBuffer<u32>,
    zw_host: PinnedBuffer<f64>,
    u_out: DeviceBuffer<f32>,
    v_out: DeviceBuffer<f32>,
    orth_cap: u32,
    stage: Vec<f32>,
}

impl GpuRsvd {
    /// Allocates everything for `m x n` inputs (rank + oversampling must be at most 48) and
    /// draws the Gaussian sketch (it depends only on the seed and the shape).
    pub fn new(gpu: Arc<Gpu>, m: usize, n: usize, opts: RsvdOptions) -> Result<Self> {
        opts.validate(m, n)?;
        let l = opts.width(m, n);
        if opts.rank + opts.oversample > WIDTH as usize {
            return Err(Error::Capacity { what: "GPU randomized SVD rank + oversampling".into(), needed: opts.rank + opts.oversample, capacity: WIDTH as usize });
        }
        let (mp, np) = (round_up(m, BM as usize), round_up(n, BM as usize));
        let _ = u32_of("padded matrix elements", mp * np)?;
        let (nn, tn) = (plan(&gpu, mp, np, GEMM_BLOCKS_PER_SM), plan(&gpu, np, mp, GEMM_BLOCKS_PER_SM));
        let (nn_max, tn_max) = (plan(&gpu, mp, np, MAX_GEMM_BLOCKS_PER_SM), plan(&gpu, np, mp, MAX_GEMM_BLOCKS_PER_SM));
        let w = WIDTH as usize;
        let partial = (nn_max.splits.max(nn.splits) as usize * mp).max(tn_max.splits.max(tn.splits) as usize * np) * w;
        let tiles = (mp.max(np) / BM as usize) * (w / BN as usize);
        let f = gpu.function(KernelId::RnnOrth)?;
        let orth_cap = cooperative_capacity(&gpu, &f, ORTH_THREADS, 0)?.min(gpu.facts().sm_count);
        let st = gpu.stream().clone();
        let r = GpuRsvd {
            m,
            n,
            mp,
            np,
            l,
            opts,
            nn,
            tn,
            a: zeros(&st, mp * np, "rSVD matrix")?,
            omega: zeros(&st, np * w, "rSVD sketch")?,
            y: zeros(&st, mp * w, "rSVD range basis")?,
            z: zeros(&st, np * w, "rSVD co-range basis")?,
            gemm_partial: zeros(&st, partial, "GEMM split-K partials")?,
            counters: zeros(&st, tiles, "GEMM tile counters")?,
            orth_partial: zeros(&st, orth_cap as usize * WW, "CholQR partial Gram")?,
            gram: zeros(&st, WW, "CholQR Gram")?,
            rt: zeros(&st, 2 * WW, "CholQR R_total")?,
            bar: zeros(&st, 4, "CholQR barrier words")?,
            zw: zeros(&st, 2 * WW, "small-SVD Z_k and W_k")?,
            rt_host: PinnedBuffer::new(&gpu, WW, PinnedKind::Download)?,
            bar_host: PinnedBuffer::new(&gpu, 4, PinnedKind::Download)?,
            zw_host: PinnedBuffer::new(&gpu, 2 * WW, PinnedKind::Upload)?,
            u_out: zeros(&st, mp * w, "rSVD U")?,
            v_out: zeros(&st, np * w, "rSVD V")?,
            orth_cap,
            stage: Vec::new(),
            gpu,
        };
        r.sketch()?;
        Ok(r)
    }

    /// Re-plans the products' split-K for `blocks_per_sm` blocks per SM (1..=
    /// [`MAX_GEMM_BLOCKS_PER_SM`]; default [`GEMM_BLOCKS_PER_SM`]). The split count changes the
    /// products' summation order (each plan is deterministic).
    pub fn set_gemm_blocks_per_sm(&mut self, blocks_per_sm: u32) -> Result<()> {
        if !(1..=MAX_GEMM_BLOCKS_PER_SM).contains(&blocks_per_sm) {
            return Err(Error::input(format!("GEMM blocks per SM {blocks_per_sm} must be in 1..={MAX_GEMM_BLOCKS_PER_SM}")));
        }
        self.nn = plan(&self.gpu, self.mp, self.np, blocks_per_sm);
        self.tn = plan(&self.gpu, self.np, self.mp, blocks_per_sm);
        Ok(())
    }

    /// Uploads A (`m x n`, row-major), zero-padded on the device.
    pub fn upload(&mut self, a: &[f32]) -> Result<()> {
        check_len("rSVD matrix (m x n)", a.len(), self.m * self.n)?;
        check_finite("rSVD matrix", a)?;
        let st = self.gpu.stream().clone();
        if self.mp == self.m && self.np == self.n {
            return self.a.upload(&st, a);
        }
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        stage.resize(self.mp * self.np, 0.0);
        for i in 0..self.m {
            stage[i * self.np..i * self.np + self.n].copy_from_slice(&a[i * self.n..(i + 1) * self.n]);
        }
        let r = self.a.upload(&st, &stage);
        self.stage = stage;
        r
    }

    /// Fills Omega (it depends only on the seed and the shape, so once per instance).
    fn sketch(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        let f = self.gpu.function(KernelId::RnnGaussian)?;
        let (rows, ld, l) = (self.np as u32, WIDTH, self.l as u32);
        let (slo, shi) = (self.opts.seed as u32, (self.opts.seed >> 32) as u32);
        let blocks = ((self.np * WIDTH as usize).div_ceil(256) as u32).min(self.gpu.facts().sm_count * 8);
        let mut lb = st.launch_builder(&f);
        lb.arg(self.omega.slice()).arg(&rows).arg(&ld).arg(&l).arg(&slo).arg(&shi);
        // SAFETY: (out, rows, ld, l, seed_lo, seed_hi) as rnn_gaussian declares; out holds
        // np x 48 values and the kernel writes exactly those.
        unsafe { lb.launch(cfg((blocks, 1, 1), 256, 0)) }.map_err(Error::driver("launching rnn_gaussian"))?;
        Ok(())
    }

    /// nn: `y = A (from_sketch ? omega : z)`; tn: `z = A^T y`.
    fn gemm(&self, st: &Arc<CudaStream>, trans: bool, from_sketch: bool) -> Result<()> {
        let (id, plan, m, k) = if trans { (KernelId::RnnGemmTn, self.tn, self.np, self.mp) } else { (KernelId::RnnGemmNn, self.nn, self.mp, self.np) };
        let f = self.gpu.function(id)?;
        let (b, c) = match (trans, from_sketch) {
            (true, _) => (&self.y, &self.z),
            (false, true) => (&self.omega, &self.y),
            (false, false) => (&self.z, &self.y),
        };
        let (mu, nu, ku, lda) = (m as u32, WIDTH, k as u32, self.np as u32);
        let grid = ((m / BM as usize) as u32, WIDTH / BN, plan.splits);
        let mut lb = st.launch_builder(&f);
        lb.arg(self.a.slice()).arg(b.slice()).arg(c.slice()).arg(self.gemm_partial.slice()).arg(self.counters.slice());
        lb.arg(&mu).arg(&nu).arg(&ku).arg(&lda).arg(&plan.k_per_split).arg(&plan.splits);
        // SAFETY: parameters (a, b, c, partial, counters; m, n, k, lda, k_per_split, splits) as
        // the kernel declares. A is mp x np, B is k x 48, C is m x 48 (m, k in {mp, np}, both
        // multiples of 128 = BM, hence of BK); partial holds splits*m*48 (sized for both plans);
        // counters hold m/BM tiles and are zero between launches (the last block resets them).
        unsafe { lb.launch(cfg(grid, GEMM_THREADS, 0)) }.map_err(Error::driver(if trans { "launching rnn_gemm_tn" } else { "launching rnn_gemm_nn" }))?;
        Ok(())
    }

    fn orth(&self, st: &Arc<CudaStream>, on_y: bool, passes: u32) -> Result<()> {
        let (buf, rows) = if on_y { (&self.y, self.mp) } else { (&self.z, self.np) };
        let f = self.gpu.function(KernelId::RnnOrth)?;
        let blocks = ((rows / SLAB as usize) as u32).min(self.orth_cap).max(1);
        let (r, l) = (rows as u32, self.l as u32);
        let mut lb = st.launch_builder(&f);
        lb.arg(buf.slice()).arg(&r).arg(&l).arg(&passes).arg(self.orth_partial.slice()).arg(self.gram.slice()).arg(self.rt.slice()).arg(self.bar.slice());
        // SAFETY: parameters (y, rows, l, passes, partial, gram, rt, bar) as rnn_orth declares;
        // y holds rows x 48 (rows a multiple of 128, hence of SLAB); partial holds orth_cap >=
        // blocks Gram blocks; gram and rt hold 48x48 and 2x48x48 f64; bar holds 4 zeroed words.
        // blocks <= the co-resident capacity, which the cooperative launch enforces.
        unsafe { lb.launch_cooperative(cfg((blocks, 1, 1), ORTH_THREADS, 0)) }.map_err(Error::driver("launching rnn_orth"))?;
        Ok(())
    }

    fn apply(&self, st: &Arc<CudaStream>, on_y: bool) -> Result<()> {
        let (x, half, out, rows) = if on_y { (&self.y, 0, &self.u_out, self.mp) } else { (&self.z, 1, &self.v_out, self.np) };
        let m = self.zw.slice().slice(half * WW..(half + 1) * WW);
        let f = self.gpu.function(KernelId::RnnApplySmall)?;
        let mut lb = st.launch_builder(&f);
        lb.arg(x.slice()).arg(&m).arg(out.slice());
        // SAFETY: (x, m, out) as rnn_apply_small declares: x and out hold rows x 48 f32, m is
        // a 48 x 48 f64 half of zw (Z_k, then W_k); one block per 32-row slab.
        unsafe { lb.launch(cfg(((rows / SLAB as usize) as u32, 1, 1), ORTH_THREADS, 0)) }.map_err(Error::driver("launching rnn_apply_small"))?;
        Ok(())
    }

    /// Runs the whole decomposition of the uploaded matrix; U and V stay on the device
    /// (`mp x 48` and `np x 48`, first k columns). Returns S. Synchronises once, for the small SVD.
    pub fn run_device(&mut self) -> Result<Vec<f64>> {
        let st = self.gpu.stream().clone();
        let q = self.opts.power_iters;
        self.gemm(&st, false, true)?;
        self.orth(&st, true, if q == 0 { FINAL_PASSES } else { MID_PASSES })?;
        for it in 0..q {
            self.gemm(&st, true, false)?;
            self.orth(&st, false, MID_PASSES)?;
            self.gemm(&st, false, false)?;
            self.orth(&st, true, if it + 1 == q { FINAL_PASSES } else { MID_PASSES })?;
        }
        self.gemm(&st, true, false)?;
        self.orth(&st, false, FINAL_PASSES)?;
        // R_total and the barrier words come back through pinned memory: two async copies, one
        // synchronisation.
        let slot = ((FINAL_PASSES - 1) % 2) as usize;
        st.memcpy_dtoh(&self.rt.slice().slice(slot * WW..(slot + 1) * WW), self.rt_host.raw_mut()).map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.memcpy_dtoh(self.bar.slice(), self.bar_host.raw_mut()).map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.synchronize().map_err(Error::driver("synchronizing the rSVD"))?;
        let status = self.bar_host.raw().as_slice().map_err(Error::driver("reading pinned memory"))?[2];
        if status != 0 {
            return Err(Error::Kernel { kernel: "rnn_orth", code: status, detail: "grid barrier timed out: the blocks were not all resident (another cooperative kernel running concurrently?)".into() });
        }
        let rt = self.rt_host.raw().as_slice().map_err(Error::driver("reading pinned memory"))?;
        let (s, zk, wk) = small_svd(rt, WIDTH as usize, self.l, self.opts.rank)?;
        let zw = self.zw_host.raw_mut().as_mut_slice().map_err(Error::driver("writing pinned memory"))?;
        zw[..WW].copy_from_slice(&zk);
        zw[WW..].copy_from_slice(&wk);
        st.memcpy_htod(self.zw_host.raw(), self.zw.slice_mut()).map_err(Error::driver("cuMemcpyHtoDAsync"))?;
        self.apply(&st, true)?;
        self.apply(&st, false)?;
        Ok(s)
    }

    /// The decomposition of the uploaded matrix as host factors.
    pub fn run(&mut self) -> Result<LowRank> {
        let s = self.run_device()?;
        let st = self.gpu.stream().clone();
        let w = WIDTH as usize;
        let k = self.opts.rank;
        let mut u = vec![0.0f32; self.mp * w];
        let mut v = vec![0.0f32; self.np * w];
        st.memcpy_dtoh(self.u_out.slice(), &mut u).map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.memcpy_dtoh(self.v_out.slice(), &mut v).map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.synchronize().map_err(Error::driver("synchronizing the rSVD download"))?;
        let uk: Vec<f32> = (0..self.m).flat_map(|i| u[i * w..i * w + k].to_vec()).collect();
        let mut vt = vec![0.0f32; k * self.n];
        for c in 0..self.n {
            for j in 0..k {
                vt[j * self.n + c] = v[c * w + j];
            }
        }
        LowRank::new(self.m, self.n, k, uk, s.iter().map(|&x| x as f32).collect(), vt)
    }

    /// Enqueues one product on the uploaded matrix, for benchmarks: `A Omega` (nn) or `A^T Y`
    /// (tn), each one pass over A.
    pub fn enqueue_product(&self, transpose: bool) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.gemm(&st, transpose, true)
    }

    /// Enqueues one orthonormalisation of the range basis (`passes` CholQR passes), for
    /// benchmarks.
    pub fn enqueue_orth(&self, passes: u32) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.orth(&st, true, passes)
    }

    /// Padded sizes (rows, columns) of A on the device.
    pub fn padded(&self) -> (usize, usize) {
        (self.mp, self.np)
    }

    /// Uploads `a` and decomposes it.
    pub fn decompose(&mut self, a: &[f32]) -> Result<LowRank> {
        self.upload(a)?;
        self.run()
    }
}
