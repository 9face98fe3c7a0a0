//! Thread-block cluster launches (sm_90 and later): [`Launch::launch_cluster`] enqueues a
//! checked launch through `cuLaunchKernelEx` with a cluster dimension, [`allow_cluster`] opts a
//! kernel into cluster sizes above the portable 8, and [`max_active_clusters`] asks the driver
//! how many clusters of a shape can be resident at once.

use super::launch::{Launch, LoadedKernel};
use crate::{Error, Result};
use cudarc::driver::sys::{
    self, CUclusterSchedulingPolicy, CUfunction_attribute, CUlaunchAttribute, CUlaunchAttributeID,
    CUlaunchConfig,
};
use cudarc::driver::{CudaStream, LaunchConfig};
use std::ffi::c_void;

/// A launch argument as `cuLaunchKernelEx` takes it: a value (a device address) or the address
/// of the caller's scalar.
#[derive(Clone, Copy, Debug)]
pub enum RawArg {
    /// A 64-bit value (device pointers).
    Value(u64),
    /// The address of a scalar that lives as long as the launch builder.
    Ref(*const c_void),
}

/// The launch attributes: cluster dimension `(x, 1, 1)` and, when `spread`, the scheduling
/// policy preference that spreads a cluster's blocks over SMs.
fn cluster_attributes(x: u32, spread: bool) -> [CUlaunchAttribute; 2] {
    // SAFETY: CUlaunchAttribute is plain C data (an id, padding and a union of plain C data);
    // all-zero bytes are a valid value, and the fields set below are the ones the id selects.
    let mut attrs: [CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    attrs[0].id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[0].value.clusterDim.x = x;
    attrs[0].value.clusterDim.y = 1;
    attrs[0].value.clusterDim.z = 1;
    attrs[1].id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[1].value.clusterSchedulingPolicyPreference = if spread {
        CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_SPREAD
    } else {
        CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_DEFAULT
    };
    attrs
}

fn config(
    cfg: &LaunchConfig,
    stream: &CudaStream,
    attrs: &mut [CUlaunchAttribute; 2],
) -> CUlaunchConfig {
    CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: 2,
    }
}

impl Launch<'_> {
    /// As [`Launch::launch`], with blocks grouped in clusters of `cluster_x` consecutive blocks
    /// (`cuLaunchKernelEx`, `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`). The grid's x size must be
    /// a multiple of `cluster_x`; sizes above 8 need [`allow_cluster`] first. `spread`: ask the
    /// scheduler to spread each cluster's blocks over SMs.
    ///
    /// # Safety
    /// As [`Launch::launch`].
    pub unsafe fn launch_cluster(&mut self, cluster_x: u32, spread: bool) -> Result<()> {
        self.check()?;
        let name = &self.kernel.signature().name;
        let bad = |problem: String| Error::Launch {
            kernel: name.clone(),
            problem,
        };
        if cluster_x == 0 || !self.cfg.grid_dim.0.is_multiple_of(cluster_x) {
            return Err(bad(format!(
                "grid of {} blocks is not a multiple of the cluster size {cluster_x}",
                self.cfg.grid_dim.0
            )));
        }
        let mut values = [0u64; super::MAX_ARGS];
        let mut ptrs = [std::ptr::null_mut::<c_void>(); super::MAX_ARGS];
        for i in 0..self.n {
            match self.raw[i] {
                Some(RawArg::Value(v)) => values[i] = v,
                Some(RawArg::Ref(p)) => ptrs[i] = p as *mut c_void,
                None => return Err(bad(format!("argument {i} has no raw form"))),
            }
        }
        for i in 0..self.n {
            if let Some(RawArg::Value(_)) = self.raw[i] {
                ptrs[i] = (&mut values[i] as *mut u64).cast();
            }
        }
        let mut attrs = cluster_attributes(cluster_x, spread);
        let cfg = config(&self.cfg, self.stream, &mut attrs);
        self.stream
            .context()
            .bind_to_thread()
            .map_err(Error::driver(self.kernel.call))?;
        // SAFETY: the argument count and types match the kernel's parameters (checked above);
        // `ptrs[i]` points at argument i (a device address in `values` or the caller's scalar,
        // both alive until this call returns, and the driver copies them at launch); memory
        // validity is this function's own contract, passed to the caller.
        unsafe {
            sys::cuLaunchKernelEx(
                &cfg,
                self.kernel.function().cu_function(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(Error::driver(self.kernel.call))
    }
}

/// Allows `kernel` cluster sizes above 8 (non-portable; H100 allows 16).
pub fn allow_cluster(kernel: &LoadedKernel) -> Result<()> {
    kernel
        .function()
        .set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            1,
        )
        .map_err(Error::driver(
            "cuFuncSetAttribute(non-portable cluster size)",
        ))
}

/// Clusters of `cluster_x` blocks of `cfg`'s shape and shared memory that can be resident at
/// once (`cuOccupancyMaxActiveClusters`; 0 when the kernel cannot run in such clusters), with
/// the scheduling policy of [`Launch::launch_cluster`]'s `spread`.
pub fn max_active_clusters(
    kernel: &LoadedKernel,
    stream: &CudaStream,
    cfg: LaunchConfig,
    cluster_x: u32,
    spread: bool,
) -> Result<u32> {
    let mut attrs = cluster_attributes(cluster_x, spread);
    let c = config(&cfg, stream, &mut attrs);
    let mut n: std::ffi::c_int = 0;
    // SAFETY: `c` is a complete launch configuration whose attribute array (two elements) lives
    // until the call returns; the function handle belongs to a loaded module.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, kernel.function().cu_function(), &c) }
        .result()
        .map_err(Error::driver("cuOccupancyMaxActiveClusters"))?;
    Ok(n.max(0) as u32)
}
