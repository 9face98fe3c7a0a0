//! The module cache: loads each kernel's PTX into the context once, on first use, and keeps the
//! function with its launch contract. Built-in kernels (embedded by build.rs) load for the highest
//! target the kernel ships that the device supports and are indexed by [`KernelId::index`]; user
//! kernels (PTX text or a builder [`Module`]) are keyed by entry name and a hash of their PTX, so
//! both kinds coexist and two different kernels of one name never alias. Load errors name the
//! kernel.

use super::launch::LoadedKernel;
use crate::kernels::{KernelId, ALL_KERNELS};
use crate::ptx::{Module, Signature, Target};
use crate::{Error, Result};
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Per-kernel resources as the driver reports them after JIT.
#[derive(Clone, Copy, Debug)]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: i32,
    /// Static shared memory per block, bytes (dynamic shared memory comes on top).
    pub static_shared_bytes: i32,
    /// Local memory per thread (spills and stack), bytes.
    pub local_bytes: i32,
    /// The most threads per block the kernel can be launched with on this device.
    pub max_threads_per_block: i32,
    /// The PTX target that was loaded.
    pub target: Target,
}

/// What the module cache is keyed by: a built-in kernel, or a user kernel's entry name and the
/// hash of its PTX text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KernelKey {
    /// One of ptxflow's own kernels.
    Builtin(KernelId),
    /// A user kernel.
    User {
        /// Its entry point.
        name: String,
        /// Hash of the PTX module text it was loaded from.
        ptx_hash: u64,
    },
}

impl KernelKey {
    /// The key of user kernel `entry` in PTX text `ptx`.
    pub fn user(entry: &str, ptx: &str) -> KernelKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        ptx.hash(&mut h);
        KernelKey::User {
            name: entry.to_string(),
            ptx_hash: h.finish(),
        }
    }
}

pub(crate) struct ModuleCache {
    ctx: Arc<CudaContext>,
    cc: (i32, i32),
    builtin: Mutex<Vec<Option<LoadedKernel>>>,
    user: Mutex<HashMap<KernelKey, LoadedKernel>>,
}

impl ModuleCache {
    pub(crate) fn new(ctx: Arc<CudaContext>, cc: (i32, i32)) -> Self {
        ModuleCache {
            ctx,
            cc,
            builtin: Mutex::new(vec![None; ALL_KERNELS.len()]),
            user: Mutex::new(HashMap::new()),
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

    fn load(
        &self,
        entry: &str,
        src: &str,
        sig: Signature,
        call: &'static str,
    ) -> Result<LoadedKernel> {
        let err = |source| Error::ModuleLoad {
            kernel: entry.to_string(),
            source,
        };
        let module = super::jit_cache::load_module(&self.ctx, entry, src).map_err(err)?;
        let f = module.load_function(entry).map_err(err)?;
        Ok(LoadedKernel::new(f, sig, call))
    }

    pub(crate) fn kernel(&self, id: KernelId) -> Result<LoadedKernel> {
        // A poisoned lock only means another thread panicked mid-load; the Vec is still valid.
        let mut loaded = self.builtin.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = &loaded[id.index()] {
            return Ok(k.clone());
        }
        let target = self.target_for(id)?;
        let src = crate::embedded::ptx(id, target)
            .expect("build.rs embeds every (kernel, target) of the table");
        let sig = Signature::from_ptx(src, id.name())
            .expect("build.rs emits every kernel's entry with a parsable parameter list");
        let k = self.load(id.name(), src, sig, id.launch_call())?;
        loaded[id.index()] = Some(k.clone());
        Ok(k)
    }

    /// Loads (once) user kernel `entry` from PTX text, checked against `sig` (or the contract
    /// parsed from the text when `None`).
    pub(crate) fn user(
        &self,
        entry: &str,
        ptx: &str,
        sig: Option<&Signature>,
    ) -> Result<LoadedKernel> {
        let key = KernelKey::user(entry, ptx);
        let mut user = self.user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = user.get(&key) {
            return Ok(k.clone());
        }
        let sig = match sig {
            Some(s) => s.clone(),
            None => Signature::from_ptx(ptx, entry).map_err(|problem| Error::Launch {
                kernel: entry.to_string(),
                problem,
            })?,
        };
        let k = self.load(entry, ptx, sig, "launching a user kernel")?;
        user.insert(key, k.clone());
        Ok(k)
    }

    /// Loads (once) kernel `entry` of a builder module, checked against the builder's contract.
    pub(crate) fn module(&self, module: &Module, entry: &str) -> Result<LoadedKernel> {
        let sig = module
            .kernels()
            .iter()
            .find(|k| k.name() == entry)
            .map(|k| k.signature().clone())
            .ok_or_else(|| Error::Launch {
                kernel: entry.to_string(),
                problem: "the module has no kernel of that name".into(),
            })?;
        let ptx = module.emit()?;
        self.user(entry, &ptx, Some(&sig))
    }

    pub(crate) fn resources(&self, id: KernelId) -> Result<KernelResources> {
        let k = self.kernel(id)?;
        let f = k.function();
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
