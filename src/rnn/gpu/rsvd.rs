//! [`GpuRsvd`]: the randomized truncated SVD on the GPU (algorithm: `crate::rnn::rsvd`). The
//! products run in `rnn_gemm_nn`/`rnn_gemm_tn` (f32, split-K), the sketch in `rnn_gaussian`, every
//! orthonormalisation in `rnn_orth` (CholeskyQR with f64 Gram and factors: [`MID_PASSES`] after
//! intermediate products, [`FINAL_PASSES`] for the last Q), and the small step from B^T's Gram
//! (a Gram-only `rnn_orth` launch) by one of three routes:
//! - host factor route (the default): the GPU factors B^T ([`FINAL_PASSES`] CholQR passes)
//!   while the CPU solves the eigenproblem (`crate::rnn::rsvd::small_eigen`), then
//!   `small_factors` forms `W_k` from B^T's triangular factor and `V = Q_b W_k`;
//! - host Gram route (`PTXFLOW_RSVD_ROUTE=gram` or [`GpuRsvd::set_gram_route`]): no CholQR of
//!   B^T; `gram_factors` checks `Sigma^-1 Z^T G Z Sigma^-1 = I` and `V = B^T Z_k Sigma_k^-1`;
//!   only a failed check factors B^T. Its eigenproblem is not hidden behind GPU work, so both
//!   host routes take about the same time (H200 and H100, medians of 40 alternating runs);
//! - device (opt-in: `PTXFLOW_RSVD_SMALL=device` or [`GpuRsvd::set_small_on_device`]):
//!   `rnn_small_eig` solves the eigenproblem by Jacobi and forms the Gram route's factors and
//!   check on the GPU (see `rsvd_device`); the host enqueues everything, synchronises once and
//!   takes the factor route only when the kernel reports a status other than OK. Not the
//!   default: on an H100 (4096^2, rank 32, 40 alternating runs) 844.9 us against 691.6 us for
//!   the host factor route, its kernel taking 317.9 us (7 sweeps of 41 rounds at 1.11 us,
//!   shared-memory bound: ncu L1/TEX 49%, 9.1 cycles per issued instruction at 8 warps).
//!
//! On sm_80 and later the products use the 3xTF32 tensor-core kernels with A streamed through a
//! `cp.async` ring, `rnn_gemm_nn_tca`/`rnn_gemm_tn_tca` ([`GpuRsvd::set_gemm_tensor_ring`]):
//! on an H100 (4096^2, rank 32, medians of 40 alternating runs) 635.6 us against 681.4 us with
//! the 8-row f32 kernels (A Omega 47.8 against 51.7 us, A^T Y 47.4 against 56.9 us); singular
//! values within 1e-5 (relative) of theirs. Elsewhere, or with `PTXFLOW_RSVD_GEMM=r8`, the
//! 8-row `rnn_gemm_nn_r8`/`rnn_gemm_tn_r8` ([`GpuRsvd::set_gemm_rows`]; `=r4`: the 4-row ones;
//! H200: 709 / 671 us against 743 / 693 us with the 4-row ones, factor route).
//!
//! `U = Q Z_k` and V come from one `rnn_apply_small` launch. A is held zero-padded to multiples
//! of 128 in both dimensions; the sketch width is padded to 48 (so rank + oversampling <= 48 on
//! the GPU).

pub use super::rsvd_device::SmallReport;
pub(super) use super::rsvd_host::GemmPlan;
use super::rsvd_host::{plan, plan_tc};
pub use super::rsvd_host::{HostTimes, GEMM_BLOCKS_PER_SM_TC};
use super::{cooperative_capacity, round_up, u32_of, zeros};
use crate::kernels::rnn::gemm::{BM, BN};
use crate::kernels::rnn::orth::{STAMPS, THREADS as ORTH_THREADS, WIDTH};
use crate::kernels::KernelId;
use crate::rnn::jacobi::OUT_LEN;
use crate::rnn::rsvd::{small_eigen, small_factors};
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::{LowRank, RsvdOptions};
use crate::runtime::{DeviceBuffer, Gpu, PinnedBuffer, PinnedKind};
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::Arc;
use std::time::Instant;

/// CholQR passes after the intermediate products: only their range matters there, and one
/// shifted pass reaches the f64 reference's error (`rsvd_model` in tests/rnn_cpu.rs; measured
/// with 1 and 2 passes on exponential, harmonic, flat and low-rank spectra).
pub const MID_PASSES: u32 = 1;
/// CholQR passes for the final Q and for B^T (orthonormal to rounding).
pub const FINAL_PASSES: u32 = 2;
pub(super) const WW: usize = (WIDTH * WIDTH) as usize;

