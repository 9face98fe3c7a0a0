//! LZ4 page compression on the GPU: the `lz4_compress` kernel (one warp per page) and the
//! `lz4_decompress` / `lz4_decompress_wide` kernels (two pages per warp; one for pages above 32 KiB;
//! see `crate::kernels::lz4`) behind the [`PageCodec`](super::PageCodec) and [`PageStream`] seams.
//!
//! - [`layout`]: the host/kernel contract (geometry, info words, entries), CUDA-free;
//! - [`kernels`]: [`Lz4Kernels`], launches on device buffers;
//! - `ring`: pinned slots and four streams that overlap upload, kernel and download;
//! - [`codec`]: [`GpuPageCodec`] (batches); [`stream`]: [`GpuPageStream`] (the ring seam);
//! - [`frames`]: whole LZ4 frames decoded on the GPU ([`decode_frames_gpu`]).
//!
//! Both fall back to the CPU reference when there is no device or a device operation fails (a
//! sticky error poisons the context: the GPU path is then retired for good), producing the same
//! bytes and reporting [`CodecPath::Cpu`] with the reason.

pub mod codec;
mod codec_decode;
mod decode_ring;
pub mod frame_pipe;
pub mod frame_stream;
pub mod frames;
mod host_mem;
pub mod kernels;
pub mod layout;
pub mod pipeline;
pub mod reader;
mod register;
mod register_ahead;
mod ring;
mod ring_parts;
mod ring_steps;
mod ring_submit;
mod stage;
pub mod stream;
pub mod tuning;

pub use codec::GpuPageCodec;
pub use frame_pipe::{BatchSource, FileSource, HashJob, ReadSource, SliceSource};
pub use frame_stream::FrameStreamError;
pub use frames::decode_frames_gpu;
pub use host_mem::{huge_slots, set_huge_slots};
pub use kernels::Lz4Kernels;
pub use pipeline::CompressedBatch;
pub use reader::GpuFrameDecoder;
pub use stage::{DecodeStage, DecodedBatch};
pub use stream::GpuPageStream;
pub use tuning::{HostTuning, Phases};

use super::{CodecPath, CpuPageStream, PageStream};
use crate::runtime::Gpu;
use crate::{Error, Result};

/// Sizes of the pinned ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOptions {
    /// Input bytes per batch (one kernel launch); rounded down to whole pages, at least one.
    pub batch_bytes: usize,
    /// Batches in flight (slots of the ring), at least one.
    pub slots: usize,
}

impl Default for GpuOptions {
    /// 16 MiB batches (enough pages to fill an H100 several times over), 4 slots.
    fn default() -> Self {
        GpuOptions {
            batch_bytes: 16 << 20,
            slots: 4,
        }
    }
}

/// Most ring slots: each is a stream, pinned buffers and device buffers of a whole batch.
pub const MAX_SLOTS: usize = 64;

impl GpuOptions {
    /// Checks the ring sizes before anything is allocated: `slots` in `1..=64` and `batch_bytes`
    /// below 2³² (page offsets are 32-bit on the device); [`Error::Input`] otherwise.
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_SLOTS).contains(&self.slots) {
            return Err(Error::input(format!(
                "LZ4 GPU ring slots must lie in 1..={MAX_SLOTS}, got {}",
                self.slots
            )));
        }
        if self.batch_bytes > u32::MAX as usize {
            return Err(Error::input(format!(
                "LZ4 GPU batch of {} bytes exceeds {} (32-bit page offsets)",
                self.batch_bytes,
                u32::MAX
            )));
        }
        Ok(())
    }
}

/// True for errors that mean the device path cannot be trusted any more (driver errors, module
/// loads, inconsistent kernel results, a vanished device), as opposed to bad input.
pub fn device_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Driver { .. }
            | Error::ModuleLoad { .. }
            | Error::Kernel { .. }
            | Error::NoDevice { .. }
    )
}

/// Where to compress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU reference.
    Cpu,
    /// The GPU; an error when there is none.
    Gpu,
    /// The GPU when there is one, else the CPU.
    Auto,
}

/// A page stream for `device`: on the GPU, or on the CPU with `cpu_slots` slots. Returns the
/// stream and, for `Auto` without a usable GPU, why the CPU runs. Fails with
/// [`Error::NoDevice`] for `Gpu` without a device and [`Error::Input`] for a bad page size.
pub fn open_page_stream(
    device: Device,
    page_bytes: usize,
    cpu_slots: usize,
    options: GpuOptions,
) -> Result<(Box<dyn PageStream + Send>, Option<String>)> {
    let gpu = || Gpu::open_default().and_then(|g| GpuPageStream::new(g, page_bytes, options));
    match device {
        Device::Cpu => Ok((Box::new(CpuPageStream::new(page_bytes, cpu_slots)?), None)),
        Device::Gpu => Ok((Box::new(gpu()?), None)),
        Device::Auto => match gpu() {
            Ok(s) => Ok((Box::new(s), None)),
            Err(e) if device_failure(&e) => Ok((
                Box::new(CpuPageStream::new(page_bytes, cpu_slots)?),
                Some(e.to_string()),
            )),
            Err(e) => Err(e),
        },
    }
}

/// The path a stream of `path` ran on, as the CLI prints it.
pub fn describe_path(path: CodecPath, note: Option<&str>) -> String {
    match note {
        Some(n) => format!("{path} ({n})"),
        None => path.to_string(),
    }
}
