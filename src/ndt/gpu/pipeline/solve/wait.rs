//! The device solver's set-up, its waits (the result, the kernel's exit) with every way out,
//! and reading the result (see the parent module's docs).

use super::super::launch::stream_idle;
use super::super::GpuDerivativePipeline;
use super::{stop_reason, Buffers, DeviceSolveStats};
use crate::kernels::ndt::derivatives::build_align_device_opts;
use crate::kernels::ndt::derivatives::hessian_index;
use crate::kernels::ndt::derivatives::server::{
    EXIT_WORD, GRID_SYNC_WORDS, RESULT_SEQ_WORD, STAMPS, STAMP_WORD, STATUS_IDLE,
    STATUS_NOT_RESIDENT, STATUS_WORD,
};
use crate::kernels::ndt::derivatives::BLOCK;
use crate::kernels::ndt::solve::assist::{assist_check, ASSIST_CHECK, MAILBOX_CHECK};
use crate::kernels::ndt::solve::profile::{OPT_PROFILE, PROF_STATE_WORDS};
use crate::kernels::ndt::solve::OPT_FAST_ASSIST;
use crate::kernels::ndt::solve::{
    ASSIST_GRADIENT, ASSIST_HESSIAN, ASSIST_WORD, DONE, MAILBOX_WORDS, OUT_ASSISTS,
    OUT_EVALUATIONS, OUT_ITERATIONS, OUT_POSE, OUT_SOLVE_NS, OUT_STOP, OUT_TOTAL_NS, OUT_WORDS,
    STATE_WORDS, TABLE_OPTS,
};
use crate::kernels::KernelId;
use crate::ndt::derivatives::GaussConstants;
use crate::ndt::gpu::mapped::MappedBuffer;
use crate::ndt::gpu::records::{decode_result, VALUES};
use crate::ndt::newton_step::newton_increment;
use crate::ndt::pose::Pose6;
use crate::ndt::result::NdtResult;
use crate::ptx::Target;
use crate::runtime::DeviceBuffer;
use crate::{Error, Result};
use nalgebra::{Matrix6, Vector6};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An [`Error::Kernel`] of the device solver.
fn solve_error(code: u32, detail: String) -> Error {
    Error::Kernel {
        kernel: "ndt_align_device",
        code,
        detail,
    }
}

impl GpuDerivativePipeline {
    /// Loads the kernel and allocates the buffers once; clears the words of a failed launch.
    pub(super) fn prepare_device_solve(&mut self) -> Result<()> {
        if self.solve.kernel.is_none() {
            let f = match self.solve.opts {
                TABLE_OPTS => self.gpu.kernel(KernelId::NdtAlignDevice)?,
                o => self.gpu.load_module(
                    &build_align_device_opts(Target::Sm75, o),
                    "ndt_align_device",
                )?,
            };
            let per_sm = f
                .function()
                .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
                .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
                as usize;
            self.solve.kernel = Some((f, per_sm));
        }
        if self.solve.buffers.is_none() {
            let s = self
                .gpu
                .ctx()
                .new_stream()
                .map_err(Error::driver("cuStreamCreate (NDT device solver)"))?;
            self.solve.buffers = Some(Buffers {
                answers: MappedBuffer::new(&self.gpu, OUT_WORDS, true)?,
                mailbox: MappedBuffer::new(&self.gpu, MAILBOX_WORDS, true)?,
                grid_sync: DeviceBuffer::zeros(&s, GRID_SYNC_WORDS, "NDT device solver sync")?,
                state: {
                    let n = STATE_WORDS + PROF_STATE_WORDS;
                    let mut d = DeviceBuffer::zeros(&s, n, "NDT device solver state")?;
                    // All in use (the kernel's; the profile build's counters are read back).
                    d.set_len(n)?;
                    d
                },
                stream: s,
            });
            self.counters.allocations += 4;
        }
        if let Some(token) = self.solve.exiting.take() {
            if self.wait_device_exit(token).is_err() {
                self.abandon_device_solve();
            }
        }
        if self.solve.dirty {
            let b = self.solve.buffers.as_mut().expect("allocated above");
            b.grid_sync.upload(&b.stream, &[0u32; GRID_SYNC_WORDS])?;
            let mut c = self.counters_dev.slice_mut().slice_mut(0..1);
            b.stream
                .memcpy_htod(&[0u32], &mut c)
                .map_err(Error::driver("zeroing the NDT request counter"))?;
            self.solve.dirty = false;
        }
        Ok(())
    }

