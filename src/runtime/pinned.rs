//! Page-locked host buffers. Staging buffers for host-to-device copies are write-combined (fast
//! for the copy engine to read, slow for the CPU to read back); buffers the CPU reads after a
//! device-to-host copy are plain pinned memory.

use super::device::Gpu;
use crate::{Error, Result};
use cudarc::driver::{sys, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

/// Which way a pinned buffer's data flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinnedKind {
    /// Host writes, device reads: write-combined.
    Upload,
    /// Device writes, host reads: plain pinned (cached).
    Download,
}

/// A pinned host buffer of `len` elements, zero-initialised.
pub struct PinnedBuffer<T: DeviceRepr> {
    inner: PinnedHostSlice<T>,
    kind: PinnedKind,
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
        let mut inner = unsafe { gpu.ctx().alloc_pinned_with_flags::<T>(len.max(1), flags) }
            .map_err(Error::driver("cuMemHostAlloc"))?;
        let s = inner.as_mut_slice().map_err(Error::driver("pinned buffer event sync"))?;
        // SAFETY: `s` covers exactly the allocation; zero bits are a valid T (ValidAsZeroBits).
        unsafe { std::ptr::write_bytes(s.as_mut_ptr(), 0, s.len()) };
        Ok(PinnedBuffer { inner, kind })
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

    /// The host view; waits for any copy that still uses the buffer.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.inner.as_slice().map_err(Error::driver("pinned buffer event sync"))
    }

    /// The mutable host view; waits for any copy that still uses the buffer.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.inner.as_mut_slice().map_err(Error::driver("pinned buffer event sync"))
    }

    /// The cudarc pinned slice, for `memcpy_htod`/`memcpy_dtoh`.
    pub fn raw(&self) -> &PinnedHostSlice<T> {
        &self.inner
    }

    /// The cudarc pinned slice, mutable.
    pub fn raw_mut(&mut self) -> &mut PinnedHostSlice<T> {
        &mut self.inner
    }
}
