//! The module cache: loads each kernel's PTX (embedded by build.rs) into the context once, on
//! first use, for the highest target the kernel ships that the device supports. Load errors
//! name the kernel. Indexed by [`KernelId::index`].

use crate::kernels::{KernelId, ALL_KERNELS};
use crate::ptx::Target;
use crate::{Error, Result};
use cudarc::driver::{CudaContext, CudaFunction};
use std::sync::{Arc, Mutex};

/// Per-kernel resources as the driver reports them after JIT.
#[derive(Clone, Copy, Debug)]
pub struct KernelResources {
    pub registers: i32,
    pub static_shared_bytes: i32,
    pub local_bytes: i32,
    pub max_threads_per_block: i32,
    pub target: Target,
}

pub(crate) struct ModuleCache {
    ctx: Arc<CudaContext>,
    cc: (i32, i32),
    loaded: Mutex<Vec<Option<CudaFunction>>>,
}

impl ModuleCache {
    pub(crate) fn new(ctx: Arc<CudaContext>, cc: (i32, i32)) -> Self {
        ModuleCache {
            ctx,
            cc,
            loaded: Mutex::new(vec![None; ALL_KERNELS.len()]),
        }
    }

    fn target_for(&self, id: KernelId) -> Result<Target> {
        Target::best_for(id.targets(), self.cc.0, self.cc.1).ok_or_else(|| Error::NoDevice {
            reason: format!(
                "kernel `{}` needs {} but the device is sm_{}{}",
                id.name(),
                id.targets()[0],
                self.cc.0,
                self.cc.1
            ),
        })
    }

    pub(crate) fn function(&self, id: KernelId) -> Result<CudaFunction> {
        // A poisoned lock only means another thread panicked mid-load; the Vec is still valid.
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &loaded[id.index()] {
            return Ok(f.clone());
        }
        let target = self.target_for(id)?;
        let src = crate::embedded::ptx(id, target)
            .expect("build.rs embeds every (kernel, target) of the table");
        let module =
            super::jit_cache::load_module(&self.ctx, id.name(), src).map_err(|source| {
                Error::ModuleLoad {
                    kernel: id.name(),
                    source,
                }
            })?;
        let f = module
            .load_function(id.name())
            .map_err(|source| Error::ModuleLoad {
                kernel: id.name(),
                source,
            })?;
        loaded[id.index()] = Some(f.clone());
        Ok(f)
    }

    pub(crate) fn resources(&self, id: KernelId) -> Result<KernelResources> {
        let f = self.function(id)?;
        let e = Error::driver("cuFuncGetAttribute");
        Ok(KernelResources {
            registers: f.num_regs().map_err(e)?,
            static_shared_bytes: f.shared_size_bytes().map_err(e)?,
            local_bytes: f.local_size_bytes().map_err(e)?,
            max_threads_per_block: f.max_threads_per_block().map_err(e)?,
            target: self.target_for(id)?,
        })
    }
}
