//! The host side of the rings at pipeline speed: a batch is staged into a free slot (by the
//! caller's `fill`, e.g. a parallel copy from ordinary memory or parallel reads of a file) while
//! the oldest finished batch is handed to the caller's `sink` (a parallel copy out, or a frame
//! writer), and the device works on the batches in between. Memory stays bounded by the ring.
//!
//! Each step of the loop (run on a pool thread) is one `rayon::join`: one side enqueues the
//! batch staged in the previous step and then waits for and drains the oldest batch, the other
//! stages the next batch; both copy with every core. With `n` slots, up to `n - 2` batches are
//! on the device meanwhile. Where the time goes is kept per phase ([`Phases`]).
//!
//! Measured on the H100 machine (16 cores, 256 MiB of dickens from ordinary memory, 2026-11-25):
//! the staging copies in and out take nearly all of the host's copy bandwidth (fill and sink
//! ~7 ms each of a ~9 ms run, overlapped), so the design keeps them overlapped with each other
//! and with the device, and keeps every serial step (enqueueing, waking threads, the device's
//! latency for the last batch) short; deeper rings or smaller slots measured slower (more
//! per-batch work, less of the ring in the 300 MiB cache), and registering the caller's memory
//! instead of copying it much slower (see [`HostTuning`](super::HostTuning)).
//!
//! Compression (2026-11-26): in one piece the host waited ~5 ms of a ~9 ms run on the batch
//! submitted two steps earlier (its upload, kernel and download one after the other take
//! longer than two steps); with each batch in 2 parts (`ring_parts`, the default
//! `HostTuning::compress_parts`) a batch is ready about one part's kernel and download after
//! its upload and the first part sinks while the second comes down: the wait fell to 1-2 ms.
//! What is left is the host's memory traffic: ~5.5 bytes per input byte (staging copy in, the
//! upload's reads, the eager download's writes of each page's bound, the copy out) at ~32 GB/s
//! is about the ~180 GB/s the 16 cores reach copying both ways at once.
//!
//! Session 8 counted it per byte of input (dickens, 0.767 stored bytes per input byte with the
//! 16-byte alignment): compression reads 1 and writes 1 staging (streaming stores: no read for
//! ownership), the upload reads 1, the eager download writes the bound, 1 (0.80 with
//! `HostTuning::guess_download`, the default since), the copy out reads and writes 0.767: 5.53
//! (5.33) bytes against 1.77 for the pinned ring (upload 1, exact download 0.767).
//! Decompression, per output byte: staging 0.767 + 0.767, upload 0.767, download 1, copy out
//! 1 + 1: 5.30. Run one after the other (`HostTuning::serial_steps`), the sides cost (H100-class
//! host, 256 MiB): compression fill 4.27 ms, sink 3.55 ms; decompression fill 4.52 ms for the
//! 196 MiB of stored bytes, sink 3.05 ms for 256 MiB. The decompression fill is ~1.9x slower per
//! byte than its sink. Most likely because it reads the caller's stored bytes from DRAM while
//! the sink reads a batch the copy engine has just written (Intel hosts put DMA writes into the
//! last-level cache; not measured directly), and because with fixed 256 KiB tasks its 49 tasks
//! a batch took four rounds of 16 threads (balanced tasks since, see
//! `par::set_copy_chunk_bytes`). Side by side, each side's wall time is about the step's (see
//! [`Phases`]), which is why the fill showed 6.5 ms beside a 5.2 ms sink.

use super::register::ExtInput;
use super::register_ahead::Ahead;
use super::ring::{Part, Ring, Slot, State, Submit, D2H};
use super::ring_parts::part_plan;
use super::ring_steps::{add_step, RingSteps};
use super::tuning::Phases;
pub use crate::lz4::par::{par_copy, par_extend};
use crate::lz4::PageEntry;
use crate::{Error, Result};

/// One compressed batch as the ring hands it to a sink, in input order.
pub struct CompressedBatch<'a> {
    /// Where each page lies in `packed` (offsets are 16-byte aligned; gaps hold padding).
    pub entries: &'a [PageEntry],
    /// The stored pages as the kernel packed them.
    pub packed: &'a [u8],
    /// Input bytes of the batch.
    pub input_bytes: usize,
    /// The batch's input (cached pinned memory: the host may read it, e.g. to hash it).
    pub input: &'a [u8],
}

/// Part `p` of a drained slot's batch, whose entries (from the part's packed start) and packed
/// bytes used the slot holds.
fn view<'a>(slot: &'a Slot, p: &Part, pb: usize) -> CompressedBatch<'a> {
    let (at, bytes) = (p.byte_at(pb), p.input_bytes(slot.input_bytes, pb));
    CompressedBatch {
        entries: &slot.entries,
        packed: &slot.h_out.slice()[at..at + slot.used],
        input_bytes: bytes,
        input: match &slot.ext {
            Some(ext) => &ext.bytes()[at..at + bytes],
            None => &slot.h_in.slice()[at..at + bytes],
        },
    }
}

