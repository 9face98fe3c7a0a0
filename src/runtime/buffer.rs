//! Typed device buffers with a fixed capacity and a current length. Pipelines allocate them once
//! and reuse them; an upload larger than the capacity is an [`Error::Capacity`], never an
//! out-of-bounds write. Copies run on the stream the caller passes.

use crate::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// A device allocation of `capacity` elements of `T`, of which the first `len` are in use.
///
/// The buffer is allocated and zeroed on its owner stream. Copies on another stream first wait
/// for the owner (cudarc's per-slice event tracking is off, see `Gpu`); the buffer is freed on
/// the owner stream when dropped, so work on other streams that uses it must be synchronized
/// before the drop.
pub struct DeviceBuffer<T: DeviceRepr> {
    slice: CudaSlice<T>,
    len: usize,
    what: &'static str,
    owner: Arc<CudaStream>,
}

impl<T: DeviceRepr + ValidAsZeroBits> DeviceBuffer<T> {
    /// A zero-filled buffer of `capacity` elements (at least one, so the pointer is valid).
    /// `what` names the buffer in capacity errors.
    pub fn zeros(stream: &Arc<CudaStream>, capacity: usize, what: &'static str) -> Result<Self> {
        // cudarc multiplies without a check; a wrapped size would under-allocate.
        crate::size::bytes_of::<T>(what, capacity)?;
        let slice = stream
            .alloc_zeros::<T>(capacity.max(1))
            .map_err(Error::driver("cuMemAlloc"))?;
        Ok(DeviceBuffer {
            slice,
            len: 0,
            what,
            owner: stream.clone(),
        })
    }

    /// A buffer holding a copy of `data` (capacity = its length).
    pub fn from_host(stream: &Arc<CudaStream>, data: &[T], what: &'static str) -> Result<Self> {
        let mut b = Self::zeros(stream, data.len(), what)?;
        b.upload(stream, data)?;
        Ok(b)
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Elements in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no element is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements allocated.
    pub fn capacity(&self) -> usize {
        self.slice.len()
    }

    /// Bytes allocated on the device.
    pub fn allocated_bytes(&self) -> usize {
        self.slice.len() * std::mem::size_of::<T>()
    }

    /// Sets the number of elements in use (for buffers a kernel fills).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        self.check(len)?;
        self.len = len;
        Ok(())
    }

    /// Orders `stream` after the owner stream's work (allocation, zeroing, earlier copies).
    fn after_owner(&self, stream: &Arc<CudaStream>) -> Result<()> {
        if !Arc::ptr_eq(stream, &self.owner) {
            stream
                .join(&self.owner)
                .map_err(Error::driver("cuStreamWaitEvent (buffer owner)"))?;
        }
        Ok(())
    }

    /// The stream the buffer was allocated on.
    pub fn owner(&self) -> &Arc<CudaStream> {
        &self.owner
    }

    fn check(&self, needed: usize) -> Result<()> {
        if needed > self.capacity() {
            return Err(Error::Capacity {
                what: self.what.to_string(),
                needed,
                capacity: self.capacity(),
            });
        }
        Ok(())
    }

    /// Copies `data` to the start of the buffer on `stream`; `len` becomes `data.len()`.
    pub fn upload(&mut self, stream: &Arc<CudaStream>, data: &[T]) -> Result<()> {
        self.check(data.len())?;
        self.after_owner(stream)?;
        if !data.is_empty() {
            let mut dst = self.slice.slice_mut(0..data.len());
            stream
                .memcpy_htod(data, &mut dst)
                .map_err(Error::driver("cuMemcpyHtoDAsync"))?;
        }
        self.len = data.len();
        Ok(())
    }

    /// Copies the first `out.len()` elements to `out` (waits for the copy to finish).
    pub fn download_into(&self, stream: &Arc<CudaStream>, out: &mut [T]) -> Result<()> {
        if out.len() > self.len {
            return Err(Error::Shape {
                what: format!("download from {}", self.what),
                expected: format!("at most {} elements", self.len),
                got: out.len().to_string(),
            });
        }
        self.after_owner(stream)?;
        if !out.is_empty() {
            let src = self.slice.slice(0..out.len());
            stream
                .memcpy_dtoh(&src, out)
                .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
            stream
                .synchronize()
                .map_err(Error::driver("synchronizing a download"))?;
        }
        Ok(())
    }

    /// The elements in use, copied to a new vector.
    pub fn to_vec(&self, stream: &Arc<CudaStream>) -> Result<Vec<T>>
    where
        T: Default + Clone,
    {
        let mut v = vec![T::default(); self.len];
        self.download_into(stream, &mut v)?;
        Ok(v)
    }

    /// The underlying cudarc slice (whole capacity), for kernel arguments.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// The underlying cudarc slice, mutable.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}
