//! [`GpuRsvd`]'s small step on the device (opt-in: `PTXFLOW_RSVD_SMALL=device` at
//! construction or [`GpuRsvd::set_small_on_device`]; [`GpuRsvd::set_gram_route`] goes back to
//! a host route): after B^T's Gram, `rnn_small_eig` (one block: Jacobi
//! eigenproblem, the Gram route's factors and check; CPU mirror `crate::rnn::jacobi`) writes
//! `Z_k` and `Z_k Sigma_k^-1` where `rnn_apply_small` reads them, and S with a status word; the
//! host enqueues everything and synchronises once. A status other than OK (G not finite, no
//! convergence, `sigma_k < EIGEN_MIN_RATIO sigma_1`, a failed check) falls back to the host's
//! factor route from the same Gram (B^T factored, `small_eigen`, `small_factors`).

use super::cfg;
use super::rsvd::{GpuRsvd, OrthMode, FINAL_PASSES};
use super::rsvd_host::HostTimes;
use crate::kernels::rnn::orth::WIDTH;
use crate::kernels::rnn::small::THREADS;
use crate::kernels::KernelId;
use crate::rnn::jacobi::{SmallStep, OUT_DEFECT, OUT_ROUNDS, OUT_STATUS, OUT_SWEEPS, SMALL_OK};
use crate::rnn::rsvd::{small_eigen, small_factors};
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::Arc;
use std::time::Instant;

/// What the last device small step reported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SmallReport {
    /// `crate::rnn::jacobi::SMALL_OK` or the reason the host took over.
    pub status: u32,
    /// Jacobi sweeps.
    pub sweeps: u32,
    /// Rounds in which some pair rotated.
    pub rounds: u32,
    /// `max |Sigma^-1 Z^T G Z Sigma^-1 - I|`.
    pub defect: f64,
}

impl GpuRsvd {
    /// Runs the small step on the device (`on`; off by default unless `PTXFLOW_RSVD_SMALL=device`
    /// was set at construction) or on the host by the route last chosen
    /// ([`GpuRsvd::set_gram_route`]; the factor route unless `PTXFLOW_RSVD_ROUTE=gram`).
    pub fn set_small_on_device(&mut self, on: bool) {
        self.small_device = on;
    }

    /// Whether the small step runs on the device.
    pub fn small_on_device(&self) -> bool {
        self.small_device
    }

    /// Status, sweeps and check value of the last device small step (read after
    /// [`GpuRsvd::run_device`] or [`GpuRsvd::small_step_device`]).
    pub fn small_report(&self) -> Result<SmallReport> {
        let out = self.small_host.as_slice()?;
        Ok(SmallReport {
            status: out[OUT_STATUS] as u32,
            sweeps: out[OUT_SWEEPS] as u32,
            rounds: out[OUT_ROUNDS] as u32,
            defect: out[OUT_DEFECT],
        })
    }

    /// Enqueues `rnn_small_eig` on B^T's Gram (in `gram`).
    pub(super) fn small_eig(&self, st: &Arc<CudaStream>) -> Result<()> {
        let kern = self.gpu.kernel(KernelId::RnnSmallEig)?;
        let (l, k) = (self.l as u32, self.opts.rank as u32);
        let mut lb = kern.launch(st, cfg((1, 1, 1), THREADS, 0));
        lb.arg(self.gram.slice())
            .arg(&l)
            .arg(&k)
            .arg(self.zw.slice())
            .arg(self.small_out.slice());
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // gram holds 48 x 48 f64 (read), zw 2 x 48 x 48 f64 and small_out OUT_LEN f64 (written);
        // 1 <= k <= l <= 48 (checked in new()).
        unsafe { lb.launch() }?;
        Ok(())
    }

    /// Enqueues `rnn_small_eig` alone on the Gram left by the last run, for benchmarks.
    pub fn enqueue_small_eig(&self) -> Result<()> {
        let st = self.gpu.stream().clone();
        self.small_eig(&st)
    }

    /// The device route's finish after [`GpuRsvd::enqueue_to_gram`]: the small step, the apply,
    /// one synchronisation; the host factor route when the status is not OK.
    pub(super) fn finish_on_device(&mut self, st: &Arc<CudaStream>) -> Result<Vec<f64>> {
        let t0 = Instant::now();
        self.small_eig(st)?;
        self.apply(st)?;
        self.small_host.download(st, self.small_out.slice(), 0)?;
        self.bar_host.download(st, self.bar.slice(), 0)?;
        self.sync_checked(st)?;
        let t1 = Instant::now();
        let report = self.small_report()?;
        if report.status == SMALL_OK {
            let s = self.small_host.as_slice()?[..self.opts.rank].to_vec();
            self.host = HostTimes::from_instants(t0, t1, t1, t1);
            return Ok(s);
        }
        // The host's factor route from the same Gram (the CholQR of B^T overwrites `gram`, so
        // its download goes first).
        let (w, l, k) = (WIDTH as usize, self.l, self.opts.rank);
        self.gram_host.download(st, self.gram.slice(), 0)?;
        self.orth(st, false, FINAL_PASSES, OrthMode::Full)?;
        self.download_factor(st)?;
        self.sync_checked(st)?;
        let t2 = Instant::now();
        let eig = small_eigen(self.gram_host.as_slice()?, w, l, k)?;
        let rt = self.rt_host.as_slice()?;
        let (s, zk, wk) = small_factors(eig.as_ref(), rt, w, l, k)?;
        self.host = HostTimes::from_instants(t0, t1, t2, t2);
        self.upload_and_apply(st, &zk, &wk)?;
        Ok(s)
    }

    /// Runs the products up to B^T's Gram and `rnn_small_eig` on the uploaded matrix and
    /// returns the Gram (`48 x 48` f64) and the kernel's results as the CPU mirror
    /// (`crate::rnn::jacobi::small_step`) reports them, for tests.
    pub fn small_step_device(&mut self) -> Result<(Vec<f64>, SmallStep)> {
        let st = self.gpu.stream().clone();
        self.enqueue_to_gram(&st)?;
        self.gram_host.download(&st, self.gram.slice(), 0)?;
        self.small_eig(&st)?;
        self.small_host.download(&st, self.small_out.slice(), 0)?;
        let w = WIDTH as usize;
        let mut zw = vec![0.0f64; 2 * w * w];
        st.memcpy_dtoh(self.zw.slice(), &mut zw)
            .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
        self.bar_host.download(&st, self.bar.slice(), 0)?;
        self.sync_checked(&st)?;
        let report = self.small_report()?;
        let ok = report.status == SMALL_OK;
        let k = self.opts.rank;
        let out = self.small_host.as_slice()?;
        let keep = |v: &[f64]| if ok { v.to_vec() } else { vec![0.0; v.len()] };
        Ok((
            self.gram_host.as_slice()?.to_vec(),
            SmallStep {
                status: report.status,
                sweeps: report.sweeps,
                rounds: report.rounds,
                defect: report.defect,
                s: keep(&out[..k]),
                zk: keep(&zw[..w * w]),
                xk: keep(&zw[w * w..]),
            },
        ))
    }
}
