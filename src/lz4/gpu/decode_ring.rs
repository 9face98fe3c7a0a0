//! The decompression ring: slots of pinned stored bytes and entry words (upload), registered
//! output and pinned status words (download), their device twins and events. Per slot, one
//! stream uploads, the slot's own stream runs `lz4_decompress`, another downloads pages and
//! status; the host stages batch i+1 and drains batch i-1 meanwhile
//! ([`DecodeRing::decompress_stream`], same shape as the compress ring's stream).

use super::kernels::Lz4Kernels;
use super::pipeline::two_mut;
use super::ring::{Pinned, Registered};
use crate::runtime::{PinnedKind, StreamSet};
use crate::{Error, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice};
use std::collections::VecDeque;

const H2D: usize = 0;
const D2H: usize = 1;
/// Stream of slot `i`'s kernel: `COMPUTE + i`.
const COMPUTE: usize = 2;
/// Padding after the stored bytes: the kernel reads 16-byte chunks below the length it is given.
const PAD: usize = 32;

/// What a fill stages into a slot: stored pages back to back, and 4 entry words per page
/// (offset into `packed`, stored bytes, original bytes or bound, kind; see `kernels::lz4`).
pub struct DecodeStage<'a> {
    /// Room for the stored bytes (`batch_pages * page_bytes`).
    pub packed: &'a mut [u8],
    /// Room for `4 * batch_pages` entry words.
    pub entries: &'a mut [u32],
}

/// One decoded batch as handed to a sink: page `k` is at `out[k * page_bytes..]`, its status
/// word (code and produced bytes) is `status[k]`.
pub struct DecodedBatch<'a> {
    /// Pages in the batch.
    pub pages: usize,
    /// The decoded pages, `page_bytes` apart.
    pub out: &'a [u8],
    /// One status word per page.
    pub status: &'a [u32],
    /// The stored bytes the fill staged.
    pub packed: &'a [u8],
    /// The entry words the fill staged (4 per page).
    pub entries: &'a [u32],
}

struct Slot {
    h_packed: Pinned<u8>,
    h_entries: Pinned<u32>,
    h_out: Registered,
    h_status: Pinned<u32>,
    d_packed: CudaSlice<u8>,
    d_entries: CudaSlice<u32>,
    d_out: CudaSlice<u8>,
    d_status: CudaSlice<u32>,
    ev_h2d: CudaEvent,
    ev_kernel: CudaEvent,
    ev_done: CudaEvent,
    pages: usize,
    busy: bool,
}

fn stage(s: &mut Slot, pb: usize, bp: usize) -> DecodeStage<'_> {
    DecodeStage {
        packed: &mut s.h_packed.slice_mut()[..pb * bp],
        entries: &mut s.h_entries.slice_mut()[..4 * bp],
    }
}

/// The ring of decompression slots over one device.
pub(crate) struct DecodeRing {
    kernels: Lz4Kernels,
    streams: StreamSet,
    slots: Vec<Slot>,
    pub(crate) page_bytes: usize,
    pub(crate) batch_pages: usize,
}

impl DecodeRing {
    /// `slots` slots of `batch_pages` pages of up to `page_bytes` each.
    pub(crate) fn new(
        kernels: Lz4Kernels,
        page_bytes: usize,
        batch_pages: usize,
        slots: usize,
    ) -> Result<Self> {
        let gpu = kernels.gpu().clone();
        let slots = slots.max(1);
        let batch_pages = batch_pages.max(1);
        let bytes = page_bytes * batch_pages;
        let streams = StreamSet::new(&gpu, COMPUTE + slots)?;
        let s = streams.get(H2D);
        let alloc = Error::driver("cuMemAlloc (lz4 decode ring)");
        let event = || {
            gpu.ctx()
                .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(Error::driver("cuEventCreate"))
        };
        let mut v = Vec::with_capacity(slots);
        for _ in 0..slots {
            v.push(Slot {
                // Cached rather than write-combined: a sink may read blocks and entries back
                // (to decode a block on the host that the device could not).
                h_packed: Pinned::new(&gpu, bytes + PAD, PinnedKind::Download)?,
                h_entries: Pinned::new(&gpu, 4 * batch_pages, PinnedKind::Download)?,
                h_out: Registered::new(&gpu, bytes)?,
                h_status: Pinned::new(&gpu, batch_pages, PinnedKind::Download)?,
                d_packed: s.alloc_zeros::<u8>(bytes + PAD).map_err(alloc)?,
                d_entries: s.alloc_zeros::<u32>(4 * batch_pages).map_err(alloc)?,
                d_out: s.alloc_zeros::<u8>(bytes).map_err(alloc)?,
                d_status: s.alloc_zeros::<u32>(batch_pages).map_err(alloc)?,
                ev_h2d: event()?,
                ev_kernel: event()?,
                ev_done: event()?,
                pages: 0,
                busy: false,
            });
        }
        s.synchronize()
            .map_err(Error::driver("zeroing the lz4 decode ring"))?;
        Ok(DecodeRing {
            kernels,
            streams,
            slots: v,
            page_bytes,
            batch_pages,
        })
    }

