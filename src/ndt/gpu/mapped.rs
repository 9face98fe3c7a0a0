//! Page-locked host memory, optionally mapped into the device's address space ("zero-copy"):
//! kernels then write it directly over the bus, so a per-iteration result needs no copy command.
//! Unmapped, it is the staging buffer of asynchronous copies.
//!
//! Host accesses are volatile and happen only while no launch or copy that uses the buffer is in
//! flight (the owner synchronizes its stream before reading results and writing new requests).

use crate::runtime::Gpu;
use crate::{Error, Result};
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};
use cudarc::driver::{DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

/// A pinned host buffer of `len` elements, mapped for the device when created so.
pub struct MappedBuffer<T: DeviceRepr> {
    /// Owns the allocation (freed on drop).
    _host: PinnedHostSlice<T>,
    ptr: *mut T,
    device_ptr: Option<u64>,
    len: usize,
}

// SAFETY: the buffer owns its allocation (PinnedHostSlice is Send); the raw pointer is only
// dereferenced through `&self`/`&mut self` methods, so moving the owner to another thread moves
// exclusive access with it.
unsafe impl<T: DeviceRepr + Send> Send for MappedBuffer<T> {}

/// Whether the device can address mapped host memory through unified addressing.
pub fn device_can_map(gpu: &Gpu) -> bool {
    let a = |x| gpu.ctx().attribute(x).unwrap_or(0);
    a(Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) == 1
        && a(Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy> MappedBuffer<T> {
    /// Allocates `len` (at least 1) zeroed elements, mapped for the device when `mapped`.
    ///
    /// Errors: [`Error::Capacity`] when `len` elements exceed `isize::MAX` bytes;
    /// [`Error::Driver`] when the allocation or the device-pointer query fails (e.g. `mapped` on a
    /// device that cannot map host memory).
    pub fn new(gpu: &Gpu, len: usize, mapped: bool) -> Result<Self> {
        let len = len.max(1);
        // cudarc multiplies without a check; a wrapped size would under-allocate.
        crate::size::bytes_of::<T>("mapped host buffer", len)?;
        let map_flag = if mapped {
            sys::CU_MEMHOSTALLOC_DEVICEMAP
        } else {
            0
        };
        let flags = map_flag | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: the memory is zeroed below before any read; T is valid as all-zero bits.
        let mut host = unsafe { gpu.ctx().alloc_pinned_with_flags::<T>(len, flags) }
            .map_err(Error::driver("cuMemHostAlloc (mapped)"))?;
        let ptr = host
            .as_mut_ptr()
            .map_err(Error::driver("pinned buffer event sync"))?;
        // SAFETY: `ptr` points to `len` elements owned by `host`; zero bits are a valid T.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        let device_ptr = if mapped {
            let mut d: sys::CUdeviceptr = 0;
            gpu.ctx()
                .bind_to_thread()
                .map_err(Error::driver("binding the context"))?;
            // SAFETY: `ptr` was returned by cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP in this
            // context; the call only writes the device address into `d`.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, ptr.cast(), 0) }
                .result()
                .map_err(Error::driver("cuMemHostGetDevicePointer"))?;
            Some(d)
        } else {
            None
        };
        Ok(MappedBuffer {
            _host: host,
            ptr,
            device_ptr,
            len,
        })
    }

    /// Elements allocated.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (at least one element).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device address of element 0, for kernel arguments (`None` when not mapped).
    pub fn device_ptr(&self) -> Option<u64> {
        self.device_ptr
    }

    /// The host address of element 0 (for copies in and out of device buffers).
    pub fn host_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Writes `values` at `offset` (volatile: the device reads them). Errors: [`Error::Capacity`]
    /// beyond the end.
    pub fn write(&mut self, offset: usize, values: &[T]) -> Result<()> {
        self.check(offset, values.len())?;
        for (k, v) in values.iter().enumerate() {
            // SAFETY: in bounds (checked above); no launch using the buffer is in flight while
            // the owner holds `&mut self` between synchronizations.
            unsafe { self.ptr.add(offset + k).write_volatile(*v) };
        }
        Ok(())
    }

    /// Sets `n` elements from `offset` to `value` (volatile).
    pub fn fill(&mut self, offset: usize, n: usize, value: T) -> Result<()> {
        self.check(offset, n)?;
        for k in 0..n {
            // SAFETY: in bounds (checked above); no launch using the buffer is in flight.
            unsafe { self.ptr.add(offset + k).write_volatile(value) };
        }
        Ok(())
    }

    /// Reads `out.len()` elements from `offset` (volatile: the device wrote them).
    pub fn read(&self, offset: usize, out: &mut [T]) -> Result<()> {
        self.check(offset, out.len())?;
        for (k, o) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above); the owner synchronized the stream, so the
            // device's writes are complete and visible.
            *o = unsafe { self.ptr.add(offset + k).read_volatile() };
        }
        Ok(())
    }

    fn check(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::Capacity {
                what: "mapped host buffer".into(),
                needed: offset.saturating_add(n),
                capacity: self.len,
            }),
        }
    }
}
