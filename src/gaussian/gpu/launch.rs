//! Launch geometry and kernel launches of the GPU Gaussian field.
//!
//! The fused kernels' blocks all do the same amount of work, so a grid slightly larger than one
//! resident wave runs in two block-times (a nearly empty second wave). The plans therefore split
//! the work into at most `slots` blocks (SMs x resident blocks per SM, from the driver's occupancy
//! calculator), as many as the problem allows. Plans depend only on (N, B, slots), so a given
//! device always splits the same way and results are bit-identical from run to run (every
//! partial sum is added in a fixed order; see `crate::kernels::gaussian`).

use crate::kernels::gaussian::{backward, distances, forward, reduce};
use crate::kernels::KernelId;
use crate::runtime::{ArgElem, Gpu, LoadedKernel};
use crate::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DeviceRepr, LaunchConfig};
use std::sync::Arc;

/// Fewest points per backward chunk.
const MIN_CHUNK_POINTS: u32 = 16;
/// Largest grid y extent CUDA allows.
const MAX_GRID_Y: u32 = 65_535;

/// How the fused forward splits (B points) x (n_pad Gaussians).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardPlan {
    /// Blocks along the points (`GpuReal::FORWARD_POINTS_PER_BLOCK` each).
    pub point_blocks: u32,
    /// Gaussian chunks (grid y); partial rows to add when > 1.
    pub chunks: u32,
    /// Gaussians per chunk (a multiple of [`forward::CHUNK_ALIGN`]).
    pub chunk_len: u32,
}

/// Splits the forward into at most `slots` blocks (one resident wave) when B allows;
/// `points_per_block` of the kernel (`GpuReal::FORWARD_POINTS_PER_BLOCK`).
pub fn forward_plan(n_pad: u32, b: u32, slots: u32, points_per_block: u32) -> ForwardPlan {
    let point_blocks = b.div_ceil(points_per_block).max(1);
    let want = (slots / point_blocks).clamp(1, (n_pad / forward::CHUNK_ALIGN).max(1));
    let chunk_len = n_pad.div_ceil(want).next_multiple_of(forward::CHUNK_ALIGN);
    ForwardPlan {
        point_blocks,
        chunks: n_pad.div_ceil(chunk_len),
        chunk_len,
    }
}

/// How the fused backward splits (n_pad Gaussians) x (B points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardPlan {
    /// Blocks along the Gaussians (`backward::BLOCK * q` each); per-point partial rows.
    pub gauss_blocks: u32,
    /// Point chunks (grid y); per-Gaussian partial rows.
    pub chunks: u32,
    /// Points per chunk.
    pub chunk_len: u32,
}

/// Splits the backward into at most `slots` blocks (one resident wave) when N allows; `q` =
/// Gaussians per thread of the kernel's type.
pub fn backward_plan(n_pad: u32, b: u32, slots: u32, q: u32) -> BackwardPlan {
    let gauss_blocks = (n_pad / (backward::BLOCK * q)).max(1);
    let want = (slots / gauss_blocks).clamp(1, b.div_ceil(MIN_CHUNK_POINTS).max(1));
    let chunk_len = b.div_ceil(want).max(1);
    BackwardPlan {
        gauss_blocks,
        chunks: b.div_ceil(chunk_len).max(1),
        chunk_len,
    }
}

