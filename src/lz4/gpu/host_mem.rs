//! Host memory the LZ4 rings copy through: [`Pinned`] (page-locked allocations whose host view
//! is taken once) and [`Registered`] (ordinary page-aligned memory registered with the driver).

use crate::runtime::{PinnedBuffer, PinnedKind};
use crate::{Error, Result};
use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

/// A pinned buffer with its host view taken once at allocation, so the host can still read it
/// after the CUDA context has failed (cudarc's accessors synchronize an event first, which a
/// failed context refuses).
pub(crate) struct Pinned<T: DeviceRepr> {
    _buf: PinnedBuffer<T>,
    ptr: *mut T,
    len: usize,
}

// SAFETY: `ptr` points into the page-locked allocation `_buf` owns for the struct's lifetime and
// is only reached through `&self` / `&mut self`, like the buffer itself (which is Send).
unsafe impl<T: DeviceRepr + Send> Send for Pinned<T> {}

impl<T: DeviceRepr + ValidAsZeroBits> Pinned<T> {
    pub(crate) fn new(gpu: &crate::runtime::Gpu, len: usize, kind: PinnedKind) -> Result<Self> {
        let mut buf = PinnedBuffer::new(gpu, len, kind)?;
        let s = buf.as_mut_slice()?;
        let (ptr, len) = (s.as_mut_ptr(), s.len());
        Ok(Pinned {
            _buf: buf,
            ptr,
            len,
        })
    }

    pub(crate) fn slice(&self) -> &[T] {
        // SAFETY: see the Send impl; the allocation holds `len` initialised (zeroed) elements.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn slice_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Page-aligned host memory registered with the driver (`cuMemHostRegister`): the device copies
/// into it like any pinned buffer, while the CPU keeps its ordinary cached mapping. Download
/// buffers use it (it was introduced while chasing slow host-side reads of downloaded pages; the
/// bench's later host-read figure showed `cuMemHostAlloc` memory reads as fast as ordinary
/// memory, so either kind works).
pub(crate) struct Registered {
    ptr: *mut u8,
    layout: std::alloc::Layout,
    len: usize,
}

// SAFETY: the struct owns its allocation exclusively; access goes through `&self`/`&mut self`.
unsafe impl Send for Registered {}

impl Registered {
    pub(crate) fn new(gpu: &crate::runtime::Gpu, len: usize) -> Result<Self> {
        let size = len.max(1).div_ceil(4096) * 4096;
        let layout =
            std::alloc::Layout::from_size_align(size, 4096).map_err(|_| Error::Capacity {
                what: "lz4 download buffer".into(),
                needed: len,
                capacity: isize::MAX as usize,
            })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::Capacity {
                what: "lz4 download buffer (host memory)".into(),
                needed: size,
                capacity: 0,
            });
        }
        gpu.ctx()
            .bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        // SAFETY: `ptr..ptr + size` is a live allocation owned by the value being built; it is
        // unregistered in Drop before it is freed.
        let r = unsafe { cudarc::driver::sys::cuMemHostRegister_v2(ptr.cast(), size, 0) }.result();
        if let Err(e) = r {
            // SAFETY: allocated above with this layout and not registered.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(Error::Driver {
                call: "cuMemHostRegister",
                source: e,
            });
        }
        Ok(Registered { ptr, layout, len })
    }

    pub(crate) fn slice(&self) -> &[u8] {
        // SAFETY: `len <= layout.size()` zero-initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; a failed unregister (dead context) leaves nothing to undo.
        unsafe {
            let _ = cudarc::driver::sys::cuMemHostUnregister(self.ptr.cast());
            std::alloc::dealloc(self.ptr, self.layout);
        }
    }
}