    /// After a failed wait: the kernel is stopped by its own timeouts at the latest; once the
    /// stream is idle, the barrier words and the request counter (which the ordinary rounds
    /// share) are cleared. Anything that fails here is left for the next launch (`dirty`).
    pub(super) fn abandon_device_solve(&mut self) {
        self.solve.dirty = true;
        let Some(b) = self.solve.buffers.as_mut() else {
            return;
        };
        if b.stream.synchronize().is_err() {
            return;
        }
        let cleared = b
            .grid_sync
            .upload(&b.stream, &[0u32; GRID_SYNC_WORDS])
            .is_ok()
            && {
                let mut c = self.counters_dev.slice_mut().slice_mut(0..1);
                b.stream.memcpy_htod(&[0u32], &mut c).is_ok()
            }
            && b.stream.synchronize().is_ok();
        self.solve.dirty = !cleared;
    }

    /// Spins until the done word holds `DONE | token`, answering the kernel's eigen-path
    /// requests meanwhile.
    pub(super) fn wait_device_solve(&self, token: u32) -> Result<()> {
        self.spin_device(RESULT_SEQ_WORD, DONE | u64::from(token), true)
    }

    /// Spins until the exit word says every block has left.
    pub(super) fn wait_device_exit(&self, token: u32) -> Result<()> {
        self.spin_device(EXIT_WORD, u64::from(token) | 1 << 32, false)
    }

    /// Answers an eigen-path request (see `kernels::ndt::solve::ASSIST_WORD`): the host
    /// solver's `newton_increment` of the Hessian and gradient the kernel wrote.
    /// With `OPT_FAST_ASSIST` (fenceless, checked payloads: `kernels::ndt::solve::assist`)
    /// returns `false` while the request's payload does not match its check yet (read again).
    fn answer_assist(&self, word: u64) -> Result<bool> {
        let b = self
            .solve
            .buffers
            .as_ref()
            .expect("a launched device solve has buffers");
        let fast = self.solve.opts & OPT_FAST_ASSIST != 0;
        let a = b.answers.as_slice()?.as_ptr();
        // SAFETY: words < OUT_WORDS of the answers (alive with `self`); the kernel wrote them
        // before its system fence and the request word, which the caller acquired (or, fast,
        // they are accepted only when they match the check word).
        let raw = |k: usize| unsafe { std::ptr::read_volatile(a.add(k)) };
        let payload: Vec<u64> = (ASSIST_HESSIAN..ASSIST_WORD).map(raw).collect();
        if fast && assist_check(word, &payload) != raw(ASSIST_CHECK) {
            return Ok(false);
        }
        let f = |k: usize| f64::from_bits(payload[k - ASSIST_HESSIAN]);
        let mut hessian = Matrix6::zeros();
        for i in 0..6 {
            for j in i..6 {
                let v = f(ASSIST_HESSIAN + hessian_index(i, j) - 7);
                hessian[(i, j)] = v;
                hessian[(j, i)] = v;
            }
        }
        let gradient = Vector6::from_fn(|i, _| f(ASSIST_GRADIENT + i));
        let (delta, flags) = match newton_increment(&hessian, &gradient) {
            Some((d, pd)) => (d, 1 | u64::from(pd) << 1),
            None => (Vector6::zeros(), 0),
        };
        let m = b.mailbox.as_slice()?.as_ptr().cast_mut();
        // SAFETY: the mailbox's MAILBOX_WORDS words, alive with `self`; the kernel reads them
        // only after it sees word 0 equal to `word`, which is released after the payload.
        let answer: [u64; 7] =
            std::array::from_fn(|k| if k < 6 { delta[k].to_bits() } else { flags });
        unsafe {
            for (k, v) in answer.iter().enumerate() {
                std::ptr::write_volatile(m.add(1 + k), *v);
            }
            std::ptr::write_volatile(m.add(MAILBOX_CHECK), assist_check(word, &answer));
            AtomicU64::from_ptr(m).store(word, Ordering::Release);
        }
        Ok(true)
    }

