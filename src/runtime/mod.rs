//! The runtime: ptxflow's layer over cudarc (driver API, loaded dynamically). It knows the
//! kernel table but no domain. Nothing here panics for want of a GPU: [`Gpu::new`] says why.

mod buffer;
mod cluster;
mod device;
mod device_choice;
mod jit_cache;
mod launch;
mod modules;
mod pinned;
mod pinned_copy;
mod registration;
mod streams;
mod timer;

pub use buffer::DeviceBuffer;
pub use cluster::{allow_cluster, max_active_clusters, RawArg};
pub use device::{DeviceFacts, Gpu};
pub use device_choice::{Choice, Device};
pub use jit_cache::{jit_cache_dir, jit_cache_has, jit_stats, precompile, JitStats};
pub use launch::{ArgElem, ArgKind, KernelArg, Launch, LoadedKernel, MAX_ARGS};
pub use modules::{KernelKey, KernelResources};
pub use pinned::{device_can_map, PinnedBuffer, PinnedKind};
pub use registration::{DeviceAccess, HostRegistration};
pub use streams::StreamSet;
pub use timer::GpuTimer;

/// Re-exported cudarc types that appear in ptxflow's API.
pub use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
