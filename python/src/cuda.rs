//! `CudaGaussian`: the Gaussian kernels of one CUDA device on PyTorch's memory and stream.
//!
//! `ptxflow.torch` passes raw device addresses (`tensor.data_ptr()`) with lengths in scalars and
//! the current stream (`torch.cuda.current_stream(device).cuda_stream`); the kernels run in the
//! device's primary context, which is the context PyTorch uses. Lengths and alignment are checked
//! by `ptxflow::gaussian::RawGaussianKernels` before any launch.
//!
//! Two workspaces per call keep the allocations down to what PyTorch must see: the forward's
//! `[prep | comp | scratch]` (saved for the backward) and the backward's `[partial points |
//! partial Gaussians]`; sub-buffers start at 16-byte multiples.

use crate::device::gpu;
use crate::IntoPy;
use ptxflow::gaussian::gpu_raw::CUstream;
use ptxflow::gaussian::{GpuReal, RawGaussianKernels, RawPlan, RawSlice};
use pyo3::prelude::*;

/// `(data_ptr, numel)` of a tensor.
type Slice = (u64, usize);

/// Scalars of padding granularity: 16 bytes of f32 (and 32 of f64).
const GRAIN: usize = 4;

fn raw(s: Slice) -> RawSlice {
    RawSlice { ptr: s.0, len: s.1 }
}

/// `len` scalars at scalar offset `at` of `base`.
fn sub<T>(base: Slice, at: usize, len: usize) -> RawSlice {
    RawSlice {
        ptr: base.0 + (at * std::mem::size_of::<T>()) as u64,
        len,
    }
}

fn up(n: usize) -> usize {
    n.div_ceil(GRAIN) * GRAIN
}

/// Forward workspace length: prep, comp, then the forward scratch.
fn forward_work(p: &RawPlan) -> usize {
    p.prep_len + p.comp_len + up(p.forward_scratch_len)
}

/// Backward workspace length: per-point partials, then per-Gaussian partials.
fn backward_work(p: &RawPlan) -> usize {
    up(p.partial_points_len) + p.partial_gauss_len
}

fn workspace(what: &str, s: Slice, len: usize) -> ptxflow::Result<()> {
    if s.1 != len {
        return Err(ptxflow::Error::Shape {
            what: format!("gaussian {what} workspace"),
            expected: format!("{len} scalars"),
            got: format!("{} scalars", s.1),
        });
    }
    Ok(())
}

/// The kernels of both float types on one device.
#[pyclass(module = "ptxflow._native", frozen)]
pub struct CudaGaussian {
    f32: RawGaussianKernels<f32>,
    f64: RawGaussianKernels<f64>,
}

#[allow(clippy::too_many_arguments)]
fn forward<T: GpuReal>(
    k: &RawGaussianKernels<T>,
    stream: usize,
    n: usize,
    b: usize,
    normalised: bool,
    diag_eps: f64,
    [packed, points, work, values]: [Slice; 4],
) -> ptxflow::Result<()> {
    let p = k.plan(n, b)?;
    workspace("forward", work, forward_work(&p))?;
    let prep = sub::<T>(work, 0, p.prep_len);
    let comp = sub::<T>(work, p.prep_len, p.comp_len);
    let scratch = sub::<T>(work, p.prep_len + p.comp_len, p.forward_scratch_len);
    let s = stream as CUstream;
    // SAFETY: ptxflow.torch passes the storage of live, contiguous CUDA tensors of this device
    // (`data_ptr()`, `numel()`) and PyTorch's current stream of this device. The tensors stay
    // alive until the stream has run these launches: PyTorch's caching allocator reuses memory
    // only in the stream order of the stream it was allocated on, which is this one, and the
    // forward workspace is saved for the backward.
    unsafe {
        k.prepare(s, &p, normalised, diag_eps, raw(packed), prep, comp)?;
        k.forward(s, &p, prep, raw(points), scratch, raw(values))
    }
}

#[allow(clippy::too_many_arguments)]
fn backward<T: GpuReal>(
    k: &RawGaussianKernels<T>,
    stream: usize,
    n: usize,
    b: usize,
    normalised: bool,
    [fwork, points, grad_values, bwork, grad_points, grad_gaussians]: [Slice; 6],
) -> ptxflow::Result<()> {
    let p = k.plan(n, b)?;
    workspace("forward", fwork, forward_work(&p))?;
    workspace("backward", bwork, backward_work(&p))?;
    let prep = sub::<T>(fwork, 0, p.prep_len);
    let comp = sub::<T>(fwork, p.prep_len, p.comp_len);
    let pp = sub::<T>(bwork, 0, p.partial_points_len);
    let pg = sub::<T>(bwork, up(p.partial_points_len), p.partial_gauss_len);
    // SAFETY: as in `forward`; `fwork` is the forward's workspace (prep and comp as written by
    // its prepare launch), saved by autograd.
    unsafe {
        k.backward(
            stream as CUstream,
            &p,
            normalised,
            prep,
            comp,
            raw(points),
            raw(grad_values),
            pp,
            pg,
            raw(grad_points),
            raw(grad_gaussians),
        )
    }
}

#[pymethods]
impl CudaGaussian {
    /// Opens (once per process) CUDA device `ordinal` and loads the Gaussian kernels.
    #[new]
    fn new(py: Python<'_>, ordinal: usize) -> PyResult<Self> {
        py.detach(|| -> ptxflow::Result<Self> {
            let g = gpu(ordinal)?;
            Ok(CudaGaussian {
                f32: RawGaussianKernels::new(g.clone())?,
                f64: RawGaussianKernels::new(g)?,
            })
        })
        .py_err()
    }

    /// `(forward workspace, backward workspace)` lengths in scalars for n Gaussians, b points.
    fn plan(&self, double: bool, n: usize, b: usize) -> PyResult<(usize, usize)> {
        let p = if double {
            self.f64.plan(n, b)
        } else {
            self.f32.plan(n, b)
        }
        .py_err()?;
        Ok((forward_work(&p), backward_work(&p)))
    }

    /// Enqueues prepare + forward on `stream`; buffers are `(data_ptr, numel)`: packed
    /// Gaussians (n * 10), points (b * 3), forward workspace, values (b).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        normalised: bool,
        diag_eps: f64,
        packed: Slice,
        points: Slice,
        work: Slice,
        values: Slice,
    ) -> PyResult<()> {
        let bufs = [packed, points, work, values];
        if double {
            forward(&self.f64, stream, n, b, normalised, diag_eps, bufs)
        } else {
            forward(&self.f32, stream, n, b, normalised, diag_eps, bufs)
        }
        .py_err()
    }

    /// Enqueues the backward on `stream`; buffers are `(data_ptr, numel)`: the forward's
    /// workspace, points, dLoss/df (b), backward workspace, dLoss/dpoints (b * 3),
    /// dLoss/dgaussians (n * 10).
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        normalised: bool,
        forward_work: Slice,
        points: Slice,
        grad_values: Slice,
        backward_work: Slice,
        grad_points: Slice,
        grad_gaussians: Slice,
    ) -> PyResult<()> {
        let bufs = [
            forward_work,
            points,
            grad_values,
            backward_work,
            grad_points,
            grad_gaussians,
        ];
        if double {
            backward(&self.f64, stream, n, b, normalised, bufs)
        } else {
            backward(&self.f32, stream, n, b, normalised, bufs)
        }
        .py_err()
    }
}
