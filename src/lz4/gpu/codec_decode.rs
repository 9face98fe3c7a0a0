//! GPU decompression of [`CompressedPages`] through the decode ring: stored pages staged into
//! pinned slots, decoded pages copied out, or written by the device straight into the caller's
//! registered output where the tuning asks for it (see `register`).

use super::codec::{ramp, GpuPageCodec};
use super::register::ExtOutput;
use super::register_ahead::{with_registrar, Ahead, AHEAD_WINDOW};
use super::stage::stage_pages;
use crate::kernels::lz4::status;
use crate::lz4::par::{par_extend_from_slot, reserve_output};
use crate::lz4::{check_page_bytes, CompressedPages, PageEntry};
use crate::{Error, Result};
use std::sync::Arc;

impl GpuPageCodec {
    pub(super) fn decompress_gpu(
        &mut self,
        pages: &CompressedPages,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let pb = pages.page_bytes;
        check_page_bytes(pb)?;
        let n = pages.pages.len();
        let last_full = pages.pages.len().saturating_sub(1);
        reserve_output(out, pages.original_bytes());
        let (pieces, lead) = (self.tuning.register_pieces, self.tuning.register_ahead);
        let threads = self.tuning.register_threads;
        let parallel = self.tuning.parallel_stage;
        let ring = self.decode_ring(pb)?;
        let ctx = ring.kernels.gpu().ctx().clone();
        let bp = ring.batch_pages;
        // Whole pages back to back (all but possibly the very last): one contiguous output.
        let dense = |first: usize, entries: &[PageEntry]| {
            entries
                .iter()
                .enumerate()
                .all(|(k, e)| e.original_bytes == pb || first + k == last_full)
        };
        // The output's spare capacity (reserved above, so it does not move) as an address the
        // fill may register batch by batch: the device then writes dense batches in place.
        let spare = out.as_mut_ptr() as usize + out.len();
        // Batches as page ranges, quarter batches at the end as for compression (see `ramp`).
        let mut plan = Vec::with_capacity(n / bp + 8);
        let mut a = 0;
        while a < n {
            let b = (a + ramp(n - a, bp, 1)).min(n);
            plan.push((a, b));
            a = b;
        }
        let ahead = (lead > 0).then(|| {
            // Where each dense batch goes in the spare capacity (registered ahead).
            let mut produced = 0usize;
            let spans = plan.iter().map(|&(a, b)| {
                let entries = &pages.pages[a..b];
                let len: usize = entries.iter().map(|e| e.original_bytes).sum();
                let at = spare + produced;
                produced += len;
                dense(a, entries).then_some((at, len))
            });
            Arc::new(Ahead::new(spans.collect(), false, lead, AHEAD_WINDOW))
        });
        ring.ahead = ahead.clone();
        let (mut staged, mut drained, mut produced) = (0usize, 0usize, 0usize);
        let r = with_registrar(&ctx, ahead.as_deref(), threads, || {
            ring.decompress_stream_ext(
                |st| {
                    let Some(&(a, b)) = plan.get(staged) else {
                        return Ok((0, 0, None));
                    };
                    let used = stage_pages(&pages.data, &pages.pages[a..b], a, pb, st, parallel)?;
                    let entries = &pages.pages[a..b];
                    let len: usize = entries.iter().map(|e| e.original_bytes).sum();
                    let ext = if let Some(ah) = &ahead {
                        ah.take(staged)
                    } else if pieces > 0 && dense(a, entries) {
                        // SAFETY: `spare + produced .. + len` lies in the reserved capacity past
                        // every byte the sink has written; nothing touches it until this batch is
                        // drained, after its downloads (the stream resets on errors first).
                        unsafe {
                            ExtOutput::for_output(&ctx, (spare + produced) as *mut u8, len, pieces)
                        }
                    } else {
                        None
                    };
                    produced += len;
                    staged += 1;
                    Ok((b - a, used, ext))
                },
                |d| {
                    let first = drained;
                    drained += d.pages;
                    if let Some(k) = d.status.iter().position(|&w| w & status::CODE_MASK != 0) {
                        let code = d.status[k] & status::CODE_MASK;
                        return Err(Error::Corrupt {
                            what: format!(
                                "page {}: {} (GPU status {code})",
                                first + k,
                                status::describe(code)
                            ),
                        });
                    }
                    let entries = &pages.pages[first..drained];
                    let len: usize = entries.iter().map(|e| e.original_bytes).sum();
                    if let Some(ext) = d.direct {
                        let base = out.len();
                        for (at, n) in ext.staged() {
                            // SAFETY: `base + at + n <= base + len` lies in the reserved capacity;
                            // the device wrote the rest of the batch in place (its downloads have
                            // completed), so after the head and tail every byte is initialised.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    d.out[at..at + n].as_ptr(),
                                    out.as_mut_ptr().add(base + at),
                                    n,
                                )
                            };
                        }
                        // SAFETY: see above: the batch's `len` bytes are all written.
                        unsafe { out.set_len(base + len) };
                    } else if dense(first, entries) {
                        par_extend_from_slot(out, &d.out[..len]);
                    } else {
                        for (k, e) in entries.iter().enumerate() {
                            out.extend_from_slice(&d.out[k * pb..k * pb + e.original_bytes]);
                        }
                    }
                    Ok(())
                },
            )
        });
        ring.ahead = None;
        if let Some(a) = &ahead {
            (ring.phases.registered, ring.phases.overtaken) = a.counts();
        }
        r
    }
}
