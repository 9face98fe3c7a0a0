//! The device solver: one alignment's whole Newton solve in one cooperative launch of
//! `ndt_align_device` (`kernels::ndt::solve`), with only the result crossing the bus. On by
//! default since session 10 ([`DEVICE_SOLVE_DEFAULT`]; `PTXFLOW_NDT_DEVICE_SOLVE=0` when the
//! pipeline is created, or [`GpuDerivativePipeline::set_device_solve`], turns it off: the
//! evaluation server then serves the host solver); [`crate::ndt::align`] on the pipeline asks
//! it first ([`crate::ndt::Linearize::align_whole`]). The kernel is the build with
//! [`DEVICE_SOLVE_OPTS_DEFAULT`] (`PTXFLOW_NDT_DEVICE_OPTS=n` or
//! [`GpuDerivativePipeline::set_device_solve_opts`] for others, built at run time).
//!
//! The kernel evaluates with the server's grid and reductions and runs the host solver's steps
//! in the host's operation order; its own are the request's sines and cosines (within an ulp of
//! `f64::sin_cos`), the table build's cross-product point derivatives (`OPT_CROSS`: sums equal
//! to the last bits) and the eigen path's Jacobi decomposition (`OPT_DEVICE_EIGEN`: a Hessian
//! the Cholesky path cannot take; the host's increment up to rounding), so poses, iterations
//! and stop reasons match the host path's to rounding wherever the iteration converges.
//!
//! Builds without `OPT_DEVICE_EIGEN` (`PTXFLOW_NDT_DEVICE_OPTS=188`, session 10's) ask the host
//! for those steps instead: while it waits for the result the host answers with its own
//! `newton_increment` (one PCIe round trip each; the increment is the host path's bit for bit).
//!
//! Never a hang, never a different answer: the host waits for the done word with the server's
//! timeouts ([`super::ServerTimeouts`]), checks the status word and the stream while waiting,
//! and after any failure (or a kernel that hands the alignment back, `STOP_HOST`: an angle out
//! of the kernel's range, no answer from the host) returns `None`, so the host solver runs the
//! alignment as usual; a failed launch's words (and the request counter the ordinary rounds
//! share) are cleared once its stream is idle.

mod wait;

use super::launch::{idle_ns, PersistentHead};
use super::GpuDerivativePipeline;
use crate::kernels::ndt::derivatives::server::STAMPS;
use crate::kernels::ndt::derivatives::{Variant, BLOCK};
use crate::kernels::ndt::solve::profile::PROF_WORDS;
use crate::kernels::ndt::solve::{
    REDUCER_BLOCK0, REDUCER_LAST, STOP_CONVERGED, STOP_MAX_ITERATIONS, STOP_NO_CORRESPONDENCES,
    STOP_SINGULAR, STOP_STALLED, TABLE_OPTS,
};
use crate::ndt::gpu::mapped::{device_can_map, MappedBuffer};
use crate::ndt::gpu::records::pack_request;
use crate::ndt::gpu::variants::{env_switch, variant_from_env};
use crate::ndt::params::SolverParams;
use crate::ndt::pose::isometry_to_pose;
use crate::ndt::result::{NdtResult, StopReason};
use crate::runtime::{DeviceBuffer, LoadedKernel};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, DevicePtr, LaunchConfig};
use nalgebra::Isometry3;
use std::sync::Arc;

/// Default of `PTXFLOW_NDT_DEVICE_SOLVE`: on (session 10), with the build options
/// [`DEVICE_SOLVE_OPTS_DEFAULT`]: faster than the evaluation server, which stays the fallback
/// (H100, Velodyne pair without upload, 300 runs alternating in one process, twice,
/// `gpu-results/s10/ndts-3.log`: device solver 175.4 / 173.6 us, server 200.1 / 200.9 us, the
/// session 9 build 211.5 / 209.8 us). Verified with those options: results equal to the host
/// solver's on the server (bit for bit on the Velodyne pair, every search mode), the NDT GPU
/// tests pass with it on, compute-sanitizer memcheck 0 errors and racecheck 0 hazards
/// (`tests/ndt_gpu_solve.rs`). Session 9 measured the table's build slower than the server
/// (206.5 against 193.2 us), which kept it off then.
pub const DEVICE_SOLVE_DEFAULT: bool = true;

