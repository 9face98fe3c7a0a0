//! [`GpuPageStream`]: the [`PageStream`] seam over the ring. Pushed pages are copied into the
//! filling slot's pinned input; a full slot (or a short final page, or a pop that needs it) is
//! submitted; pops return pages in push order, waiting for their slot's download. When every
//! slot is in use, `free_slots` is 0 and pushes fail with [`Error::Capacity`] until pages are
//! popped. On a device failure all pending pages are compressed again on the CPU from their
//! host copies and the stream continues on the CPU: none is lost or duplicated.

use super::kernels::Lz4Kernels;
use super::ring::{Ring, State};
use super::{device_failure, GpuOptions};
use crate::lz4::{
    check_page_bytes, CodecPath, CompressedPage, CpuPageStream, PageEncoder, PageStream,
};
use crate::runtime::Gpu;
use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;

/// Pipelined page compression on the GPU, or on the CPU after a failure (same bytes).
pub struct GpuPageStream {
    page_bytes: usize,
    ring: Option<Ring>,
    /// Slots holding pages not yet popped, oldest first; the last may still be filling.
    order: VecDeque<usize>,
    /// The slot being filled, and how many bytes it holds.
    filling: Option<(usize, usize)>,
    /// Pages already popped from the oldest slot.
    popped: usize,
    pending: usize,
    closed: bool,
    /// After a failure: pages rescued on the CPU, then a CPU stream for the rest.
    rescued: VecDeque<CompressedPage>,
    cpu: Option<CpuPageStream>,
    failure: Option<String>,
}

impl GpuPageStream {
    /// A stream of `page_bytes` pages on `gpu` (a multiple of 1024 up to 64 KiB).
    pub fn new(gpu: Arc<Gpu>, page_bytes: usize, options: GpuOptions) -> Result<Self> {
        check_page_bytes(page_bytes)?;
        options.check()?;
        let kernels = Lz4Kernels::new(gpu)?;
        let batch_pages = (options.batch_bytes / page_bytes).max(1);
        let ring = Ring::new(kernels, page_bytes, batch_pages, options.slots)?;
        Ok(GpuPageStream {
            page_bytes,
            ring: Some(ring),
            order: VecDeque::new(),
            filling: None,
            popped: 0,
            pending: 0,
            closed: false,
            rescued: VecDeque::new(),
            cpu: None,
            failure: None,
        })
    }

    /// Why the stream runs on the CPU, if it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The kernels while the GPU path is healthy (tests use them to provoke a device fault).
    pub fn kernels(&self) -> Option<&Lz4Kernels> {
        self.ring.as_ref().map(|r| &r.kernels)
    }

    fn capacity_pages(&self) -> usize {
        self.ring
            .as_ref()
            .map_or(0, |r| r.batch_pages * r.slots.len())
    }

    /// Submits the filling slot, if any.
    fn submit_filling(&mut self) -> Result<()> {
        if let (Some((i, bytes)), Some(ring)) = (self.filling.take(), self.ring.as_mut()) {
            ring.submit(i, bytes)?;
            ring.poll(self.order.iter().copied())?;
        }
        Ok(())
    }

    /// Moves every pending page to the CPU after a device failure (see the module docs).
    fn retire(&mut self, e: &Error) -> Result<()> {
        self.failure = Some(format!("GPU path stopped after: {e}"));
        let ring = self.ring.take().expect("retire runs once, on the GPU path");
        let mut enc = PageEncoder::new();
        let mut first = self.popped;
        for &i in &self.order {
            let slot = &ring.slots[i];
            let bytes = match self.filling {
                Some((f, b)) if f == i => b,
                _ => slot.input_bytes,
            };
            let pages = bytes.div_ceil(self.page_bytes);
            for k in first..pages {
                let start = k * self.page_bytes;
                let page = &slot.h_in.slice()[start..(start + self.page_bytes).min(bytes)];
                let mut out = Vec::with_capacity(page.len());
                let kind = enc.compress_page(page, &mut out)?;
                self.rescued.push_back(CompressedPage {
                    bytes: out,
                    kind,
                    original_bytes: page.len(),
                });
            }
            first = 0;
        }
        self.cpu = Some(CpuPageStream::new(
            self.page_bytes,
            ring.batch_pages * ring.slots.len(),
        )?);
        self.order.clear();
        self.filling = None;
        Ok(())
    }

