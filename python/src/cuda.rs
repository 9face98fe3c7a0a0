//! `CudaGaussian`: the Gaussian kernels of one CUDA device on PyTorch's memory and stream.
//!
//! `ptxflow.torch` passes raw device addresses (`tensor.data_ptr()`) as plain ints and the raw
//! current stream (`torch._C._cuda_getCurrentRawStream`): one call per direction, no tuples, no
//! lookups. It has checked that the tensors are contiguous CUDA tensors of this device with the
//! shapes `n` and `b` imply and 16-byte aligned addresses, and it allocates the workspaces with
//! the lengths `plan` returns; the lengths below follow from `n` and `b`, and
//! `ptxflow::gaussian::RawGaussianKernels` checks them and the alignment again before any
//! launch. The kernels run in the device's primary context, which is the context PyTorch uses.
//!
//! Two workspaces per call keep the allocations down to what PyTorch must see: the forward's
//! `[prep | comp | scratch]` (saved for the backward) and the backward's `[partial points |
//! partial Gaussians]`; sub-buffers start at 16-byte multiples.
//!
//! `PTXFLOW_PY_NO_LAUNCH=1` in the environment when a `CudaGaussian` is made turns its launches
//! off (every check still runs, nothing is written): a diagnostic for `python/gpu/overhead.py`,
//! which times the host cost of a call with and without the driver's launches.
//!
//! Opt-in: `PTXFLOW_PY_GRAPHS=1` when a `CudaGaussian` is made (or its `graphs` property) replays
//! each direction's kernels as one recorded CUDA graph ([`crate::graphs`]) instead of launching
//! them one by one; a call the recording cannot serve launches directly. On the H100 machine
//! (`python/gpu/overhead.py`, 1000 x 500 f32 fwd+bwd) it saved 44 us a call in one run and nothing
//! beyond the noise in another, so it stays off by default; checked by `gpu_check.py` and by
//! `memcheck_op.py` under compute-sanitizer (0 errors).

use crate::device::gpu;
use crate::graphs::{Graphs, Key};
use crate::IntoPy;
use cudarc::driver::CudaContext;
use ptxflow::gaussian::gpu_raw::CUstream;
use ptxflow::gaussian::layout::STRIDE;
use ptxflow::gaussian::{GpuReal, RawGaussianKernels, RawPlan, RawSlice};
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Scalars of padding granularity: 16 bytes of f32 (and 32 of f64).
const GRAIN: usize = 4;

fn at(ptr: u64, len: usize) -> RawSlice {
    RawSlice { ptr, len }
}