/// Default of `PTXFLOW_NDT_DEVICE_OPTS` (`Variant::solve_opts`): the table's `ndt_align_device`
/// (`kernels::ndt::solve::TABLE_OPTS`: session 10's options plus the eigen path on the device
/// and the cross-product point derivatives); other values (188 is session 10's build, 0
/// session 9's) are built at run time.
pub const DEVICE_SOLVE_OPTS_DEFAULT: u32 = TABLE_OPTS;

/// Where the device's time went in the last device solve (for phase measurements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSolveStats {
    /// Evaluations the kernel ran.
    pub evaluations: usize,
    /// Nanoseconds from the kernel's start (block 0, before the start barrier) to the result.
    pub total_ns: u64,
    /// Nanoseconds of solver steps (thread 0 of the block that reduced last), summed; they
    /// include the eigen-path steps (round trips to the host in builds without
    /// `OPT_DEVICE_EIGEN`).
    pub solve_ns: u64,
    /// Newton steps that took the eigen path (on the device with `OPT_DEVICE_EIGEN`, else
    /// computed by the host).
    pub assists: usize,
    /// The server's `%globaltimer` stamps of the last evaluation (see
    /// [`GpuDerivativePipeline::server_stamps`]; the poll stamps stay 0).
    pub stamps: [u64; STAMPS],
}

/// The device solver's state inside the pipeline.
pub(in crate::ndt::gpu) struct SolveState {
    enabled: bool,
    /// The kernel and how many of its blocks fit an SM.
    kernel: Option<(LoadedKernel, usize)>,
    buffers: Option<Buffers>,
    /// `first_seq` of the next launch (also its done and exit tokens).
    token: u32,
    /// A launch ended abnormally: its words need clearing.
    dirty: bool,
    /// The token of a launch whose result was read but whose exit word was not waited for
    /// (the blocks leave a microsecond or two after the result): the next launch waits for it.
    exiting: Option<u32>,
    stats: Option<DeviceSolveStats>,
    /// Why the last alignment fell back to the host solver (`None`: it did not).
    fallback: Option<String>,
    /// Which block reduces and solves (`kernels::ndt::solve::REDUCER_*`):
    /// `PTXFLOW_NDT_DEVICE_REDUCER=last` for the block that counts itself last, else block 0.
    reducer: u32,
    /// The kernel's build options (`kernels::ndt::solve` `OPT_*` bits, `Variant::solve_opts`):
    /// `PTXFLOW_NDT_DEVICE_OPTS=n`, default `TABLE_OPTS` (the table's kernel); others are built and
    /// loaded at run time.
    opts: u32,
    /// The kernels loaded for other options than the current ones.
    loaded: Vec<(u32, LoadedKernel, usize)>,
    /// [`crate::kernels::ndt::solve::profile`]'s counters of the last solve (profile builds).
    profile: Option<[u64; PROF_WORDS]>,
}

/// The kernel's own stream and words; dropping them waits for the stream first.
struct Buffers {
    stream: Arc<CudaStream>,
    answers: MappedBuffer<u64>,
    /// The host's answers to eigen-path requests (`kernels::ndt::solve::ASSIST_WORD`).
    mailbox: MappedBuffer<u64>,
    grid_sync: DeviceBuffer<u32>,
    state: DeviceBuffer<u64>,
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // A kernel that never reached its exit word may still use the buffers.
        let _ = self.stream.synchronize();
    }
}

impl SolveState {
    /// On unless `PTXFLOW_NDT_DEVICE_SOLVE=0` (see [`DEVICE_SOLVE_DEFAULT`]).
    pub(in crate::ndt::gpu) fn from_env() -> SolveState {
        SolveState {
            enabled: env_switch("PTXFLOW_NDT_DEVICE_SOLVE", DEVICE_SOLVE_DEFAULT),
            kernel: None,
            buffers: None,
            token: 1,
            dirty: false,
            exiting: None,
            stats: None,
            fallback: None,
            reducer: match std::env::var("PTXFLOW_NDT_DEVICE_REDUCER").as_deref() {
                Ok("last") => REDUCER_LAST,
                _ => REDUCER_BLOCK0,
            },
            opts: std::env::var("PTXFLOW_NDT_DEVICE_OPTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEVICE_SOLVE_OPTS_DEFAULT),
            loaded: Vec::new(),
            profile: None,
        }
    }
}

/// The device's stop code as the solver's reason (`None`: handed back to the host).
pub(super) fn stop_reason(code: u32) -> Option<StopReason> {
    Some(match code {
        STOP_CONVERGED => StopReason::Converged,
        STOP_MAX_ITERATIONS => StopReason::MaxIterations,
        STOP_NO_CORRESPONDENCES => StopReason::NoCorrespondences,
        STOP_SINGULAR => StopReason::SingularHessian,
        STOP_STALLED => StopReason::Stalled,
        _ => return None,
    })
}

impl GpuDerivativePipeline {
    /// Runs single alignments' whole Newton solve on the device (see the module docs of
    /// `pipeline/solve`).
    ///
    /// Errors: [`Error::NoDevice`] when turning it on for a device that cannot map host memory.
    pub fn set_device_solve(&mut self, on: bool) -> Result<()> {
        if on && !device_can_map(&self.gpu) {
            return Err(Error::NoDevice {
                reason: "the NDT device solver needs mapped host memory".into(),
            });
        }
        self.solve.enabled = on;
        Ok(())
    }

