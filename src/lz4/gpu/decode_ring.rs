//! The decompression ring: slots of pinned stored bytes and entry words (upload), registered
//! output and pinned status words (download), their device twins and events. Per slot, one
//! stream uploads, the slot's own stream runs `lz4_decompress`, another downloads pages and
//! status; the host stages batch i+1 and drains batch i-1 meanwhile
//! ([`DecodeRing::decompress_stream`], same shape as the compress ring's stream).

use super::kernels::Lz4Kernels;
use super::pipeline::{both, pick3};
use super::register::ExtOutput;
use super::register_ahead::Ahead;
use super::ring::{Pinned, Registered};
use super::ring_steps::{add_step, RingSteps};
use super::stage::{DecodeStage, DecodedBatch};
use super::tuning::{HostTuning, Phases};
use crate::runtime::{PinnedKind, StreamSet};
use crate::{Error, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, DevicePtr};
use std::sync::Arc;

const H2D: usize = 0;
const D2H: usize = 1;
/// Stream of slot `i`'s kernel: `COMPUTE + i`.
const COMPUTE: usize = 2;
/// Padding after the stored bytes: the kernel reads 16-byte chunks below the length it is given.
const PAD: usize = 32;

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
    /// Where the decoded bytes go instead of `h_out` (all but a head and tail).
    ext: Option<ExtOutput>,
}

fn stage(s: &mut Slot, pb: usize, bp: usize) -> DecodeStage<'_> {
    DecodeStage {
        packed: &mut s.h_packed.slice_mut()[..pb * bp],
        entries: &mut s.h_entries.slice_mut()[..4 * bp],
    }
}

/// The ring of decompression slots over one device.
pub(crate) struct DecodeRing {
    pub(crate) kernels: Lz4Kernels,
    streams: StreamSet,
    slots: Vec<Slot>,
    pub(crate) page_bytes: usize,
    pub(crate) batch_pages: usize,
    /// Host time by phase of the last `decompress_stream`.
    pub(crate) phases: Phases,
    /// The host-side knobs (see [`HostTuning`]; the decode ring reads `serial_steps`).
    pub(crate) tuning: HostTuning,
    /// Where drained slots' registrations go to be undone (a registrar thread), else undone
    /// in the drain.
    pub(crate) ahead: Option<Arc<Ahead>>,
}

