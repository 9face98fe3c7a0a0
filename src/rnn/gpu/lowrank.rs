//! [`GpuLowRank`]: the low-rank correction `pred + U diag(S) V^T x` on the GPU
//! (`rnn_lowrank_correct`), and [`correct_add`] for the element-wise `pred + corr` through the
//! foundation's `core_correct_add`.

use super::{cfg, u32_of, zeros};
use crate::kernels::rnn::lowrank::{BLOCK, MAX_RANK};
use crate::kernels::KernelId;
use crate::ops::{GpuOps, VectorOps};
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::LowRank;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use std::sync::Arc;

/// A low-rank correction operator on the device (U stored transposed), with buffers for up to
/// `max_batch` rows.
pub struct GpuLowRank {
    core: Core,
    pred: DeviceBuffer<f32>,
    x: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
    max_batch: usize,
}

struct Core {
    gpu: Arc<Gpu>,
    m: usize,
    n: usize,
    k: usize,
    ut: DeviceBuffer<f32>,
    s: DeviceBuffer<f32>,
    vt: DeviceBuffer<f32>,
}

impl GpuLowRank {
    /// Uploads the factors (rank at most 256).
    pub fn new(gpu: Arc<Gpu>, lr: &LowRank, max_batch: usize) -> Result<Self> {
        if lr.k() > MAX_RANK as usize {
            return Err(Error::Capacity {
                what: "low-rank correction rank".into(),
                needed: lr.k(),
                capacity: MAX_RANK as usize,
            });
        }
        let batch_m = crate::size::product("correction batch x m", &[max_batch, lr.m()])?;
        let batch_n = crate::size::product("correction batch x n", &[max_batch, lr.n()])?;
        let st = gpu.stream().clone();
        let core = Core {
            m: lr.m(),
            n: lr.n(),
            k: lr.k(),
            ut: DeviceBuffer::from_host(&st, &lr.u_transposed(), "low-rank U^T")?,
            s: DeviceBuffer::from_host(&st, lr.s(), "low-rank S")?,
            vt: DeviceBuffer::from_host(&st, lr.vt(), "low-rank V^T")?,
            gpu,
        };
        Ok(GpuLowRank {
            core,
            pred: zeros(&st, batch_m, "correction predictions")?,
            x: zeros(&st, batch_n, "correction inputs")?,
            out: zeros(&st, batch_m, "corrected predictions")?,
            max_batch,
        })
    }

    /// Enqueues `out = pred + U S V^T x` for `batch` rows on `stream` (`pred`, `out`: batch x m,
    /// `x`: batch x n; `out` may be the same memory as `pred`).
    pub fn correct_device(
        &self,
        stream: &Arc<CudaStream>,
        pred: &CudaView<'_, f32>,
        x: &CudaView<'_, f32>,
        batch: usize,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        self.core.launch(stream, pred, x, batch, out)
    }

    /// `pred + U S V^T x` for `batch` host rows; returns `batch x m`.
    pub fn correct(&mut self, pred: &[f32], x: &[f32], batch: usize) -> Result<Vec<f32>> {
        let (m, n) = (self.core.m, self.core.n);
        check_len("correction predictions (batch x m)", pred.len(), batch * m)?;
        check_len("correction input (batch x n)", x.len(), batch * n)?;
        check_finite("correction predictions", pred)?;
        check_finite("correction input", x)?;
        if batch > self.max_batch {
            return Err(Error::Capacity {
                what: "correction batch".into(),
                needed: batch,
                capacity: self.max_batch,
            });
        }
        let st = self.core.gpu.stream().clone();
        self.pred.upload(&st, pred)?;
        self.x.upload(&st, x)?;
        self.out.set_len(batch * m)?;
        let pv = self.pred.slice().slice(0..pred.len().max(1));
        let xv = self.x.slice().slice(0..x.len().max(1));
        let mut ov = self.out.slice_mut().slice_mut(0..(batch * m).max(1));
        self.core.launch(&st, &pv, &xv, batch, &mut ov)?;
        let mut out = vec![0.0f32; batch * m];
        self.out.download_into(&st, &mut out)?;
        Ok(out)
    }
}

impl Core {
    fn launch(
        &self,
        stream: &Arc<CudaStream>,
        pred: &CudaView<'_, f32>,
        x: &CudaView<'_, f32>,
        batch: usize,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        if pred.len() < batch * self.m || out.len() < batch * self.m || x.len() < batch * self.n {
            return Err(Error::Shape {
                what: "low-rank correct_device views".into(),
                expected: format!("pred/out >= {}, x >= {}", batch * self.m, batch * self.n),
                got: format!("{}, {}, {}", pred.len(), out.len(), x.len()),
            });
        }
        if batch == 0 {
            return Ok(());
        }
        let kern = self.gpu.kernel(KernelId::RnnLowrankCorrect)?;
        let (m, n, k) = (
            u32_of("m", self.m)?,
            u32_of("n", self.n)?,
            u32_of("k", self.k)?,
        );
        let blocks = u32_of("correction batch", batch)?;
        let mut lb = kern.launch(stream, cfg((blocks, 1, 1), BLOCK, 0));
        lb.arg(pred)
            .arg(x)
            .arg(self.ut.slice())
            .arg(self.s.slice())
            .arg(self.vt.slice())
            .arg(out)
            .arg(&m)
            .arg(&n)
            .arg(&k);
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // pred/out hold batch*m values, x batch*n (checked), ut k*m, s k, vt k*n
        // (uploaded from a validated LowRank); one block per batch row; k <= MAX_RANK.
        unsafe { lb.launch() }?;
        Ok(())
    }
}

/// `pred + corr` element-wise on the GPU (the foundation's `core_correct_add`).
pub fn correct_add(ops: &mut GpuOps, pred: &[f32], corr: &[f32]) -> Result<Vec<f32>> {
    let mut out = vec![0.0f32; pred.len()];
    ops.correct_add(pred, corr, &mut out)?;
    Ok(out)
}
