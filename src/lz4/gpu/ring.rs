//! The async ring: slots of pinned host input (write-combined) and output (registered host
//! memory) buffers, device buffers and events. Streams overlap the work of consecutive slots: one for
//! host-to-device copies, one per slot for its kernel (so one batch's last pages overlap the next
//! batch's first), one for the small per-page info downloads and one for the packed-bytes
//! downloads, so slot i+1 uploads while slot i compresses and slot i-1 downloads.
//!
//! Per slot: `submit` enqueues upload -> `lz4_compress` -> info download; once the info has
//! arrived (`poll` without blocking, or `start_download` blocking) the host knows how many packed
//! bytes to fetch and enqueues exactly that download; `wait` blocks until it has landed. With
//! eager downloads (the streaming loop's default) the info and the whole packed region come down
//! right after the kernel on the download stream instead, and `Slot::finish` waits for them; the
//! streaming loop may also send a batch in parts, each with its own kernel stream and events,
//! drained part by part (`ring_parts`). The host never touches a slot's buffers
//! while its copies may still run: every transition waits for the event of the copy that used
//! them. `ring_submit` enqueues a slot's work.

pub(crate) use super::host_mem::{Pinned, Registered};
use super::kernels::Lz4Kernels;
use super::layout::{info_words, page_lengths, read_compress_info};
use super::register::ExtInput;
use super::register_ahead::Ahead;
use super::ring_parts::{slot_info_words, slot_scratch_pages};
pub(crate) use super::ring_parts::{Part, MAX_PARTS};
pub(crate) use super::ring_submit::Submit;
use super::tuning::{HostTuning, Phases};
use crate::lz4::PageEntry;
use crate::runtime::{PinnedKind, StreamSet};
use crate::{Error, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice};
use std::sync::Arc;

pub(crate) const H2D: usize = 0;
pub(crate) const INFO: usize = 1;
pub(crate) const D2H: usize = 2;
/// Stream of the kernel of part `j` of slot `i`: `COMPUTE + compute_stream(slots, i, j)`.
pub(crate) const COMPUTE: usize = 3;
/// Most kernel streams of a ring (parts of slots beyond share them).
const MAX_COMPUTE: usize = 64;

/// The kernel stream (counted from `COMPUTE`) of part `j` of slot `i` in a ring of `slots`:
/// slot `i`'s own for its first part, distinct ones for every part of up to 8 slots.
pub(crate) fn compute_stream(slots: usize, i: usize, j: usize) -> usize {
    (j * slots + i) % compute_streams(slots)
}

/// Kernel streams of a ring of `slots` (at least `slots`).
fn compute_streams(slots: usize) -> usize {
    (slots * MAX_PARTS).min(MAX_COMPUTE.max(slots)).max(1)
}

/// Where a slot is in its cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Free,
    Submitted,
    Downloading,
    Ready,
}

/// The events of one part of a slot's batch: its upload, kernel, info and packed downloads.
pub(crate) struct PartEvents {
    pub(crate) h2d: CudaEvent,
    pub(crate) kernel: CudaEvent,
    pub(crate) info: CudaEvent,
    pub(crate) d2h: CudaEvent,
}

/// One batch's buffers and events.
pub(crate) struct Slot {
    pub(crate) h_in: Pinned<u8>,
    pub(crate) h_out: Registered,
    pub(crate) h_info: Pinned<u32>,
    pub(crate) d_in: CudaSlice<u8>,
    pub(crate) scratch: CudaSlice<u8>,
    pub(crate) d_packed: CudaSlice<u8>,
    pub(crate) d_info: CudaSlice<u32>,
    /// Events of each part of the batch (`ring_parts`; one part unless the loop asks for more).
    pub(crate) ev: Vec<PartEvents>,
    /// Parts the submitted batch went in (at least one).
    pub(crate) parts: usize,
    /// Packed bytes the eager download of each part fetches (from the part's start).
    pub(crate) fetched: [usize; MAX_PARTS],
    pub(crate) state: State,
    /// Bytes of input in this batch.
    pub(crate) input_bytes: usize,
    /// Where each page lies in `h_out` once the slot is Ready.
    pub(crate) entries: Vec<PageEntry>,
    /// Bytes of `h_out` the pages use (alignment gaps included) once the slot is Ready.
    pub(crate) used: usize,
    /// The whole packed region's download was enqueued with the kernel (eager submit).
    pub(crate) eager_d2h: bool,
    /// The batch's input read in place from the caller's registered memory (else `h_in`).
    pub(crate) ext: Option<ExtInput>,
}

impl Slot {
    /// The stored bytes of page `k` of a Ready slot.
    pub(crate) fn stored(&self, k: usize) -> &[u8] {
        let e = self.entries[k];
        &self.h_out.slice()[e.offset..e.offset + e.stored_bytes]
    }

    /// Reads the info words of a slot whose info download has completed: the entries and the
    /// packed bytes used, checked against the slot (a batch in one part).
    fn read_info(&mut self, pb: usize) -> Result<()> {
        let whole = Part {
            first: 0,
            pages: self.input_bytes.div_ceil(pb),
            info_at: 0,
        };
        self.read_part_info(&whole, pb)
    }

