//! Page-locked host buffers. Staging buffers for host-to-device copies are write-combined (fast
//! for the copy engine to read, slow for the CPU to read back); buffers the CPU reads after a
//! device-to-host copy are plain pinned memory.
//!
//! Errors: [`Error::Capacity`] for a buffer larger than the address space allows; otherwise
//! [`Error::Driver`] naming the driver call that failed (a pinned allocation the system refuses
//! included).

use super::device::Gpu;
use crate::{Error, Result};
use cudarc::driver::{sys, CudaEvent, CudaStream, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

/// Which way a pinned buffer's data flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinnedKind {
    /// Host writes, device reads: write-combined.
    Upload,
    /// Device writes, host reads: plain pinned (cached).
    Download,
}

/// A pinned host buffer of `len` elements, zero-initialised.
///
/// With cudarc's event tracking off, cudarc no longer knows when a copy still uses the buffer,
/// so the buffer keeps its own event: [`PinnedBuffer::record_use`] after enqueuing a copy (the
/// `copy_*` helpers do it), and the host views and `Drop` wait on it.
pub struct PinnedBuffer<T: DeviceRepr> {
    inner: PinnedHostSlice<T>,
    kind: PinnedKind,
    in_use: CudaEvent,
}

impl<T: DeviceRepr + ValidAsZeroBits> PinnedBuffer<T> {
    /// Allocates `len` elements (at least one) of page-locked memory for `kind` traffic.
    pub fn new(gpu: &Gpu, len: usize, kind: PinnedKind) -> Result<Self> {
        let flags = match kind {
            PinnedKind::Upload => sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            PinnedKind::Download => 0,
        };
        // SAFETY: the allocation is zeroed below before anyone can read it, and T is valid as
        // all-zero bits.
        if len
            .checked_mul(std::mem::size_of::<T>())
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(Error::Capacity {
                what: "pinned host buffer".into(),
                needed: len,
                capacity: isize::MAX as usize / std::mem::size_of::<T>().max(1),
            });
        }
        let in_use = gpu
            .ctx()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(Error::driver("cuEventCreate"))?;
        let mut inner = unsafe { gpu.ctx().alloc_pinned_with_flags::<T>(len.max(1), flags) }
            .map_err(Error::driver("cuMemHostAlloc"))?;
        let s = inner
            .as_mut_slice()
            .map_err(Error::driver("pinned buffer event sync"))?;
        // SAFETY: `s` covers exactly the allocation; zero bits are a valid T (ValidAsZeroBits).
        unsafe { std::ptr::write_bytes(s.as_mut_ptr(), 0, s.len()) };
        Ok(PinnedBuffer {
            inner,
            kind,
            in_use,
        })
    }

    /// The direction this buffer was allocated for.
    pub fn kind(&self) -> PinnedKind {
        self.kind
    }

    /// Elements allocated.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Never true (at least one element is allocated).
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Marks the buffer as used by everything enqueued on `stream` so far.
    pub fn record_use(&self, stream: &CudaStream) -> Result<()> {
        self.in_use
            .record(stream)
            .map_err(Error::driver("cuEventRecord (pinned buffer)"))
    }

    /// Blocks until the last recorded use has finished.
    pub fn wait_idle(&self) -> Result<()> {
        self.in_use
            .synchronize()
            .map_err(Error::driver("cuEventSynchronize (pinned buffer)"))
    }

    /// The host view, after the last recorded copy has finished.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.wait_idle()?;
        self.inner
            .as_slice()
            .map_err(Error::driver("pinned buffer event sync"))
    }

    /// The mutable host view, after the last recorded copy has finished.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.wait_idle()?;
        self.inner
            .as_mut_slice()
            .map_err(Error::driver("pinned buffer event sync"))
    }

    /// The cudarc pinned slice, for `memcpy_htod`/`memcpy_dtoh`; call
    /// [`PinnedBuffer::record_use`] on the copy's stream right after enqueuing.
    pub fn raw(&self) -> &PinnedHostSlice<T> {
        &self.inner
    }

    /// The cudarc pinned slice, mutable; see [`PinnedBuffer::raw`].
    pub fn raw_mut(&mut self) -> &mut PinnedHostSlice<T> {
        &mut self.inner
    }
}

impl<T: DeviceRepr> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // A copy may still read or write this memory: let it finish before cudarc frees it.
        let _ = self.in_use.synchronize();
    }
}