/// Runs `f`, adding its wall seconds to `secs`.
fn timed<R>(secs: &mut f64, f: impl FnOnce() -> R) -> R {
    let t = Phases::clock();
    let r = f();
    Phases::add(secs, t);
    r
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
                h_packed: Pinned::staging(&gpu, bytes + PAD, PinnedKind::Download)?,
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
                ext: None,
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
            phases: Phases::default(),
            tuning: HostTuning::default(),
            ahead: None,
        })
    }

    /// Enqueues upload, kernel and download of slot `i` (`pages` pages, `packed` stored bytes).
    fn submit(
        streams: &StreamSet,
        kernels: &Lz4Kernels,
        pb: usize,
        slot: &mut Slot,
        i: usize,
        pages: usize,
        packed: usize,
    ) -> Result<()> {
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
        kernels.decompress(
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
        let down = drv("cuMemcpyDtoHAsync (lz4 decoded pages)");
        match &slot.ext {
            Some(ext) => {
                for (at, n) in ext.staged() {
                    if n > 0 {
                        d2h.memcpy_dtoh(
                            &slot.d_out.slice(at..at + n),
                            &mut slot.h_out.slice_mut()[at..at + n],
                        )
                        .map_err(down)?;
                    }
                }
                let (src, _) = slot.d_out.device_ptr(d2h);
                for k in 0..ext.parts.len() {
                    let (dst, n) = ext.part_ptr(k);
                    let at = ext.parts[k].0 as u64;
                    // SAFETY: `dst..dst + n` is registered memory of the caller that only this
                    // copy writes until the slot is drained (ExtInput::for_output's contract);
                    // the source lies inside `d_out` (the fill registers at most the batch).
                    unsafe {
                        cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                            dst.cast(),
                            src + at,
                            n,
                            d2h.cu_stream(),
                        )
                    }
                    .result()
                    .map_err(down)?;
                }
            }
            None => d2h
                .memcpy_dtoh(
                    &slot.d_out.slice(0..pages * pb),
                    &mut slot.h_out.slice_mut()[..pages * pb],
                )
                .map_err(down)?,
        }
        slot.ev_done.record(d2h).map_err(drv("cuEventRecord"))?;
        slot.pages = pages;
        slot.busy = true;
        Ok(())
    }

    fn view(slot: &Slot, pb: usize) -> DecodedBatch<'_> {
        DecodedBatch {
            pages: slot.pages,
            out: &slot.h_out.slice()[..slot.pages * pb],
            status: &slot.h_status.slice()[..slot.pages],
            packed: slot.h_packed.slice(),
            entries: &slot.h_entries.slice()[..4 * slot.pages],
            direct: slot.ext.as_ref(),
        }
    }

    /// Waits for every busy slot (ignoring errors) and frees it.
    fn reset(&mut self) {
        // Downloads into registered memory end before it is unregistered.
        let _ = self.streams.get(D2H).synchronize();
        for slot in &mut self.slots {
            if slot.busy {
                let _ = slot.ev_done.synchronize();
                slot.busy = false;
            }
            slot.ext = None;
        }
    }

    /// Hands a drained slot's registered output back (its downloads have completed).
    fn release(slot: &mut Slot, ph_release: &mut f64, ahead: Option<&Ahead>) {
        if let Some(ext) = slot.ext.take() {
            timed(ph_release, || match ahead {
                Some(a) => a.give_back(ext),
                None => ext.release(),
            });
        }
    }

    /// Decodes every batch `fill` stages and hands each to `sink` in order. `fill` returns
    /// `(pages, stored bytes)` it staged; 0 pages ends the input. On an error the ring is reset.
    pub(crate) fn decompress_stream<F, S>(&mut self, mut fill: F, sink: S) -> Result<()>
    where
        F: FnMut(DecodeStage<'_>) -> Result<(usize, usize)> + Send,
        S: FnMut(&DecodedBatch<'_>) -> Result<()> + Send,
    {
        self.decompress_stream_ext(|st| fill(st).map(|(p, b)| (p, b, None)), sink)
    }

    /// Like `decompress_stream`, but `fill` may also hand over where the batch's decoded bytes
    /// go in the caller's registered memory (see `DecodedBatch::direct`).
    pub(crate) fn decompress_stream_ext<F, S>(&mut self, fill: F, sink: S) -> Result<()>
    where
        F: FnMut(DecodeStage<'_>) -> Result<(usize, usize, Option<ExtOutput>)> + Send,
        S: FnMut(&DecodedBatch<'_>) -> Result<()> + Send,
    {
        self.phases = Phases::default();
        let t = Phases::clock();
        // On a pool thread, like the compress ring's loop (see `Ring::compress_stream_ext`).
        let r = rayon::scope(|_| self.stream_inner(fill, sink));
        Phases::add(&mut self.phases.total_s, t);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn stream_inner<F, S>(&mut self, mut fill: F, mut sink: S) -> Result<()>
    where
        F: FnMut(DecodeStage<'_>) -> Result<(usize, usize, Option<ExtOutput>)> + Send,
        S: FnMut(&DecodedBatch<'_>) -> Result<()> + Send,
    {
        let (pb, bp) = (self.page_bytes, self.batch_pages);
        // Batches are (pages, packed bytes) staged into a slot.
        let mut steps = RingSteps::<(usize, usize)>::new(self.slots.len());
        let mut ph = Phases::default();
        let (serial, early) = (self.tuning.serial_steps, self.tuning.submit_early);
        while let Some(step) = steps.step() {
            let (streams, kernels) = (&self.streams, &self.kernels);
            let ahead = self.ahead.as_deref();
            let (s_slot, o_slot, f_slot) = pick3(
                &mut self.slots,
                step.submit.map(|p| p.0),
                step.drain,
                step.fill,
            );
            // One side submits the pending batch and drains the oldest; the other stages the
            // next batch.
            let (mut side, mut fill_s, mut early_submit_s) = (Phases::default(), 0.0, 0.0);
            let (a, b) = both(
                serial,
                || -> Result<()> {
                    // (A batch the fill side submitted itself is busy already.)
                    if let (Some((i, (pages, packed))), Some(slot)) = (step.submit, s_slot) {
                        if !slot.busy {
                            timed(&mut side.submit_s, || {
                                Self::submit(streams, kernels, pb, slot, i, pages, packed)
                            })?;
                        }
                    }
                    let Some(done) = o_slot else { return Ok(()) };
                    timed(&mut side.wait_s, || done.ev_done.synchronize())
                        .map_err(Error::driver("cuEventSynchronize (lz4 decode)"))?;
                    let r = timed(&mut side.sink_s, || sink(&Self::view(done, pb)));
                    Self::release(done, &mut side.release_s, ahead);
                    r
                },
                || -> Result<(usize, usize, Option<ExtOutput>)> {
                    let (Some(slot), Some(i)) = (f_slot, step.fill) else {
                        return Ok((0, 0, None));
                    };
                    let (pages, packed, ext) = timed(&mut fill_s, || fill(stage(slot, pb, bp)))?;
                    if !early || pages == 0 {
                        return Ok((pages, packed, ext));
                    }
                    check_staged(pages, packed, pb, bp)?;
                    // Submitted right away (see `HostTuning::submit_early`).
                    slot.ext = ext;
                    timed(&mut early_submit_s, || {
                        Self::submit(streams, kernels, pb, slot, i, pages, packed)
                    })?;
                    Ok((pages, packed, None))
                },
            );
            add_step(&mut ph, &side, fill_s);
            ph.submit_s += early_submit_s;
            // The submitted batch is in flight (or failed with the ring about to be reset).
            steps.ran(&step);
            if let Some(o) = step.drain {
                self.slots[o].busy = false;
            }
            a?;
            let (pages, packed, ext) = b?;
            if let Some(next) = step.fill {
                if pages == 0 {
                    steps.staged(None);
                } else {
                    check_staged(pages, packed, pb, bp)?;
                    if !early {
                        self.slots[next].ext = ext;
                    }
                    steps.staged(Some((pages, packed)));
                    ph.batches += 1;
                    ph.bytes += pages * pb;
                }
            }
        }
        let total = self.phases.total_s;
        self.phases = Phases {
            total_s: total,
            ..ph
        };
        Ok(())
    }
}

/// Fails when a fill staged more than a slot holds.
fn check_staged(pages: usize, packed: usize, pb: usize, bp: usize) -> Result<()> {
    if pages > bp || packed > pb * bp {
        return Err(Error::Capacity {
            what: "lz4 decode ring slot".into(),
            needed: packed.max(pages),
            capacity: pb * bp,
        });
    }
    Ok(())
}