    /// Reads the info words of part `p` of the batch, whose info download has completed, into
    /// `entries` (offsets from the part's packed start) and `used` (the part's packed bytes),
    /// checked against the part's packed region.
    pub(crate) fn read_part_info(&mut self, p: &Part, pb: usize) -> Result<()> {
        let lens: Vec<usize> = page_lengths(p.input_bytes(self.input_bytes, pb), pb).collect();
        let info = &self.h_info.slice()[p.info_at..p.info_at + info_words(lens.len())];
        self.entries = read_compress_info(info, &lens)?;
        let used = super::layout::packed_used(info);
        let room = self.d_packed.len() - p.byte_at(pb);
        if used > room {
            return Err(Error::Kernel {
                kernel: "lz4_compress",
                code: 0,
                detail: format!("{used} packed bytes in a {room}-byte part of a slot"),
            });
        }
        self.used = used;
        Ok(())
    }

    /// Blocks until a slot whose packed download is enqueued (an eager submit, or
    /// `start_download`) is Ready; needs no stream, so it can run beside work on other slots.
    pub(crate) fn finish(&mut self, pb: usize) -> Result<()> {
        match self.state {
            State::Submitted if self.eager_d2h && self.parts > 1 => {
                return Err(Error::Kernel {
                    kernel: "lz4_compress",
                    code: 0,
                    detail: "a batch in parts finished as one".into(),
                })
            }
            State::Submitted if self.eager_d2h => {
                self.ev[0]
                    .info
                    .synchronize()
                    .map_err(Error::driver("cuEventSynchronize (lz4 info)"))?;
                self.read_info(pb)?;
            }
            State::Submitted => {
                return Err(Error::Kernel {
                    kernel: "lz4_compress",
                    code: 0,
                    detail: "ring slot finished before its download was enqueued".into(),
                })
            }
            State::Downloading => {}
            State::Free | State::Ready => return Ok(()),
        }
        self.ev[0]
            .d2h
            .synchronize()
            .map_err(Error::driver("cuEventSynchronize (lz4 download)"))?;
        self.state = State::Ready;
        Ok(())
    }

    /// Pages in this batch.
    pub(crate) fn pages(&self, page_bytes: usize) -> usize {
        self.input_bytes.div_ceil(page_bytes)
    }
}

/// The ring of slots over one device.
pub(crate) struct Ring {
    pub(crate) kernels: Lz4Kernels,
    pub(crate) streams: StreamSet,
    pub(crate) slots: Vec<Slot>,
    pub(crate) page_bytes: usize,
    pub(crate) batch_pages: usize,
    /// Download each batch's whole packed region right after its kernel, without waiting for
    /// the host to read the info words (more bytes over the otherwise idle device-to-host
    /// direction, no host round trip in the pipeline). Off: download exactly the bytes used.
    pub(crate) eager: bool,
    /// The host-side knobs (see [`HostTuning`]).
    pub(crate) tuning: HostTuning,
    /// Host time by phase of the last `compress_stream`.
    pub(crate) phases: Phases,
    /// Where drained slots' registrations go to be undone (a registrar thread), else undone
    /// in the drain.
    pub(crate) ahead: Option<Arc<Ahead>>,
}

fn part_events(k: &Lz4Kernels) -> Result<PartEvents> {
    let event = || {
        k.gpu()
            .ctx()
            .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(Error::driver("cuEventCreate"))
    };
    Ok(PartEvents {
        h2d: event()?,
        kernel: event()?,
        info: event()?,
        d2h: event()?,
    })
}

impl Ring {
    /// Allocates `slots` slots of `batch_pages` pages of `page_bytes` (pinned and device).
    pub(crate) fn new(
        kernels: Lz4Kernels,
        page_bytes: usize,
        batch_pages: usize,
        slots: usize,
    ) -> Result<Self> {
        let gpu = kernels.gpu().clone();
        let slots = slots.max(1);
        let streams = StreamSet::new(&gpu, COMPUTE + compute_streams(slots))?;
        let batch_bytes = page_bytes * batch_pages;
        let g = kernels.compress_geometry(page_bytes, batch_pages);
        // Room for the kernels of every part of a batch at once (see `ring_parts`).
        let scratch_bytes = page_bytes
            * slot_scratch_pages(batch_pages, g.warps_per_block as usize, g.warps() as usize);
        let s = streams.get(H2D);
        let alloc = Error::driver("cuMemAlloc (lz4 ring)");
        let mut v = Vec::with_capacity(slots);
        for _ in 0..slots {
            v.push(Slot {
                // Cached, not write-combined: the host reads a batch's input back (the frame's
                // content hash) while the device compresses it.
                h_in: Pinned::staging(&gpu, batch_bytes, PinnedKind::Download)?,
                h_out: Registered::new(&gpu, batch_bytes)?,
                h_info: Pinned::new(&gpu, slot_info_words(batch_pages), PinnedKind::Download)?,
                d_in: s.alloc_zeros::<u8>(batch_bytes).map_err(alloc)?,
                scratch: s.alloc_zeros::<u8>(scratch_bytes).map_err(alloc)?,
                d_packed: s.alloc_zeros::<u8>(batch_bytes).map_err(alloc)?,
                d_info: s
                    .alloc_zeros::<u32>(slot_info_words(batch_pages))
                    .map_err(alloc)?,
                ev: (0..MAX_PARTS)
                    .map(|_| part_events(&kernels))
                    .collect::<Result<_>>()?,
                parts: 1,
                fetched: [0; MAX_PARTS],
                state: State::Free,
                input_bytes: 0,
                entries: Vec::new(),
                used: 0,
                eager_d2h: false,
                ext: None,
            });
        }
        s.synchronize()
            .map_err(Error::driver("zeroing the lz4 ring"))?;
        Ok(Ring {
            kernels,
            streams,
            slots: v,
            page_bytes,
            batch_pages,
            eager: false,
            tuning: HostTuning::default(),
            phases: Phases::default(),
            ahead: None,
        })
    }

