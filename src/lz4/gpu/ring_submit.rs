//! Enqueuing one compress-ring slot's work (upload, `lz4_compress`, info download and, eager, the
//! packed download) on the ring's streams; see `ring` for the stream layout and slot cycle.

use super::kernels::Lz4Kernels;
use super::layout::info_words;
use super::ring::{Slot, State, COMPUTE, D2H, H2D, INFO};
use crate::runtime::StreamSet;
use crate::{Error, Result};

/// What enqueuing a slot's work needs besides the slot: shared by the ring's loop, which
/// submits one slot while other threads fill and drain others.
pub(crate) struct Submit<'a> {
    pub(crate) streams: &'a StreamSet,
    pub(crate) kernels: &'a Lz4Kernels,
    pub(crate) page_bytes: usize,
    pub(crate) eager: bool,
}

impl Submit<'_> {
    /// Enqueues upload, kernel and info download (and with `eager` the packed download) of
    /// `slot` (number `i`), whose `h_in` (or registered input) holds `input_bytes`.
    pub(crate) fn submit(&self, slot: &mut Slot, i: usize, input_bytes: usize) -> Result<()> {
        let (pb, streams) = (self.page_bytes, self.streams);
        debug_assert_eq!(slot.state, State::Free);
        slot.input_bytes = input_bytes;
        slot.entries.clear();
        slot.eager_d2h = self.eager;
        let n = input_bytes.div_ceil(pb);
        let words = info_words(n);
        let h2d = streams.get(H2D);
        // The copies read h_in (or the caller's registered memory) asynchronously; the host
        // writes h_in again, or unregisters, only once this slot has gone through `finish` /
        // `wait`, which follow the copies' completion.
        let up = Error::driver("cuMemcpyHtoDAsync (lz4 input)");
        match &slot.ext {
            Some(ext) => {
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
            None if input_bytes > 0 => {
                h2d.memcpy_htod(
                    &slot.h_in.slice()[..input_bytes],
                    &mut slot.d_in.slice_mut(0..input_bytes),
                )
                .map_err(up)?;
            }
            None => {}
        }
        slot.ev_h2d
            .record(h2d)
            .map_err(Error::driver("cuEventRecord"))?;
        let compute = streams.get(COMPUTE + i);
        compute
            .wait(&slot.ev_h2d)
            .map_err(Error::driver("cuStreamWaitEvent"))?;
        let input = slot.d_in.slice(0..input_bytes.max(1));
        let mut packed = slot.d_packed.slice_mut(..);
        let mut info = slot.d_info.slice_mut(0..words);
        self.kernels.compress(
            compute,
            &input,
            input_bytes,
            pb,
            &mut slot.scratch,
            &mut packed,
            &mut info,
        )?;
        slot.ev_kernel
            .record(compute)
            .map_err(Error::driver("cuEventRecord"))?;
        let info_s = streams.get(INFO);
        info_s
            .wait(&slot.ev_kernel)
            .map_err(Error::driver("cuStreamWaitEvent"))?;
        info_s
            .memcpy_dtoh(
                &slot.d_info.slice(0..words),
                &mut slot.h_info.slice_mut()[..words],
            )
            .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 info)"))?;
        slot.ev_info
            .record(info_s)
            .map_err(Error::driver("cuEventRecord"))?;
        if self.eager {
            // Every stored page takes at most its page, 16-byte aligned: n pages fit n * pb.
            let bound = (n * pb).min(slot.d_packed.len());
            let d2h = streams.get(D2H);
            d2h.wait(&slot.ev_kernel)
                .map_err(Error::driver("cuStreamWaitEvent"))?;
            d2h.memcpy_dtoh(
                &slot.d_packed.slice(0..bound),
                &mut slot.h_out.slice_mut()[..bound],
            )
            .map_err(Error::driver("cuMemcpyDtoHAsync (lz4 packed, eager)"))?;
            slot.ev_d2h
                .record(d2h)
                .map_err(Error::driver("cuEventRecord"))?;
        }
        slot.state = State::Submitted;
        Ok(())
    }
}
