//! [`Lz4Kernels`]: the loaded `lz4_compress` / `lz4_decompress` functions of one device and
//! their launches on device-resident buffers (no host copies, no synchronization).

mod variants;

pub use variants::{build_geometry, KernelVariants};

use super::layout::{compress_geometry_for, Geometry, SmLimits};
use crate::kernels::lz4::{compress, decompress};
use crate::kernels::KernelId;
use crate::ptx::Target;
use crate::runtime::{Gpu, LoadedKernel};
use crate::{Error, Result};
use cudarc::driver::sys::CUfunction_attribute_enum as FuncAttr;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig};
use std::sync::Arc;

/// Dynamic shared memory a launch may use without opting in (bytes).
const DEFAULT_SHARED_LIMIT: u32 = 48 << 10;

/// The LZ4 kernels of one device, ready to launch (cloning shares the loaded module).
#[derive(Clone)]
pub struct Lz4Kernels {
    gpu: Arc<Gpu>,
    compress: LoadedKernel,
    /// The decompress build of `variants` and its registers per thread.
    decompress: (LoadedKernel, u32),
    /// `lz4_decompress_wide` for pages above 32 KiB, when the build above is a half-warp one.
    decompress_wide: Option<(LoadedKernel, u32)>,
    sm_shared: u32,
    compress_regs: u32,
    variants: KernelVariants,
}

fn u32_len(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Capacity {
        what: what.to_string(),
        needed: n,
        capacity: u32::MAX as usize,
    })
}

