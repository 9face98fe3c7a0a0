//! [`GpuPageCodec`]: batch compression through the ring (`PageCodec`), and GPU decompression,
//! with the CPU path taking over when there is no device or any device operation fails.

use super::kernels::Lz4Kernels;
use super::layout::{check_decompress_status, decompress_entries};
use super::ring::Ring;
use super::{device_failure, GpuOptions};
use crate::lz4::{
    check_page_bytes, CodecPath, CompressedPages, CpuPageCodec, PageCodec, PageEntry,
};
use crate::runtime::Gpu;
use crate::{Error, Result};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Page compression on the GPU when it works, on the CPU otherwise (same bytes either way).
/// After any device failure (a driver error such as a sticky illegal address, a failed launch,
/// an inconsistent kernel result) it stops using the device for good and says why.
pub struct GpuPageCodec {
    kernels: Option<Lz4Kernels>,
    ring: Option<Ring>,
    options: GpuOptions,
    failure: Option<String>,
}

impl GpuPageCodec {
    /// A codec on `gpu` (kernels load now; buffers are allocated on first use per page size).
    pub fn new(gpu: Arc<Gpu>, options: GpuOptions) -> Result<Self> {
        Ok(GpuPageCodec {
            kernels: Some(Lz4Kernels::new(gpu)?),
            ring: None,
            options,
            failure: None,
        })
    }

    /// The GPU codec on the default device, or the CPU one with the reason when there is none.
    pub fn open_or_cpu(options: GpuOptions) -> Self {
        match Gpu::open_default().and_then(|g| Self::new(g, options)) {
            Ok(c) => c,
            Err(e) => GpuPageCodec {
                kernels: None,
                ring: None,
                options,
                failure: Some(e.to_string()),
            },
        }
    }

    /// Why the CPU path runs (no device, or the failure that retired it); `None` on the GPU path.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The kernels, while the GPU path is healthy (benches launch them on their own buffers).
    pub fn kernels(&self) -> Option<&Lz4Kernels> {
        self.kernels
            .as_ref()
            .or(self.ring.as_ref().map(|r| &r.kernels))
    }

    /// Records a device failure and drops everything that touches the device.
    fn retire(&mut self, e: &Error) {
        self.failure = Some(format!("GPU path stopped after: {e}"));
        self.ring = None;
        self.kernels = None;
    }

    fn ring(&mut self, page_bytes: usize) -> Result<&mut Ring> {
        if self
            .ring
            .as_ref()
            .is_none_or(|r| r.page_bytes != page_bytes)
        {
            if let Some(old) = self.ring.take() {
                // A new page size needs a new ring; the kernels move over.
                self.kernels = Some(old.kernels);
            }
            self.options.check()?;
            let k = self.kernels.take().ok_or_else(|| Error::NoDevice {
                reason: "GPU path retired".into(),
            })?;
            let batch_pages = (self.options.batch_bytes / page_bytes).max(1);
            let gpu = k.gpu().clone();
            match Ring::new(k, page_bytes, batch_pages, self.options.slots) {
                Ok(r) => self.ring = Some(r),
                Err(e) => {
                    // The kernels went into the failed ring; reload them for the next try.
                    self.kernels = Lz4Kernels::new(gpu).ok();
                    return Err(e);
                }
            }
        }
        Ok(self.ring.as_mut().expect("ring set above"))
    }

    fn compress_gpu(&mut self, input: &[u8], page_bytes: usize) -> Result<CompressedPages> {
        let ring = self.ring(page_bytes)?;
        let batch = ring.batch_bytes();
        let n_slots = ring.slots.len();
        let mut data = Vec::with_capacity(input.len() / 2);
        let mut pages = Vec::with_capacity(input.len().div_ceil(page_bytes));
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        let drain = |ring: &mut Ring,
                     i: usize,
                     data: &mut Vec<u8>,
                     pages: &mut Vec<PageEntry>|
         -> Result<()> {
            ring.wait(i)?;
            let slot = &mut ring.slots[i];
            for k in 0..slot.entries.len() {
                let e = slot.entries[k];
                pages.push(PageEntry {
                    offset: data.len(),
                    ..e
                });
                data.extend_from_slice(slot.stored(k));
            }
            slot.state = super::ring::State::Free;
            Ok(())
        };
        for (b, chunk) in input.chunks(batch).enumerate() {
            let i = b % n_slots;
            if in_flight.len() == n_slots {
                let oldest = in_flight.pop_front().expect("ring is full");
                drain(ring, oldest, &mut data, &mut pages)?;
            }
            let dst = &mut ring.slots[i].h_in.slice_mut()[..chunk.len()];
            dst.par_chunks_mut(1 << 20)
                .zip(chunk.par_chunks(1 << 20))
                .for_each(|(d, s)| d.copy_from_slice(s));
            ring.submit(i, chunk.len())?;
            in_flight.push_back(i);
            ring.poll(in_flight.iter().copied())?;
        }
        while let Some(i) = in_flight.pop_front() {
            drain(ring, i, &mut data, &mut pages)?;
        }
        Ok(CompressedPages {
            page_bytes,
            data,
            pages,
            path: CodecPath::Gpu,
        })
    }

