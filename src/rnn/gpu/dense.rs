//! [`GpuDense`]: the dense encoder `relu(x W + b)` on the GPU (`rnn_dense_f32` / `rnn_dense_f16`).

use super::{cfg, u32_of, zeros};
use crate::kernels::rnn::dense::BLOCK;
use crate::kernels::KernelId;
use crate::rnn::half::to_f16_vec;
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::DenseLayer;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use std::sync::Arc;

/// How the weights are stored on the device (accumulation is f32 either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightStorage {
    /// f32 as given.
    F32,
    /// IEEE half, rounded to nearest even on upload: half the weight traffic, ~1e-3 relative
    /// weight error.
    F16,
}

/// The dense encoder on the device, with reusable input and output buffers for up to
/// `max_rows` rows.
pub struct GpuDense {
    core: Core,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    max_rows: usize,
}

struct Core {
    gpu: Arc<Gpu>,
    input: usize,
    output: usize,
    storage: WeightStorage,
    w32: DeviceBuffer<f32>,
    w16: DeviceBuffer<u16>,
    bias: DeviceBuffer<f32>,
}

impl GpuDense {
    /// Uploads the layer's weights in the given storage.
    pub fn new(
        gpu: Arc<Gpu>,
        layer: &DenseLayer,
        storage: WeightStorage,
        max_rows: usize,
    ) -> Result<Self> {
        let x_len = crate::size::product("dense input (rows x input)", &[max_rows, layer.input()])?;
        let y_len =
            crate::size::product("dense output (rows x output)", &[max_rows, layer.output()])?;
        let s = gpu.stream().clone();
        let (w32, w16) = match storage {
            WeightStorage::F32 => (
                DeviceBuffer::from_host(&s, layer.w(), "dense weights")?,
                zeros(&s, 1, "unused f16 weights")?,
            ),
            WeightStorage::F16 => (
                zeros(&s, 1, "unused f32 weights")?,
                DeviceBuffer::from_host(&s, &to_f16_vec(layer.w()), "dense weights (f16)")?,
            ),
        };
        let bias = DeviceBuffer::from_host(&s, layer.b(), "dense bias")?;
        let x = zeros(&s, x_len, "dense input")?;
        let y = zeros(&s, y_len, "dense output")?;
        let core = Core {
            gpu,
            input: layer.input(),
            output: layer.output(),
            storage,
            w32,
            w16,
            bias,
        };
        Ok(GpuDense {
            core,
            x,
            y,
            max_rows,
        })
    }

    /// Input features per row.
    pub fn input(&self) -> usize {
        self.core.input
    }
    /// Output features per row.
    pub fn output(&self) -> usize {
        self.core.output
    }

    /// Enqueues `y = relu(x W + b)` for `rows` rows of device data on `stream`.
    pub fn forward_device(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        rows: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        self.core.launch(stream, x, rows, y)
    }

    /// `relu(x W + b)` for `rows` rows of host data (`rows x input`); returns `rows x output`.
    pub fn forward(&mut self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let (input, output) = (self.core.input, self.core.output);
        check_len("dense input (rows x input)", x.len(), rows * input)?;
        check_finite("dense input", x)?;
        if rows > self.max_rows {
            return Err(Error::Capacity {
                what: "dense rows".into(),
                needed: rows,
                capacity: self.max_rows,
            });
        }
        let s = self.core.gpu.stream().clone();
        self.x.upload(&s, x)?;
        self.y.set_len(rows * output)?;
        let xv = self.x.slice().slice(0..x.len().max(1));
        let mut yv = self.y.slice_mut().slice_mut(0..(rows * output).max(1));
        self.core.launch(&s, &xv, rows, &mut yv)?;
        let mut out = vec![0.0f32; rows * output];
        self.y.download_into(&s, &mut out)?;
        Ok(out)
    }
}

impl Core {
    fn launch(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        rows: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        if x.len() < rows * self.input || y.len() < rows * self.output {
            return Err(Error::Shape {
                what: "dense forward_device views".into(),
                expected: format!(
                    "at least {} inputs and {} outputs",
                    rows * self.input,
                    rows * self.output
                ),
                got: format!("{} and {}", x.len(), y.len()),
            });
        }
        let total = rows * self.output;
        if total == 0 {
            return Ok(());
        }
        let (r, i, o) = (
            u32_of("dense rows", rows)?,
            u32_of("dense input", self.input)?,
            u32_of("dense output", self.output)?,
        );
        let _ = u32_of("dense outputs", total)?;
        let grid = (total.div_ceil(BLOCK as usize) as u32, 1, 1);
        let id = match self.storage {
            WeightStorage::F32 => KernelId::RnnDenseF32,
            WeightStorage::F16 => KernelId::RnnDenseF16,
        };
        let kern = self.gpu.kernel(id)?;
        let mut lb = kern.launch(stream, cfg(grid, BLOCK, 0));
        lb.arg(x);
        match self.storage {
            WeightStorage::F32 => lb.arg(self.w32.slice()),
            WeightStorage::F16 => lb.arg(self.w16.slice()),
        };
        lb.arg(self.bias.slice()).arg(y).arg(&r).arg(&i).arg(&o);
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // x holds rows*input values, y rows*output, w input*output, bias output (checked
        // above and at construction); the kernel touches only those.
        unsafe { lb.launch() }?;
        Ok(())
    }
}
