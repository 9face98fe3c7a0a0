//! Host-side design knobs of the rings (benches compare them in one run) and the per-phase host
//! time of the last run through a ring, so a slow path says where its time went.

use std::fmt;
use std::time::Instant;

/// How the host side of the rings moves bytes. The defaults are the measured best on an H100
/// with 16 cores (benches/lz4_variants.rs, `PTXFLOW_LZ4_VARIANTS`; 2026-11-25/26): eager downloads
/// beat exact ones by 5-15% (no host round trip per batch), and registering the caller's memory
/// lost to staging copies by 3-8x (register + unregister ran at 12-16 GB/s whatever the number
/// of threads, against 55-65 GB/s for parallel copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostTuning {
    /// Compression from memory or files: download each batch's whole packed region right after
    /// its kernel (no host round trip) instead of exactly the bytes used once the per-page info
    /// has arrived (fewer bytes over PCIe and through host memory).
    pub eager_download: bool,
    /// The codec from memory: register the caller's input (compression) or output
    /// (decompression) with the driver, a batch at a time in this many pieces on several
    /// threads, so the copy engines read or write it in place; 0 (the default) stages it through
    /// the pinned slots with parallel copies.
    pub register_pieces: usize,
    /// The codec from memory: a thread of its own registers the caller's input (compression)
    /// or output (decompression) this many batches ahead of the staging copies, and the copy
    /// engine reads or writes the batches registered in time in place (see `register_ahead`);
    /// 0 (the default): off. Takes precedence over `register_pieces`.
    pub register_ahead: usize,
    /// Threads that register ahead (with `register_ahead`; at least 1).
    pub register_threads: usize,
    /// Compression through the ring with eager downloads: each batch goes to the device in
    /// this many parts (1 to 4), each uploaded, compressed and downloaded on its own and drained
    /// by the host in order, so a batch's download starts before its last part is compressed
    /// and the host sinks its first part while the rest comes down (see `ring_parts`); 1: the
    /// batch in one piece. Default 2: on the H100 machine (256 MiB of dickens from ordinary
    /// memory, ring of 4 x 16 MiB, 2026-11-26) the host's wait on the device fell from ~4.5 ms
    /// to 1-2 ms of an ~8 ms run and compression from memory ran at 33.0-34.0 GB/s (65-68% of
    /// the pinned ring) against 30.7-31.3 GB/s (61-62%) in one piece, 9 runs each alternating
    /// in one process (criterion's SUMMARY: 33.3 GB/s = 66%); 3 parts gave 32.6-33.0 GB/s,
    /// 4 parts 24.4-29.9 in earlier runs (more enqueueing and smaller copies out).
    pub compress_parts: usize,
    /// Compression in parts (`compress_parts` > 1) with eager downloads: each part's eager
    /// download fetches a guess of its packed bytes (the ratio of the parts drained so far, plus
    /// a margin) instead of the part's whole bound, and a part whose packed bytes outgrow the
    /// guess fetches the rest when it is drained (counted in [`Phases::refetched`]). Fewer bytes
    /// over PCIe and through host memory (dickens: ~0.77 of the bound). On by default: on two
    /// H200 machines (2026-11-26, 256 MiB of dickens from ordinary memory, 31 alternating
    /// rounds per pair) compression took 0.982x and 0.955x the time of whole-bound downloads
    /// (faster in 20 and 26 of 31 rounds).
    pub guess_download: bool,
    /// Diagnostic: each step of a ring's loop stages the next batch and then submits and drains,
    /// one after the other (each with every core) instead of side by side, so that [`Phases`]
    /// gives each side's own cost (side by side, the fill and the sink share the pool, and each
    /// side's wall time is about the whole step's). Slower; for benches.
    pub serial_steps: bool,
    /// The rings' loops: the side that stages a batch enqueues its upload and kernel as soon
    /// as it is staged, instead of the other side at the start of the next step, so the upload
    /// starts while the oldest batch still drains and the draining side, which waits on the
    /// device and copies out, no longer enqueues. Off by default: measured slower (H200
    /// machine with slow host copies, 2026-11-26, 31 alternating rounds: compression 1.057x,
    /// decompression 1.137x the time of submitting at the next step).
    pub submit_early: bool,
    /// Decompression from memory: a batch's entries are checked and written in parallel
    /// tasks, beside the stored bytes' copy (one thread walks the 4096 entries of a batch
    /// twice otherwise). Off by default: measured slower (same run: decompression 1.050x the
    /// time of the one-thread walk, faster in 7 of 31 rounds).
    pub parallel_stage: bool,
}