/// Split-K target of the 4-row GEMMs (`rnn_gemm_*`, [`GpuRsvd::set_gemm_rows`]`(4)`): blocks
/// per SM over the whole device.
pub const GEMM_BLOCKS_PER_SM: u32 = 2;
/// Default split-K targets (nn, tn) of the 8-row kernels (`rnn_gemm_*_r8`, 128 threads): one
/// full wave each (`rnn_gemm_nn_r8` needs ~168 registers, so 3 blocks fit an SM; the tn kernel
/// is built for 4).
pub const GEMM_BLOCKS_PER_SM_R8: (u32, u32) = (3, 4);
/// Largest target [`GpuRsvd::set_gemm_blocks_per_sm`] accepts (the partials are sized for it).
pub const MAX_GEMM_BLOCKS_PER_SM: u32 = 4;

/// One product of the uploaded A with a sketch-width matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Product {
    /// `y = A omega` (nn).
    Sketch,
    /// `y = A z` (nn).
    Range,
    /// `z = A^T y` (tn).
    CoRange,
}

/// What one `rnn_orth` launch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OrthMode {
    Full,
    /// With block 0's clock stamps (benchmarks).
    Stamped,
    /// Only the Gram matrix of the input, into `gram`.
    GramOnly,
}

/// A randomized SVD of `m x n` matrices with fixed options; buffers allocated once.
pub struct GpuRsvd {
    pub(super) gpu: Arc<Gpu>,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) mp: usize,
    pub(super) np: usize,
    pub(super) l: usize,
    pub(super) opts: RsvdOptions,
    pub(super) nn: GemmPlan,
    pub(super) tn: GemmPlan,
    pub(super) a: DeviceBuffer<f32>,
    pub(super) omega: DeviceBuffer<f32>,
    pub(super) y: DeviceBuffer<f32>,
    pub(super) z: DeviceBuffer<f32>,
    pub(super) gemm_partial: DeviceBuffer<f32>,
    pub(super) counters: DeviceBuffer<u32>,
    pub(super) orth_partial: DeviceBuffer<f64>,
    pub(super) gram: DeviceBuffer<f64>,
    pub(super) rt: DeviceBuffer<f64>,
    pub(super) bar: DeviceBuffer<u32>,
    pub(super) zw: DeviceBuffer<f64>,
    pub(super) rt_host: PinnedBuffer<f64>,
    pub(super) gram_host: PinnedBuffer<f64>,
    pub(super) bar_host: PinnedBuffer<u32>,
    pub(super) zw_host: PinnedBuffer<f64>,
    pub(super) u_out: DeviceBuffer<f32>,
    pub(super) v_out: DeviceBuffer<f32>,
    pub(super) orth_cap: u32,
    pub(super) stage: Vec<f32>,
    pub(super) stamps: DeviceBuffer<u64>,
    pub(super) host: HostTimes,
    pub(super) gram_route: bool,
    /// Rows of C per GEMM thread: 4 (`rnn_gemm_*`) or 8 (`rnn_gemm_*_r8`).
    pub(super) gemm_rows: u32,
    /// The products run in the 3xTF32 tensor-core kernels (`rnn_gemm_*_tc`, or
    /// `rnn_gemm_*_tca` with `gemm_ring`).
    pub(super) gemm_tc: bool,
    pub(super) gemm_ring: bool,
    /// Full CholQR launches use `rnn_orth_skip` (a-posteriori check on later passes).
    pub(super) orth_skip: bool,
    /// The small step runs on the device (`rnn_small_eig`; see `rsvd_device`).
    pub(super) small_device: bool,
    /// `rnn_small_eig`'s `out` (S, status, sweeps, check value) and its pinned copy.
    pub(super) small_out: DeviceBuffer<f64>,
    pub(super) small_host: PinnedBuffer<f64>,
}