    /// Whether single alignments run on the device solver.
    pub fn device_solve_enabled(&self) -> bool {
        self.solve.enabled
    }

    /// Phase figures of the last device solve (`None` before the first).
    pub fn device_solve_stats(&self) -> Option<DeviceSolveStats> {
        self.solve.stats
    }

    /// Which block reduces and solves each evaluation: block 0 (`false`, the default) or the
    /// block that counts itself last (`true`, the evaluation server's rule), for comparisons.
    pub fn set_device_solve_last_block(&mut self, last: bool) {
        self.solve.reducer = if last { REDUCER_LAST } else { REDUCER_BLOCK0 };
    }

    /// The device solver's build options (`kernels::ndt::solve` `OPT_*` bits; `TABLE_OPTS`: the
    /// table's kernel, 0: session 9's build), for comparisons; the next alignment loads (or builds) that kernel.
    pub fn set_device_solve_opts(&mut self, opts: u32) {
        if opts != self.solve.opts {
            if let Some((f, per_sm)) = self.solve.kernel.take() {
                self.solve.loaded.push((self.solve.opts, f, per_sm));
            }
            if let Some(k) = self.solve.loaded.iter().position(|(o, _, _)| *o == opts) {
                let (_, f, per_sm) = self.solve.loaded.swap_remove(k);
                self.solve.kernel = Some((f, per_sm));
            }
            self.solve.opts = opts;
        }
    }

    /// The profile build's cycle counters of the last device solve
    /// (`kernels::ndt::solve::profile`; `None` for other builds).
    pub fn device_solve_profile(&self) -> Option<[u64; PROF_WORDS]> {
        self.solve.profile
    }

    /// Why the last alignment offered to the device solver went to the host solver instead
    /// (`None` when the device solved it, or when it was not offered).
    pub fn device_solve_fallback(&self) -> Option<&str> {
        self.solve.fallback.as_deref()
    }

    /// The whole alignment of `source` from `init` on the device; `None` when the device solver
    /// is off, cannot run here, or handed the alignment back (see the module docs).
    pub(in crate::ndt::gpu) fn align_device(
        &mut self,
        source: usize,
        init: &Isometry3<f64>,
        params: &SolverParams,
    ) -> Result<Option<NdtResult>> {
        self.solve.fallback = None;
        if !self.solve.enabled {
            return Ok(None);
        }
        match self.try_align_device(source, init, params) {
            Ok(Ok(r)) => Ok(Some(r)),
            Ok(Err(why)) | Err(Error::Kernel { detail: why, .. }) => {
                self.solve.fallback = Some(why);
                Ok(None)
            }
            Err(e) => {
                self.solve.fallback = Some(e.to_string());
                self.solve.dirty = true;
                Ok(None)
            }
        }
    }