impl Default for HostTuning {
    fn default() -> Self {
        HostTuning {
            eager_download: true,
            register_pieces: 0,
            register_ahead: 0,
            register_threads: 1,
            compress_parts: 2,
            guess_download: true,
            serial_steps: false,
            submit_early: false,
            parallel_stage: false,
        }
    }
}

/// Host wall seconds of one run through a ring, by phase. Staging and draining run at the same
/// time (each with every core), so the phases add up to more than `total_s` when they overlap.
/// Side by side, `fill_s` and `sink_s` are wall times of two sides that share one thread pool,
/// not their costs: whichever side ends first lends its threads to the other, so both last
/// about the whole step (a decompression's fill of the stored bytes, ~0.77 of the output for
/// dickens, showed 6.5 ms beside a sink of all 256 MiB at 5.2 ms because the sink starts only
/// after the submit and the wait of its step). [`HostTuning::serial_steps`] runs the sides one
/// after the other, so that the phases give each side's own cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    /// Batches through the ring.
    pub batches: usize,
    /// Input bytes.
    pub bytes: usize,
    /// The whole run.
    pub total_s: f64,
    /// Staging batches into pinned slots (copies from memory, reads, parsing).
    pub fill_s: f64,
    /// Blocked on the device for the oldest batch.
    pub wait_s: f64,
    /// Handing finished batches on (copies out of pinned slots, frame layout).
    pub sink_s: f64,
    /// Enqueuing copies and kernels.
    pub submit_s: f64,
    /// Unregistering the caller's memory after its uploads.
    pub release_s: f64,
    /// Parts whose packed bytes outgrew the guessed download (`HostTuning::guess_download`)
    /// and were completed by a second download.
    pub refetched: usize,
    /// Batches the device read or wrote in the caller's registered memory (no staging copy).
    pub registered: usize,
    /// Registrations made ahead that the staging copies overtook (undone unused).
    pub overtaken: usize,
}

impl Phases {
    pub(crate) fn clock() -> Instant {
        Instant::now()
    }

    /// Adds the seconds since `t` to `slot`.
    pub(crate) fn add(slot: &mut f64, t: Instant) {
        *slot += t.elapsed().as_secs_f64();
    }
}

impl fmt::Display for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |s: f64| s * 1e3;
        write!(
            f,
            "{} batches, {:.1} MiB in {:.2} ms ({:.1} GB/s): fill {:.2} ms, wait {:.2} ms, sink {:.2} ms, submit {:.2} ms, release {:.2} ms",
            self.batches,
            self.bytes as f64 / (1 << 20) as f64,
            ms(self.total_s),
            self.bytes as f64 / self.total_s.max(1e-12) / 1e9,
            ms(self.fill_s),
            ms(self.wait_s),
            ms(self.sink_s),
            ms(self.submit_s),
            ms(self.release_s),
        )?;
        if self.refetched > 0 {
            write!(f, ", refetched {}", self.refetched)?;
        }
        if self.registered + self.overtaken > 0 {
            write!(
                f,
                ", registered ahead {} (overtaken {})",
                self.registered, self.overtaken
            )?;
        }
        Ok(())
    }
}

impl super::GpuPageCodec {
    /// Sets the host-side knobs (they apply from the next call).
    pub fn set_host_tuning(&mut self, tuning: HostTuning) {
        self.tuning = tuning;
    }

    /// The host-side knobs in use.
    pub fn host_tuning(&self) -> HostTuning {
        self.tuning
    }

    /// Host time by phase of the last compression through the ring (`None` before the first).
    pub fn compress_phases(&self) -> Option<Phases> {
        self.ring.as_ref().map(|r| r.phases)
    }

    /// Host time by phase of the last decompression through the ring (`None` before the first).
    pub fn decompress_phases(&self) -> Option<Phases> {
        self.decode.as_ref().map(|r| r.phases)
    }
}