/// Kernel `id`: the built-in one, or the variant that the environment variable
/// `PTXFLOW_GAUSS_BWD` (backward kernels: `backward::variant`) or `PTXFLOW_GAUSS_FWD` (forward
/// kernels: `forward::variant`) names, built at run time with the same parameters, block and
/// work per thread, so that one bench binary can time both. Unknown names give the built-in
/// kernel.
///
/// A variant is built and loaded once per context and name (kept in a process-wide cache, so
/// that timed launches pay no build; the cached kernel keeps its context alive, so a context's
/// address never names another while its entries exist).
pub fn kernel(gpu: &Gpu, id: KernelId) -> Result<LoadedKernel> {
    type Make = fn(KernelId, &str) -> Option<crate::ptx::Module>;
    // (context, kernel, "VAR=name") -> the loaded variant, or None where the name is not one.
    type Cache = Vec<(usize, KernelId, String, Option<LoadedKernel>)>;
    static VARIANTS: std::sync::Mutex<Cache> = std::sync::Mutex::new(Vec::new());
    let ctx = Arc::as_ptr(gpu.ctx()) as usize;
    let vars: [(&str, Make); 2] = [
        ("PTXFLOW_GAUSS_BWD", backward::variant),
        ("PTXFLOW_GAUSS_FWD", forward::variant),
    ];
    for (var, make) in vars {
        let Ok(name) = std::env::var(var) else {
            continue;
        };
        let key = format!("{var}={name}");
        let mut cache = VARIANTS.lock().unwrap_or_else(|p| p.into_inner());
        let hit = cache
            .iter()
            .find(|(c, i, k, _)| *c == ctx && *i == id && *k == key)
            .map(|e| e.3.clone());
        let loaded = match hit {
            Some(k) => k,
            None => {
                let k = match make(id, &name) {
                    Some(m) => Some(gpu.load_module(&m, id.name())?),
                    None => None,
                };
                cache.push((ctx, id, key, k.clone()));
                k
            }
        };
        if let Some(k) = loaded {
            return Ok(k);
        }
    }
    gpu.kernel(id)
}

/// Resident blocks of kernel `id` per SM (launched with `block` threads) times the SM count.
pub fn resident_slots(gpu: &Gpu, id: KernelId, block: u32) -> Result<u32> {
    let per_sm = kernel(gpu, id)?
        .function()
        .occupancy_max_active_blocks_per_multiprocessor(block, 0, None)
        .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
    Ok(per_sm.max(1) * gpu.facts().sm_count.max(1))
}

/// `n` as a u32 kernel argument, or a capacity error naming `what`.
pub fn to_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Capacity {
        what: what.into(),
        needed: n,
        capacity: u32::MAX as usize,
    })
}

