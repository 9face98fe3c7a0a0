//! The host memory the LZ4 rings copy through, under the names the rings use: [`Pinned`]
//! (driver-allocated page-locked memory) and [`Registered`] (ordinary page-aligned memory the
//! driver page-locks). Both are [`PinnedBuffer`]s; these wrappers only fix the constructors and
//! give views that never fail, so that the rings can still finish a batch on the CPU after the
//! device failed (see [`PinnedBuffer::host`]).
//!
//! The rings enqueue their copies with cudarc's stream copies on these views, not through
//! [`PinnedBuffer::upload`] / [`PinnedBuffer::download`], so the buffers' own events do not see
//! them: each slot's events order them instead (the host touches a slot's buffers only after
//! waiting for the event of the copy that used them; see `ring.rs`).

use crate::runtime::{Gpu, PinnedBuffer, PinnedKind};
use crate::Result;
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use std::sync::atomic::{AtomicBool, Ordering};

static HUGE_SLOTS: AtomicBool = AtomicBool::new(false);

/// Whether rings allocated from now on stage bytes through registered memory backed by
/// transparent huge pages ([`PinnedBuffer::registered_huge`]) instead of `cuMemHostAlloc`
/// memory and 4 KiB-page registered memory (off by default; benches compare them). The slot
/// copies then take one TLB entry per 2 MiB of a slot. Measured no faster (H200 machines,
/// 2026-11-26, 31 alternating rounds from ordinary memory: compression 0.980x and 1.024x,
/// decompression 1.021x and 1.016x the time with the default slots).
pub fn set_huge_slots(on: bool) {
    HUGE_SLOTS.store(on, Ordering::Relaxed);
}

/// See [`set_huge_slots`].
pub fn huge_slots() -> bool {
    HUGE_SLOTS.load(Ordering::Relaxed)
}

/// Page-locked memory from `cuMemHostAlloc`.
pub(crate) struct Pinned<T: DeviceRepr>(PinnedBuffer<T>);

impl<T: DeviceRepr + ValidAsZeroBits> Pinned<T> {
    pub(crate) fn new(gpu: &Gpu, len: usize, kind: PinnedKind) -> Result<Self> {
        PinnedBuffer::new(gpu, len, kind).map(Pinned)
    }

    pub(crate) fn slice(&self) -> &[T] {
        self.0.host()
    }

    pub(crate) fn slice_mut(&mut self) -> &mut [T] {
        self.0.host_mut()
    }
}

impl Pinned<u8> {
    /// A slot's staging bytes: `cuMemHostAlloc` memory of `kind`, or with [`huge_slots`]
    /// huge-page registered memory (always cached, like [`PinnedKind::Download`]).
    pub(crate) fn staging(gpu: &Gpu, len: usize, kind: PinnedKind) -> Result<Self> {
        match huge_slots() {
            true => PinnedBuffer::registered_huge(gpu, len).map(Pinned),
            false => Self::new(gpu, len, kind),
        }
    }
}

/// Page-aligned host memory registered with the driver (`cuMemHostRegister`): the device copies
/// into it like any pinned buffer, while the CPU keeps its ordinary cached mapping. Download
/// buffers use it (it was introduced while chasing slow host-side reads of downloaded pages; the
/// bench's later host-read figure showed `cuMemHostAlloc` memory reads as fast as ordinary
/// memory, so either kind works).
pub(crate) struct Registered(PinnedBuffer<u8>);

impl Registered {
    pub(crate) fn new(gpu: &Gpu, len: usize) -> Result<Self> {
        match huge_slots() {
            true => PinnedBuffer::registered_huge(gpu, len).map(Registered),
            false => PinnedBuffer::registered(gpu, len).map(Registered),
        }
    }

    pub(crate) fn slice(&self) -> &[u8] {
        self.0.host()
    }

    pub(crate) fn slice_mut(&mut self) -> &mut [u8] {
        self.0.host_mut()
    }
}
