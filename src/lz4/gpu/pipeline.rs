//! The host side of the rings at pipeline speed: a batch is staged into a free slot (by the
//! caller's `fill`, e.g. a parallel copy from ordinary memory or parallel reads of a file) while
//! the oldest finished batch is handed to the caller's `sink` (a parallel copy out, or a frame
//! writer), and the device works on the batches in between. Memory stays bounded by the ring.
//!
//! With `n` slots, `n - 1` batches are on the device while the host fills one and drains one,
//! both with every core (`rayon::join` of two parallel copies).

use super::ring::Ring;
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

fn view(slot: &super::ring::Slot) -> CompressedBatch<'_> {
    CompressedBatch {
        entries: &slot.entries,
        packed: slot.packed(),
        input_bytes: slot.input_bytes,
        input: &slot.h_in.slice()[..slot.input_bytes],
    }
}

impl Ring {
    /// Compresses everything `fill` stages and hands each batch to `sink` in order. `fill` gets
    /// a slot's input buffer (one batch) and returns the bytes it wrote: the whole buffer, or
    /// less only at the end of the input (0: nothing more). On an error the ring is reset.
    pub(crate) fn compress_stream<F, S>(&mut self, fill: F, sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<usize> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        self.eager = true;
        let r = self.compress_stream_inner(fill, sink);
        if r.is_err() {
            self.reset();
        }
        self.eager = false;
        r
    }

    fn compress_stream_inner<F, S>(&mut self, mut fill: F, mut sink: S) -> Result<()>
    where
        F: FnMut(&mut [u8]) -> Result<usize> + Send,
        S: FnMut(&CompressedBatch<'_>) -> Result<()> + Send,
    {
        let n = self.slots.len();
        let batch = self.batch_bytes();
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let mut next = 0;
        loop {
            // Keep one slot free for filling: drain the oldest when the ring is otherwise full.
            let oldest = (in_flight.len() + 1 >= n)
                .then(|| in_flight.pop_front())
                .flatten();
            let filled = match oldest {
                Some(o) if o != next => {
                    // The next batch is staged while the oldest finishes on the device and
                    // is drained (eager downloads need no stream to finish a slot).
                    let pb = self.page_bytes;
                    let (done, free) = two_mut(&mut self.slots, o, next);
                    let buf = &mut free.h_in.slice_mut()[..batch];
                    let (a, b) = rayon::join(
                        || {
                            done.finish_eager(pb)?;
                            sink(&view(done))
                        },
                        || fill(buf),
                    );
                    self.slots[o].state = super::ring::State::Free;
                    a?;
                    b?
                }
                Some(o) => {
                    self.wait(o)?;
                    sink(&view(&self.slots[o]))?;
                    self.slots[o].state = super::ring::State::Free;
                    fill(&mut self.slots[next].h_in.slice_mut()[..batch])?
                }
                None => fill(&mut self.slots[next].h_in.slice_mut()[..batch])?,
            };
            if filled == 0 {
                break;
            }
            self.submit(next, filled.min(batch))?;
            in_flight.push_back(next);
            self.poll(in_flight.iter().copied())?;
            next = (next + 1) % n;
            if filled < batch {
                break;
            }
        }
        while let Some(o) = in_flight.pop_front() {
            self.wait(o)?;
            sink(&view(&self.slots[o]))?;
            self.slots[o].state = super::ring::State::Free;
        }
        Ok(())
    }
}
