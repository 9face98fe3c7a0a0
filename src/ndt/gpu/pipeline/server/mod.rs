//! The evaluation server: one alignment's evaluations without a launch or a driver
//! synchronization each (the default for single alignments on devices that map host memory;
//! `PTXFLOW_NDT_SERVER=0` when the pipeline is created, or
//! [`GpuDerivativePipeline::set_server`], turns it off).
//!
//! [`crate::ndt::Linearize::start_alignment`] (called by the solver for a single alignment)
//! launches `ndt_derivatives_server` once, cooperatively, with at most one block per point
//! range the ordinary one-request round would use. Each single-request round then writes the
//! request record and a new sequence number into a mapped host mailbox (release store) and
//! spins on the sequence number the kernel releases into mapped host memory after the sums;
//! [`crate::ndt::Linearize::finish_alignment`] (or any other use of the pipeline, or dropping
//! it) sends the stop command and synchronizes the server's stream once. The kernel runs on a
//! stream of its own, so work that other pipelines queue on the device's stream meanwhile runs
//! beside it instead of waiting for it to end. The kernel runs the ordinary
//! kernel's steps on the same data, so the sums, and with them the solver's poses and stop
//! reasons, are those of the launch-per-round path.
//!
//! Never a hang: the host gives up after [`ServerTimeouts::answer`] (an [`Error::Kernel`]) and
//! notices at once a kernel that ended on its own (its status word: idle too long, or the grid
//! was not co-resident) or that faulted (the stream is idle, checked once a millisecond while
//! spinning); the kernel ends by itself when no request comes for [`ServerTimeouts::idle`]. After
//! any such error the server is stopped and its counters cleared, and the next round runs the
//! ordinary way (or a new server starts with the next alignment).

mod wait;

use super::launch::{idle_ns, PersistentHead};
use super::GpuDerivativePipeline;
use crate::kernels::ndt::derivatives::server::{
    CMD_EVALUATE, GRID_SYNC_WORDS, REQUEST_WORD, RESULT_SEQ_WORD, RESULT_WORDS, STAMPS, STAMP_WORD,
};
use crate::kernels::ndt::derivatives::{Variant, BLOCK, SPLIT_POINTS_PER_BLOCK};
use crate::ndt::gpu::mapped::{device_can_map, MappedBuffer};
use crate::ndt::gpu::records::{decode_result, pack_request, REQUEST_WORDS, VALUES};
use crate::ndt::gpu::variants::{derivative_kernel, env_switch, variant_from_env};
use crate::ndt::linearize::{Linearization, LinearizeRequest};
use crate::runtime::{DeviceBuffer, LoadedKernel};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, DevicePtr, LaunchConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long each side waits for the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerTimeouts {
    /// The host's wait for one answer (default 10 s, `PTXFLOW_NDT_SERVER_TIMEOUT_MS`).
    pub answer: Duration,
    /// The kernel's wait for the next request before it ends by itself (default 2 s,
    /// `PTXFLOW_NDT_SERVER_IDLE_MS`).
    pub idle: Duration,
}

impl ServerTimeouts {
    /// The defaults, or the environment's values in milliseconds.
    pub fn from_env() -> ServerTimeouts {
        let ms = |name: &str, default: u64| {
            let v = std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
            Duration::from_millis(v.unwrap_or(default))
        };
        ServerTimeouts {
            answer: ms("PTXFLOW_NDT_SERVER_TIMEOUT_MS", 10_000),
            idle: ms("PTXFLOW_NDT_SERVER_IDLE_MS", 2_000),
        }
    }
}

/// Whether single alignments use the server unless `PTXFLOW_NDT_SERVER` says otherwise: on
/// since session 8 (criterion `gpu/ndt/align_{launch,server}_no_upload/velodyne` alternating in
/// one run: H200 209-227 us launching per round, 187-188 us served; H100 218-224 us against
/// 202-203 us; results equal bit for bit, compute-sanitizer memcheck and racecheck clean).
pub const SERVER_DEFAULT: bool = true;