    /// `Ok(Err(why))`: the device cannot take this alignment (no error, the host solves it).
    fn try_align_device(
        &mut self,
        source: usize,
        init: &Isometry3<f64>,
        params: &SolverParams,
    ) -> Result<std::result::Result<NdtResult, String>> {
        if self.transfer != super::Transfer::Mapped {
            return Ok(Err("results are not in mapped memory".into()));
        }
        let Some(t) = self.target else {
            return Err(Error::input(
                "GPU NDT pipeline: upload_target before linearizing",
            ));
        };
        let Some(&(first, count)) = self.sources.get(source) else {
            return Err(Error::input(format!(
                "source index {source} out of range ({} sources uploaded)",
                self.sources.len()
            )));
        };
        let Some((_, _, cells)) = self.cells.active() else {
            return Ok(Err("no dense cell table (the kernel probes it)".into()));
        };
        let wanted = Variant {
            server: true,
            solve: true,
            ..variant_from_env(true, true)
        };
        if wanted != Variant::SOLVE {
            return Ok(Err("kernel switches other than the defaults are set".into()));
        }
        self.stop_server()?;
        self.prepare_device_solve()?;
        let (func, per_sm) = self.solve.kernel.as_ref().expect("loaded by prepare");
        let sms = self.gpu.facts().sm_count as usize;
        // The server's grid (and so the launch-per-round path's sums).
        let blocks = (count as usize)
            .div_ceil(BLOCK as usize)
            .min(sms * self.blocks_per_sm)
            .min(self.partials.capacity() / crate::kernels::ndt::derivatives::SLOT_VALUES)
            .min(sms * per_sm)
            .max(1);
        let token = self.solve.token;
        self.solve.token = token.wrapping_add(1).max(1);
        let pose = isometry_to_pose(init);
        let r0 = pack_request(&pose, first, count);
        let r0f: [f64; 9] = std::array::from_fn(|k| f64::from_bits(r0[k]));
        let b = self.solve.buffers.as_mut().expect("allocated by prepare");
        b.answers.as_mut_slice()?.fill(0);
        b.mailbox.as_mut_slice()?.fill(0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let s = b.stream.clone();
        let answers = b
            .answers
            .device_ptr()
            .expect("a mapped buffer has a device address");
        let mailbox = b
            .mailbox
            .device_ptr()
            .expect("a mapped buffer has a device address");
        let grid_sync = b.grid_sync.slice().device_ptr(&s).0;
        let state = b.state.slice().device_ptr(&s).0;
        let idle_ns = idle_ns(&self.server_timeouts());
        let head = PersistentHead::new(t, self.search, answers);
        let neg_d1 = -t.gauss.d1;
        let scale = t.gauss.d1 * t.gauss.d2;
        let ls = params.line_search.unwrap_or_default();
        let line_search = u32::from(params.line_search.is_some());
        let max_iterations = u32::try_from(params.max_iterations).unwrap_or(u32::MAX);
        let ls_max = u32::try_from(ls.max_evaluations).unwrap_or(u32::MAX);
        let init6: [f64; 6] = std::array::from_fn(|k| pose[k]);
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = func.launch(&s, cfg);
        head.push(&mut lb, self);
        for v in &r0f {
            lb.arg(v);
        }
        lb.arg(&first).arg(&count);
        cells.push(&mut lb);
        lb.arg(&mailbox).arg(&grid_sync).arg(&idle_ns).arg(&token);
        lb.arg(&state);
        for v in &init6 {
            lb.arg(v);
        }
        lb.arg(&max_iterations)
            .arg(&params.step_max)
            .arg(&params.translation_epsilon_m)
            .arg(&params.rotation_epsilon_rad)
            .arg(&line_search)
            .arg(&ls.mu)
            .arg(&ls.eta)
            .arg(&ls_max)
            .arg(&ls.x_tolerance)
            .arg(&neg_d1)
            .arg(&scale)
            .arg(&self.solve.reducer);
        // SAFETY: the arguments are the server's (`server/mod.rs`: points, voxels, hash and
        // dense table uploaded and consistent; `first + count` within the uploaded points; a
        // grid of `blocks` ≤ the partial slots and co-resident, which the cooperative launch
        // checks and the start barrier's status reports) with `mailbox` the MAILBOX_WORDS
        // mapped words of the host's eigen-path answers (read by the kernel only after it saw
        // their word 0, which the host releases last), then `state` (STATE_WORDS u64 of device
        // memory) and plain values. The kernel writes `answers` (OUT_WORDS mapped words), which
        // the host reads only through volatile or atomic loads until the done word; `grid_sync` holds
        // GRID_SYNC_WORDS u32, zero at the start barrier's words (cleared after a failed
        // launch). The buffers outlive the kernel: `Buffers` waits for the stream when dropped,
        // and the kernel ends by itself (idle timeout) if the host goes away.
        unsafe { lb.launch_cooperative() }?;
        self.counters.launches += 1;
        let done = self.wait_device_solve(token);
        if let Err(e) = done {
            self.abandon_device_solve();
            return Err(e);
        }
        let out = self.read_device_solve(count as usize, t.gauss)?;
        // The blocks are leaving; the next launch (stream-ordered after this one anyway) checks
        // their exit word before it reuses the mapped words. No pipeline buffer is touched any
        // more: the last evaluation's counter was reset before the result.
        self.solve.exiting = Some(token);
        Ok(out)
    }
}
