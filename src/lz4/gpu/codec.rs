//! [`GpuPageCodec`]: batch compression through the ring (`PageCodec`), and GPU decompression,
//! with the CPU path taking over when there is no device or any device operation fails.

use super::decode_ring::DecodeRing;
use super::kernels::Lz4Kernels;
use super::pipeline::CompressedBatch;
use super::register::ExtInput;
use super::register_ahead::{with_registrar, Ahead, AHEAD_WINDOW};
use super::ring::Ring;
use super::tuning::HostTuning;
use super::{device_failure, GpuOptions};
use crate::lz4::par::{par_copy_to_slot, par_extend_from_slot, reserve_output};
use crate::lz4::{
    check_page_bytes, CodecPath, CompressedPages, CpuPageCodec, PageCodec, PageEntry,
};
use crate::runtime::Gpu;
use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Page compression on the GPU when it works, on the CPU otherwise (same bytes either way).
/// After any device failure (a driver error such as a sticky illegal address, a failed launch,
/// an inconsistent kernel result) it stops using the device for good and says why.
pub struct GpuPageCodec {
    kernels: Option<Lz4Kernels>,
    pub(super) ring: Option<Ring>,
    pub(super) decode: Option<DecodeRing>,
    options: GpuOptions,
    failure: Option<String>,
    pub(super) tuning: HostTuning,
}

impl GpuPageCodec {
    /// A codec on `gpu` (kernels load now; buffers are allocated on first use per page size).
    pub fn new(gpu: Arc<Gpu>, options: GpuOptions) -> Result<Self> {
        Ok(GpuPageCodec {
            kernels: Some(Lz4Kernels::new(gpu)?),
            ring: None,
            decode: None,
            options,
            failure: None,
            tuning: HostTuning::default(),
        })
    }

