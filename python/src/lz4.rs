//! `lz4_compress` and `lz4_decompress`: standard LZ4 frames in memory.

use crate::device::{pick, Device};
use crate::IntoPy;
use numpy::PyReadonlyArray1;
use ptxflow::lz4::gpu::{decode_frames_gpu, device_failure, GpuOptions, GpuPageStream, Lz4Kernels};
use ptxflow::lz4::{
    check_page_bytes, compress_frame, decompress_frame, FrameEncoder, FrameOptions,
};
use ptxflow::{Error, Result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::Path;

fn bytes_of<'a>(data: &'a PyReadonlyArray1<'_, u8>) -> PyResult<&'a [u8]> {
    data.as_slice()
        .map_err(|_| PyValueError::new_err("data must be contiguous bytes"))
}

fn compress_gpu(data: &[u8], page_bytes: usize, device: Device) -> Result<Vec<u8>> {
    let Some(gpu) = pick(device)? else {
        return compress_frame(data, page_bytes);
    };
    let options = GpuOptions {
        batch_bytes: 8 << 20,
        slots: 3,
    };
    let mut stream = match GpuPageStream::new(gpu, page_bytes, options) {
        Ok(s) => s,
        Err(e) if device == Device::Auto && device_failure(&e) => {
            return compress_frame(data, page_bytes)
        }
        Err(e) => return Err(e),
    };
    let frame = FrameOptions {
        page_bytes,
        content_size: Some(data.len() as u64),
        block_checksum: false,
    };
    let out = Vec::with_capacity(data.len() / 2 + 64);
    let mut enc = FrameEncoder::new(out, Path::new("<memory>"), &mut stream, frame)?;
    enc.write(data)?;
    Ok(enc.finish()?.0)
}

/// Compresses `data` (contiguous uint8) into one LZ4 frame (content size declared).
#[pyfunction]
#[pyo3(signature = (data, page_kib, device))]
pub fn lz4_compress<'py>(
    py: Python<'py>,
    data: PyReadonlyArray1<'py, u8>,
    page_kib: usize,
    device: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let device = Device::parse(device)?;
    let page_bytes = page_kib
        .checked_mul(1024)
        .ok_or_else(|| PyValueError::new_err("page_kib overflows"))?;
    check_page_bytes(page_bytes).py_err()?;
    let input = bytes_of(&data)?;
    let out = py
        .detach(|| match device {
            Device::Cpu => compress_frame(input, page_bytes),
            _ => compress_gpu(input, page_bytes, device),
        })
        .py_err()?;
    Ok(PyBytes::new(py, &out))
}

fn decompress_any(data: &[u8], device: Device) -> Result<Vec<u8>> {
    if device != Device::Cpu {
        if let Some(gpu) = pick(device)? {
            let kernels = match Lz4Kernels::new(gpu) {
                Ok(k) => Some(k),
                Err(e) if device == Device::Auto && device_failure(&e) => None,
                Err(e) => return Err(e),
            };
            if let Some(k) = kernels {
                let mut out = Vec::new();
                match decode_frames_gpu(&k, data, &mut out) {
                    Ok(Some(_)) => return Ok(out),
                    Ok(None) => {}
                    Err(e) if device == Device::Auto && device_failure(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    decompress_frame(data).map_err(|e| match e {
        Error::Io { source, .. } => Error::Corrupt {
            what: format!("LZ4 frame: {source}"),
        },
        other => other,
    })
}

/// Decodes every LZ4 frame in `frame` (contiguous uint8) and returns the concatenated content.
#[pyfunction]
#[pyo3(signature = (frame, device))]
pub fn lz4_decompress<'py>(
    py: Python<'py>,
    frame: PyReadonlyArray1<'py, u8>,
    device: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let device = Device::parse(device)?;
    let input = bytes_of(&frame)?;
    let out = py.detach(|| decompress_any(input, device)).py_err()?;
    Ok(PyBytes::new(py, &out))
}
