//! The kernel launches of [`GpuRsvd`]: the sketch (`rnn_gaussian`), the products
//! (`rnn_gemm_nn_r8`/`rnn_gemm_tn_r8` or `rnn_gemm_nn`/`rnn_gemm_tn`, with their split-K plan),
//! the CholeskyQR (`rnn_orth`, or `rnn_orth_skip` for full launches when chosen) and the small
//! apply (`rnn_apply_small`).

use super::cfg;
use super::rsvd::{GpuRsvd, OrthMode, Product, WW};
use crate::kernels::rnn::gemm::tc::TC_THREADS;
use crate::kernels::rnn::gemm::{BM, BN, SHAPE8, THREADS as GEMM_THREADS};
use crate::kernels::rnn::orth::STAMPS;
use crate::kernels::rnn::orth::{SLAB, THREADS as ORTH_THREADS, WIDTH};
use crate::kernels::KernelId;
use crate::Error;
use crate::Result;
use cudarc::driver::CudaStream;
use std::sync::Arc;

impl GpuRsvd {
    /// Enqueues the GPU work before the host step, for benchmarks: the products and
    /// orthonormalisations up to B^T's Gram (in `gram`; nothing is downloaded).
    pub fn enqueue_until_gram(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.enqueue_to_gram(&st)
    }

    /// Enqueues `U = Q Z_k`, `V = X W_k` with the factors already on the device, for benchmarks.
    pub fn enqueue_apply(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.apply(&st)
    }

    /// Enqueues a Gram-only `rnn_orth` launch on the co-range basis, for benchmarks.
    pub fn enqueue_gram(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.orth(&st, false, 1, OrthMode::GramOnly)
    }

    /// Enqueues one product on the uploaded matrix, for benchmarks: `A Omega` (nn) or `A^T Y`
    /// (tn), each one pass over A.
    pub fn enqueue_product(&self, transpose: bool) -> Result<()> {
        let st = self.gpu.stream().clone();
        let product = if transpose {
            Product::CoRange
        } else {
            Product::Sketch
        };
        self.gemm(&st, product)
    }

