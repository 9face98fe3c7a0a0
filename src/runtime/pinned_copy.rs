//! Copies in and out of a [`PinnedBuffer`]: synchronous ones between the buffer and host slices
//! (`write`, `read`, `fill`), and asynchronous ones between the buffer and device memory on a
//! stream (`upload`, `download`), which record the buffer's event so that host views and `Drop`
//! wait for them (see `pinned.rs`).
//!
//! Errors: [`Error::Capacity`] for a range that leaves the buffer, [`Error::Shape`] for device
//! memory shorter than the copy, [`Error::Driver`] naming the call that failed.

use super::pinned::{PinnedBuffer, DEVICE_READS, DEVICE_WRITES};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `offset..offset + n` if it lies inside `len` elements, else a capacity error.
pub(crate) fn span(len: usize, offset: usize, n: usize) -> Result<Range<usize>> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(offset..end),
        _ => Err(Error::Capacity {
            what: "pinned host buffer (elements)".into(),
            needed: offset.saturating_add(n),
            capacity: len,
        }),
    }
}

/// Checks that device memory of `device_len` elements holds a copy of `n`.
pub(crate) fn device_room(what: &str, device_len: usize, n: usize) -> Result<()> {
    if device_len < n {
        return Err(Error::Shape {
            what: format!("device side of a pinned {what}"),
            expected: format!("at least {n} elements"),
            got: device_len.to_string(),
        });
    }
    Ok(())
}

impl<T: DeviceRepr + Copy> PinnedBuffer<T> {
    /// Copies `values` into the buffer at `offset` (waits for copies still using the buffer).
    pub fn write(&mut self, offset: usize, values: &[T]) -> Result<()> {
        let r = span(self.len(), offset, values.len())?;
        self.as_mut_slice()?[r].copy_from_slice(values);
        Ok(())
    }

    /// Sets `n` elements from `offset` to `value` (waits for copies still using the buffer).
    pub fn fill(&mut self, offset: usize, n: usize, value: T) -> Result<()> {
        let r = span(self.len(), offset, n)?;
        self.as_mut_slice()?[r].fill(value);
        Ok(())
    }

    /// Copies `out.len()` elements from `offset` into `out` (waits for downloads into the
    /// buffer).
    pub fn read(&self, offset: usize, out: &mut [T]) -> Result<()> {
        let r = span(self.len(), offset, out.len())?;
        out.copy_from_slice(&self.as_slice()?[r]);
        Ok(())
    }
}

impl<T: DeviceRepr> PinnedBuffer<T> {
    /// Enqueues on `stream` a copy of `self[range]` to the start of `dst` and returns before it
    /// runs. The host may still read the buffer meanwhile; a mutable view waits for the copy.
    pub fn upload<D: DevicePtrMut<T>>(
        &mut self,
        stream: &Arc<CudaStream>,
        range: Range<usize>,
        dst: &mut D,
    ) -> Result<()> {
        let n = range.end.checked_sub(range.start).ok_or_else(|| {
            Error::input(format!("pinned upload of the reversed range {range:?}"))
        })?;
        let r = span(self.len(), range.start, n)?;
        device_room("upload", dst.len(), r.len())?;
        if r.is_empty() {
            return Ok(());
        }
        self.after_recorded(stream)?;
        stream
            .memcpy_htod(&self.raw_slice()[r], dst)
            .map_err(Error::driver("cuMemcpyHtoDAsync (pinned upload)"))?;
        self.record(stream, DEVICE_READS)
    }

    /// Enqueues on `stream` a copy of all of `src` into the buffer at `offset` and returns
    /// before it runs; host views wait for it.
    pub fn download<S: DevicePtr<T>>(
        &mut self,
        stream: &Arc<CudaStream>,
        src: &S,
        offset: usize,
    ) -> Result<()> {
        let r = span(self.len(), offset, src.len())?;
        if r.is_empty() {
            return Ok(());
        }
        self.after_recorded(stream)?;
        stream
            .memcpy_dtoh(src, &mut self.raw_slice_mut()[r])
            .map_err(Error::driver("cuMemcpyDtoHAsync (pinned download)"))?;
        self.record(stream, DEVICE_WRITES)
    }

    /// As [`PinnedBuffer::download`], then blocks until everything enqueued on `stream` (the
    /// copy included) has finished. Records no event and leaves nothing for a view to wait for:
    /// the cheaper choice (by an event record and a wait) when the caller would synchronize the
    /// stream anyway. Errors from earlier work on the stream surface here.
    pub fn download_now<S: DevicePtr<T>>(
        &mut self,
        stream: &Arc<CudaStream>,
        src: &S,
        offset: usize,
    ) -> Result<()> {
        let r = span(self.len(), offset, src.len())?;
        self.after_recorded(stream)?;
        if !r.is_empty() {
            stream
                .memcpy_dtoh(src, &mut self.raw_slice_mut()[r])
                .map_err(Error::driver("cuMemcpyDtoHAsync (pinned download)"))?;
        }
        stream
            .synchronize()
            .map_err(Error::driver("cuStreamSynchronize (pinned download)"))?;
        // The stream waited for every recorded copy before this one, so all have finished.
        self.pending.store(0, Ordering::Release);
        Ok(())
    }

    /// Marks the buffer as read and written by everything enqueued on `stream` so far (a
    /// kernel using a mapped buffer, a copy made outside these methods): host views and `Drop`
    /// then wait for that work too.
    pub fn record_use(&mut self, stream: &CudaStream) -> Result<()> {
        self.record(stream, DEVICE_READS | DEVICE_WRITES)
    }

    /// Orders `stream` after the copies recorded so far, so that one event always covers every
    /// pending copy, whichever streams they ran on.
    fn after_recorded(&self, stream: &CudaStream) -> Result<()> {
        if self.pending.load(Ordering::Acquire) != 0 {
            stream
                .wait(&self.in_use)
                .map_err(Error::driver("cuStreamWaitEvent (pinned buffer)"))?;
        }
        Ok(())
    }

    fn record(&mut self, stream: &CudaStream, bits: u8) -> Result<()> {
        // Marked before recording: if the record fails, views still try to wait.
        self.pending.fetch_or(bits, Ordering::AcqRel);
        self.in_use
            .record(stream)
            .map_err(Error::driver("cuEventRecord (pinned buffer)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_inside_the_buffer_pass() {
        assert_eq!(span(10, 0, 10).unwrap(), 0..10);
        assert_eq!(span(10, 3, 4).unwrap(), 3..7);
        assert_eq!(span(10, 10, 0).unwrap(), 10..10);
    }

    #[test]
    fn spans_past_the_end_or_overflowing_are_capacity_errors() {
        for (offset, n, needed) in [(0, 11, 11), (10, 1, 11), (usize::MAX, 2, usize::MAX)] {
            match span(10, offset, n) {
                Err(Error::Capacity {
                    needed: got,
                    capacity: 10,
                    ..
                }) => assert_eq!(got, needed),
                other => panic!("{offset}+{n}: {other:?}"),
            }
        }
    }

    #[test]
    fn short_device_memory_is_a_shape_error() {
        assert!(device_room("upload", 8, 8).is_ok());
        let e = device_room("upload", 7, 8).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
        assert!(e.to_string().contains("at least 8"), "{e}");
    }
}
