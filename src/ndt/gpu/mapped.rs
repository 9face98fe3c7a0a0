//! The NDT pipeline's page-locked host buffers under the name it uses: [`MappedBuffer`] is a
//! [`PinnedBuffer`] (the runtime's one host-memory type, which it dereferences to) that is
//! mapped into the device's address space when created so. Mapped, kernels write results
//! directly over the bus ("zero-copy"), so a per-iteration result needs no copy command;
//! unmapped, it is the staging buffer of asynchronous copies.

use crate::runtime::{Gpu, PinnedBuffer, PinnedKind};
use crate::Result;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

pub use crate::runtime::device_can_map;

/// A pinned host buffer of `len` elements, mapped for the device when created so.
pub struct MappedBuffer<T: DeviceRepr>(PinnedBuffer<T>);

impl<T: DeviceRepr + ValidAsZeroBits> MappedBuffer<T> {
    /// Allocates `len` (at least 1) zeroed elements, mapped for the device when `mapped`.
    ///
    /// Errors: as [`PinnedBuffer::new`] (e.g. `mapped` on a device that cannot map host memory).
    pub fn new(gpu: &Gpu, len: usize, mapped: bool) -> Result<Self> {
        let kind = if mapped {
            PinnedKind::Mapped
        } else {
            PinnedKind::Download
        };
        PinnedBuffer::new(gpu, len, kind).map(MappedBuffer)
    }
}

impl<T: DeviceRepr> std::ops::Deref for MappedBuffer<T> {
    type Target = PinnedBuffer<T>;
    fn deref(&self) -> &PinnedBuffer<T> {
        &self.0
    }
}

impl<T: DeviceRepr> std::ops::DerefMut for MappedBuffer<T> {
    fn deref_mut(&mut self) -> &mut PinnedBuffer<T> {
        &mut self.0
    }
}
