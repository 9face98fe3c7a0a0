//! [`GpuOps`]: launches `core_correct_add` and `core_reduce_sum`. Host-slice calls reuse device
//! buffers that grow between calls; the `*_device` calls only enqueue work on device memory.

use super::{check_same_len, VectorOps, CORRECT_ADD};
use crate::kernels::core_ops::{correct_add, reduce_sum};
use crate::kernels::KernelId;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig};
use std::sync::Arc;

/// GPU implementation of [`VectorOps`].
pub struct GpuOps {
    gpu: Arc<Gpu>,
    a: Option<DeviceBuffer<f32>>,
    b: Option<DeviceBuffer<f32>>,
    c: Option<DeviceBuffer<f32>>,
    total: DeviceBuffer<f64>,
}

/// Most elements one launch takes: indices are u32 and a grid-stride step (at most 2^31 threads
/// here) is added to an index below this bound, so `i + stride` never wraps.
pub const MAX_ELEMENTS: usize = 1 << 31;

fn count_u32(n: usize) -> Result<u32> {
    if n > MAX_ELEMENTS {
        return Err(Error::Capacity {
            what: "elements per launch".into(),
            needed: n,
            capacity: MAX_ELEMENTS,
        });
    }
    Ok(n as u32)
}

fn blocks_for(items: usize, block: u32, cap: u32) -> u32 {
    (items.div_ceil(block as usize) as u64).clamp(1, u64::from(cap)) as u32
}

/// Makes sure `slot` holds a buffer of at least `n` elements (reallocating only to grow).
fn ensure(
    stream: &Arc<CudaStream>,
    slot: &mut Option<DeviceBuffer<f32>>,
    n: usize,
    what: &'static str,
) -> Result<()> {
    if slot.as_ref().is_none_or(|b| b.capacity() < n) {
        *slot = Some(DeviceBuffer::zeros(stream, n, what)?);
    }
    Ok(())
}

impl GpuOps {
    /// Ready to launch on `gpu` (modules load on first use).
    pub fn new(gpu: Arc<Gpu>) -> Result<Self> {
        let total = DeviceBuffer::zeros(gpu.stream(), 1, "sum total")?;
        Ok(GpuOps {
            gpu,
            a: None,
            b: None,
            c: None,
            total,
        })
    }

    /// The device this runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Enqueues `out = prediction + correction` on `stream` (no synchronization).
    pub fn correct_add_device(
        &self,
        stream: &Arc<CudaStream>,
        prediction: &CudaView<'_, f32>,
        correction: &CudaView<'_, f32>,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        launch_correct_add(&self.gpu, stream, prediction, correction, out)
    }

    /// Enqueues `total += sum(x)` on `stream`; the caller zeroes `total` first.
    pub fn reduce_sum_device(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        total: &mut CudaSlice<f64>,
    ) -> Result<()> {
        launch_reduce_sum(&self.gpu, stream, x, total)
    }

    /// The former name of [`GpuOps::reduce_sum_device`].
    #[deprecated(note = "renamed to `reduce_sum_device`, after its kernel")]
    pub fn sum_device(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        total: &mut CudaSlice<f64>,
    ) -> Result<()> {
        self.reduce_sum_device(stream, x, total)
    }
}

fn launch_correct_add(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    prediction: &CudaView<'_, f32>,
    correction: &CudaView<'_, f32>,
    out: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let n = prediction.len();
    check_same_len("correct_add_device", [n, correction.len(), out.len()])?;
    let n32 = count_u32(n)?;
    let k = gpu.kernel(KernelId::CoreCorrectAdd)?;
    let cap = gpu.facts().sm_count * 32;
    let cfg = LaunchConfig {
        grid_dim: (blocks_for(n.div_ceil(4), correct_add::BLOCK, cap), 1, 1),
        block_dim: (correct_add::BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: every view holds exactly n elements, and the kernel touches indices below n only
    // (argument types and block shape are checked against the kernel's contract).
    unsafe {
        k.launch(stream, cfg)
            .arg(prediction)
            .arg(correction)
            .arg(out)
            .arg(&n32)
            .launch()
    }
}

fn launch_reduce_sum(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, f32>,
    total: &mut CudaSlice<f64>,
) -> Result<()> {
    let n32 = count_u32(x.len())?;
    let k = gpu.kernel(KernelId::CoreReduceSum)?;
    let cap = gpu.facts().sm_count * 8;
    let cfg = LaunchConfig {
        grid_dim: (
            blocks_for(x.len().div_ceil(4), reduce_sum::BLOCK, cap),
            1,
            1,
        ),
        block_dim: (reduce_sum::BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel reads x[..n] and adds to total[0] only (argument types and the
    // .reqntid block are checked against the kernel's contract).
    unsafe { k.launch(stream, cfg).arg(x).arg(&n32).arg(total).launch() }
}

impl VectorOps for GpuOps {
    fn device(&self) -> &'static str {
        "gpu"
    }

    fn correct_add(
        &mut self,
        prediction: &[f32],
        correction: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        check_same_len(CORRECT_ADD, [prediction.len(), correction.len(), out.len()])?;
        let n = prediction.len();
        let stream = self.gpu.stream().clone();
        ensure(&stream, &mut self.a, n, "correct_add prediction")?;
        ensure(&stream, &mut self.b, n, "correct_add correction")?;
        ensure(&stream, &mut self.c, n, "correct_add out")?;
        let (a, b, c) = (self.a.as_mut(), self.b.as_mut(), self.c.as_mut());
        let (a, b, c) = (
            a.expect("ensured"),
            b.expect("ensured"),
            c.expect("ensured"),
        );
        a.upload(&stream, prediction)?;
        b.upload(&stream, correction)?;
        c.set_len(n)?;
        let (av, bv) = (a.slice().slice(0..n), b.slice().slice(0..n));
        launch_correct_add(
            &self.gpu,
            &stream,
            &av,
            &bv,
            &mut c.slice_mut().slice_mut(0..n),
        )?;
        c.download_into(&stream, out)
    }

    fn reduce_sum(&mut self, x: &[f32]) -> Result<f64> {
        let stream = self.gpu.stream().clone();
        ensure(&stream, &mut self.a, x.len(), "sum input")?;
        let a = self.a.as_mut().expect("ensured above");
        a.upload(&stream, x)?;
        stream
            .memset_zeros(self.total.slice_mut())
            .map_err(Error::driver("cuMemsetD8Async"))?;
        let view = a.slice().slice(0..x.len());
        launch_reduce_sum(&self.gpu, &stream, &view, self.total.slice_mut())?;
        let mut t = [0.0f64];
        self.total.set_len(1)?;
        self.total.download_into(&stream, &mut t)?;
        Ok(t[0])
    }
}
