//! Enqueuing one compress-ring slot's work (upload, `lz4_compress`, info download and, eager, the
//! packed download) on the ring's streams; see `ring` for the stream layout and slot cycle.

use super::kernels::Lz4Kernels;
use super::layout::info_words;
use super::ring::{compute_stream, Slot, State, COMPUTE, D2H, H2D, INFO};
use super::ring_parts::{part_count, part_plan};
use crate::runtime::StreamSet;
use crate::{Error, Result};

/// What enqueuing a slot's work needs besides the slot: shared by the ring's loop, which
/// submits one slot while other threads fill and drain others.
pub(crate) struct Submit<'a> {
    pub(crate) streams: &'a StreamSet,
    pub(crate) kernels: &'a Lz4Kernels,
    pub(crate) page_bytes: usize,
    pub(crate) eager: bool,
    /// With `eager` and a batch in parts: fetch about this many packed bytes per input byte of
    /// each part (plus a margin) instead of the part's whole bound (`HostTuning::guess_download`).
    pub(crate) guess: Option<f64>,
}

/// The bytes an eager download of a part fetches: its whole `bound`, or with a `guess` of packed
/// bytes per input byte, that share of the part's `input` bytes plus a margin (1/32 and 16 KiB),
/// in whole 4 KiB, at most the bound.
pub(crate) fn eager_fetch(bound: usize, input: usize, guess: Option<f64>) -> usize {
    match guess {
        None => bound,
        Some(r) => {
            let want = (input as f64 * r.clamp(0.0, 2.0) * (1.0 + 1.0 / 32.0)) as usize;
            (want + (16 << 10)).next_multiple_of(4096).min(bound)
        }
    }
}

impl Submit<'_> {
    /// Enqueues upload, kernel and info download (and with `eager` the packed download) of
    /// `slot` (number `i` of `slots`), whose `h_in` (or registered input) holds `input_bytes`,
    /// in `parts` parts (see `ring_parts`; one where the input is registered or the download
    /// waits for the info).
    pub(crate) fn submit(
        &self,
        slot: &mut Slot,
        (i, slots): (usize, usize),
        input_bytes: usize,
        parts: usize,
    ) -> Result<()> {
        let (pb, streams) = (self.page_bytes, self.streams);
        debug_assert_eq!(slot.state, State::Free);
        slot.input_bytes = input_bytes;
        slot.entries.clear();
        slot.eager_d2h = self.eager;
        let n = input_bytes.div_ceil(pb);
        let parts = if self.eager && slot.ext.is_none() {
            part_count(n, parts)
        } else {
            1
        };
        slot.parts = parts;
        let guess = self.guess.filter(|_| parts > 1);
        let h2d = streams.get(H2D);
        // The copies read h_in (or the caller's registered memory) asynchronously; the host
        // writes h_in again, or unregisters, only once this slot has gone through `finish` /
        // `wait` / the drain of every part, which follow the copies' completion.
        let up = Error::driver("cuMemcpyHtoDAsync (lz4 input)");
        if let Some(ext) = &slot.ext {
            let src = ext.bytes();
            for (at, len) in ext.staged() {
                if len > 0 {
                    h2d.memcpy_htod(
                        &slot.h_in.slice()[at..at + len],
                        &mut slot.d_in.slice_mut(at..at + len),
                    )
                    .map_err(up)?;
                }
            }
            for &(at, len) in &ext.parts {
                h2d.memcpy_htod(&src[at..at + len], &mut slot.d_in.slice_mut(at..at + len))
                    .map_err(up)?;
            }
        }
        let mut scratch_at = 0;
        for (j, part) in part_plan(n, parts).enumerate() {
            let ev = &slot.ev[j];
            let at = part.byte_at(pb);
            let bytes = part.input_bytes(input_bytes, pb);
            if slot.ext.is_none() && bytes > 0 {
                h2d.memcpy_htod(
                    &slot.h_in.slice()[at..at + bytes],
                    &mut slot.d_in.slice_mut(at..at + bytes),
                )
                .map_err(up)?;
            }
            ev.h2d.record(h2d).map_err(Error::driver("cuEventRecord"))?;
            let compute = streams.get(COMPUTE + compute_stream(slots, i, j));
            compute
                .wait(&ev.h2d)
                .map_err(Error::driver("cuStreamWaitEvent"))?;
            let words = info_words(part.pages);
            let info_at = part.info_at;
            let input = slot.d_in.slice(at..at + bytes.max(1));
            // The part's packed region: its pages' bound, from its first byte.
            let bound = (part.pages * pb).min(slot.d_packed.len() - at);
            let mut packed = slot.d_packed.slice_mut(at..at + bound);
            let mut info = slot.d_info.slice_mut(info_at..info_at + words);
            // Each part's kernel has scratch of its own: the parts' kernels may run at once.
            let warps = self.kernels.compress_geometry(pb, part.pages).warps() as usize;
            let end = (scratch_at + warps * pb).min(slot.scratch.len());
            let mut scratch = slot.scratch.slice_mut(scratch_at..end);
            scratch_at = end;
            self.kernels.compress_in(
                compute,
                &input,
                bytes,
                pb,
                &mut scratch,
                &mut packed,
                &mut info,
            )?;
            ev.kernel
                .record(compute)
                .map_err(Error::driver("cuEventRecord"))?;
            // Eager: the info words and the packed bound come down one after the other on the
            // download stream (one wait for the kernel; the drain needs both). Otherwise the
            // info comes alone on its own stream, for the host to size the download.
            let down = streams.get(if self.eager { D2H } else { INFO });
            down.wait(&ev.kernel)
                .map_err(Error::driver("cuStreamWaitEvent"))?;
            down.memcpy_dtoh(
                &slot.d_info.slice(info_at..info_at + words),
                &mut slot.h_info.slice_mut()[info_at..info_at + words],
            )
            .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 info)"))?;
            ev.info
                .record(down)
                .map_err(Error::driver("cuEventRecord"))?;
            if self.eager {
                // Every stored page takes at most its page, 16-byte aligned: the part's pages
                // fit its bound. With a guess, the drain fetches what the guess missed.
                let fetch = eager_fetch(bound, bytes, guess);
                slot.fetched[j] = fetch;
                down.memcpy_dtoh(
                    &slot.d_packed.slice(at..at + fetch),
                    &mut slot.h_out.slice_mut()[at..at + fetch],
                )
                .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 packed, eager)"))?;
                ev.d2h
                    .record(down)
                    .map_err(Error::driver("cuEventRecord"))?;
            }
        }
        slot.state = State::Submitted;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::eager_fetch;

    #[test]
    fn guessed_fetch_has_a_margin_and_stays_in_the_bound() {
        let bound = 8 << 20;
        assert_eq!(eager_fetch(bound, bound, None), bound);
        // dickens: ~0.77 packed bytes per input byte; the guess keeps 1/32 and 16 KiB over it.
        let f = eager_fetch(bound, bound, Some(0.77));
        assert!(f >= (bound as f64 * 0.77 * 1.03) as usize && f < bound && f.is_multiple_of(4096));
        assert_eq!(eager_fetch(bound, bound, Some(1.0)), bound);
        assert_eq!(eager_fetch(bound, bound, Some(f64::NAN)), 16 << 10);
        assert_eq!(eager_fetch(4096, 100, Some(0.0)), 4096);
    }
}