/// The server's state inside the pipeline.
pub(in crate::ndt::gpu) struct ServerState {
    enabled: bool,
    timeouts: ServerTimeouts,
    /// Kernels loaded so far, for the hash (0) and the dense table (1), with their variant and
    /// how many blocks of each fit an SM.
    kernels: [Option<(Variant, LoadedKernel, usize)>; 2],
    /// Mailbox (host writes), answers (device writes), start-barrier words (device).
    buffers: Option<Buffers>,
    /// The last sequence number written to the mailbox.
    seq: u32,
    running: bool,
    /// `first_seq` of the running (or last) launch: its exit token is `token | 1 << 32`.
    token: u32,
    /// The last launch was stopped without a driver synchronization (its exit word seen).
    needs_sync: bool,
    /// A session ended abnormally: the request counter and barrier words need zeroing.
    dirty: bool,
}

struct Buffers {
    /// The server kernel's own stream: other work on the device's stream (another pipeline's
    /// rounds on the same `Gpu`, say) never queues behind the persistent kernel.
    stream: Arc<CudaStream>,
    mailbox: MappedBuffer<u64>,
    answers: MappedBuffer<u64>,
    grid_sync: DeviceBuffer<u32>,
}

impl ServerState {
    /// On unless `PTXFLOW_NDT_SERVER=0` (see [`SERVER_DEFAULT`]).
    pub(in crate::ndt::gpu) fn from_env() -> ServerState {
        ServerState {
            enabled: env_switch("PTXFLOW_NDT_SERVER", SERVER_DEFAULT),
            timeouts: ServerTimeouts::from_env(),
            kernels: [None, None],
            buffers: None,
            seq: 0,
            running: false,
            token: 0,
            needs_sync: false,
            dirty: false,
        }
    }
}

impl GpuDerivativePipeline {
    /// Serves single alignments with the persistent kernel (see the module docs of
    /// `pipeline/server.rs`); `false` stops a running server.
    ///
    /// Errors: [`Error::NoDevice`] when turning it on for a device that cannot map host memory;
    /// errors of stopping a running server.
    pub fn set_server(&mut self, on: bool) -> Result<()> {
        if on && !device_can_map(&self.gpu) {
            return Err(Error::NoDevice {
                reason: "the NDT evaluation server needs mapped host memory".into(),
            });
        }
        if !on {
            self.stop_server()?;
        }
        self.server.enabled = on;
        Ok(())
    }

    /// Whether single alignments use the evaluation server.
    pub fn server_enabled(&self) -> bool {
        self.server.enabled
    }

    /// Sets both timeouts (see [`ServerTimeouts`]); takes effect with the next server launch.
    pub fn set_server_timeouts(&mut self, t: ServerTimeouts) {
        self.server.timeouts = t;
    }

    /// The timeouts in use (see [`ServerTimeouts`]; the device solver uses them too).
    pub fn server_timeouts(&self) -> ServerTimeouts {
        self.server.timeouts
    }

    /// Whether a server kernel is running now (between `start_alignment` and the stop).
    pub fn server_running(&self) -> bool {
        self.server.running
    }

    /// The server kernel's `%globaltimer` stamps (ns) of the last answered request: block 0 saw
    /// it, had its terms, had done its points; the last block began the final reduction, had
    /// fenced the sums; block 0 issued the poll that saw it; the last block saw it (see
    /// `kernels::ndt::derivatives::server::STAMP_WORD`). `None` before the first server launch.
    /// For phase measurements only.
    pub fn server_stamps(&self) -> Option<[u64; STAMPS]> {
        let b = self.server.buffers.as_ref()?;
        let a = b.answers.as_slice().ok()?.as_ptr();
        // SAFETY: words STAMP_WORD.. of the answers (alive with `self`); read volatile because
        // a running kernel may be writing them (a torn stamp only spoils a measurement).
        Some(std::array::from_fn(|k| unsafe {
            std::ptr::read_volatile(a.add(STAMP_WORD + k))
        }))
    }

