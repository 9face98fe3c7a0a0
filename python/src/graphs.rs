//! [`Graphs`]: one direction's kernel launches (the forward's prepare, forward and row sums; the
//! backward's backward, row sums and finish) recorded once as a CUDA graph per problem, stream and
//! options, then replayed with one `cuGraphLaunch` instead of one `cuLaunchKernel` per kernel.
//!
//! A recording is made by stream capture of the very launches a direct call would enqueue (on a
//! private stream, thread-local capture mode, nothing runs), so the graph holds the same kernels,
//! grids and arguments. What changes between calls with the same key is only where the buffers
//! are: the call passes the base address of every buffer slice it hands to the kernels, every
//! 8-byte kernel argument equal to one of them at recording is tied to that slice, and a replay
//! whose slices moved rewrites those arguments first (`cuGraphExecKernelNodeSetParams`, only for
//! the kernels whose arguments changed). Scalars (sizes, options) are part of the key.
//!
//! Anything unusual launches directly, as without graphs: a caller stream that is itself being
//! captured (a PyTorch CUDA graph), a recording that fails or has an argument layout this does not
//! handle, slices that coincided at recording but no longer do, a full cache.

use crate::graph_node::{read_node, Node};
use cudarc::driver::sys::{
    self, CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream, CUstreamCaptureMode,
    CUstreamCaptureStatus,
};
use cudarc::driver::{CudaContext, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Recordings kept per device; calls with further keys launch directly.
const MAX_RECORDINGS: usize = 256;

/// What a recording depends on besides buffer addresses: the caller's raw stream (a replay is
/// ordered after earlier replays of the same graph, so streams do not share one), direction,
/// float type and options (`tag`, packed by the caller), sizes, `diag_eps` bits (forward) or 0.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    pub stream: usize,
    pub tag: u32,
    pub n: usize,
    pub b: usize,
    pub eps: u64,
}

/// Why a call did not replay (it launches directly instead): a driver call failed or the argument
/// layout is not one this handles (the key is not tried again), or this call only (slices that
/// coincided at recording differ now).
#[derive(Debug)]
pub(crate) enum Skip {
    Driver(&'static str, CUresult),
    Layout,
    ThisCall,
}

pub(crate) fn check(call: &'static str, r: CUresult) -> Result<(), Skip> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(Skip::Driver(call, e)),
    }
}

/// A recorded direction: the template graph, its executable and its kernel nodes.
struct Recorded {
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: Vec<Node>,
    /// The slices' addresses the executable's arguments hold now.
    bases: Vec<u64>,
    /// Slices that had one address at recording (all arguments equal to it are tied to the
    /// first): a replay needs them still equal.
    same: Vec<(usize, usize)>,
}

// SAFETY: the handles are driver objects usable from any thread; the raw pointers point into the
// node's own boxed cells. A `Recorded` is only touched under `Graphs::cache`'s lock.
unsafe impl Send for Recorded {}

