//! `read_cloud`, `ndt_align` and `ndt_align_hypotheses`.

use crate::device::{pick, Device};
use crate::IntoPy;
use nalgebra::{Isometry3, Matrix3, Matrix4, Rotation3, Translation3, UnitQuaternion};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods};
use ptxflow::ndt::{
    align_hypotheses, read_cloud as lib_read_cloud, voxel_grid_filter, CpuLinearizer, GpuCapacity,
    GpuDerivativePipeline, NdtParams, NdtResult, NeighbourSearch, PointCloud, VoxelMap,
};
use ptxflow::runtime::Gpu;
use ptxflow::{Error, Result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::Arc;

/// Reads a PCD (any encoding) or PLY file into an (N, 3) float32 array (non-finite points dropped).
#[pyfunction]
pub fn read_cloud<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let cloud = py.detach(|| lib_read_cloud(&path)).py_err()?;
    let n = cloud.points.len();
    let flat: Vec<f32> = cloud.points.into_iter().flatten().collect();
    Ok(PyArray1::from_vec(py, flat).reshape([n, 3])?.into_any())
}

type Cloud = Vec<[f32; 3]>;

fn points(a: &PyReadonlyArray2<'_, f32>, what: &str) -> PyResult<Cloud> {
    let shape = a.shape();
    if shape[1] != 3 {
        return Err(PyValueError::new_err(format!(
            "{what} must have shape (N, 3), got ({}, {})",
            shape[0], shape[1]
        )));
    }
    let s = a
        .as_slice()
        .map_err(|_| PyValueError::new_err(format!("{what} must be C-contiguous")))?;
    Ok(s.chunks_exact(3).map(|p| [p[0], p[1], p[2]]).collect())
}

/// A rigid 4x4 transform (row-major) as an isometry, or why it is not one.
fn isometry(m: &[f64]) -> Result<Isometry3<f64>> {
    let m = Matrix4::from_row_slice(m);
    if !m.iter().all(|v| v.is_finite()) {
        return Err(Error::input("init transform has a non-finite entry"));
    }
    let r: Matrix3<f64> = m.fixed_view::<3, 3>(0, 0).into_owned();
    let orth = (r.transpose() * r - Matrix3::identity()).abs().max();
    let bottom =
        (m[(3, 0)].abs() + m[(3, 1)].abs() + m[(3, 2)].abs() + (m[(3, 3)] - 1.0).abs()).max(0.0);
    if orth > 1e-6 || r.determinant() <= 0.0 || bottom > 1e-9 {
        return Err(Error::input(format!(
            "init transform is not rigid (rotation orthonormality error {orth:.2e}, \
             determinant {:.6}, bottom row [{}, {}, {}, {}])",
            r.determinant(),
            m[(3, 0)],
            m[(3, 1)],
            m[(3, 2)],
            m[(3, 3)]
        )));
    }
    let rot = UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r));
    Ok(Isometry3::from_parts(
        Translation3::new(m[(0, 3)], m[(1, 3)], m[(2, 3)]),
        rot,
    ))
}

struct Setup {
    params: NdtParams,
    leaf: f64,
    device: Device,
}

fn setup(
    resolution: f64,
    leaf: f64,
    search: &str,
    device: &str,
    max_iters: usize,
) -> PyResult<Setup> {
    if !(leaf >= 0.0 && leaf.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "leaf must be 0 or a positive length in metres, got {leaf}"
        )));
    }
    let search: NeighbourSearch = search.parse().py_err()?;
    let mut params = NdtParams {
        resolution_m: resolution,
        search,
        ..Default::default()
    };
    params.solver.max_iterations = max_iters;
    params.validate().py_err()?;
    Ok(Setup {
        params,
        leaf,
        device: Device::parse(device)?,
    })
}

fn filtered(points: Vec<[f32; 3]>, leaf: f64) -> Result<Vec<[f32; 3]>> {
    let cloud = PointCloud::from_points(points);
    Ok(if leaf > 0.0 {
        voxel_grid_filter(&cloud, leaf)?.points
    } else {
        cloud.points
    })
}

/// Runs every alignment of `inits` against one map, on the GPU when `gpu` is given.
fn run(
    gpu: Option<Arc<Gpu>>,
    target: &[[f32; 3]],
    source: &[[f32; 3]],
    inits: &[Isometry3<f64>],
    params: &NdtParams,
) -> Result<(Vec<NdtResult>, Option<usize>)> {
    if source.is_empty() {
        return Err(Error::input("NDT source cloud has no (finite) points"));
    }
    let map = VoxelMap::build(target, params.resolution_m)?;
    if map.is_empty() {
        return Err(Error::input(format!(
            "NDT target ({} points) has no voxel of {} m with enough distinct points",
            target.len(),
            params.resolution_m
        )));
    }
    let report = match gpu {
        Some(g) => {
            let capacity = GpuCapacity {
                points: source.len(),
                voxels: map.len(),
                requests: inits.len().max(1),
            };
            let mut p =
                GpuDerivativePipeline::new(g, capacity, params.search, params.outlier_ratio)?;
            p.upload_target(&map)?;
            p.upload_source(source)?;
            align_hypotheses(&mut p, 0, inits, &params.solver)?
        }
        None => {
            let mut lin =
                CpuLinearizer::new(&map, vec![source], params.search, params.outlier_ratio)?;
            align_hypotheses(&mut lin, 0, inits, &params.solver)?
        }
    };
    Ok((report.results, report.best))
}