    /// Launches the server for the uploaded target, when enabled and not running.
    pub(super) fn start_server(&mut self) -> Result<()> {
        if !self.server.enabled || self.server.running || self.transfer != super::Transfer::Mapped {
            return Ok(());
        }
        let t = *self
            .target
            .as_ref()
            .ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        if self.server.buffers.is_none() {
            let s = self
                .gpu
                .ctx()
                .new_stream()
                .map_err(Error::driver("cuStreamCreate (NDT server)"))?;
            self.server.buffers = Some(Buffers {
                mailbox: MappedBuffer::new(&self.gpu, 2 + REQUEST_WORDS, true)?,
                answers: MappedBuffer::new(&self.gpu, RESULT_WORDS, true)?,
                grid_sync: DeviceBuffer::zeros(
                    &s,
                    GRID_SYNC_WORDS,
                    "NDT server barrier and relay",
                )?,
                stream: s,
            });
            self.counters.allocations += 3;
        }
        let s = self
            .server
            .buffers
            .as_ref()
            .expect("allocated above")
            .stream
            .clone();
        // No synchronization with the device's stream: the device buffers' event tracking
        // orders the launch after the uploads and rounds there (the dense table, passed as an
        // address, was synchronized when uploaded).
        let dense = self.cells.active();
        let k = usize::from(dense.is_some());
        let v = Variant {
            server: true,
            ..variant_from_env(dense.is_some(), true)
        };
        if self.server.kernels[k]
            .as_ref()
            .is_none_or(|(loaded, _, _)| *loaded != v)
        {
            let f = derivative_kernel(&self.gpu, v)?;
            let per_sm = f
                .function()
                .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
                .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
                as usize;
            self.server.kernels[k] = Some((v, f, per_sm));
        }
        let per_block = if v.split_point {
            SPLIT_POINTS_PER_BLOCK
        } else {
            BLOCK
        } as usize;
        if self.server.dirty {
            let b = self.server.buffers.as_mut().expect("allocated above");
            b.grid_sync.upload(&s, &[0u32; 4])?;
            let mut c = self.counters_dev.slice_mut().slice_mut(0..1);
            s.memcpy_htod(&[0u32], &mut c)
                .map_err(Error::driver("zeroing the NDT request counter"))?;
            self.server.dirty = false;
        }
        let (_, func, per_sm) = self.server.kernels[k].as_ref().expect("loaded above");
        let per_sm = *per_sm;
        // The ordinary single-request round's grid (so the partial sums, and with them the
        // results, are the same bit for bit), within what is co-resident (the cooperative
        // launch checks).
        let sms = self.gpu.facts().sm_count as usize;
        let points = self.sources.iter().map(|s| s.1 as usize).max().unwrap_or(0);
        let blocks = points
            .div_ceil(per_block)
            .min(sms * self.blocks_per_sm)
            .min(self.partials.capacity() / crate::kernels::ndt::derivatives::SLOT_VALUES)
            .min(sms * per_sm)
            .max(1);
        let seq = self.server.seq;
        let b = self.server.buffers.as_mut().expect("allocated above");
        {
            let m = b.mailbox.as_mut_slice()?;
            m.fill(0);
            m[0] = u64::from(seq) | u64::from(CMD_EVALUATE) << 32;
            let a = b.answers.as_mut_slice()?;
            a.fill(0);
            a[RESULT_SEQ_WORD] = u64::from(seq);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        let mailbox = b
            .mailbox
            .device_ptr()
            .expect("a mapped buffer has a device address");
        let answers = b
            .answers
            .device_ptr()
            .expect("a mapped buffer has a device address");
        let grid_sync = b.grid_sync.slice().device_ptr(&s).0;
        let idle_ns = idle_ns(&self.server.timeouts);
        let head = PersistentHead::new(t, self.search, answers);
        let zero_f = 0.0f64;
        let zero_u = 0u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = func.launch(&s, cfg);
        head.push(&mut lb, self);
        for _ in 0..9 {
            lb.arg(&zero_f);
        }
        lb.arg(&zero_u).arg(&zero_u);
        if let Some((_, _, cells)) = &dense {
            cells.push(&mut lb);
        }
        lb.arg(&mailbox).arg(&grid_sync).arg(&idle_ns).arg(&seq);
        // SAFETY: the arguments are the ordinary round's (see `round.rs`: points, voxels, hash
        // and dense table uploaded and consistent) for a grid of `blocks` ≤ the partial slots
        // and one request row (counter 0, zero between rounds); the kernel reads requests only
        // from `mailbox` (2 + REQUEST_WORDS mapped words) after an acquire of its word 0, whose
        // record the host writes before releasing a new seq, with `first + count` within the
        // uploaded points (`serve_one` packs it from `self.sources`); it writes the sums, the
        // seq and the status into `answers` (RESULT_WORDS mapped words), which the host only
        // reads through atomic or volatile loads while the kernel runs; `grid_sync` holds 4
        // zeroed u32. Every buffer outlives the kernel: `stop_server` (called before any other
        // use of the pipeline and from `Drop`) synchronizes the stream, and the kernel ends by
        // itself after `idle_ns` without requests. The cooperative launch guarantees the grid is
        // co-resident (the start barrier's status reports it if not).
        unsafe { lb.launch_cooperative() }?;
        self.counters.launches += 1;
        self.server.running = true;
        self.server.token = seq;
        Ok(())
    }

    /// After a failed start: nothing runs, and the next start clears the counters.
    pub(super) fn server_start_failed(&mut self) {
        self.server.running = false;
        self.server.dirty = true;
    }

    /// One request through the running server.
    pub(super) fn serve_one(&mut self, r: &LinearizeRequest) -> Result<Linearization> {
        let t = *self
            .target
            .as_ref()
            .ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        let &(start, count) = self.sources.get(r.source).ok_or_else(|| {
            Error::input(format!(
                "source index {} out of range ({} sources uploaded)",
                r.source,
                self.sources.len()
            ))
        })?;
        let words = pack_request(&r.pose, start, count);
        let seq = self.server.seq.wrapping_add(1);
        let b = self
            .server
            .buffers
            .as_mut()
            .expect("a running server has buffers");
        let m = b.mailbox.as_mut_slice()?.as_mut_ptr();
        // SAFETY: `m` points at the mailbox's 2 + REQUEST_WORDS words, alive while `self` is;
        // the kernel only reads them, and only the record after acquiring word 0, which is
        // released after the record below (AtomicU64 view of an aligned u64 of that memory).
        unsafe {
            for (k, w) in words.iter().enumerate() {
                std::ptr::write_volatile(m.add(REQUEST_WORD + k), *w);
            }
            AtomicU64::from_ptr(m).store(
                u64::from(seq) | u64::from(CMD_EVALUATE) << 32,
                Ordering::Release,
            );
        }
        self.server.seq = seq;
        self.counters.requests += 1;
        self.counters.bytes_up += (8 * REQUEST_WORDS) as u64;
        self.counters.bytes_down += (8 * (VALUES + 1)) as u64;
        if let Err(e) = self.wait_answer(seq) {
            self.server.dirty = true;
            // The kernel may still finish this round; the stop lets it end cleanly.
            let _ = self.stop_server();
            return Err(e);
        }
        let b = self
            .server
            .buffers
            .as_ref()
            .expect("a running server has buffers");
        let a = b.answers.as_slice()?.as_ptr();
        let mut rec = [0.0f64; VALUES];
        for (k, v) in rec.iter_mut().enumerate() {
            // SAFETY: word k < VALUES of the answers (alive with `self`); the kernel wrote it
            // before releasing `seq`, which `wait_answer` acquired, and writes it again only
            // after the next request.
            *v = f64::from_bits(unsafe { std::ptr::read_volatile(a.add(k)) });
        }
        decode_result(&rec, t.gauss, count as usize)
    }
}

impl Drop for GpuDerivativePipeline {
    /// Stops a running server before the buffers it uses are freed.
    fn drop(&mut self) {
        let _ = self.stop_server();
    }
}