impl Lz4Kernels {
    /// Loads both kernels (JIT on first use) and asks for the largest shared-memory carveout,
    /// since shared memory bounds how many page warps an SM holds. The builds are those
    /// `PTXFLOW_LZ4_DECOMPRESS` and `PTXFLOW_LZ4_COMPRESS` ask for (see [`KernelVariants`]), by
    /// default the table's.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self> {
        Self::with_variants(gpu, KernelVariants::from_env()?)
    }

    /// [`new`](Self::new) with the given builds and grid choices.
    pub fn with_variants(gpu: Arc<Gpu>, variants: KernelVariants) -> Result<Self> {
        let compress = if variants.compress == compress::Variant::TABLE {
            gpu.kernel(KernelId::Lz4Compress)?
        } else {
            let module = compress::build_variant(Target::Sm75, variants.compress);
            gpu.load_module(&module, "lz4_compress")?
        };
        let decompress = match variants.decompress {
            decompress::Variant::TABLE => gpu.kernel(KernelId::Lz4Decompress)?,
            decompress::Variant::WIDE => gpu.kernel(KernelId::Lz4DecompressWide)?,
            v => {
                let module = decompress::build_variant(Target::Sm75, v);
                gpu.load_module(&module, "lz4_decompress")?
            }
        };
        let wide = if variants.decompress.lanes_per_page() < 32 {
            Some(gpu.kernel(KernelId::Lz4DecompressWide)?)
        } else {
            None
        };
        let all = [Some(&compress), Some(&decompress), wide.as_ref()];
        for f in all.into_iter().flatten().map(LoadedKernel::function) {
            f.set_attribute(
                FuncAttr::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                100,
            )
            .map_err(Error::driver("cuFuncSetAttribute(carveout)"))?;
        }
        // An SM holds the opt-in per-block maximum plus the 1 KiB reserved per block.
        let sm_shared = gpu.facts().max_shared_per_block_optin + 1024;
        let regs = |f: &CudaFunction| {
            f.num_regs()
                .map(|r| r.max(0) as u32)
                .map_err(Error::driver("cuFuncGetAttribute(registers)"))
        };
        let compress_regs = regs(compress.function())?;
        let decompress_regs = regs(decompress.function())?;
        let decompress_wide = match wide {
            Some(k) => {
                let r = regs(k.function())?;
                Some((k, r))
            }
            None => None,
        };
        Ok(Lz4Kernels {
            gpu,
            compress,
            decompress: (decompress, decompress_regs),
            decompress_wide,
            sm_shared,
            compress_regs,
            variants,
        })
    }

    /// The builds and grid choices in use.
    pub fn variants(&self) -> KernelVariants {
        self.variants
    }

    /// The decompress kernel for pages of `page_bytes` and its registers per thread.
    fn decompress_for(&self, page_bytes: usize) -> &(LoadedKernel, u32) {
        match &self.decompress_wide {
            Some(wide) if self.variants.decompress_for(page_bytes) != self.variants.decompress => {
                wide
            }
            _ => &self.decompress,
        }
    }

    /// Registers per thread and local memory per thread (bytes) of the decompress build for
    /// pages of `page_bytes`.
    pub fn decompress_resources(&self, page_bytes: usize) -> Result<(u32, u32)> {
        let (k, regs) = self.decompress_for(page_bytes);
        let local = k
            .function()
            .local_size_bytes()
            .map_err(Error::driver("cuFuncGetAttribute(local size)"))?;
        Ok((*regs, local.max(0) as u32))
    }

    /// Registers per thread of the compress build.
    pub fn compress_regs(&self) -> u32 {
        self.compress_regs
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Launch shape of a compress launch over `n_pages` pages.
    pub fn compress_geometry(&self, page_bytes: usize, n_pages: usize) -> Geometry {
        let sm = SmLimits {
            shared_bytes: self.sm_shared,
            regs_per_thread: self.compress_regs,
        };
        compress_geometry_for(
            self.variants.compress,
            page_bytes,
            n_pages,
            self.gpu.facts().sm_count,
            sm,
        )
    }

    /// Launch shape of a decompress launch over `n_pages` pages.
    pub fn decompress_geometry(&self, page_bytes: usize, n_pages: usize) -> Geometry {
        let sm = SmLimits {
            shared_bytes: self.sm_shared,
            regs_per_thread: self.decompress_for(page_bytes).1,
        };
        let sm_count = self.gpu.facts().sm_count;
        self.variants
            .decompress_geometry(page_bytes, n_pages, sm_count, sm)
    }

    fn config(f: &CudaFunction, g: Geometry) -> Result<LaunchConfig> {
        if g.shared_bytes > DEFAULT_SHARED_LIMIT {
            f.set_attribute(
                FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                g.shared_bytes as i32,
            )
            .map_err(Error::driver("cuFuncSetAttribute(max dynamic shared)"))?;
        }
        Ok(LaunchConfig {
            grid_dim: (g.blocks, 1, 1),
            block_dim: (g.threads(), 1, 1),
            shared_mem_bytes: g.shared_bytes,
        })
    }

    /// Enqueues `lz4_compress` on `stream` over the `input_bytes` bytes at the start of `input`.
    /// `info` must hold [`info_words`](super::layout::info_words) words with the first four
    /// zeroed (this call zeroes them on `stream`); `packed` needs `n_pages * page_bytes` bytes and
    /// `scratch` `geometry.warps() * page_bytes` (checked; [`Error::Capacity`] otherwise).
    #[allow(clippy::too_many_arguments)]
    pub fn compress(
        &self,
        stream: &Arc<CudaStream>,
        input: &CudaView<'_, u8>,
        input_bytes: usize,
        page_bytes: usize,
        scratch: &mut CudaSlice<u8>,
        packed: &mut CudaViewMut<'_, u8>,
        info: &mut CudaViewMut<'_, u32>,
    ) -> Result<()> {
        let mut scratch = scratch.as_view_mut();
        self.compress_in(
            stream,
            input,
            input_bytes,
            page_bytes,
            &mut scratch,
            packed,
            info,
        )
    }

    /// [`compress`](Self::compress) with the scratch a view (a part of a larger buffer).
    #[allow(clippy::too_many_arguments)]
    pub fn compress_in(
        &self,
        stream: &Arc<CudaStream>,
        input: &CudaView<'_, u8>,
        input_bytes: usize,
        page_bytes: usize,
        scratch: &mut CudaViewMut<'_, u8>,
        packed: &mut CudaViewMut<'_, u8>,
        info: &mut CudaViewMut<'_, u32>,
    ) -> Result<()> {
        let n_pages = input_bytes.div_ceil(page_bytes);
        let g = self.compress_geometry(page_bytes, n_pages);
        let need = |what: &str, needed: usize, capacity: usize| {
            if needed > capacity {
                return Err(Error::Capacity {
                    what: what.to_string(),
                    needed,
                    capacity,
                });
            }
            Ok(())
        };
        need("lz4 compress input", input_bytes, input.len())?;
        need(
            "lz4 compress scratch",
            g.warps() as usize * page_bytes,
            scratch.len(),
        )?;
        need("lz4 compress output", n_pages * page_bytes, packed.len())?;
        need(
            "lz4 compress info",
            super::layout::info_words(n_pages),
            info.len(),
        )?;
        if n_pages == 0 {
            return Ok(());
        }
        let (ib, pb, np) = (
            u32_len(input_bytes, "lz4 batch bytes")?,
            page_bytes as u32,
            n_pages as u32,
        );
        stream
            .memset_zeros(&mut info.slice_mut(0..4))
            .map_err(Error::driver("cuMemsetD8Async(lz4 info)"))?;
        let cfg = Self::config(self.compress.function(), g)?;
        // SAFETY: (argument types, the .maxntid block and the dynamic shared memory are checked
        // against lz4_compress's contract) the capacities were checked above against what the kernel touches (input[..input_bytes], page_bytes of
        // scratch per warp of this grid, packed[..n_pages * page_bytes] in 16-byte-rounded
        // pieces, info[..4 + 2 n_pages]); the block is whole warps within .maxntid and the
        // dynamic shared memory is what the geometry asked for (opted in above when > 48 KiB).
        unsafe {
            self.compress
                .launch(stream, cfg)
                .arg(input)
                .arg(&ib)
                .arg(&pb)
                .arg(&np)
                .arg(scratch)
                .arg(packed)
                .arg(info)
                .launch()
        }
    }

    /// Enqueues `lz4_decompress` on `stream`: `entries` holds 4 words per page (see
    /// [`decompress_entries`](super::layout::decompress_entries)), `packed` the stored pages,
    /// `output` gets page `k` at `k * page_bytes`, `status` one word per page.
    #[allow(clippy::too_many_arguments)]
    pub fn decompress(
        &self,
        stream: &Arc<CudaStream>,
        packed: &CudaView<'_, u8>,
        entries: &CudaView<'_, u32>,
        n_pages: usize,
        page_bytes: usize,
        output: &mut CudaViewMut<'_, u8>,
        status: &mut CudaViewMut<'_, u32>,
    ) -> Result<()> {
        let cap_err = |what: &str, needed: usize, capacity: usize| Error::Capacity {
            what: what.to_string(),
            needed,
            capacity,
        };
        if entries.len() < 4 * n_pages {
            return Err(cap_err(
                "lz4 decompress entries",
                4 * n_pages,
                entries.len(),
            ));
        }
        if output.len() < n_pages * page_bytes {
            return Err(cap_err(
                "lz4 decompress output",
                n_pages * page_bytes,
                output.len(),
            ));
        }
        if status.len() < n_pages {
            return Err(cap_err("lz4 decompress status", n_pages, status.len()));
        }
        if n_pages == 0 {
            return Ok(());
        }
        let g = self.decompress_geometry(page_bytes, n_pages);
        let kernel = &self.decompress_for(page_bytes).0;
        let cfg = Self::config(kernel.function(), g)?;
        let (plen, np, pb) = (
            u32_len(packed.len(), "lz4 packed bytes")?,
            n_pages as u32,
            page_bytes as u32,
        );
        // SAFETY: (argument types and block shape are checked against lz4_decompress's contract)
        // the kernel
        // reads packed only below its length rounded down to 16 and checks every entry against
        // it; entries, output (n_pages * page_bytes) and status (n_pages) were checked above.
        unsafe {
            kernel
                .launch(stream, cfg)
                .arg(packed)
                .arg(&plen)
                .arg(entries)
                .arg(&np)
                .arg(&pb)
                .arg(output)
                .arg(status)
                .launch()
        }
    }

    /// Test hook: launches `lz4_compress` with invalid pointers on the device's work stream, so
    /// the context fails with a sticky illegal-address error (every later CUDA call in this
    /// process then fails). Only for tests of the fallback, in a process of their own.
    #[doc(hidden)]
    pub fn provoke_sticky_fault(&self) -> Result<()> {
        let g = self.compress_geometry(1024, 1);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: g.shared_bytes / g.warps_per_block,
        };
        let bogus = 0x10u64;
        let (ib, pb, np) = (1024u32, 1024u32, 1u32);
        // SAFETY: deliberately unsound for the device (pointers to nothing), never for the host:
        // the kernel's first global access faults, which the driver reports as a sticky error.
        unsafe {
            self.compress
                .launch(self.gpu.stream(), cfg)
                .arg(&bogus)
                .arg(&ib)
                .arg(&pb)
                .arg(&np)
                .arg(&bogus)
                .arg(&bogus)
                .arg(&bogus)
                .launch()
        }?;
        let _ = self.gpu.sync();
        Ok(())
    }
}