    /// Runs a GPU-path step; a device failure retires the GPU path (`Ok(None)` then).
    fn guard<T>(&mut self, r: Result<T>) -> Result<Option<T>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if device_failure(&e) => self.retire(&e).map(|()| None),
            Err(e) => Err(e),
        }
    }

    fn push_gpu(&mut self, page: &[u8]) -> Result<()> {
        let pb = self.page_bytes;
        if self.filling.is_none() {
            let ring = self.ring.as_mut().expect("GPU path");
            let n = ring.slots.len();
            let next = self.order.back().map_or(0, |&i| (i + 1) % n);
            if ring.slots[next].state != State::Free {
                return Err(Error::Capacity {
                    what: "LZ4 GPU ring slots".into(),
                    needed: self.pending + 1,
                    capacity: self.capacity_pages(),
                });
            }
            self.filling = Some((next, 0));
            self.order.push_back(next);
        }
        let (i, bytes) = self.filling.expect("set above");
        let ring = self.ring.as_mut().expect("GPU path");
        ring.slots[i].h_in.slice_mut()[bytes..bytes + page.len()].copy_from_slice(page);
        let bytes = bytes + page.len();
        self.filling = Some((i, bytes));
        if bytes == ring.batch_bytes() || page.len() < pb {
            self.submit_filling()?;
        }
        Ok(())
    }

    fn pop_gpu(&mut self, out: &mut CompressedPage) -> Result<()> {
        let i = *self.order.front().expect("pending pages are in a slot");
        if self.filling.is_some_and(|(f, _)| f == i) {
            self.submit_filling()?;
        }
        let pb = self.page_bytes;
        let ring = self.ring.as_mut().expect("GPU path");
        ring.wait(i)?;
        let slot = &mut ring.slots[i];
        let e = slot.entries[self.popped];
        out.bytes.clear();
        out.bytes.extend_from_slice(slot.stored(self.popped));
        out.kind = e.kind;
        out.original_bytes = e.original_bytes;
        self.popped += 1;
        if self.popped == slot.pages(pb) {
            slot.state = State::Free;
            self.order.pop_front();
            self.popped = 0;
        }
        Ok(())
    }
}

impl PageStream for GpuPageStream {
    fn path(&self) -> CodecPath {
        if self.failure.is_none() {
            CodecPath::Gpu
        } else {
            CodecPath::Cpu
        }
    }

    fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    fn free_slots(&self) -> usize {
        if let Some(cpu) = &self.cpu {
            return cpu.free_slots().saturating_sub(self.rescued.len());
        }
        let Some(ring) = &self.ring else { return 0 };
        let n = ring.slots.len();
        let filling_left = self
            .filling
            .map_or(0, |(_, b)| (ring.batch_bytes() - b) / self.page_bytes);
        let next = self.order.back().map_or(0, |&i| (i + 1) % n);
        let free_after = (0..n)
            .map(|k| (next + k) % n)
            .take_while(|&k| ring.slots[k].state == State::Free && !self.order.contains(&k))
            .count();
        filling_left + free_after * ring.batch_pages
    }

    fn pending(&self) -> usize {
        self.pending
    }

    fn push_page(&mut self, page: &[u8]) -> Result<()> {
        if self.closed && self.pending > 0 {
            return Err(Error::input("page pushed after a short (final) page"));
        }
        if page.is_empty() || page.len() > self.page_bytes {
            return Err(Error::input(format!(
                "page of {} bytes pushed to a stream of {}-byte pages",
                page.len(),
                self.page_bytes
            )));
        }
        if self.free_slots() == 0 {
            return Err(Error::Capacity {
                what: "LZ4 page stream slots".into(),
                needed: self.pending + 1,
                capacity: self.capacity_pages(),
            });
        }
        if self.ring.is_some() {
            // A device failure can only come after the page was copied into its slot, so the
            // rescue in `retire` has compressed it already.
            let r = self.push_gpu(page);
            self.guard(r)?;
        } else {
            self.cpu
                .as_mut()
                .expect("CPU path after retire")
                .push_page(page)?;
        }
        self.closed = page.len() < self.page_bytes;
        self.pending += 1;
        Ok(())
    }

    fn pop_page(&mut self, out: &mut CompressedPage) -> Result<bool> {
        if self.pending == 0 {
            return Ok(false);
        }
        if self.ring.is_some() {
            let r = self.pop_gpu(out);
            if self.guard(r)?.is_some() {
                self.pending -= 1;
                return Ok(true);
            }
        }
        if let Some(p) = self.rescued.pop_front() {
            *out = p;
        } else if !self
            .cpu
            .as_mut()
            .expect("CPU path after retire")
            .pop_page(out)?
        {
            return Ok(false);
        }
        self.pending -= 1;
        Ok(true)
    }
}
