//! The host side of the rings at pipeline speed: a batch is staged into a free slot (by the
//! caller's `fill`, e.g. a parallel copy from ordinary memory or parallel reads of a file) while
//! the oldest finished batch is handed to the caller's `sink` (a parallel copy out, or a frame
//! writer), and the device works on the batches in between. Memory stays bounded by the ring.
//!
//! With `n` slots, `n - 1` batches are on the device while the host fills one and drains one,
//! both with every core (`rayon::join` of two parallel copies).

use super::register::ExtInput;
use super::ring::{Ring, Slot};
use super::tuning::Phases;
pub use crate::lz4::par::{par_copy, par_extend};
use crate::lz4::PageEntry;
use crate::Result;
use std::collections::VecDeque;

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

/// Two distinct elements of a slice, both mutable.
pub(crate) fn two_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two_mut needs distinct indices");
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

fn view(slot: &Slot) -> CompressedBatch<'_> {
    CompressedBatch {
        entries: &slot.entries,
        packed: slot.packed(),
        input_bytes: slot.input_bytes,
        input: match &slot.ext {
            Some(ext) => ext.bytes(),
            None => &slot.h_in.slice()[..slot.input_bytes],
        },
    }
}

impl Ring {
    /// Compresses everything `fill` stages and hands each batch to `sink` in order. `fill` gets
    /// a slot's input buffer (one batch) and returns the bytes it wrote: the whole buffer, or
    /// less only at the end of the input (0: nothing more). On an error the ring is reset.
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
        let r = self.compress_stream_inner(fill, sink);
        Phases::add(&mut self.phases.total_s, t);
        if r.is_err() {
            self.reset();
        }
        self.eager = false;
        r
    }

    /// Waits for slot `o` and hands it to `sink`, timing both.
    fn drain_one<S>(slot: &mut Slot, pb: usize, sink: &mut S, ph: &mut Phases) -> Result<()>
    where
        S: FnMut(&CompressedBatch<'_>) -> Result<()>,
    {
        let t = Phases::clock();
        slot.finish(pb)?;
        Phases::add(&mut ph.wait_s, t);
        let t = Phases::clock();
        let r = sink(&view(slot));
        Phases::add(&mut ph.sink_s, t);
        if let Some(ext) = slot.ext.take() {
            // The upload that read it completed before the kernel, before `finish` returned.
            let t = Phases::clock();
            ext.release();
            Phases::add(&mut ph.release_s, t);
        }
        r
    }

    fn compress_stream_inner<F, S>(&mut self, mut fill: F, mut sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<(usize, Option<ExtInput>)> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        let n = self.slots.len();
        let batch = self.batch_bytes();
        let pb = self.page_bytes;
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let mut next = 0;
        let mut ph = Phases::default();
        let timed_fill = |fill: &mut F, buf: &mut [u8], secs: &mut f64| {
            let t = Phases::clock();
            let r = fill(buf);
            Phases::add(secs, t);
            r
        };
        loop {
            // Keep one slot free for filling: drain the oldest when the ring is otherwise full.
            let oldest = (in_flight.len() + 1 >= n)
                .then(|| in_flight.pop_front())
                .flatten();
            let filled = match oldest {
                Some(o) if o != next => {
                    if !self.eager {
                        // The exact-size download needs the info words and the D2H stream.
                        let t = Phases::clock();
                        self.start_download(o, true)?;
                        Phases::add(&mut ph.wait_s, t);
                    }
                    // The next batch is staged while the oldest finishes on the device and
                    // is drained (a slot finishes through its events, no stream needed).
                    let (done, free) = two_mut(&mut self.slots, o, next);
                    let buf = &mut free.h_in.slice_mut()[..batch];
                    let (mut da, mut fs) = (Phases::default(), 0.0);
                    let (a, b) = rayon::join(
                        || Self::drain_one(done, pb, &mut sink, &mut da),
                        || timed_fill(&mut fill, buf, &mut fs),
                    );
                    ph.wait_s += da.wait_s;
                    ph.sink_s += da.sink_s;
                    ph.release_s += da.release_s;
                    ph.fill_s += fs;
                    self.slots[o].state = super::ring::State::Free;
                    a?;
                    b?
                }
                Some(o) => {
                    self.start_download(o, true)?;
                    Self::drain_one(&mut self.slots[o], pb, &mut sink, &mut ph)?;
                    self.slots[o].state = super::ring::State::Free;
                    timed_fill(
                        &mut fill,
                        &mut self.slots[next].h_in.slice_mut()[..batch],
                        &mut ph.fill_s,
                    )?
                }
                None => timed_fill(
                    &mut fill,
                    &mut self.slots[next].h_in.slice_mut()[..batch],
                    &mut ph.fill_s,
                )?,
            };
            let (filled, ext) = filled;
            self.slots[next].ext = ext;
            if filled == 0 {
                self.slots[next].ext = None;
                break;
            }
            let t = Phases::clock();
            self.submit(next, filled.min(batch))?;
            in_flight.push_back(next);
            self.poll(in_flight.iter().copied())?;
            Phases::add(&mut ph.submit_s, t);
            ph.batches += 1;
            ph.bytes += filled.min(batch);
            next = (next + 1) % n;
            if filled < batch {
                break;
            }
        }
        while let Some(o) = in_flight.pop_front() {
            self.start_download(o, true)?;
            Self::drain_one(&mut self.slots[o], pb, &mut sink, &mut ph)?;
            self.slots[o].state = super::ring::State::Free;
        }
        self.phases = ph;
        Ok(())
    }
}
