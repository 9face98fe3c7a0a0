//! [`Slot`]: a device buffer of the GPU field that grows (reallocates) only when a larger size
//! is needed, so a training loop does not allocate per step.

use crate::runtime::DeviceBuffer;
use crate::{Error, Result};
use cudarc::driver::{CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// A device buffer slot that grows (reallocates) only when a larger size is needed.
pub(super) struct Slot<T: DeviceRepr> {
    pub(super) buf: Option<DeviceBuffer<T>>,
    what: &'static str,
}

impl<T: DeviceRepr + ValidAsZeroBits> Slot<T> {
    pub(super) fn new(what: &'static str) -> Self {
        Slot { buf: None, what }
    }
    pub(super) fn ensure(
        &mut self,
        stream: &Arc<CudaStream>,
        len: usize,
    ) -> Result<&mut DeviceBuffer<T>> {
        if self.buf.as_ref().is_none_or(|b| b.capacity() < len) {
            self.buf = Some(DeviceBuffer::zeros(stream, len, self.what)?);
        }
        let buf = self.buf.as_mut().expect("allocated just above");
        buf.set_len(len)?;
        Ok(buf)
    }
    pub(super) fn get(&self) -> Result<&DeviceBuffer<T>> {
        self.buf
            .as_ref()
            .ok_or_else(|| Error::input(format!("{} is not on the device yet", self.what)))
    }
    pub(super) fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.allocated_bytes())
    }
}
