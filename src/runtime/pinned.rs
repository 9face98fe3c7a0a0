//! Page-locked ("pinned") host memory: the one type every pipeline stages host data in.
//!
//! A [`PinnedBuffer`] is either allocated by the driver (`cuMemHostAlloc`, [`PinnedBuffer::new`])
//! or ordinary page-aligned memory that the driver page-locks (`cuMemHostRegister`,
//! [`PinnedBuffer::registered`]). [`PinnedKind`] says which way the data flows: upload staging
//! is write-combined (fast for the copy engine to read, slow for the CPU to read back), download
//! buffers are cached, and mapped buffers are also addressable by kernels ("zero-copy": a kernel
//! writes results straight into host memory over the bus).
//!
//! How it stays sound: the asynchronous copies ([`PinnedBuffer::upload`],
//! [`PinnedBuffer::download`], in `pinned_copy.rs`) take `&mut self` and record the buffer's own
//! event on the copy's stream. A host view waits for that event first (a read-only view only
//! when a download may still write the memory, a mutable view for any copy), and `Drop` waits
//! before the memory is freed. A kernel that writes a mapped buffer through
//! [`PinnedBuffer::device_ptr`] is outside this tracking: its launch is `unsafe`, and part of
//! that contract is that the host looks at the buffer only after synchronizing the stream.
//!
//! Errors: [`Error::Capacity`] for a buffer larger than the address space allows;
//! [`Error::Driver`] naming the driver call that failed (a page-locked allocation the system
//! refuses included).

use super::device::Gpu;
use super::registration::HostRegistration;
use crate::{Error, Result};
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};
use cudarc::driver::{result as cu, CudaEvent, DeviceRepr, ValidAsZeroBits};
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};

/// Which way a pinned buffer's data flows (and so how it is allocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinnedKind {
    /// Host writes, device reads: write-combined (avoid reading it back on the host).
    Upload,
    /// Device writes, host reads (or the host reads back what it staged): cached.
    Download,
    /// Cached, and mapped into the device's address space: kernels read and write it through
    /// [`PinnedBuffer::device_ptr`]. Needs [`device_can_map`].
    Mapped,
}

impl PinnedKind {
    /// The `cuMemHostAlloc` flags of this kind.
    pub(crate) fn alloc_flags(self) -> u32 {
        match self {
            PinnedKind::Upload => sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            PinnedKind::Download => 0,
            // Portable: the mapping stays valid whichever context is current.
            PinnedKind::Mapped => sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
        }
    }
}