impl Drop for Recorded {
    fn drop(&mut self) {
        // SAFETY: both were created by `record` and are destroyed once, here; the driver keeps
        // replays already enqueued valid after the executable is destroyed.
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec);
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

impl Recorded {
    /// Points the arguments at `bases` (the call's slices), rewriting the changed kernels only.
    fn update(&mut self, bases: &[u64]) -> Result<(), Skip> {
        if bases == self.bases.as_slice() {
            return Ok(());
        }
        if self.same.iter().any(|&(a, c)| bases[a] != bases[c]) {
            return Err(Skip::ThisCall);
        }
        for node in &mut self.nodes {
            let mut changed = false;
            for &(arg, slice) in &node.relocs {
                if node.cells[arg] != bases[slice] {
                    node.cells[arg] = bases[slice];
                    changed = true;
                }
            }
            if changed {
                node.params.kernelParams = node.ptrs.as_mut_ptr();
                // SAFETY: `node.node` is a kernel node of the graph `self.exec` was instantiated
                // from; the parameters are the ones read from it with the address arguments
                // replaced, `kernelParams` pointing at live cells (the driver copies them).
                check("cuGraphExecKernelNodeSetParams", unsafe {
                    sys::cuGraphExecKernelNodeSetParams_v2(self.exec, node.node, &node.params)
                })?;
            }
        }
        self.bases.clear();
        self.bases.extend_from_slice(bases);
        Ok(())
    }
}

/// Recordings of one device's launches; see the module docs.
pub struct Graphs {
    ctx: Arc<CudaContext>,
    /// Private stream that recordings are captured on.
    capture: Arc<CudaStream>,
    /// `None`: this key is launched directly (its recording failed).
    cache: Mutex<HashMap<Key, Option<Recorded>>>,
    /// What calls did (diagnostics).
    stats: Mutex<Stats>,
}

/// Counters of [`Graphs::run`] (see [`Graphs::stats`]).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub recorded: u64,
    pub replays: u64,
    pub updates: u64,
    pub direct: u64,
    pub last_skip: String,
}