/// The launch configuration of a `grid` of `block`-thread blocks (a capacity error when the y
/// extent exceeds CUDA's limit).
pub(super) fn config(grid: (u32, u32), block: u32) -> Result<LaunchConfig> {
    if grid.1 > MAX_GRID_Y {
        return Err(Error::Capacity {
            what: "grid y extent".into(),
            needed: grid.1 as usize,
            capacity: MAX_GRID_Y as usize,
        });
    }
    Ok(LaunchConfig {
        grid_dim: (grid.0.max(1), grid.1.max(1), 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Device arrays of one problem, borrowed for a launch.
pub struct Problem<'a, T> {
    /// Prepared Gaussians, `n_pad * PREP_STRIDE` scalars.
    pub prep: &'a CudaSlice<T>,
    /// Gaussians in the problem.
    pub n: u32,
    /// `n` rounded up to the kernels' Gaussian tile (the padding is zero-weight).
    pub n_pad: u32,
    /// Points, `3 * b` scalars.
    pub points: &'a CudaSlice<T>,
    /// Points in the problem.
    pub b: u32,
}

/// Where a launch goes: the device, the stream and the kernel.
#[derive(Clone, Copy)]
pub struct Launch<'a> {
    /// The device.
    pub gpu: &'a Gpu,
    /// The stream the kernel is enqueued on.
    pub stream: &'a Arc<CudaStream>,
    /// The kernel.
    pub id: KernelId,
}

/// Enqueues `gaussian_distances`: `out[i * n + j] = d_ij` (`out` holds at least b * n scalars).
pub fn distances<T: DeviceRepr + ArgElem>(
    l: Launch<'_>,
    p: &Problem<'_, T>,
    out: &mut CudaSlice<T>,
) -> Result<()> {
    let k = l.gpu.kernel(l.id)?;
    let cfg = config(
        (
            p.b.div_ceil(distances::POINTS_PER_BLOCK),
            p.n.div_ceil(distances::BLOCK),
        ),
        distances::BLOCK,
    )?;
    // SAFETY: (argument types and the .reqntid block are checked against the kernel's contract)
    // prep holds n_pad >= ceil(n / BLOCK) * BLOCK prepared Gaussians (every thread's j is in range),
    // points holds 3b scalars, out at least b * n; the kernel stores only i < b, j < n.
    unsafe {
        k.launch(l.stream, cfg)
            .arg(p.prep)
            .arg(&p.n)
            .arg(p.points)
            .arg(&p.b)
            .arg(out)
            .launch()
    }
}

/// Enqueues `gaussian_forward` writing `plan.chunks` rows of b partial sums to `out`.
pub fn forward<T: DeviceRepr + ArgElem>(
    l: Launch<'_>,
    p: &Problem<'_, T>,
    plan: &ForwardPlan,
    out: &mut CudaViewMut<'_, T>,
) -> Result<()> {
    let k = kernel(l.gpu, l.id)?;
    let cfg = config((plan.point_blocks, plan.chunks), forward::BLOCK)?;
    // SAFETY: (argument types and the .reqntid block are checked against the kernel's contract)
    // n_pad and chunk_len are multiples of CHUNK_ALIGN as the kernel requires; the
    // block is exactly forward::BLOCK threads; out holds chunks * b scalars (checked by caller),
    // and only i < b is read or written.
    unsafe {
        k.launch(l.stream, cfg)
            .arg(p.prep)
            .arg(&p.n_pad)
            .arg(&plan.chunk_len)
            .arg(p.points)
            .arg(&p.b)
            .arg(out)
            .launch()
    }
}

/// The backward's device buffers besides the problem's.
pub struct BackwardBuffers<'a, T> {
    /// dLoss/df, b scalars.
    pub grad_values: &'a CudaSlice<T>,
    /// Compensation records, n_pad * `COMP_STRIDE` scalars.
    pub comp: &'a CudaSlice<T>,
    /// Per-point partial sums, gauss_blocks * 3b scalars.
    pub partial_points: &'a mut CudaSlice<T>,
    /// Per-Gaussian partial sums, chunks * n_pad * 10 scalars.
    pub partial_gauss: &'a mut CudaSlice<T>,
}

/// Enqueues `gaussian_backward`: per-point partials (gauss_blocks x 3b) and per-Gaussian partials
/// (chunks x n_pad x 10).
pub fn backward<T: DeviceRepr + ArgElem>(
    l: Launch<'_>,
    p: &Problem<'_, T>,
    plan: &BackwardPlan,
    bufs: BackwardBuffers<'_, T>,
) -> Result<()> {
    let k = kernel(l.gpu, l.id)?;
    let cfg = config((plan.gauss_blocks, plan.chunks), backward::BLOCK)?;
    // SAFETY: (argument types and the .reqntid block are checked against the kernel's contract)
    // n_pad is a multiple
    // of BLOCK * q so every thread's Gaussians exist; points/grad_values hold 3b / b scalars; the
    // partial buffers hold gauss_blocks * 3b and chunks * n_pad * 10 scalars, comp n_pad *
    // COMP_STRIDE (checked by caller).
    unsafe {
        k.launch(l.stream, cfg)
            .arg(p.prep)
            .arg(&p.n_pad)
            .arg(p.points)
            .arg(bufs.grad_values)
            .arg(&p.b)
            .arg(&plan.chunk_len)
            .arg(bufs.partial_points)
            .arg(bufs.partial_gauss)
            .arg(bufs.comp)
            .launch()
    }
}

/// An ordered sum of partial rows: `out[m] = scale * sum_{r < rows} partial[r * stride + m]` for
/// m < len.
pub struct RowSum<'a, T> {
    /// The rows, at least (rows - 1) * stride + len scalars.
    pub partial: &'a CudaSlice<T>,
    /// Rows to add.
    pub rows: u32,
    /// Scalars between rows.
    pub stride: u32,
    /// Entries per row to sum.
    pub len: u32,
    /// Factor applied to each sum.
    pub scale: T,
}