fn result_dict<'py>(py: Python<'py>, r: &NdtResult, device: &str) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let m: Vec<f64> = r.matrix_row_major().iter().flatten().copied().collect();
    d.set_item("transform", PyArray1::from_vec(py, m).reshape([4, 4])?)?;
    d.set_item("stop", r.stop.name())?;
    d.set_item("converged", r.stop.converged())?;
    d.set_item("iterations", r.iterations)?;
    d.set_item("evaluations", r.evaluations)?;
    d.set_item("score", r.score)?;
    d.set_item("likelihood_per_point", r.likelihood_per_point)?;
    d.set_item("correspondences", r.correspondences)?;
    d.set_item("source_points", r.source_points)?;
    d.set_item("device", device)?;
    Ok(d)
}

fn prepare(
    target: &PyReadonlyArray2<'_, f32>,
    source: &PyReadonlyArray2<'_, f32>,
) -> PyResult<(Cloud, Cloud)> {
    Ok((points(target, "target")?, points(source, "source")?))
}

/// Aligns `source` to `target` from a row-major 4x4 `init` (float64, 16 values).
#[pyfunction]
#[pyo3(signature = (target, source, init, resolution, leaf, search, device, max_iters))]
#[allow(clippy::too_many_arguments)]
pub fn ndt_align<'py>(
    py: Python<'py>,
    target: PyReadonlyArray2<'py, f32>,
    source: PyReadonlyArray2<'py, f32>,
    init: Vec<f64>,
    resolution: f64,
    leaf: f64,
    search: &str,
    device: &str,
    max_iters: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let s = setup(resolution, leaf, search, device, max_iters)?;
    let init = isometry(&init).py_err()?;
    let (t, src) = prepare(&target, &source)?;
    let (results, dev) = py
        .detach(|| -> Result<_> {
            let gpu = pick(s.device)?;
            let dev = if gpu.is_some() { "gpu" } else { "cpu" };
            let (t, src) = (filtered(t, s.leaf)?, filtered(src, s.leaf)?);
            Ok((run(gpu, &t, &src, &[init], &s.params)?.0, dev))
        })
        .py_err()?;
    result_dict(py, &results[0], dev)
}

/// Aligns `source` to `target` from every 4x4 of `inits` (K, 4, 4) in lockstep; returns
/// `{"results": [dict, ...], "best": index}`.
#[pyfunction]
#[pyo3(signature = (target, source, inits, resolution, leaf, search, device, max_iters))]
#[allow(clippy::too_many_arguments)]
pub fn ndt_align_hypotheses<'py>(
    py: Python<'py>,
    target: PyReadonlyArray2<'py, f32>,
    source: PyReadonlyArray2<'py, f32>,
    inits: PyReadonlyArray3<'py, f64>,
    resolution: f64,
    leaf: f64,
    search: &str,
    device: &str,
    max_iters: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let s = setup(resolution, leaf, search, device, max_iters)?;
    let shape = inits.shape();
    if shape[1] != 4 || shape[2] != 4 || shape[0] == 0 {
        return Err(PyValueError::new_err(format!(
            "inits must have shape (K, 4, 4) with K >= 1, got ({}, {}, {})",
            shape[0], shape[1], shape[2]
        )));
    }
    let flat = inits
        .as_slice()
        .map_err(|_| PyValueError::new_err("inits must be C-contiguous"))?;
    let inits: Vec<Isometry3<f64>> = flat
        .chunks_exact(16)
        .enumerate()
        .map(|(k, m)| isometry(m).map_err(|e| Error::input(format!("inits[{k}]: {e}"))))
        .collect::<Result<_>>()
        .py_err()?;
    let (t, src) = prepare(&target, &source)?;
    let (results, best, dev) = py
        .detach(|| -> Result<_> {
            let gpu = pick(s.device)?;
            let dev = if gpu.is_some() { "gpu" } else { "cpu" };
            let (t, src) = (filtered(t, s.leaf)?, filtered(src, s.leaf)?);
            let (results, best) = run(gpu, &t, &src, &inits, &s.params)?;
            Ok((results, best, dev))
        })
        .py_err()?;
    let out = PyDict::new(py);
    let list: Vec<Bound<'py, PyDict>> = results
        .iter()
        .map(|r| result_dict(py, r, dev))
        .collect::<PyResult<_>>()?;
    out.set_item("results", list)?;
    out.set_item("best", best)?;
    Ok(out)
}