    /// Enqueues one orthonormalisation of the range basis (`passes` CholQR passes), for
    /// benchmarks.
    pub fn enqueue_orth(&self, passes: u32) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.orth(&st, true, passes, OrthMode::Full)
    }

    /// Runs one orthonormalisation of the range basis with clock stamps and returns them
    /// (`rnn_orth`'s [`STAMPS`] `%clock64` values of block 0; see `crate::kernels::rnn::orth`).
    pub fn orth_stamps(&self, passes: u32) -> Result<Vec<u64>> {
        let st = self.gpu.stream().clone();
        self.orth(&st, true, passes, OrthMode::Stamped)?;
        let mut out = vec![0u64; STAMPS as usize];
        st.memcpy_dtoh(self.stamps.slice(), &mut out)
            .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        st.synchronize()
            .map_err(Error::driver("synchronizing the clock stamps"))?;
        Ok(out)
    }

    /// Fills Omega (it depends only on the seed and the shape, so once per instance).
    pub(super) fn sketch(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        let kern = self.gpu.kernel(KernelId::RnnGaussian)?;
        let (rows, ld, l) = (self.np as u32, WIDTH, self.l as u32);
        let (slo, shi) = (self.opts.seed as u32, (self.opts.seed >> 32) as u32);
        let blocks =
            ((self.np * WIDTH as usize).div_ceil(256) as u32).min(self.gpu.facts().sm_count * 8);
        let mut lb = kern.launch(&st, cfg((blocks, 1, 1), 256, 0));
        lb.arg(self.omega.slice())
            .arg(&rows)
            .arg(&ld)
            .arg(&l)
            .arg(&slo)
            .arg(&shi);
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // out holds np x 48 values and the kernel writes exactly those.
        unsafe { lb.launch() }?;
        Ok(())
    }

    /// Enqueues `product` (nn: `y = A omega`, `y = A z`; tn: `z = A^T y`).
    pub(super) fn gemm(&self, st: &Arc<CudaStream>, product: Product) -> Result<()> {
        let r8 = self.gemm_rows == 8;
        let (tn, nn) = match (self.gemm_tc, r8) {
            (true, _) if self.gemm_ring => (KernelId::RnnGemmTnTca, KernelId::RnnGemmNnTca),
            (true, _) => (KernelId::RnnGemmTnTc, KernelId::RnnGemmNnTc),
            (false, true) => (KernelId::RnnGemmTnR8, KernelId::RnnGemmNnR8),
            (false, false) => (KernelId::RnnGemmTn, KernelId::RnnGemmNn),
        };
        let (id, plan, m, k) = match product {
            Product::CoRange => (tn, self.tn, self.np, self.mp),
            _ => (nn, self.nn, self.mp, self.np),
        };
        let threads = match (self.gemm_tc, r8) {
            (true, _) => TC_THREADS,
            (false, true) => SHAPE8.threads,
            (false, false) => GEMM_THREADS,
        };
        let kern = self.gpu.kernel(id)?;
        let (b, c) = match product {
            Product::CoRange => (&self.y, &self.z),
            Product::Sketch => (&self.omega, &self.y),
            Product::Range => (&self.z, &self.y),
        };
        let (mu, nu, ku, lda) = (m as u32, WIDTH, k as u32, self.np as u32);
        let grid = ((m / BM as usize) as u32, WIDTH / BN, plan.splits);
        let mut lb = kern.launch(st, cfg(grid, threads, 0));
        lb.arg(self.a.slice())
            .arg(b.slice())
            .arg(c.slice())
            .arg(self.gemm_partial.slice())
            .arg(self.counters.slice());
        lb.arg(&mu)
            .arg(&nu)
            .arg(&ku)
            .arg(&lda)
            .arg(&plan.k_per_split)
            .arg(&plan.splits);
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // A is mp x np, B is k x 48, C is m x 48 (m, k in {mp, np}, both
        // multiples of 128 = BM, hence of BK and of the tc kernels' KC = 64; the tc plans' split
        // is a multiple of KC); partial holds splits*m*48 (sized for every plan);
        // counters hold m/BM tiles and are zero between launches (the last block resets them).
        unsafe { lb.launch() }?;
        Ok(())
    }

    pub(super) fn orth(
        &self,
        st: &Arc<CudaStream>,
        on_y: bool,
        passes: u32,
        mode: OrthMode,
    ) -> Result<()> {
        let (buf, rows) = if on_y {
            (&self.y, self.mp)
        } else {
            (&self.z, self.np)
        };
        let id = if self.orth_skip && mode == OrthMode::Full {
            KernelId::RnnOrthSkip
        } else {
            KernelId::RnnOrth
        };
        let kern = self.gpu.kernel(id)?;
        let blocks = ((rows / SLAB as usize) as u32).min(self.orth_cap).max(1);
        let (r, l) = (rows as u32, self.l as u32);
        let no_stamps = 0u64;
        let gram_only = u32::from(mode == OrthMode::GramOnly);
        let mut lb = kern.launch(st, cfg((blocks, 1, 1), ORTH_THREADS, 0));
        lb.arg(buf.slice())
            .arg(&r)
            .arg(&l)
            .arg(&passes)
            .arg(self.orth_partial.slice())
            .arg(self.gram.slice())
            .arg(self.rt.slice())
            .arg(self.bar.slice());
        if mode == OrthMode::Stamped {
            lb.arg(self.stamps.slice());
        } else {
            lb.arg(&no_stamps);
        }
        lb.arg(&gram_only);
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // stamps is null or holds STAMPS u64;
        // y holds rows x 48 (rows a multiple of 128, hence of SLAB); partial holds orth_cap >=
        // blocks Gram blocks; gram and rt hold 48x48 and 2x48x48 f64; bar holds 4 zeroed words.
        // blocks <= the co-resident capacity, which the cooperative launch enforces.
        unsafe { lb.launch_cooperative() }?;
        Ok(())
    }

    /// `U = Q Z_k` and `V = Q_b W_k` in one launch.
    pub(super) fn apply(&self, st: &Arc<CudaStream>) -> Result<()> {
        let zk = self.zw.slice().slice(0..WW);
        let wk = self.zw.slice().slice(WW..2 * WW);
        let (slabs_u, slabs_v) = (
            (self.mp / SLAB as usize) as u32,
            (self.np / SLAB as usize) as u32,
        );
        let kern = self.gpu.kernel(KernelId::RnnApplySmall)?;
        let mut lb = kern.launch(st, cfg((slabs_u + slabs_v, 1, 1), ORTH_THREADS, 0));
        lb.arg(self.y.slice())
            .arg(&zk)
            .arg(self.u_out.slice())
            .arg(&slabs_u);
        lb.arg(self.z.slice()).arg(&wk).arg(self.v_out.slice());
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // y and u_out
        // hold mp x 48 f32 (slabs_u slabs), z and v_out np x 48 (slabs_v slabs); Z_k and W_k are
        // the 48 x 48 f64 halves of zw; one block per 32-row slab of either product.
        unsafe { lb.launch() }?;
        Ok(())
    }
}