/// Enqueues `gaussian_reduce_rows` for `sum` into `out` (len scalars).
pub fn reduce_rows<T: DeviceRepr + ArgElem>(
    l: Launch<'_>,
    sum: RowSum<'_, T>,
    out: &mut CudaViewMut<'_, T>,
) -> Result<()> {
    let k = l.gpu.kernel(l.id)?;
    let blocks = sum
        .len
        .div_ceil(reduce::BLOCK)
        .clamp(1, l.gpu.facts().sm_count.max(1) * 16);
    let cfg = config((blocks, 1), reduce::BLOCK)?;
    // SAFETY: (argument types and the .reqntid block are checked against the kernel's contract)
    // partial holds rows * stride >= (rows - 1) * stride + len scalars and out len (checked by
    // the caller); grid-stride loop over m < len.
    unsafe {
        k.launch(l.stream, cfg)
            .arg(sum.partial)
            .arg(&sum.rows)
            .arg(&sum.stride)
            .arg(&sum.len)
            .arg(&sum.scale)
            .arg(out)
            .launch()
    }
}

/// Enqueues `gaussian_finish`: the packed per-Gaussian gradient from `rows` chunk partials.
pub fn finish<T: DeviceRepr + ArgElem>(
    l: Launch<'_>,
    p: &Problem<'_, T>,
    partial_gauss: &CudaSlice<T>,
    rows: u32,
    normalised: bool,
    out: &mut CudaViewMut<'_, T>,
) -> Result<()> {
    let k = l.gpu.kernel(l.id)?;
    let blocks =
        p.n.div_ceil(reduce::BLOCK)
            .clamp(1, l.gpu.facts().sm_count.max(1) * 16);
    let cfg = config((blocks, 1), reduce::BLOCK)?;
    let flag = u32::from(normalised);
    // SAFETY: (argument types and the .reqntid block are checked against the kernel's contract)
    // partial holds rows * n_pad * 10 scalars, prep n_pad * 12, out
    // n * 10 (checked by the caller); grid-stride loop over j < n.
    unsafe {
        k.launch(l.stream, cfg)
            .arg(partial_gauss)
            .arg(&rows)
            .arg(&p.n_pad)
            .arg(p.prep)
            .arg(&p.n)
            .arg(&flag)
            .arg(out)
            .launch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_plan_covers_every_gaussian_in_aligned_chunks() {
        for (n_pad, b) in [
            (256, 1),
            (1024, 500),
            (10240, 500),
            (10240, 100_000),
            (256, 10_000_000),
        ] {
            let ppb = forward::BLOCK * forward::POINTS_PER_THREAD_F32;
            let p = forward_plan(n_pad, b, 132 * 9, ppb);
            assert!(
                p.point_blocks * p.chunks <= (132 * 9).max(p.point_blocks),
                "{p:?}"
            );
            assert_eq!(p.chunk_len % forward::CHUNK_ALIGN, 0, "{p:?}");
            assert!(
                p.chunks * p.chunk_len >= n_pad && (p.chunks - 1) * p.chunk_len < n_pad,
                "{p:?}"
            );
            assert!(p.point_blocks * ppb >= b, "{p:?}");
        }
    }

    #[test]
    fn backward_plan_covers_every_point_with_nonempty_chunks() {
        for (n_pad, b) in [
            (512, 1),
            (1024, 500),
            (10240, 500),
            (10240, 100_000),
            (512, 17),
        ] {
            for q in [2, 4, 8] {
                let p = backward_plan(n_pad, b, 132 * 8, q);
                assert!(
                    p.gauss_blocks * p.chunks <= (132 * 8).max(p.gauss_blocks),
                    "{p:?}"
                );
                assert!(
                    p.chunks * p.chunk_len >= b && (p.chunks - 1) * p.chunk_len < b,
                    "{p:?}"
                );
                assert_eq!(
                    p.gauss_blocks * backward::BLOCK * q,
                    n_pad.max(backward::BLOCK * q),
                    "{p:?}"
                );
            }
        }
    }
}