/// Whether the device can address mapped host memory through unified addressing (what
/// [`PinnedKind::Mapped`] needs). A failed attribute query counts as "no".
pub fn device_can_map(gpu: &Gpu) -> bool {
    let a = |x| gpu.ctx().attribute(x).unwrap_or(0);
    a(Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) == 1
        && a(Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1
}

/// Bits of [`PinnedBuffer`]'s `pending` word: copies recorded on `in_use` and not yet waited for.
pub(super) const DEVICE_READS: u8 = 1;
pub(super) const DEVICE_WRITES: u8 = 2;

/// Who owns the pages (and so how they are given back).
pub(super) enum Backing {
    /// `cuMemHostAlloc`; freed with `cuMemFreeHost`.
    Driver,
    /// The Rust allocator with `layout`, page-locked by `registration` (always `Some` until
    /// Drop ends it before freeing the pages).
    Registered {
        layout: Layout,
        registration: Option<HostRegistration>,
    },
}

/// `len` elements of `T` in page-locked host memory, zero-initialised (at least one element,
/// so the pointer is always valid).
///
/// The buffer keeps its own event: asynchronous copies record it, host views and `Drop` wait
/// for it (see the module docs).
pub struct PinnedBuffer<T: DeviceRepr> {
    ptr: NonNull<T>,
    len: usize,
    kind: PinnedKind,
    backing: Backing,
    device_ptr: Option<u64>,
    pub(super) in_use: CudaEvent,
    /// [`DEVICE_READS`] | [`DEVICE_WRITES`] of the copies recorded on `in_use` since the last wait.
    pub(super) pending: AtomicU8,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its pages exclusively (nothing else holds `ptr`); the memory is only
// reached through `&self` (shared views) and `&mut self` (mutable views, copies), so moving the
// owner to another thread moves that access with it. CudaEvent is Send.
unsafe impl<T: DeviceRepr + Send> Send for PinnedBuffer<T> {}
// SAFETY: `&self` methods only read the memory (after waiting for device writes), query the
// event (thread-safe in the driver) or update `pending` atomically.
unsafe impl<T: DeviceRepr + Sync> Sync for PinnedBuffer<T> {}

impl<T: DeviceRepr + ValidAsZeroBits> PinnedBuffer<T> {
    /// Allocates `len` elements (at least one) of page-locked memory for `kind` traffic.
    ///
    /// Errors: [`Error::Capacity`] when `len` elements exceed `isize::MAX` bytes;
    /// [`Error::Driver`] when the system refuses the allocation, or for [`PinnedKind::Mapped`]
    /// on a device that cannot map host memory.
    pub fn new(gpu: &Gpu, len: usize, kind: PinnedKind) -> Result<Self> {
        let len = len.max(1);
        let bytes = crate::size::bytes_of::<T>("pinned host buffer", len)?;
        let in_use = new_event(gpu)?;
        bind(gpu)?;
        // SAFETY: cuMemHostAlloc only writes the new address into its out-parameter; the memory
        // is zeroed below before any view of it exists.
        let raw = unsafe { cu::malloc_host(bytes, kind.alloc_flags()) }
            .map_err(Error::driver("cuMemHostAlloc"))?;
        let mut buf = Self::adopt(raw.cast(), len, kind, Backing::Driver, in_use)?;
        // SAFETY: `bytes` bytes at `ptr` were just allocated for this buffer alone, page-aligned
        // (so aligned for T); all-zero bits are a valid T (ValidAsZeroBits).
        unsafe { std::ptr::write_bytes(buf.ptr.as_ptr().cast::<u8>(), 0, bytes) };
        if kind == PinnedKind::Mapped {
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: `ptr` was returned by cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP in this
            // context (bound above); the call only writes the device address into `d`. On error
            // `buf`'s Drop frees the allocation.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, buf.ptr.as_ptr().cast(), 0) }
                .result()
                .map_err(Error::driver("cuMemHostGetDevicePointer"))?;
            buf.device_ptr = Some(d);
        }
        Ok(buf)
    }

    pub(super) fn adopt(
        raw: *mut T,
        len: usize,
        kind: PinnedKind,
        backing: Backing,
        in_use: CudaEvent,
    ) -> Result<Self> {
        let ptr = NonNull::new(raw).ok_or_else(|| Error::Input {
            what: "the driver returned a null page-locked allocation".into(),
        })?;
        Ok(PinnedBuffer {
            ptr,
            len,
            kind,
            backing,
            device_ptr: None,
            in_use,
            pending: AtomicU8::new(0),
            _owns: PhantomData,
        })
    }
}

pub(super) fn new_event(gpu: &Gpu) -> Result<CudaEvent> {
    gpu.ctx()
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(Error::driver("cuEventCreate (pinned buffer)"))
}

pub(super) fn bind(gpu: &Gpu) -> Result<()> {
    gpu.ctx()
        .bind_to_thread()
        .map_err(Error::driver("binding the context"))
}

impl<T: DeviceRepr> PinnedBuffer<T> {
    /// The direction this buffer was allocated for.
    pub fn kind(&self) -> PinnedKind {
        self.kind
    }

    /// Whether the memory is registered ordinary memory ([`PinnedBuffer::registered`]).
    pub fn is_registered(&self) -> bool {
        matches!(self.backing, Backing::Registered { .. })
    }

    /// Elements allocated.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (at least one element is allocated).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated (of `T`; registered memory is rounded up to whole pages beyond this).
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device address of element 0, for kernel arguments; `Some` only for
    /// [`PinnedKind::Mapped`]. Whoever launches a kernel with it promises (in the launch's
    /// `SAFETY`) that the host does not view the buffer before the stream is synchronized.
    pub fn device_ptr(&self) -> Option<u64> {
        self.device_ptr
    }

    /// Blocks until every recorded copy has finished.
    pub fn wait_idle(&self) -> Result<()> {
        self.wait_for(DEVICE_READS | DEVICE_WRITES)
    }

    /// Waits for the recorded copies if any of `bits` is pending.
    fn wait_for(&self, bits: u8) -> Result<()> {
        if self.pending.load(Ordering::Acquire) & bits != 0 {
            self.in_use
                .synchronize()
                .map_err(Error::driver("cuEventSynchronize (pinned buffer)"))?;
            self.pending.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// The host view, once no download may still write it.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.wait_for(DEVICE_WRITES)?;
        Ok(self.raw_slice())
    }

    /// The mutable host view, once no copy may still use it.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.wait_idle()?;
        Ok(self.raw_slice_mut())
    }

    /// As [`PinnedBuffer::as_slice`], for callers that cannot fail: when the wait itself fails
    /// the context has hit a sticky error, after which it runs no copy any more (the error comes
    /// back from the next call on any stream), so the view is safe to hand out regardless.
    /// The LZ4 rings use it to finish a batch on the CPU after the device failed.
    pub fn host(&self) -> &[T] {
        if self.wait_for(DEVICE_WRITES).is_err() {
            self.pending.store(0, Ordering::Release);
        }
        self.raw_slice()
    }

    /// The mutable form of [`PinnedBuffer::host`].
    pub fn host_mut(&mut self) -> &mut [T] {
        if self.wait_idle().is_err() {
            self.pending.store(0, Ordering::Release);
        }
        self.raw_slice_mut()
    }

    /// The whole allocation without waiting: only for enqueuing copies (which order themselves
    /// after the recorded ones) and for the views above, after their wait.
    pub(super) fn raw_slice(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised (zeroed, then only written as T) elements
        // owned by `self` for its whole life; callers have waited for device writes or only
        // hand the slice to the copy engine.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mutable form of `raw_slice`.
    pub(super) fn raw_slice_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `raw_slice`; `&mut self` makes this the only host view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DeviceRepr> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // A copy may still read or write this memory: let it finish before the pages go back.
        // A failed wait means a dead context, which runs no copy any more.
        let _ = self.wait_idle();
        let p = self.ptr.as_ptr().cast::<u8>();
        match &mut self.backing {
            Backing::Driver => {
                let _ = self.in_use.context().bind_to_thread();
                // SAFETY: `p` came from cuMemHostAlloc and is freed exactly once, here; no view
                // outlives `self`.
                let _ = unsafe { cu::free_host(p.cast()) };
            }
            Backing::Registered {
                layout,
                registration,
            } => {
                drop(registration.take());
                // SAFETY: allocated in `registered` with `layout`, now unregistered, freed once.
                unsafe { std::alloc::dealloc(p, *layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_their_allocation_flags() {
        assert_eq!(
            PinnedKind::Upload.alloc_flags(),
            sys::CU_MEMHOSTALLOC_WRITECOMBINED
        );
        assert_eq!(PinnedKind::Download.alloc_flags(), 0);
        let m = PinnedKind::Mapped.alloc_flags();
        assert_ne!(m & sys::CU_MEMHOSTALLOC_DEVICEMAP, 0);
        assert_eq!(
            m & sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            0,
            "mapped results are read back"
        );
    }
}