impl Ring {
    /// Compresses everything `fill` stages and hands each batch to `sink` in order. `fill` gets
    /// a slot's input buffer (one batch) and returns the bytes it wrote (any number up to the
    /// buffer; 0: nothing more). On an error the ring is reset.
    /// The host time of each phase lands in `self.phases`.
    pub(crate) fn compress_stream<F, S>(&mut self, mut fill: F, sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<usize> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        self.compress_stream_ext(|buf| fill(buf).map(|n| (n, None)), sink)
    }

    /// Like `compress_stream`, but `fill` may instead hand over the batch in the caller's
    /// registered memory (staging only its head and tail into the buffer; see `ExtInput`).
    pub(crate) fn compress_stream_ext<F, S>(&mut self, fill: F, sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<(usize, Option<ExtInput>)> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        self.eager = self.tuning.eager_download;
        self.phases = Phases::default();
        let t = Phases::clock();
        // The loop runs on a pool thread: its joins then fork without waking the caller's
        // thread in between, and each step's submit runs beside the next fill.
        let r = rayon::scope(|_| self.compress_stream_inner(fill, sink));
        Phases::add(&mut self.phases.total_s, t);
        if r.is_err() {
            self.reset();
        }
        self.eager = false;
        r
    }

    /// Waits for slot `o` and hands it to `sink`, timing both: part by part when the batch
    /// went in parts (each part's info and packed download, then its sink).
    fn drain_one<S>(
        slot: &mut Slot,
        pb: usize,
        sink: &mut S,
        ph: &mut Phases,
        ahead: Option<&Ahead>,
        fetch: &mut Refetch<'_>,
    ) -> Result<()>
    where
        S: FnMut(&CompressedBatch<'_>) -> Result<()>,
    {
        if slot.parts > 1 {
            // Only a batch staged in `h_in` goes in parts: there is no registration to undo.
            return Self::drain_parts(slot, pb, sink, ph, fetch);
        }
        let t = Phases::clock();
        slot.finish(pb)?;
        Phases::add(&mut ph.wait_s, t);
        let t = Phases::clock();
        let whole = Part {
            first: 0,
            pages: slot.pages(pb),
            info_at: 0,
        };
        let r = sink(&view(slot, &whole, pb));
        Phases::add(&mut ph.sink_s, t);
        if let Some(ext) = slot.ext.take() {
            // The upload that read it completed before the kernel, before `finish` returned.
            let t = Phases::clock();
            match ahead {
                Some(a) => a.give_back(ext),
                None => ext.release(),
            }
            Phases::add(&mut ph.release_s, t);
        }
        r
    }

    /// Drains a slot submitted in parts with eager downloads: waits for each part's info and
    /// packed bytes and hands the part to `sink`, in order.
    fn drain_parts<S>(
        slot: &mut Slot,
        pb: usize,
        sink: &mut S,
        ph: &mut Phases,
        fetch: &mut Refetch<'_>,
    ) -> Result<()>
    where
        S: FnMut(&CompressedBatch<'_>) -> Result<()>,
    {
        for (j, part) in part_plan(slot.pages(pb), slot.parts).enumerate() {
            let t = Phases::clock();
            slot.ev[j]
                .info
                .synchronize()
                .map_err(Error::driver("cuEventSynchronize (lz4 info)"))?;
            slot.read_part_info(&part, pb)?;
            let (at, input) = (part.byte_at(pb), part.input_bytes(slot.input_bytes, pb));
            fetch.ratio = Some(slot.used as f64 / input.max(1) as f64);
            if slot.used > slot.fetched[j] {
                // The guessed download fell short: fetch the rest behind it (the kernel is
                // done: its info has arrived) and wait for that instead.
                let (from, to) = (at + slot.fetched[j], at + slot.used);
                fetch
                    .d2h
                    .memcpy_dtoh(
                        &slot.d_packed.slice(from..to),
                        &mut slot.h_out.slice_mut()[from..to],
                    )
                    .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 packed, rest)"))?;
                slot.ev[j]
                    .d2h
                    .record(fetch.d2h)
                    .map_err(Error::driver("cuEventRecord"))?;
                slot.fetched[j] = slot.used;
                ph.refetched += 1;
            }
            slot.ev[j]
                .d2h
                .synchronize()
                .map_err(Error::driver("cuEventSynchronize (lz4 download)"))?;
            Phases::add(&mut ph.wait_s, t);
            let t = Phases::clock();
            let r = sink(&view(slot, &part, pb));
            Phases::add(&mut ph.sink_s, t);
            r?;
        }
        slot.state = State::Ready;
        Ok(())
    }

    fn compress_stream_inner<F, S>(&mut self, mut fill: F, mut sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<(usize, Option<ExtInput>)> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        let batch = self.batch_bytes();
        let pb = self.page_bytes;
        let eager = self.eager;
        let (slots, parts) = (self.slots.len(), self.tuning.compress_parts);
        let (guessing, serial) = (self.tuning.guess_download, self.tuning.serial_steps);
        let early = self.tuning.submit_early;
        // Batches are the bytes staged into a slot.
        let mut steps = RingSteps::<usize>::new(self.slots.len());
        let mut ph = Phases::default();
        // Packed bytes per input byte of the last part drained (for guessed downloads).
        let mut ratio: Option<f64> = None;
        while let Some(step) = steps.step() {
            if let Some(o) = step.drain {
                if !eager {
                    // The exact-size download needs the info words and the D2H stream.
                    let t = Phases::clock();
                    self.start_download(o, true)?;
                    Phases::add(&mut ph.wait_s, t);
                }
            }
            let ahead = self.ahead.as_deref();
            let submit = Submit {
                streams: &self.streams,
                kernels: &self.kernels,
                page_bytes: pb,
                eager,
                // The first batches fetch their whole bound (no ratio seen yet).
                guess: ratio.filter(|_| guessing),
            };
            let mut fetch = Refetch {
                d2h: self.streams.get(D2H),
                ratio,
            };
            let (s_slot, o_slot, f_slot) = pick3(
                &mut self.slots,
                step.submit.map(|p| p.0),
                step.drain,
                step.fill,
            );
            // One side submits the pending batch and drains the oldest; the other stages the
            // next batch. Both use every core for their copies.
            let (mut side, mut fill_s, mut early_submit_s) = (Phases::default(), 0.0, 0.0);
            let submit = &submit;
            let submit_drain = || -> Result<()> {
                // (A batch the fill side submitted itself is Submitted already.)
                if let (Some((i, bytes)), Some(slot)) = (step.submit, s_slot) {
                    if slot.state == State::Free {
                        let t = Phases::clock();
                        let r = submit.submit(slot, (i, slots), bytes, parts);
                        Phases::add(&mut side.submit_s, t);
                        r?;
                    }
                }
                match o_slot {
                    Some(slot) => {
                        Self::drain_one(slot, pb, &mut sink, &mut side, ahead, &mut fetch)
                    }
                    None => Ok(()),
                }
            };
            let (a, b) = both(
                serial,
                submit_drain,
                || -> Result<(usize, Option<ExtInput>)> {
                    let (Some(slot), Some(i)) = (f_slot, step.fill) else {
                        return Ok((0, None));
                    };
                    let t = Phases::clock();
                    let (filled, ext) = fill(&mut slot.h_in.slice_mut()[..batch])?;
                    Phases::add(&mut fill_s, t);
                    if !early || filled == 0 {
                        return Ok((filled, ext));
                    }
                    // Submitted right away: the upload starts while the other side still
                    // drains, and the enqueueing leaves that side's path.
                    let t = Phases::clock();
                    slot.ext = ext;
                    let r = submit.submit(slot, (i, slots), filled.min(batch), parts);
                    Phases::add(&mut early_submit_s, t);
                    r.map(|()| (filled, None))
                },
            );
            add_step(&mut ph, &side, fill_s);
            ph.submit_s += early_submit_s;
            ratio = fetch.ratio;
            // The submitted batch is in flight (or failed with the ring about to be reset).
            steps.ran(&step);
            if let Some(o) = step.drain {
                self.slots[o].state = State::Free;
            }
            a?;
            let (filled, ext) = b?;
            if let Some(next) = step.fill {
                if filled == 0 {
                    steps.staged(None);
                } else {
                    let filled = filled.min(batch);
                    if !early {
                        self.slots[next].ext = ext;
                    }
                    steps.staged(Some(filled));
                    ph.batches += 1;
                    ph.bytes += filled;
                }
            }
            if !eager {
                self.poll(steps.in_flight())?;
            }
        }
        self.phases = ph;
        Ok(())
    }
}

/// What the drain of a batch in parts with guessed downloads needs: the download stream (to
/// fetch what a guess missed) and the ratio of packed to input bytes it last saw.
pub(crate) struct Refetch<'a> {
    pub(crate) d2h: &'a std::sync::Arc<cudarc::driver::CudaStream>,
    pub(crate) ratio: Option<f64>,
}

/// Runs `a` (submit and drain) and `b` (the fill) side by side on the pool, or with `serial`
/// (`HostTuning::serial_steps`) `b` then `a`.
pub(crate) fn both<A, B, RA, RB>(serial: bool, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if serial {
        let rb = b();
        (a(), rb)
    } else {
        rayon::join(a, b)
    }
}

/// Up to three distinct elements of a slice, each mutable (`None` where the index is `None`).
pub(crate) fn pick3<T>(
    v: &mut [T],
    a: Option<usize>,
    b: Option<usize>,
    c: Option<usize>,
) -> (Option<&mut T>, Option<&mut T>, Option<&mut T>) {
    debug_assert!(
        [(a, b), (a, c), (b, c)]
            .iter()
            .all(|(x, y)| x.is_none() || x != y),
        "pick3 needs distinct indices"
    );
    let (mut ra, mut rb, mut rc) = (None, None, None);
    for (i, x) in v.iter_mut().enumerate() {
        if Some(i) == a {
            ra = Some(x);
        } else if Some(i) == b {
            rb = Some(x);
        } else if Some(i) == c {
            rc = Some(x);
        }
    }
    (ra, rb, rc)
}
