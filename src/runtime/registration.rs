//! Page-locking memory that someone else allocated (`cuMemHostRegister`): [`HostRegistration`],
//! the primitive for registering a caller's memory in place for the length of its copies, and
//! [`PinnedBuffer::registered`], a [`PinnedBuffer`] over page-aligned memory from the Rust
//! allocator registered that way.

use super::device::Gpu;
use super::pinned::{new_event, Backing, PinnedBuffer, PinnedKind};
use crate::{Error, Result};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, DeviceRepr, ValidAsZeroBits};
use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::Arc;

/// The host page size registered memory is aligned and rounded to.
const PAGE: usize = 4096;
/// A transparent huge page (x86-64).
const HUGE: usize = 2 << 20;

/// What the device may do with registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceAccess {
    /// Copies only read it (`CU_MEMHOSTREGISTER_READ_ONLY`: also accepts read-only mappings).
    Reads,
    /// Copies may write it.
    ReadsAndWrites,
}

/// One registered host range; unregistered when dropped.
#[derive(Debug)]
pub struct HostRegistration {
    ptr: *mut c_void,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: a registration is a process-wide driver object that any thread may end; the struct
// never dereferences `ptr` (only hands it back to the driver in Drop).
unsafe impl Send for HostRegistration {}
// SAFETY: `&self` gives out only the address and length, no access to the memory.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Page-locks the `len` bytes at `ptr` in `ctx` for `access`.
    ///
    /// Errors: [`Error::Driver`] when the driver refuses (memory already registered,
    /// `ReadsAndWrites` on a read-only mapping, no support for registration).
    ///
    /// # Safety
    /// `ptr..ptr + len` must be one live allocation (or mapping) of this process that outlives
    /// the returned value, and the value must be dropped only after every copy that uses the
    /// range has completed.
    pub unsafe fn new(
        ctx: &Arc<CudaContext>,
        ptr: *mut u8,
        len: usize,
        access: DeviceAccess,
    ) -> Result<Self> {
        let flags = match access {
            DeviceAccess::Reads => sys::CU_MEMHOSTREGISTER_READ_ONLY,
            DeviceAccess::ReadsAndWrites => 0,
        };
        ctx.bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        // SAFETY: the caller's contract: a live range that outlives the registration; the
        // driver only pins its pages and records them.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, flags) }
            .result()
            .map_err(Error::driver("cuMemHostRegister"))?;
        Ok(HostRegistration {
            ptr: ptr.cast(),
            len,
            ctx: ctx.clone(),
        })
    }

    /// The first byte registered.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.cast()
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty registration (the driver refuses those, so never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: registered in `new` at this address; a failed unregister (a dead context)
        // leaves nothing the host can undo.
        unsafe {
            let _ = sys::cuMemHostUnregister(self.ptr);
        }
    }
}

/// The layout registered memory of `bytes` bytes is allocated with: whole pages, page-aligned
/// (`cuMemHostRegister` pins whole pages; sharing one with another allocation would pin it too).
pub(crate) fn registered_layout(bytes: usize) -> Result<Layout> {
    let limit = isize::MAX as usize - PAGE;
    bytes
        .max(1)
        .checked_next_multiple_of(PAGE)
        .filter(|&size| size <= limit)
        .and_then(|size| Layout::from_size_align(size, PAGE).ok())
        .ok_or(Error::Capacity {
            what: "registered host buffer (bytes)".into(),
            needed: bytes,
            capacity: limit,
        })
}

impl<T: DeviceRepr + ValidAsZeroBits> PinnedBuffer<T> {
    /// `len` elements (at least one) of ordinary, page-aligned host memory that the driver
    /// page-locks (`cuMemHostRegister`): the copy engine reaches it like [`PinnedBuffer::new`]'s
    /// memory while the CPU keeps its ordinary cached mapping. Its kind is
    /// [`PinnedKind::Download`].
    ///
    /// Errors: [`Error::Capacity`] for a size beyond the address space or a host allocation
    /// the system refuses; [`Error::Driver`] when the registration fails.
    pub fn registered(gpu: &Gpu, len: usize) -> Result<Self> {
        Self::registered_with(gpu, len, false)
    }

    /// Like [`PinnedBuffer::registered`], but 2 MiB-aligned and whole 2 MiB pieces, with
    /// transparent huge pages asked for (`MADV_HUGEPAGE`, Linux) before the memory is first
    /// touched: a streaming copy through it then takes one TLB entry per 2 MiB instead of per
    /// 4 KiB. Where the kernel gives no huge pages it is ordinary registered memory.
    pub fn registered_huge(gpu: &Gpu, len: usize) -> Result<Self> {
        Self::registered_with(gpu, len, true)
    }

    fn registered_with(gpu: &Gpu, len: usize, huge: bool) -> Result<Self> {
        let len = len.max(1);
        let bytes = crate::size::bytes_of::<T>("registered host buffer", len)?;
        let layout = registered_layout(bytes)?;
        let layout = match huge {
            true => Layout::from_size_align(layout.size().next_multiple_of(HUGE), HUGE).map_err(
                |_| Error::Capacity {
                    what: "registered host buffer (bytes)".into(),
                    needed: bytes,
                    capacity: isize::MAX as usize - HUGE,
                },
            )?,
            false => layout,
        };
        let in_use = new_event(gpu)?;
        // SAFETY: the layout has a non-zero size (at least one page); the advice and the
        // zeroing cover exactly the allocation just made, which nothing else uses yet.
        let raw = unsafe {
            if huge {
                let raw = std::alloc::alloc(layout);
                if !raw.is_null() {
                    #[cfg(target_os = "linux")]
                    // The advice only sets how the untouched pages get backed; a refusal (THP
                    // off) leaves ordinary pages.
                    libc::madvise(raw.cast(), layout.size(), libc::MADV_HUGEPAGE);
                    std::ptr::write_bytes(raw, 0, layout.size());
                }
                raw
            } else {
                std::alloc::alloc_zeroed(layout)
            }
        };
        if raw.is_null() {
            return Err(Error::Capacity {
                what: "registered host buffer (host allocation refused, bytes)".into(),
                needed: layout.size(),
                capacity: 0,
            });
        }
        let access = DeviceAccess::ReadsAndWrites;
        // SAFETY: `raw..raw + size` is a live allocation nothing else uses; Drop ends the
        // registration (after waiting for the copies) before it frees the pages.
        let registration =
            match unsafe { HostRegistration::new(gpu.ctx(), raw, layout.size(), access) } {
                Ok(r) => Some(r),
                Err(e) => {
                    // SAFETY: allocated above with this layout, not registered, no view handed out.
                    unsafe { std::alloc::dealloc(raw, layout) };
                    return Err(e);
                }
            };
        let backing = Backing::Registered {
            layout,
            registration,
        };
        Self::adopt(raw.cast(), len, PinnedKind::Download, backing, in_use)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_memory_is_whole_aligned_pages() {
        for (bytes, size) in [(0, PAGE), (1, PAGE), (PAGE, PAGE), (PAGE + 1, 2 * PAGE)] {
            let l = registered_layout(bytes).unwrap();
            assert_eq!((l.size(), l.align()), (size, PAGE), "{bytes} bytes");
        }
    }

    #[test]
    fn registered_sizes_beyond_the_address_space_are_capacity_errors() {
        for bytes in [
            usize::MAX,
            isize::MAX as usize,
            isize::MAX as usize - PAGE + 1,
        ] {
            let e = registered_layout(bytes).unwrap_err();
            assert!(
                matches!(e, Error::Capacity { needed, .. } if needed == bytes),
                "{e}"
            );
        }
    }
}