    /// Bytes one slot holds.
    pub(crate) fn batch_bytes(&self) -> usize {
        self.page_bytes * self.batch_pages
    }

    /// Enqueues upload, kernel and info download of slot `i`, whose `h_in` holds `input_bytes`.
    pub(crate) fn submit(&mut self, i: usize, input_bytes: usize) -> Result<()> {
        let (pb, eager) = (self.page_bytes, self.eager);
        let at = Submit {
            streams: &self.streams,
            kernels: &self.kernels,
            page_bytes: pb,
            eager,
            guess: None,
        };
        let slots = self.slots.len();
        at.submit(&mut self.slots[i], (i, slots), input_bytes, 1)
    }

    /// Starts the packed download of a Submitted slot whose info has arrived; `block` waits for
    /// the info, otherwise a slot whose info is not there yet is left alone.
    pub(crate) fn start_download(&mut self, i: usize, block: bool) -> Result<()> {
        let pb = self.page_bytes;
        let slot = &mut self.slots[i];
        if slot.state != State::Submitted {
            return Ok(());
        }
        if slot.parts > 1 {
            // Batches in parts download eagerly and only `pipeline` drains them, part by part.
            return match block {
                false => Ok(()),
                true => Err(Error::Kernel {
                    kernel: "lz4_compress",
                    code: 0,
                    detail: "a batch in parts waited for as one".into(),
                }),
            };
        }
        if block {
            slot.ev[0]
                .info
                .synchronize()
                .map_err(Error::driver("cuEventSynchronize (lz4 info)"))?;
        } else if !slot.ev[0]
            .info
            .try_is_complete()
            .map_err(Error::driver("cuEventQuery (lz4 info)"))?
        {
            return Ok(());
        }
        slot.read_info(pb)?;
        let used = slot.used;
        if slot.eager_d2h {
            // The download was enqueued with the kernel and covers `used`.
            slot.state = State::Downloading;
            return Ok(());
        }
        let d2h = self.streams.get(D2H);
        d2h.wait(&slot.ev[0].info)
            .map_err(Error::driver("cuStreamWaitEvent"))?;
        if used > 0 {
            d2h.memcpy_dtoh(
                &slot.d_packed.slice(0..used),
                &mut slot.h_out.slice_mut()[..used],
            )
            .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 packed)"))?;
        }
        slot.ev[0]
            .d2h
            .record(d2h)
            .map_err(Error::driver("cuEventRecord"))?;
        slot.state = State::Downloading;
        Ok(())
    }

    /// Blocks until slot `i` is Ready (its packed bytes are in `h_out`).
    pub(crate) fn wait(&mut self, i: usize) -> Result<()> {
        self.start_download(i, true)?;
        let slot = &mut self.slots[i];
        if slot.state == State::Downloading {
            slot.ev[0]
                .d2h
                .synchronize()
                .map_err(Error::driver("cuEventSynchronize (lz4 download)"))?;
            slot.state = State::Ready;
        }
        Ok(())
    }

    /// After an error: waits (ignoring further errors) for every slot's work and frees it, so
    /// the ring can take the next input.
    pub(crate) fn reset(&mut self) {
        // Uploads that read registered memory end before it is unregistered.
        let _ = self.streams.get(H2D).synchronize();
        for slot in &mut self.slots {
            if slot.state != State::Free {
                for ev in &slot.ev[..slot.parts] {
                    let _ = ev.info.synchronize();
                    let _ = ev.d2h.synchronize();
                }
                slot.state = State::Free;
            }
            slot.ext = None;
        }
    }

    /// Starts the downloads of Submitted slots whose info has arrived, oldest first (`order`).
    pub(crate) fn poll(&mut self, order: impl IntoIterator<Item = usize>) -> Result<()> {
        for i in order {
            self.start_download(i, false)?;
        }
        Ok(())
    }
}