/// `len` scalars at scalar offset `off` of the buffer at `base`.
fn sub<T>(base: u64, off: usize, len: usize) -> RawSlice {
    RawSlice {
        ptr: base + (off * std::mem::size_of::<T>()) as u64,
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

/// The kernels of both float types on one device.
#[pyclass(module = "ptxflow._native", frozen)]
pub struct CudaGaussian {
    f32: RawGaussianKernels<f32>,
    f64: RawGaussianKernels<f64>,
    /// `PTXFLOW_PY_NO_LAUNCH` was set when this was made: check everything, launch nothing.
    no_launch: bool,
    /// Each direction's launches replayed as a recorded CUDA graph (the `graphs` property;
    /// opt-in; see the module docs for what it measured).
    use_graphs: AtomicBool,
    /// Made on first use with `use_graphs` on (the default path makes no driver call for it).
    graphs: OnceLock<Option<Graphs>>,
    ctx: Arc<CudaContext>,
}

impl CudaGaussian {
    fn how(&self, double: bool) -> How<'_> {
        if self.no_launch {
            return How::Off;
        }
        if self.use_graphs.load(Ordering::Relaxed) {
            // A device whose capture stream cannot be made launches directly.
            let g = self
                .graphs
                .get_or_init(|| Graphs::new(self.ctx.clone()).ok());
            if let Some(g) = g {
                return How::Graph(g, double);
            }
        }
        How::Direct
    }
}

/// Addresses of one forward: packed Gaussians, points, forward workspace, values.
type ForwardPtrs = [u64; 4];

#[allow(clippy::too_many_arguments)]
fn forward<T: GpuReal>(
    k: &RawGaussianKernels<T>,
    how: How<'_>,
    stream: usize,
    n: usize,
    b: usize,
    normalised: bool,
    diag_eps: f64,
    [packed, points, work, values]: ForwardPtrs,
) -> ptxflow::Result<()> {
    let p = k.plan(n, b)?;
    let prep = sub::<T>(work, 0, p.prep_len);
    let comp = sub::<T>(work, p.prep_len, p.comp_len);
    let scratch = sub::<T>(work, p.prep_len + p.comp_len, p.forward_scratch_len);
    let (packed, points, values) = (at(packed, n * STRIDE), at(points, 3 * b), at(values, b));
    let launch = |s: CUstream| {
        // SAFETY: ptxflow.torch passes the storage of live, contiguous CUDA tensors of this
        // device (`data_ptr()`) holding n * 10 (packed), 3b (points) and b (values) scalars, a
        // workspace of `forward_work` scalars, and PyTorch's current stream of this device (or a
        // recording's capture stream, where nothing runs). The tensors stay alive until the
        // stream has run these launches: PyTorch's caching allocator reuses memory only in the
        // stream order of the stream it was allocated on, which is this one, and the forward
        // workspace is saved for the backward.
        unsafe {
            k.prepare(s, &p, normalised, diag_eps, packed, prep, comp)?;
            k.forward(s, &p, prep, points, scratch, values)
        }
    };
    match how {
        How::Off => Ok(()),
        How::Direct => launch(stream as CUstream),
        How::Graph(g, double) => {
            let key = Key {
                stream,
                tag: u32::from(double) | u32::from(normalised) << 1,
                n,
                b,
                eps: diag_eps.to_bits(),
            };
            let bases = [
                packed.ptr,
                points.ptr,
                prep.ptr,
                comp.ptr,
                scratch.ptr,
                values.ptr,
            ];
            // SAFETY: as in `launch`; `bases` are the addresses of every slice it passes.
            unsafe { g.run(key, stream as CUstream, &bases, launch) }
        }
    }
}

/// Addresses of one backward: forward workspace, points, dLoss/df, backward workspace.
type BackwardPtrs = [u64; 4];

#[allow(clippy::too_many_arguments)]
fn backward<T: GpuReal>(
    k: &RawGaussianKernels<T>,
    how: How<'_>,
    stream: usize,
    n: usize,
    b: usize,
    normalised: bool,
    [fwork, points, grad_values, bwork]: BackwardPtrs,
    grad_points: Option<u64>,
    grad_gaussians: Option<u64>,
) -> ptxflow::Result<()> {
    let p = k.plan(n, b)?;
    let prep = sub::<T>(fwork, 0, p.prep_len);
    let comp = sub::<T>(fwork, p.prep_len, p.comp_len);
    let pp = sub::<T>(bwork, 0, p.partial_points_len);
    let pg = sub::<T>(bwork, up(p.partial_points_len), p.partial_gauss_len);
    let inputs = [prep, comp, at(points, 3 * b), at(grad_values, b)];
    let gp = grad_points.map(|a| at(a, 3 * b));
    let gg = grad_gaussians.map(|a| at(a, n * STRIDE));
    // SAFETY: as in `forward`; `fwork` is the forward's workspace (prep and comp as written by
    // its prepare launch), saved by autograd; `bwork` holds `backward_work` scalars, dLoss/df
    // b, dLoss/dpoints (when given) 3b and dLoss/dgaussians (when given) n * 10.
    let launch =
        |s: CUstream| unsafe { k.backward_some(s, &p, normalised, inputs, [pp, pg], gp, gg) };
    match how {
        How::Off => Ok(()),
        How::Direct => launch(stream as CUstream),
        How::Graph(g, double) => {
            let key = Key {
                stream,
                tag: 1 << 2
                    | u32::from(double)
                    | u32::from(normalised) << 1
                    | u32::from(gp.is_some()) << 3
                    | u32::from(gg.is_some()) << 4,
                n,
                b,
                eps: 0,
            };
            let (gp, gg) = (gp.map_or(0, |s| s.ptr), gg.map_or(0, |s| s.ptr));
            let bases = [
                prep.ptr,
                comp.ptr,
                points,
                grad_values,
                pp.ptr,
                pg.ptr,
                gp,
                gg,
            ];
            // SAFETY: as in `launch`; `bases` are the addresses of every slice it passes.
            unsafe { g.run(key, stream as CUstream, &bases, launch) }
        }
    }
}

/// How a call enqueues its kernels.
#[derive(Clone, Copy)]
enum How<'a> {
    /// Not at all (`PTXFLOW_PY_NO_LAUNCH=1`): every check runs, nothing is enqueued.
    Off,
    /// One launch per kernel.
    Direct,
    /// A replay of the direction's recording (float64?).
    Graph(&'a Graphs, bool),
}

#[pymethods]
impl CudaGaussian {
    /// Opens (once per process) CUDA device `ordinal` and loads the Gaussian kernels.
    #[new]
    fn new(py: Python<'_>, ordinal: usize) -> PyResult<Self> {
        let no_launch = std::env::var_os("PTXFLOW_PY_NO_LAUNCH").is_some_and(|v| v == "1");
        let graphs = std::env::var_os("PTXFLOW_PY_GRAPHS").is_some_and(|v| v == "1");
        py.detach(|| -> ptxflow::Result<Self> {
            let g = gpu(ordinal)?;
            Ok(CudaGaussian {
                f32: RawGaussianKernels::new(g.clone())?,
                f64: RawGaussianKernels::new(g.clone())?,
                no_launch,
                use_graphs: AtomicBool::new(graphs),
                graphs: OnceLock::new(),
                ctx: g.ctx().clone(),
            })
        })
        .py_err()
    }

    /// Whether each direction's launches are replayed as a recorded CUDA graph (one
    /// `cuGraphLaunch` per direction; `PTXFLOW_PY_GRAPHS=1` at construction turns it on).
    #[getter]
    fn graphs(&self) -> bool {
        self.use_graphs.load(Ordering::Relaxed)
    }

    #[setter]
    fn set_graphs(&self, on: bool) {
        self.use_graphs.store(on, Ordering::Relaxed);
    }

    /// `(recordings, replays, replays that moved arguments, direct launches, why the last key
    /// or call was not replayed)` (diagnostics).
    fn graph_stats(&self) -> (u64, u64, u64, u64, String) {
        match self.graphs.get() {
            Some(Some(g)) => {
                let s = g.stats();
                (s.recorded, s.replays, s.updates, s.direct, s.last_skip)
            }
            Some(None) => (
                0,
                0,
                0,
                0,
                "the graph capture stream could not be made".into(),
            ),
            None => (0, 0, 0, 0, String::new()),
        }
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

    /// Whether launches are off (`PTXFLOW_PY_NO_LAUNCH=1`, a diagnostic).
    #[getter]
    fn no_launch(&self) -> bool {
        self.no_launch
    }

    /// Enqueues prepare + forward on `stream`. Addresses (`data_ptr()`): packed Gaussians
    /// (n * 10), points (b * 3), the forward workspace (`plan(...)[0]` scalars), values (b).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        normalised: bool,
        diag_eps: f64,
        packed: u64,
        points: u64,
        work: u64,
        values: u64,
    ) -> PyResult<()> {
        let ptrs = [packed, points, work, values];
        let (s, how) = (stream, self.how(double));
        if double {
            forward(&self.f64, how, s, n, b, normalised, diag_eps, ptrs)
        } else {
            forward(&self.f32, how, s, n, b, normalised, diag_eps, ptrs)
        }
        .py_err()
    }

    /// Enqueues the backward on `stream`. Addresses (`data_ptr()`): the forward's workspace,
    /// points (b * 3), dLoss/df (b), the backward workspace (`plan(...)[1]` scalars),
    /// dLoss/dpoints (b * 3) and dLoss/dgaussians (n * 10), each None when not wanted (its
    /// reduction is then not launched).
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        double: bool,
        stream: usize,
        n: usize,
        b: usize,
        normalised: bool,
        forward_work: u64,
        points: u64,
        grad_values: u64,
        backward_work: u64,
        grad_points: Option<u64>,
        grad_gaussians: Option<u64>,
    ) -> PyResult<()> {
        let ptrs = [forward_work, points, grad_values, backward_work];
        let (s, how) = (stream, self.how(double));
        let (gp, gg) = (grad_points, grad_gaussians);
        if double {
            backward(&self.f64, how, s, n, b, normalised, ptrs, gp, gg)
        } else {
            backward(&self.f32, how, s, n, b, normalised, ptrs, gp, gg)
        }
        .py_err()
    }
}