    fn spin_device(&self, word: usize, want: u64, assist: bool) -> Result<()> {
        let b = self
            .solve
            .buffers
            .as_ref()
            .expect("a launched device solve has buffers");
        let a = b.answers.as_slice()?.as_ptr().cast_mut();
        // SAFETY: aligned u64 words of the answers (alive with `self`), read atomically (the
        // status is the u32 the kernel stores in the low half; little-endian).
        let (got, status, asked) = unsafe {
            (
                AtomicU64::from_ptr(a.add(word)),
                AtomicU32::from_ptr(a.add(STATUS_WORD).cast::<u32>()),
                AtomicU64::from_ptr(a.add(ASSIST_WORD)),
            )
        };
        let mut answered = 0u64;
        let timeouts = self.server_timeouts();
        // The whole alignment: the answer timeout per evaluation the host would wait, at most.
        let limit = timeouts.answer.saturating_mul(4);
        let start = Instant::now();
        let mut next_check = Duration::from_millis(1);
        let mut spins = 0u32;
        loop {
            if got.load(Ordering::Acquire) == want {
                return Ok(());
            }
            if assist {
                let w = asked.load(Ordering::Acquire);
                if w != answered && w != 0 && self.answer_assist(w)? {
                    answered = w;
                    continue;
                }
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) {
                std::hint::spin_loop();
                continue;
            }
            match status.load(Ordering::Acquire) {
                0 => {}
                STATUS_IDLE => {
                    return Err(solve_error(
                        2,
                        "the device solver's blocks waited longer than the idle timeout".into(),
                    ))
                }
                STATUS_NOT_RESIDENT => {
                    return Err(solve_error(
                        3,
                        "the device solver's grid was not co-resident".into(),
                    ))
                }
                other => return Err(solve_error(other, "unknown device solver status".into())),
            }
            let waited = start.elapsed();
            if waited >= next_check {
                next_check = waited + Duration::from_millis(1);
                if self.solve_stream_idle()? && got.load(Ordering::Acquire) != want {
                    return Err(solve_error(
                        4,
                        "the device solver ended without its result".into(),
                    ));
                }
            }
            if waited > limit {
                return Err(solve_error(
                    5,
                    format!("no device solver result within {limit:?}"),
                ));
            }
        }
    }

    fn solve_stream_idle(&self) -> Result<bool> {
        let stream = self.solve.buffers.as_ref().map(|b| &*b.stream);
        stream_idle(stream, "cuStreamQuery (NDT device solver)")
    }

    /// The result after the done word: `Err(why)` when the kernel handed the alignment back.
    pub(super) fn read_device_solve(
        &mut self,
        source_points: usize,
        gauss: GaussConstants,
    ) -> Result<std::result::Result<NdtResult, String>> {
        let b = self
            .solve
            .buffers
            .as_ref()
            .expect("a launched device solve has buffers");
        let a = b.answers.as_slice()?.as_ptr();
        // SAFETY: words < OUT_WORDS of the answers (alive with `self`); the kernel wrote them
        // before the done word, which the wait acquired, and writes none of them again.
        let word = |k: usize| unsafe { std::ptr::read_volatile(a.add(k)) };
        let stamps: [u64; STAMPS] = std::array::from_fn(|k| word(STAMP_WORD + k));
        let evaluations = word(OUT_EVALUATIONS) as u32 as usize;
        self.solve.stats = Some(DeviceSolveStats {
            evaluations,
            total_ns: word(OUT_TOTAL_NS),
            solve_ns: word(OUT_SOLVE_NS),
            assists: word(OUT_ASSISTS) as u32 as usize,
            stamps,
        });
        self.counters.requests += evaluations as u64;
        self.solve.profile = None;
        if self.solve.opts & OPT_PROFILE != 0 {
            // The kernel wrote the counters before the done word (a copy on its stream waits
            // for the blocks' exit too: profile builds' wall times include it).
            let b = self.solve.buffers.as_ref().expect("launched");
            let all = b.state.to_vec(&b.stream)?;
            self.solve.profile = Some(std::array::from_fn(|k| all[STATE_WORDS + k]));
        }
        let code = word(OUT_STOP) as u32;
        let Some(stop) = stop_reason(code) else {
            return Ok(Err(format!(
                "the device solver handed the alignment back (code {code}) after {evaluations} \
                 evaluations"
            )));
        };
        let rec: [f64; VALUES] = std::array::from_fn(|k| f64::from_bits(word(k)));
        let lin = decode_result(&rec, gauss, source_points)?;
        let pose = Pose6::from_fn(|k, _| f64::from_bits(word(OUT_POSE + k)));
        Ok(Ok(NdtResult::at(
            pose,
            word(OUT_ITERATIONS) as u32 as usize,
            evaluations,
            stop,
            lin,
            source_points,
        )))
    }
}