    fn decompress_gpu(&mut self, pages: &CompressedPages, out: &mut Vec<u8>) -> Result<()> {
        let k = self
            .kernels
            .as_ref()
            .or(self.ring.as_ref().map(|r| &r.kernels))
            .ok_or_else(|| Error::NoDevice {
                reason: "GPU path retired".into(),
            })?;
        let pb = pages.page_bytes;
        check_page_bytes(pb)?;
        let n = pages.pages.len();
        let words = decompress_entries(&pages.pages, pb)?;
        let s = k.gpu().stream().clone();
        let drv = Error::driver;
        // The kernel reads the data in 16-byte chunks: pad it to a multiple of 16.
        let mut padded = s
            .alloc_zeros::<u8>(pages.data.len().div_ceil(16) * 16 + 16)
            .map_err(drv("cuMemAlloc"))?;
        if !pages.data.is_empty() {
            s.memcpy_htod(&pages.data[..], &mut padded.slice_mut(0..pages.data.len()))
                .map_err(drv("cuMemcpyHtoD (lz4 blocks)"))?;
        }
        let entries = s
            .clone_htod(&words)
            .map_err(drv("cuMemcpyHtoD (lz4 entries)"))?;
        let mut output = s
            .alloc_zeros::<u8>((n * pb).max(1))
            .map_err(drv("cuMemAlloc"))?;
        let mut status = s.alloc_zeros::<u32>(n.max(1)).map_err(drv("cuMemAlloc"))?;
        k.decompress(
            &s,
            &padded.slice(..),
            &entries.slice(..),
            n,
            pb,
            &mut output.slice_mut(..),
            &mut status.slice_mut(..),
        )?;
        let status_h = s
            .clone_dtoh(&status)
            .map_err(drv("cuMemcpyDtoH (lz4 status)"))?;
        let out_h = s
            .clone_dtoh(&output)
            .map_err(drv("cuMemcpyDtoH (lz4 pages)"))?;
        s.synchronize()
            .map_err(drv("synchronizing lz4 decompress"))?;
        check_decompress_status(&status_h[..n])?;
        for (k, e) in pages.pages.iter().enumerate() {
            out.extend_from_slice(&out_h[k * pb..k * pb + e.original_bytes]);
        }
        Ok(())
    }

    /// Seconds to compress `input` (at most one ring's worth, already in the pinned input
    /// buffers) `passes` times between pinned host buffers: uploads, kernels and downloads of
    /// consecutive batches overlap when `overlap`, else each batch finishes before the next
    /// starts. For benches; host time, excluding the host copies into pinned memory.
    pub fn time_pinned_pipeline(
        &mut self,
        input: &[u8],
        page_bytes: usize,
        passes: usize,
        overlap: bool,
    ) -> Result<f64> {
        check_page_bytes(page_bytes)?;
        let ring = self.ring(page_bytes)?;
        let batch = ring.batch_bytes();
        let batches: Vec<&[u8]> = input.chunks(batch).collect();
        if batches.len() > ring.slots.len() {
            return Err(Error::Capacity {
                what: "lz4 ring bytes".into(),
                needed: input.len(),
                capacity: batch * ring.slots.len(),
            });
        }
        for (i, chunk) in batches.iter().enumerate() {
            ring.slots[i].h_in.slice_mut()[..chunk.len()].copy_from_slice(chunk);
        }
        let start = Instant::now();
        let mut in_flight: VecDeque<usize> = VecDeque::new();
        for _ in 0..passes {
            for (i, chunk) in batches.iter().enumerate() {
                if let Some(pos) = in_flight.iter().position(|&j| j == i) {
                    for _ in 0..=pos {
                        let j = in_flight.pop_front().expect("position found");
                        ring.wait(j)?;
                        ring.slots[j].state = super::ring::State::Free;
                    }
                }
                ring.submit(i, chunk.len())?;
                in_flight.push_back(i);
                if overlap {
                    ring.poll(in_flight.iter().copied())?;
                } else {
                    ring.wait(i)?;
                    ring.slots[i].state = super::ring::State::Free;
                    in_flight.clear();
                }
            }
        }
        while let Some(j) = in_flight.pop_front() {
            ring.wait(j)?;
            ring.slots[j].state = super::ring::State::Free;
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

impl PageCodec for GpuPageCodec {
    fn path(&self) -> CodecPath {
        if self.failure.is_none() {
            CodecPath::Gpu
        } else {
            CodecPath::Cpu
        }
    }

    fn compress_pages(&mut self, input: &[u8], page_bytes: usize) -> Result<CompressedPages> {
        check_page_bytes(page_bytes)?;
        if self.failure.is_none() {
            match self.compress_gpu(input, page_bytes) {
                Ok(p) => return Ok(p),
                Err(e) if device_failure(&e) => self.retire(&e),
                Err(e) => return Err(e),
            }
        }
        // The whole input again on the CPU: nothing of a failed GPU attempt is kept.
        CpuPageCodec.compress_pages(input, page_bytes)
    }

    fn decompress_pages(&mut self, pages: &CompressedPages, out: &mut Vec<u8>) -> Result<()> {
        if self.failure.is_none() {
            let start = out.len();
            match self.decompress_gpu(pages, out) {
                Ok(()) => return Ok(()),
                Err(e) if device_failure(&e) => {
                    out.truncate(start);
                    self.retire(&e);
                }
                Err(e) => return Err(e),
            }
        }
        CpuPageCodec.decompress_pages(pages, out)
    }
}