    /// Enqueues upload, kernel and download of slot `i` (`pages` pages, `packed` stored bytes).
    fn submit(&mut self, i: usize, pages: usize, packed: usize) -> Result<()> {
        let (pb, streams) = (self.page_bytes, &self.streams);
        let slot = &mut self.slots[i];
        let drv = Error::driver;
        // The kernel reads the stored bytes in 16-byte chunks below the length it gets: upload
        // (and hand it) the bytes rounded up, plus padding; what lies beyond `packed` is never
        // part of an entry that passed the fill's checks.
        let plen = (packed.div_ceil(16) * 16 + 16).min(slot.d_packed.len());
        let h2d = streams.get(H2D);
        h2d.memcpy_htod(
            &slot.h_packed.slice()[..plen],
            &mut slot.d_packed.slice_mut(0..plen),
        )
        .map_err(drv("cuMemcpyHtoDAsync (lz4 stored pages)"))?;
        h2d.memcpy_htod(
            &slot.h_entries.slice()[..4 * pages],
            &mut slot.d_entries.slice_mut(0..4 * pages),
        )
        .map_err(drv("cuMemcpyHtoDAsync (lz4 entries)"))?;
        slot.ev_h2d.record(h2d).map_err(drv("cuEventRecord"))?;
        let compute = streams.get(COMPUTE + i);
        compute
            .wait(&slot.ev_h2d)
            .map_err(drv("cuStreamWaitEvent"))?;
        self.kernels.decompress(
            compute,
            &slot.d_packed.slice(0..plen),
            &slot.d_entries.slice(0..4 * pages),
            pages,
            pb,
            &mut slot.d_out.slice_mut(0..pages * pb),
            &mut slot.d_status.slice_mut(0..pages),
        )?;
        slot.ev_kernel
            .record(compute)
            .map_err(drv("cuEventRecord"))?;
        let d2h = streams.get(D2H);
        d2h.wait(&slot.ev_kernel)
            .map_err(drv("cuStreamWaitEvent"))?;
        d2h.memcpy_dtoh(
            &slot.d_status.slice(0..pages),
            &mut slot.h_status.slice_mut()[..pages],
        )
        .map_err(drv("cuMemcpyDtoHAsync (lz4 status)"))?;
        d2h.memcpy_dtoh(
            &slot.d_out.slice(0..pages * pb),
            &mut slot.h_out.slice_mut()[..pages * pb],
        )
        .map_err(drv("cuMemcpyDtoHAsync (lz4 decoded pages)"))?;
        slot.ev_done.record(d2h).map_err(drv("cuEventRecord"))?;
        slot.pages = pages;
        slot.busy = true;
        Ok(())
    }

    fn wait(&mut self, i: usize) -> Result<()> {
        self.slots[i]
            .ev_done
            .synchronize()
            .map_err(Error::driver("cuEventSynchronize (lz4 decode)"))
    }

    fn view(slot: &Slot, pb: usize) -> DecodedBatch<'_> {
        DecodedBatch {
            pages: slot.pages,
            out: &slot.h_out.slice()[..slot.pages * pb],
            status: &slot.h_status.slice()[..slot.pages],
            packed: slot.h_packed.slice(),
            entries: &slot.h_entries.slice()[..4 * slot.pages],
        }
    }

    /// Waits for every busy slot (ignoring errors) and frees it.
    fn reset(&mut self) {
        for slot in &mut self.slots {
            if slot.busy {
                let _ = slot.ev_done.synchronize();
                slot.busy = false;
            }
        }
    }

    /// Decodes every batch `fill` stages and hands each to `sink` in order. `fill` returns
    /// `(pages, stored bytes)` it staged; 0 pages ends the input. On an error the ring is reset.
    pub(crate) fn decompress_stream<F, S>(&mut self, fill: F, sink: S) -> Result<()>
    where
        F: FnMut(DecodeStage<'_>) -> Result<(usize, usize)> + Send,
        S: FnMut(&DecodedBatch<'_>) -> Result<()> + Send,
    {
        let r = self.stream_inner(fill, sink);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn stream_inner<F, S>(&mut self, mut fill: F, mut sink: S) -> Result<()>
    where
        F: FnMut(DecodeStage<'_>) -> Result<(usize, usize)> + Send,
        S: FnMut(&DecodedBatch<'_>) -> Result<()> + Send,
    {
        let (n, pb, bp) = (self.slots.len(), self.page_bytes, self.batch_pages);
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let mut next = 0;
        loop {
            let oldest = (in_flight.len() + 1 >= n)
                .then(|| in_flight.pop_front())
                .flatten();
            let (pages, packed) = match oldest {
                Some(o) if o != next => {
                    // Stage the next batch while the oldest finishes and is drained.
                    let (done, free) = two_mut(&mut self.slots, o, next);
                    let st = stage(free, pb, bp);
                    let sink = &mut sink;
                    // `move`: the closure takes the slot's `&mut` (Send), not a shared view.
                    let (a, b) = rayon::join(
                        move || {
                            done.ev_done
                                .synchronize()
                                .map_err(Error::driver("cuEventSynchronize (lz4 decode)"))?;
                            sink(&Self::view(done, pb))
                        },
                        || fill(st),
                    );
                    self.slots[o].busy = false;
                    a?;
                    b?
                }
                Some(o) => {
                    self.wait(o)?;
                    sink(&Self::view(&self.slots[o], pb))?;
                    self.slots[o].busy = false;
                    fill(stage(&mut self.slots[next], pb, bp))?
                }
                None => fill(stage(&mut self.slots[next], pb, bp))?,
            };
            if pages == 0 {
                break;
            }
            if pages > bp || packed > pb * bp {
                return Err(Error::Capacity {
                    what: "lz4 decode ring slot".into(),
                    needed: packed.max(pages),
                    capacity: pb * bp,
                });
            }
            self.submit(next, pages, packed)?;
            in_flight.push_back(next);
            next = (next + 1) % n;
        }
        while let Some(o) = in_flight.pop_front() {
            self.wait(o)?;
            sink(&Self::view(&self.slots[o], pb))?;
            self.slots[o].busy = false;
        }
        Ok(())
    }
}
