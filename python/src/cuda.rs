//! `CudaGaussian`: the Gaussian kernels of one CUDA device on PyTorch's memory and stream.
//!
//! `ptxflow.torch` passes raw device addresses (`tensor.data_ptr()`) with lengths in scalars and
//! the current stream (`torch.cuda.current_stream().cuda_stream`); the kernels run in the device's
//! primary context, which is the context PyTorch uses. Lengths and alignment are checked by
//! `ptxflow::gaussian::RawGaussianKernels` before any launch.

use crate::device::gpu;
use crate::IntoPy;
use ptxflow::gaussian::{GpuReal, RawGaussianKernels, RawPlan, RawSlice};
use pyo3::prelude::*;

type Slice = (u64, usize);

fn raw(s: Slice) -> RawSlice {
    RawSlice { ptr: s.0, len: s.1 }
}

/// The forward and backward kernels of both float types on one device.
#[pyclass(module = "ptxflow._native", frozen)]
pub struct CudaGaussian {
    f32: RawGaussianKernels<f32>,
    f64: RawGaussianKernels<f64>,
}

fn plan_tuple(p: RawPlan) -> (usize, usize, usize, usize, usize, usize) {
    (
        p.n_pad,
        p.prep_len,
        p.comp_len,
        p.forward_scratch_len,
        p.partial_points_len,
        p.partial_gauss_len,
    )
}

fn stream(s: usize) -> cudarc_stream::CUstream {
    s as cudarc_stream::CUstream
}

mod cudarc_stream {
    pub use ptxflow::gaussian::gpu_raw::CUstream;
}

impl CudaGaussian {
    fn fwd<T: GpuReal>(
        k: &RawGaussianKernels<T>,
        args: (usize, usize, usize, Slice, Slice, Slice, Slice),
    ) -> ptxflow::Result<()> {
        let (s, n, b, prep, points, scratch, values) = args;
        let plan = k.plan(n, b)?;
        // SAFETY: the Python caller (ptxflow.torch) passes the storage of live CUDA tensors of
        // this device with their lengths, and PyTorch's current stream of this device; the
        // tensors are kept alive by the autograd graph or the caller until the stream has run
        // the launches (PyTorch's caching allocator orders reuse on that stream).
        unsafe {
            k.forward(
                stream(s),
                &plan,
                raw(prep),
                raw(points),
                raw(scratch),
                raw(values),
            )
        }
    }

    #[allow(clippy::type_complexity)]
    fn bwd<T: GpuReal>(
        k: &RawGaussianKernels<T>,
        s: usize,
        n: usize,
        b: usize,
        normalised: bool,
        bufs: [Slice; 8],
    ) -> ptxflow::Result<()> {
        let plan = k.plan(n, b)?;
        let [prep, comp, points, gv, pp, pg, gp, gg] = bufs.map(raw);
        // SAFETY: as in `fwd`.
        unsafe {
            k.backward(
                stream(s),
                &plan,
                normalised,
                prep,
                comp,
                points,
                gv,
                pp,
                pg,
                gp,
                gg,
            )
        }
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

    /// `(n_pad, prep, comp, forward_scratch, partial_points, partial_gauss)` lengths in scalars.
    fn plan(
        &self,
        double: bool,
        n: usize,
        b: usize,
    ) -> PyResult<(usize, usize, usize, usize, usize, usize)> {
        let p = if double {
            self.f64.plan(n, b)
        } else {
            self.f32.plan(n, b)
        };
        p.map(plan_tuple).py_err()
    }

    /// The factor 2^o folded into the prepared `w c` and `c`.
    #[staticmethod]
    fn exp_scale(double: bool) -> f64 {
        if double {
            RawGaussianKernels::<f64>::exp_scale()
        } else {
            RawGaussianKernels::<f32>::exp_scale()
        }
    }

    /// Enqueues the forward on `stream`; each buffer is `(data_ptr, numel)`.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        prep: Slice,
        points: Slice,
        scratch: Slice,
        values: Slice,
    ) -> PyResult<()> {
        let args = (stream, n, b, prep, points, scratch, values);
        if double {
            Self::fwd(&self.f64, args)
        } else {
            Self::fwd(&self.f32, args)
        }
        .py_err()
    }

    /// Enqueues the backward on `stream`; each buffer is `(data_ptr, numel)`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        normalised: bool,
        prep: Slice,
        comp: Slice,
        points: Slice,
        grad_values: Slice,
        partial_points: Slice,
        partial_gauss: Slice,
        grad_points: Slice,
        grad_gaussians: Slice,
    ) -> PyResult<()> {
        let bufs = [
            prep,
            comp,
            points,
            grad_values,
            partial_points,
            partial_gauss,
            grad_points,
            grad_gaussians,
        ];
        if double {
            Self::bwd(&self.f64, stream, n, b, normalised, bufs)
        } else {
            Self::bwd(&self.f32, stream, n, b, normalised, bufs)
        }
        .py_err()
    }
}