impl GpuRsvd {
    /// Allocates everything for `m x n` inputs (rank + oversampling must be at most 48) and
    /// draws the Gaussian sketch (it depends only on the seed and the shape).
    pub fn new(gpu: Arc<Gpu>, m: usize, n: usize, opts: RsvdOptions) -> Result<Self> {
        opts.validate(m, n)?;
        let l = opts.width(m, n);
        if opts.rank + opts.oversample > WIDTH as usize {
            return Err(Error::Capacity {
                what: "GPU randomized SVD rank + oversampling".into(),
                needed: opts.rank + opts.oversample,
                capacity: WIDTH as usize,
            });
        }
        // validate() bounded m x n; a u32 element count also keeps the padding below from wrapping.
        let _ = u32_of("matrix elements", m * n)?;
        let (mp, np) = (round_up(m, BM as usize), round_up(n, BM as usize));
        let _ = u32_of("padded matrix elements", mp * np)?;
        let (nn, tn) = (
            plan(&gpu, mp, np, GEMM_BLOCKS_PER_SM),
            plan(&gpu, np, mp, GEMM_BLOCKS_PER_SM),
        );
        let (nn_max, tn_max) = (
            plan(&gpu, mp, np, MAX_GEMM_BLOCKS_PER_SM),
            plan(&gpu, np, mp, MAX_GEMM_BLOCKS_PER_SM),
        );
        let w = WIDTH as usize;
        let partial = (nn_max.splits.max(nn.splits) as usize * mp)
            .max(tn_max.splits.max(tn.splits) as usize * np)
            * w;
        let tiles = (mp.max(np) / BM as usize) * (w / BN as usize);
        // Both CholQR kernels launch with the same grid: the smaller co-resident capacity.
        let mut orth_cap = gpu.facts().sm_count;
        for id in [KernelId::RnnOrth, KernelId::RnnOrthSkip] {
            let kern = gpu.kernel(id)?;
            orth_cap = orth_cap.min(cooperative_capacity(
                &gpu,
                kern.function(),
                ORTH_THREADS,
                0,
            )?);
        }
        let st = gpu.stream().clone();
        let mut r = GpuRsvd {
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
            gram_host: PinnedBuffer::new(&gpu, WW, PinnedKind::Download)?,
            bar_host: PinnedBuffer::new(&gpu, 4, PinnedKind::Download)?,
            zw_host: PinnedBuffer::new(&gpu, 2 * WW, PinnedKind::Upload)?,
            u_out: zeros(&st, mp * w, "rSVD U")?,
            v_out: zeros(&st, np * w, "rSVD V")?,
            orth_cap,
            stage: Vec::new(),
            stamps: zeros(&st, STAMPS as usize, "CholQR clock stamps")?,
            host: HostTimes::default(),
            gram_route: std::env::var("PTXFLOW_RSVD_ROUTE").is_ok_and(|v| v == "gram"),
            gemm_rows: 4,
            gemm_tc: false,
            gemm_ring: false,
            orth_skip: std::env::var("PTXFLOW_RSVD_ORTH_SKIP").is_ok_and(|v| v == "1"),
            small_device: std::env::var("PTXFLOW_RSVD_SMALL").is_ok_and(|v| v == "device"),
            small_out: zeros(&st, OUT_LEN, "small-step results")?,
            small_host: PinnedBuffer::new(&gpu, OUT_LEN, PinnedKind::Download)?,
            gpu,
        };
        r.sketch()?;
        // The 3xTF32 tensor-core GEMMs with the cp.async ring on sm_80 and later, else the
        // 8-row f32 ones (PTXFLOW_RSVD_GEMM=r8: the 8-row ones, =r4: the 4-row ones, =tc: the
        // tensor-core ones with A through registers).
        let tensor = r.gpu.facts().compute_capability.0 >= 8;
        match std::env::var("PTXFLOW_RSVD_GEMM").as_deref() {
            Ok("r4") => {}
            Ok("r8") => r.set_gemm_rows(8)?,
            Ok("tc") => r.set_gemm_tensor()?,
            _ if tensor => r.set_gemm_tensor_ring()?,
            _ => r.set_gemm_rows(8)?,
        }
        Ok(r)
    }