    /// The GPU codec on the default device, or the CPU one with the reason when there is none.
    pub fn open_or_cpu(options: GpuOptions) -> Self {
        match Gpu::open_default().and_then(|g| Self::new(g, options)) {
            Ok(c) => c,
            Err(e) => GpuPageCodec {
                kernels: None,
                ring: None,
                decode: None,
                options,
                failure: Some(e.to_string()),
                tuning: HostTuning::default(),
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
    pub(super) fn retire(&mut self, e: &Error) {
        self.failure = Some(format!("GPU path stopped after: {e}"));
        self.ring = None;
        self.decode = None;
        self.kernels = None;
    }

    pub(super) fn ring(&mut self, page_bytes: usize) -> Result<&mut Ring> {
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
        let r = self.ring.as_mut().expect("ring set above");
        r.tuning = self.tuning;
        Ok(r)
    }

    pub(super) fn decode_ring(&mut self, page_bytes: usize) -> Result<&mut DecodeRing> {
        if self
            .decode
            .as_ref()
            .is_none_or(|r| r.page_bytes != page_bytes)
        {
            self.decode = None;
            let k = self.kernels().cloned().ok_or_else(|| Error::NoDevice {
                reason: "GPU path retired".into(),
            })?;
            let batch_pages = (self.options.batch_bytes / page_bytes).max(1);
            self.decode = Some(DecodeRing::new(
                k,
                page_bytes,
                batch_pages,
                self.options.slots,
            )?);
        }
        let r = self.decode.as_mut().expect("decode ring set above");
        r.tuning = self.tuning;
        Ok(r)
    }

    fn compress_gpu(
        &mut self,
        input: &[u8],
        page_bytes: usize,
        out: &mut CompressedPages,
    ) -> Result<()> {
        out.page_bytes = page_bytes;
        out.path = CodecPath::Gpu;
        out.data.clear();
        out.pages.clear();
        reserve_output(&mut out.data, input.len() + 64);
        out.pages.reserve(input.len().div_ceil(page_bytes));
        let (pieces, lead) = (self.tuning.register_pieces, self.tuning.register_ahead);
        let threads = self.tuning.register_threads;
        let ring = self.ring(page_bytes)?;
        let ctx = ring.kernels.gpu().ctx().clone();
        let plan = batch_plan(input.len(), ring.batch_bytes(), page_bytes);
        let base = input.as_ptr() as usize;
        let ahead = (lead > 0).then(|| {
            let spans = plan.iter().map(|&(at, n)| Some((base + at, n)));
            Arc::new(Ahead::new(spans.collect(), true, lead, AHEAD_WINDOW))
        });
        ring.ahead = ahead.clone();
        let (data, pages) = (&mut out.data, &mut out.pages);
        let mut next = 0;
        let fill = |buf: &mut [u8]| {
            let Some(&(at, take)) = plan.get(next) else {
                return Ok((0, None));
            };
            let (src, buf) = (&input[at..at + take], &mut buf[..take]);
            let ext = match &ahead {
                Some(a) => a.take(next).inspect(|e| e.stage_from(src, buf)),
                // SAFETY: `input` outlives the stream, which drops every ExtInput only after
                // the uploads that read it (drained slots, or `reset` after an error). `new`
                // stages the head and tail itself.
                None if pieces > 0 => unsafe { ExtInput::new(&ctx, src, buf, pieces) },
                None => None,
            };
            if ext.is_none() {
                par_copy_to_slot(buf, src);
            }
            next += 1;
            Ok((take, ext))
        };
        let sink = |batch: &CompressedBatch<'_>| {
            let base = data.len();
            par_extend_from_slot(data, batch.packed);
            pages.extend(batch.entries.iter().map(|e| PageEntry {
                offset: e.offset + base,
                ..*e
            }));
            Ok(())
        };
        let r = with_registrar(&ctx, ahead.as_deref(), threads, || {
            ring.compress_stream_ext(fill, sink)
        });
        ring.ahead = None;
        if let Some(a) = &ahead {
            (ring.phases.registered, ring.phases.overtaken) = a.counts();
        }
        r
    }

    /// Compresses `input` into `out` (its buffers reused, so repeated calls allocate nothing),
    /// on the GPU through the ring when it works, else on the CPU. Staging into pinned memory
    /// and the copy out overlap the device's work; memory is bounded by the ring. The stored
    /// pages may sit at 16-byte aligned offsets in `out.data` (use the entries). Fails like
    /// [`PageCodec::compress_pages`].
    pub fn compress_into(
        &mut self,
        input: &[u8],
        page_bytes: usize,
        out: &mut CompressedPages,
    ) -> Result<()> {
        check_page_bytes(page_bytes)?;
        if self.failure.is_none() {
            match self.compress_gpu(input, page_bytes, out) {
                Ok(()) => return Ok(()),
                Err(e) if device_failure(&e) => self.retire(&e),
                Err(e) => return Err(e),
            }
        }
        *out = CpuPageCodec.compress_pages(input, page_bytes)?;
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
        // On a device failure the whole input runs again on the CPU: nothing of the failed GPU
        // attempt is kept.
        let mut out = CompressedPages {
            page_bytes,
            data: Vec::new(),
            pages: Vec::new(),
            path: CodecPath::Gpu,
        };
        self.compress_into(input, page_bytes, &mut out)?;
        Ok(out)
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
                Err(e) => {
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
        CpuPageCodec.decompress_pages(pages, out)
    }
}

/// The batches (offset, bytes) the ring stages `len` bytes in, slots of `batch` bytes holding
/// pages of `page` bytes (full batches, then quarter batches; see [`ramp`]).
fn batch_plan(len: usize, batch: usize, page: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::with_capacity(len / batch.max(1) + 8);
    let mut at = 0;
    while at < len {
        let left = len - at;
        let take = batch.min(left).min(ramp(left, batch, page));
        v.push((at, take));
        at += take;
    }
    v
}

/// Bytes of the next batch when `left` bytes remain, batches hold `batch` and pages `page`: the
/// last two batches' worth goes in quarter batches, so the device's latency for the final batch
/// (upload, kernel, download, which no host work can hide) is a quarter of a full batch's.
pub(super) fn ramp(left: usize, batch: usize, page: usize) -> usize {
    if left > 2 * batch {
        batch
    } else {
        (batch / 4 / page).max(1) * page
    }
}

/// The codec and the page stream move between threads (a caller's worker, an `io::Write`).
#[allow(dead_code)]
fn assert_send() {
    fn send<T: Send>() {}
    send::<GpuPageCodec>();
    send::<super::GpuPageStream>();
    send::<super::GpuFrameDecoder>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_plan_covers_the_input_in_full_then_quarter_batches() {
        let (batch, page) = (16 << 10, 1024);
        for len in [
            0,
            1,
            1024,
            batch - 1,
            batch,
            2 * batch + 1,
            10 * batch + 4097,
        ] {
            let plan = batch_plan(len, batch, page);
            let mut at = 0;
            for &(o, n) in &plan {
                assert_eq!(o, at, "len {len}");
                assert!(n > 0 && n <= batch, "len {len}");
                assert_eq!(n, batch.min(len - o).min(ramp(len - o, batch, page)));
                at += n;
            }
            assert_eq!(at, len);
        }
    }
}
