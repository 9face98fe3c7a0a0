//! `gaussian_forward_*` and `gaussian_backward_*` on numpy arrays, CPU or GPU.

use crate::device::{pick, Device};
use crate::IntoPy;
use numpy::{
    Element, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use ptxflow::gaussian::{FieldOptions, GaussianField, GaussianFieldOps, GpuGaussianField, GpuReal};
use ptxflow::Result;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn flat<'a, T: Element>(
    a: &'a PyReadonlyArray2<'_, T>,
    what: &str,
    cols: usize,
) -> PyResult<&'a [T]> {
    let shape = a.shape();
    if shape[1] != cols {
        return Err(PyValueError::new_err(format!(
            "{what} must have shape (_, {cols}), got ({}, {})",
            shape[0], shape[1]
        )));
    }
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{what} must be C-contiguous")))
}

fn options(normalised: bool, diag_eps: f64) -> FieldOptions {
    FieldOptions {
        normalised,
        diag_eps,
    }
}

/// Runs `f` on a CPU or GPU field with the Gaussians set.
fn with_field<T: GpuReal, R>(
    device: Device,
    opts: FieldOptions,
    gaussians: &[T],
    f: impl FnOnce(&mut dyn GaussianFieldOps<Scalar = T>) -> Result<R>,
) -> Result<R> {
    match pick(device)? {
        Some(gpu) => {
            let mut field = GpuGaussianField::<T>::new(gpu, opts)?;
            // The torch op (raw kernels) runs the subtract-form forward and the unit-form
            // backward; so does this path, so that both agree bit for bit
            // (python/gpu/gpu_check.py).
            field.set_forward_kind(ptxflow::gaussian::gpu::ForwardKind::Subtract);
            field.set_backward_kind(ptxflow::gaussian::gpu::BackwardKind::Unit);
            field.set_gaussians(gaussians)?;
            f(&mut field)
        }
        None => {
            let mut field = GaussianField::<T>::new(opts)?;
            field.set_gaussians(gaussians)?;
            f(&mut field)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn forward<'py, T: GpuReal + Element>(
    py: Python<'py>,
    points: PyReadonlyArray2<'py, T>,
    gaussians: PyReadonlyArray2<'py, T>,
    normalised: bool,
    diag_eps: f64,
    device: &str,
) -> PyResult<Bound<'py, PyArray1<T>>> {
    let device = Device::parse(device)?;
    let p = flat(&points, "points", 3)?;
    let g = flat(&gaussians, "gaussians", 10)?;
    let values = py
        .detach(|| {
            with_field(device, options(normalised, diag_eps), g, |field| {
                Ok(field.forward(p)?.to_vec())
            })
        })
        .py_err()?;
    Ok(PyArray1::from_vec(py, values))
}

type Grads<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>);

#[allow(clippy::too_many_arguments)]
fn backward<'py, T: GpuReal + Element>(
    py: Python<'py>,
    points: PyReadonlyArray2<'py, T>,
    gaussians: PyReadonlyArray2<'py, T>,
    grad_out: PyReadonlyArray1<'py, T>,
    normalised: bool,
    diag_eps: f64,
    device: &str,
) -> PyResult<Grads<'py>> {
    let device = Device::parse(device)?;
    let p = flat(&points, "points", 3)?;
    let g = flat(&gaussians, "gaussians", 10)?;
    let go = grad_out
        .as_slice()
        .map_err(|_| PyValueError::new_err("grad_out must be C-contiguous"))?;
    let (gp, gg) = py
        .detach(|| {
            with_field(device, options(normalised, diag_eps), g, |field| {
                field.forward(p)?;
                let grads = field.backward(go)?;
                Ok((grads.points.to_vec(), grads.gaussians.to_vec()))
            })
        })
        .py_err()?;
    let (b, n) = (gp.len() / 3, gg.len() / 10);
    Ok((
        PyArray1::from_vec(py, gp).reshape([b, 3])?.into_any(),
        PyArray1::from_vec(py, gg).reshape([n, 10])?.into_any(),
    ))
}

macro_rules! entry_points {
    ($fwd:ident, $bwd:ident, $t:ty) => {
        /// Field values at `points` (B, 3) of `gaussians` (N, 10, packed layout).
        #[pyfunction]
        #[pyo3(signature = (points, gaussians, normalised, diag_eps, device))]
        pub fn $fwd<'py>(
            py: Python<'py>,
            points: PyReadonlyArray2<'py, $t>,
            gaussians: PyReadonlyArray2<'py, $t>,
            normalised: bool,
            diag_eps: f64,
            device: &str,
        ) -> PyResult<Bound<'py, PyArray1<$t>>> {
            forward(py, points, gaussians, normalised, diag_eps, device)
        }

        /// (dLoss/dpoints (B, 3), dLoss/dgaussians (N, 10)) for dLoss/df = `grad_out` (B,).
        #[pyfunction]
        #[pyo3(signature = (points, gaussians, grad_out, normalised, diag_eps, device))]
        pub fn $bwd<'py>(
            py: Python<'py>,
            points: PyReadonlyArray2<'py, $t>,
            gaussians: PyReadonlyArray2<'py, $t>,
            grad_out: PyReadonlyArray1<'py, $t>,
            normalised: bool,
            diag_eps: f64,
            device: &str,
        ) -> PyResult<Grads<'py>> {
            backward(
                py, points, gaussians, grad_out, normalised, diag_eps, device,
            )
        }
    };
}

entry_points!(gaussian_forward_f32, gaussian_backward_f32, f32);
entry_points!(gaussian_forward_f64, gaussian_backward_f64, f64);

/// The benchmark problem of `benches/gaussian.rs`: `(gaussians (n, 10), points (b, 3), grad (b,))`
/// in float64, from `ptxflow::gaussian::generate` with the bench's seed and spreads (so Python
/// benchmarks time the very problem the Rust bench does).
#[pyfunction]
#[pyo3(signature = (n, b, seed = 0x6A55))]
pub fn gaussian_problem<'py>(
    py: Python<'py>,
    n: usize,
    b: usize,
    seed: u64,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    use ptxflow::gaussian::generate::{random_gaussians, sample_points, GaussianSpec};
    let mut rng = ptxflow::rng::Rng::new(seed);
    let g = random_gaussians(&mut rng, n, &GaussianSpec::default());
    let p = sample_points(&mut rng, &g, b, 1.5);
    let grad: Vec<f64> = (0..b).map(|_| rng.range(-1.0, 1.0)).collect();
    Ok((
        PyArray1::from_vec(py, g).reshape([n, 10])?.into_any(),
        PyArray1::from_vec(py, p).reshape([b, 3])?.into_any(),
        PyArray1::from_vec(py, grad).into_any(),
    ))
}
