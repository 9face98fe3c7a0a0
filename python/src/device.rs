//! Where a call runs: `device="cpu" | "gpu" | "auto"` and one opened [`Gpu`] per CUDA ordinal,
//! kept for the life of the process (opened on first use).

use crate::IntoPy;
use ptxflow::runtime::Gpu;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// The `device=` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
    Auto,
}

impl Device {
    pub fn parse(s: &str) -> PyResult<Device> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "gpu" | "cuda" => Ok(Device::Gpu),
            "auto" => Ok(Device::Auto),
            _ => Err(PyValueError::new_err(format!(
                "device must be \"cpu\", \"gpu\" or \"auto\", got {s:?}"
            ))),
        }
    }
}

/// Opened devices by ordinal; `Err` keeps why a device could not be opened, so "auto" does not
/// retry the driver on every call of a GPU-less machine.
type Opened = Option<Result<Arc<Gpu>, String>>;

static GPUS: Mutex<Vec<Opened>> = Mutex::new(Vec::new());

/// The device `ordinal`, opened on first use.
pub fn gpu(ordinal: usize) -> ptxflow::Result<Arc<Gpu>> {
    let mut gpus = GPUS.lock().unwrap_or_else(|p| p.into_inner());
    if gpus.len() <= ordinal {
        gpus.resize(ordinal + 1, None);
    }
    if gpus[ordinal].is_none() {
        gpus[ordinal] = Some(Gpu::new(ordinal).map_err(|e| match e {
            ptxflow::Error::NoDevice { reason } => reason,
            other => other.to_string(),
        }));
    }
    match gpus[ordinal].as_ref().expect("filled just above") {
        Ok(g) => Ok(g.clone()),
        Err(reason) => Err(ptxflow::Error::NoDevice {
            reason: reason.clone(),
        }),
    }
}

/// The GPU for `device`, or `None` for the CPU ("auto" falls back to the CPU only when there is
/// no usable device; a driver failure on an existing device is an error).
pub fn pick(device: Device) -> ptxflow::Result<Option<Arc<Gpu>>> {
    match device {
        Device::Cpu => Ok(None),
        Device::Gpu => gpu(0).map(Some),
        Device::Auto => match gpu(0) {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.is_no_device() => Ok(None),
            Err(e) => Err(e),
        },
    }
}

/// `(available, reason)`: whether device 0 opens, and why not.
#[pyfunction]
pub fn gpu_available(py: Python<'_>) -> PyResult<(bool, String)> {
    let r = py.detach(|| gpu(0).map(|g| g.facts().name.clone()));
    match r {
        Ok(name) => Ok((true, name)),
        Err(e) if e.is_no_device() => Ok((false, e.to_string())),
        Err(e) => Err(e).py_err(),
    }
}
