//! `ptxflow._native`: the compiled half of the `ptxflow` Python package (PyO3, abi3).
//!
//! The pure-Python modules in `pysrc/ptxflow` check dtypes, shapes and contiguity and pick the
//! f32 or f64 entry point; the functions here convert, release the GIL for the library call and
//! turn `ptxflow::Error` into Python exceptions carrying the library's message.

mod cuda;
mod device;
mod gaussian;
mod graph_node;
mod graphs;
mod lz4;
mod ndt;

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    ptxflow,
    PtxflowError,
    PyRuntimeError,
    "A ptxflow failure that is not bad input: a CUDA driver error, a missing device, a kernel fault."
);

/// Maps a library error to the Python exception a caller would expect: bad input and corrupt
/// data to `ValueError`, file errors to `OSError` (`FileNotFoundError` when missing), the rest
/// (driver, device, kernel, capacity) to `ptxflow.PtxflowError`. The message is the library's.
pub(crate) fn to_py(e: ptxflow::Error) -> PyErr {
    use ptxflow::Error as E;
    let msg = e.to_string();
    match &e {
        E::Input { .. } | E::Shape { .. } | E::Corrupt { .. } | E::Format { .. } => {
            PyValueError::new_err(msg)
        }
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        E::Io { .. } => PyOSError::new_err(msg),
        _ => PtxflowError::new_err(msg),
    }
}

/// Shorthand for results of library calls.
pub(crate) trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for ptxflow::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PtxflowError", m.py().get_type::<PtxflowError>())?;
    m.add_function(wrap_pyfunction!(ndt::read_cloud, m)?)?;
    m.add_function(wrap_pyfunction!(ndt::ndt_align, m)?)?;
    m.add_function(wrap_pyfunction!(ndt::ndt_align_hypotheses, m)?)?;
    m.add_function(wrap_pyfunction!(lz4::lz4_compress, m)?)?;
    m.add_function(wrap_pyfunction!(lz4::lz4_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian::gaussian_forward_f32, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian::gaussian_forward_f64, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian::gaussian_backward_f32, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian::gaussian_backward_f64, m)?)?;
    m.add_function(wrap_pyfunction!(gaussian::gaussian_problem, m)?)?;
    m.add_function(wrap_pyfunction!(device::gpu_available, m)?)?;
    m.add_class::<cuda::CudaGaussian>()?;
    Ok(())
}