impl Graphs {
    /// Recordings on `ctx` (the device's primary context).
    pub fn new(ctx: Arc<CudaContext>) -> ptxflow::Result<Graphs> {
        // Creating the stream binds `ctx` to this thread; the caller's context is put back after
        // (PyTorch reads its current device from it).
        let bound = Bound::ours(ctx.cu_ctx()).map_err(|why| match why {
            Skip::Driver(call, r) => ptxflow::Error::Driver {
                call,
                source: cudarc::driver::DriverError(r),
            },
            Skip::Layout | Skip::ThisCall => unreachable!("Bound::ours fails only in the driver"),
        })?;
        let capture = ctx
            .new_stream()
            .map_err(ptxflow::Error::driver("creating the graph capture stream"))?;
        drop(bound);
        Ok(Graphs {
            ctx,
            capture,
            cache: Mutex::new(HashMap::new()),
            stats: Mutex::new(Stats::default()),
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn skipped(&self, why: &Skip) {
        let text = match why {
            Skip::Driver(call, r) => format!("{call}: {r:?}"),
            Skip::Layout => "argument layout".to_string(),
            Skip::ThisCall => "slices no longer coincide".to_string(),
        };
        self.note(|s| {
            s.direct += 1;
            s.last_skip = text;
        });
    }

    /// Enqueues `launch`'s kernels on `stream`: as a replay of its recording for `key`, with the
    /// arguments that are slice addresses set to `bases` (every address `launch` passes to a
    /// kernel must be one of `bases`, and `launch` must enqueue the same kernels with the same
    /// scalars whenever `key` is the same), or by calling `launch(stream)` directly.
    ///
    /// # Safety
    /// As `launch`'s: the buffers at `bases` must stay valid until the enqueued work has run;
    /// `stream` must be a live stream of this device's primary context.
    pub unsafe fn run(
        &self,
        key: Key,
        stream: CUstream,
        bases: &[u64],
        launch: impl Fn(CUstream) -> ptxflow::Result<()>,
    ) -> ptxflow::Result<()> {
        let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: `stream` is live (this function's contract); `status` is a valid out pointer.
        let r = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
        if r != CUresult::CUDA_SUCCESS
            || status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            self.note(|s| s.direct += 1);
            return launch(stream);
        }
        let _bound = match Bound::ours(self.ctx.cu_ctx()) {
            Ok(b) => b,
            Err(why) => {
                self.skipped(&why);
                return launch(stream);
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if !cache.contains_key(&key) {
            if cache.len() >= MAX_RECORDINGS {
                self.note(|s| s.direct += 1);
                return launch(stream);
            }
            let rec = match self.record(bases, &launch) {
                Ok(rec) => {
                    self.note(|s| s.recorded += 1);
                    Some(rec)
                }
                Err(why) => {
                    self.note(|s| s.last_skip = format!("recording: {why:?}"));
                    None
                }
            };
            cache.insert(key, rec);
        }
        let Some(Some(rec)) = cache.get_mut(&key) else {
            self.note(|s| s.direct += 1);
            return launch(stream);
        };
        let moved = rec.bases.as_slice() != bases;
        if let Err(why) = rec.update(bases) {
            if !matches!(why, Skip::ThisCall) {
                cache.insert(key, None);
            }
            self.skipped(&why);
            return launch(stream);
        }
        // SAFETY: `rec.exec` is a live executable of this context whose arguments now point at
        // the call's buffers (valid until the work has run: this function's contract).
        let r = unsafe { sys::cuGraphLaunch(rec.exec, stream) };
        if r != CUresult::CUDA_SUCCESS {
            cache.insert(key, None);
            return Err(ptxflow::Error::Driver {
                call: "cuGraphLaunch",
                source: cudarc::driver::DriverError(r),
            });
        }
        self.note(|s| {
            s.replays += 1;
            s.updates += u64::from(moved);
        });
        Ok(())
    }

    /// Records `launch` on the capture stream (nothing runs) and reads back its kernel nodes.
    fn record(
        &self,
        bases: &[u64],
        launch: &impl Fn(CUstream) -> ptxflow::Result<()>,
    ) -> Result<Recorded, Skip> {
        let cap = self.capture.cu_stream();
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: `cap` is our own live stream, idle (it only ever captures).
        check("cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(cap, mode)
        })?;
        let launched = launch(cap);
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above on this thread; `graph` is a valid out pointer.
        let ended = unsafe { sys::cuStreamEndCapture(cap, &mut graph) };
        if ended != CUresult::CUDA_SUCCESS || graph.is_null() {
            return Err(Skip::Driver("cuStreamEndCapture", ended));
        }
        let mut rec = Recorded {
            graph,
            exec: std::ptr::null_mut(),
            nodes: Vec::new(),
            bases: bases.to_vec(),
            same: Vec::new(),
        };
        if launched.is_err() {
            return Err(Skip::Layout);
        }
        // SAFETY: `graph` is the graph just captured; `rec.exec` is a valid out pointer.
        check("cuGraphInstantiate", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut rec.exec, graph, 0)
        })?;
        let mut count = 0usize;
        // SAFETY: a null array asks for the count only.
        check("cuGraphGetNodes", unsafe {
            sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count)
        })?;
        let mut handles: Vec<CUgraphNode> = vec![std::ptr::null_mut(); count];
        // SAFETY: `handles` holds `count` entries.
        check("cuGraphGetNodes", unsafe {
            sys::cuGraphGetNodes(graph, handles.as_mut_ptr(), &mut count)
        })?;
        handles.truncate(count);
        for node in handles {
            rec.nodes.push(read_node(node, bases)?);
        }
        for a in 0..bases.len() {
            for c in a + 1..bases.len() {
                if bases[a] == bases[c] {
                    rec.same.push((a, c));
                }
            }
        }
        Ok(rec)
    }
}

/// This device's context made current for a recording or replay; the caller's put back on drop
/// when it was another (PyTorch reads its current device from the current context).
struct Bound(Option<CUcontext>);

impl Bound {
    fn ours(ours: CUcontext) -> Result<Bound, Skip> {
        let mut now: CUcontext = std::ptr::null_mut();
        // SAFETY: `now` is a valid out pointer.
        check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut now) })?;
        if now == ours {
            return Ok(Bound(None));
        }
        // SAFETY: `ours` is the device's primary context, retained for the process's life.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ours) })?;
        Ok(Bound((!now.is_null()).then_some(now)))
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            // SAFETY: `c` was current when the call began; the caller keeps its context alive.
            // A failure leaves this device's context current, which is only a wrong default.
            let _ = unsafe { sys::cuCtxSetCurrent(c) };
        }
    }
}
