//! The `Gpu` handle: one CUDA context on one device, its work stream, device facts and the
//! module cache. Creating one never panics: without libcuda, without a working driver, or without
//! a device it returns [`Error::NoDevice`] with the reason, so callers can take their CPU path.

use super::modules::ModuleCache;
use crate::kernels::KernelId;
use crate::ptx::Target;
use crate::{Error, Result};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use std::sync::Arc;

/// What the driver says about the device.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    /// The CUDA device ordinal (0 for the first GPU).
    pub ordinal: usize,
    /// The marketing name, for example "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory, bytes.
    pub total_memory_bytes: usize,
    /// Peak SM clock, kHz.
    pub clock_khz: u32,
    /// Peak memory clock, kHz.
    pub memory_clock_khz: u32,
    /// Memory bus width, bits.
    pub memory_bus_bits: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u32,
    /// Most shared memory one block may opt in to, bytes.
    pub max_shared_per_block_optin: u32,
    /// The PTX target ptxflow loads on this device (highest shipped target not above it).
    pub target: Target,
}

impl DeviceFacts {
    /// Theoretical DRAM bandwidth in GB/s from the memory clock and bus width (DDR: x2).
    pub fn peak_dram_gbs(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * (self.memory_bus_bits as f64 / 8.0) / 1e9
    }
}

/// A CUDA device ready to run ptxflow kernels.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    facts: DeviceFacts,
    pub(super) modules: ModuleCache,
}

fn no_device(reason: impl Into<String>) -> Error {
    Error::NoDevice {
        reason: reason.into(),
    }
}

impl Gpu {
    /// Opens device `ordinal`, or says why it cannot.
    pub fn new(ordinal: usize) -> Result<Arc<Gpu>> {
        // SAFETY: only probes whether the driver library can be opened; cudarc panics on first
        // use of the driver without it, so this check must come first.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(no_device(
                "the NVIDIA driver library (libcuda) is not installed",
            ));
        }
        // cudarc resolves driver symbols lazily and panics if one is missing (a driver older
        // than the API version ptxflow is built for); turn that into an error too.
        match std::panic::catch_unwind(|| Self::open(ordinal)) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(no_device(format!(
                    "the CUDA driver could not be used: {msg}"
                )))
            }
        }
    }

    /// Opens device 0; the usual entry point.
    pub fn open_default() -> Result<Arc<Gpu>> {
        Self::new(0)
    }

    fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        cudarc::driver::result::init().map_err(|e| no_device(format!("cuInit failed: {e}")))?;
        let count = CudaContext::device_count()
            .map_err(|e| no_device(format!("cuDeviceGetCount failed: {e}")))?;
        if count <= 0 {
            return Err(no_device("the driver reports no CUDA devices"));
        }
        if ordinal >= count as usize {
            return Err(no_device(format!(
                "device {ordinal} requested but only {count} present"
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| no_device(format!("creating a context on device {ordinal}: {e}")))?;
        // SAFETY: ptxflow orders all work explicitly: every pipeline issues its copies and
        // launches on streams it owns, joins streams with events it records itself, and
        // synchronizes before host buffers are read or reused. cudarc's per-slice read/write
        // events would add two event records per argument per launch (microseconds on a 10 µs
        // launch floor) and serialize streams we deliberately overlap. Frees stay stream-ordered.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(Error::driver("creating the work stream"))?;
        let attr = |a: Attr| {
            ctx.attribute(a)
                .map(|v| v.max(0) as u32)
                .map_err(Error::driver("cuDeviceGetAttribute"))
        };
        let cc = ctx
            .compute_capability()
            .map_err(Error::driver("reading compute capability"))?;
        let lowest = Target::Sm75;
        let target = Target::best_for(&crate::ptx::ALL_TARGETS, cc.0, cc.1).ok_or_else(|| {
            no_device(format!(
                "device compute capability {}.{} is below {lowest}, the lowest ptxflow supports",
                cc.0, cc.1
            ))
        })?;
        let facts = DeviceFacts {
            ordinal,
            name: ctx
                .name()
                .map_err(Error::driver("reading the device name"))?,
            compute_capability: cc,
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            total_memory_bytes: ctx
                .total_mem()
                .map_err(Error::driver("reading total memory"))?,
            clock_khz: attr(Attr::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
            memory_clock_khz: attr(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
            memory_bus_bits: attr(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            max_shared_per_block_optin: attr(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?,
            target,
        };
        let modules = ModuleCache::new(ctx.clone(), cc);
        Ok(Arc::new(Gpu {
            ctx,
            stream,
            facts,
            modules,
        }))
    }

    /// Device facts.
    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The CUDA context.
    pub fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The handle's work stream (a non-default stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The kernel's function, loading its module on first use.
    pub fn function(&self, id: KernelId) -> Result<CudaFunction> {
        Ok(self.modules.kernel(id)?.function().clone())
    }

    /// Registers, shared and local memory of a kernel as the driver reports them.
    pub fn kernel_resources(&self, id: KernelId) -> Result<super::modules::KernelResources> {
        self.modules.resources(id)
    }

    /// Blocks until all work on the work stream is done; surfaces asynchronous errors.
    pub fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(Error::driver("synchronizing the work stream"))
    }

    /// Checks that the context is still usable (a sticky error such as an illegal address
    /// poisons it for good); returns the driver error if not.
    pub fn check_healthy(&self) -> Result<()> {
        self.ctx
            .synchronize()
            .map_err(Error::driver("checking the context"))
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("facts", &self.facts).finish()
    }
}