    /// Re-plans the products' split-K for `blocks_per_sm` blocks per SM (1..=
    /// [`MAX_GEMM_BLOCKS_PER_SM`]; the defaults: [`GEMM_BLOCKS_PER_SM`] for the 4-row GEMMs,
    /// [`GEMM_BLOCKS_PER_SM_R8`] for the 8-row ones). The split count changes the
    /// products' summation order (each plan is deterministic).
    pub fn set_gemm_blocks_per_sm(&mut self, blocks_per_sm: u32) -> Result<()> {
        if !(1..=MAX_GEMM_BLOCKS_PER_SM).contains(&blocks_per_sm) {
            return Err(Error::input(format!(
                "GEMM blocks per SM {blocks_per_sm} must be in 1..={MAX_GEMM_BLOCKS_PER_SM}"
            )));
        }
        if self.gemm_tc {
            self.nn = plan_tc(&self.gpu, self.mp, self.np, blocks_per_sm);
            self.tn = plan_tc(&self.gpu, self.np, self.mp, blocks_per_sm);
        } else {
            self.nn = plan(&self.gpu, self.mp, self.np, blocks_per_sm);
            self.tn = plan(&self.gpu, self.np, self.mp, blocks_per_sm);
        }
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
            stage[i * self.np..i * self.np + self.n]
                .copy_from_slice(&a[i * self.n..(i + 1) * self.n]);
        }
        let r = self.a.upload(&st, &stage);
        self.stage = stage;
        r
    }

    /// Runs the whole decomposition of the uploaded matrix; U and V stay on the device
    /// (`mp x 48` and `np x 48`, first k columns). Returns S. Factor route: waits for B^T's Gram
    /// (then solves the small eigenproblem while the GPU finishes B^T's CholQR) and for B^T's
    /// factor; Gram route: waits once, for B^T's Gram (twice when its check fails).
    pub fn run_device(&mut self) -> Result<Vec<f64>> {
        let st = self.gpu.stream().clone();
        self.enqueue_to_gram(&st)?;
        if self.small_device {
            return self.finish_on_device(&st);
        }
        self.gram_host.download(&st, self.gram.slice(), 0)?;
        if self.gram_route {
            return self.finish_gram_route(&st);
        }
        self.orth(&st, false, FINAL_PASSES, OrthMode::Full)?;
        // R_total and the barrier words come back through pinned memory: two async copies, one
        // synchronisation.
        self.download_factor(&st)?;
        let t0 = Instant::now();
        let g = self.gram_host.as_slice()?;
        let t1 = Instant::now();
        let eig = small_eigen(g, WIDTH as usize, self.l, self.opts.rank)?;
        let t2 = Instant::now();
        self.sync_checked(&st)?;
        let t3 = Instant::now();
        let rt = self.rt_host.as_slice()?;
        let (s, zk, wk) = small_factors(eig.as_ref(), rt, WIDTH as usize, self.l, self.opts.rank)?;
        self.host = HostTimes::from_instants(t0, t1, t2, t3);
        self.upload_and_apply(&st, &zk, &wk)?;
        Ok(s)
    }

    /// The products and orthonormalisations up to B^T's Gram (`gram`, unshifted).
    pub(super) fn enqueue_to_gram(&self, st: &Arc<CudaStream>) -> Result<()> {
        let q = self.opts.power_iters;
        self.gemm(st, Product::Sketch)?;
        self.orth(
            st,
            true,
            if q == 0 { FINAL_PASSES } else { MID_PASSES },
            OrthMode::Full,
        )?;
        for it in 0..q {
            self.gemm(st, Product::CoRange)?;
            self.orth(st, false, MID_PASSES, OrthMode::Full)?;
            self.gemm(st, Product::Range)?;
            self.orth(
                st,
                true,
                if it + 1 == q {
                    FINAL_PASSES
                } else {
                    MID_PASSES
                },
                OrthMode::Full,
            )?;
        }
        self.gemm(st, Product::CoRange)?;
        // B^T's Gram goes to the host first: its eigenproblem runs while the GPU factors B^T
        // (factor route) or while nothing else runs (Gram route: B^T is not factored at all).
        self.orth(st, false, 1, OrthMode::GramOnly)
    }

    /// The decomposition of the uploaded matrix as host factors.
    pub fn run(&mut self) -> Result<LowRank> {
        let s = self.run_device()?;
        let st = self.gpu.stream().clone();
        let w = WIDTH as usize;
        let k = self.opts.rank;
        let mut u = vec![0.0f32; self.mp * w];
        let mut v = vec![0.0f32; self.np * w];
        st.memcpy_dtoh(self.u_out.slice(), &mut u)
            .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.memcpy_dtoh(self.v_out.slice(), &mut v)
            .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.synchronize()
            .map_err(Error::driver("synchronizing the rSVD download"))?;
        let uk: Vec<f32> = (0..self.m)
            .flat_map(|i| u[i * w..i * w + k].to_vec())
            .collect();
        let mut vt = vec![0.0f32; k * self.n];
        for c in 0..self.n {
            for j in 0..k {
                vt[j * self.n + c] = v[c * w + j];
            }
        }
        LowRank::new(
            self.m,
            self.n,
            k,
            uk,
            s.iter().map(|&x| x as f32).collect(),
            vt,
        )
    }

    /// Host-side times of the last [`GpuRsvd::run_device`].
    pub fn host_times(&self) -> HostTimes {
        self.host
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
