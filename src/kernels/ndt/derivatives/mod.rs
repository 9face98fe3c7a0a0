//! `ndt_derivatives`: NDT score, gradient and Hessian of many (source cloud, pose) requests against
//! one voxel map, in one launch, fused per point and reduced on the device in f64.
//!
//! # Launch
//! Grid `(blocks_per_request, requests, 1)`, blocks of exactly [`BLOCK`] threads (`.reqntid`).
//! Block `(x, y)` serves request `y` and grid-strides over its points: point `i` is taken by
//! thread `i mod (BLOCK · blocks_per_request)`.
//!
//! # Memory
//! - `points`: source clouds as f32 `[x, y, z]` (12 bytes per point), concatenated;
//! - `voxels`: per voxel 9 f64 `[μx, μy, μz, C00, C01, C02, C11, C12, C22]` (mean in m, the upper
//!   triangle of the symmetric inverse covariance in 1/m²);
//! - `slots`: the CPU's `VoxelHash` table, `[ix, iy, iz, voxel]` as i32 (16 bytes, one vector
//!   load), `slot_mask = capacity − 1`; probed exactly as `ndt::voxel_hash` documents;
//! - request `y`: f64 `sin a, cos a, sin b, cos b, sin c, cos c, tx, ty, tz` then u32
//!   `first_point, point_count` — for `y = 0` in the `r0_*` parameters (a single-request launch
//!   reads no request memory), for `y ≥ 1` at `requests + y ·` [`REQUEST_BYTES`] in device memory
//!   (record 0 of that array is never read);
//! - `cells` (only in the dense-table [`Variant`]): the dense cell table, one i32 voxel index (−1: none) per cell
//!   of the box `cell_origin + [0, cell_dims)`, x fastest; when given, a probe is one load from it
//!   instead of a walk along the hash chain, with the same answer for every key (see
//!   `ndt::gpu::tuning`); the probes of a point then go in groups of [`DENSE_GROUP`] whose loads
//!   are all issued before the first is used, their voxel indices parked in shared memory
//!   (`group`, one column per thread);
//! - `partials`: [`SLOT_VALUES`] f64 per (request, block), written once per launch;
//! - `counters`: one u32 per request, zero between launches (the last block resets it);
//! - `results`: [`VALUES`] f64 per request (may live in mapped host memory).
//!
//! # What each block does
//! 1. Thread 0 takes the request (parameters or memory) and computes `R` and its 9 angular derivative matrices from the
//!    sines and cosines ([`super::rotation`], CPU operation order) into shared memory, with the
//!    probe-offset table; barrier.
//! 2. Each thread, per point (`point.rs`): `x' = R x + t` (bit-identical to the CPU), voxel `c = floor(x' ·
//!    inv_resolution)` (no neighbours when |c| ≥ 2³⁰, as on the CPU), then for each probe offset `o`
//!    of the search mode (the CPU's tables and order) it probes the hash for `c + o`. For each
//!    voxel found (and, in radius mode, whose mean lies within the resolution) it adds, with
//!    `d = x' − μ`, `q = dᵀCd`, `e = exp(−d2 q / 2)` (pairs with `e` out of range are skipped as on
//!    the CPU): `E += e`, `G += e Cd`, `Q += e (C − d2 (Cd)(Cd)ᵀ)`. A point with at least one voxel
//!    then adds, with its Jacobian columns `j_k = (∂R/∂θ_k) x` and second-derivative columns
//!    `h_kl = (∂²R/∂θ_k∂θ_l) x`: `E` to the score sum, `[G, j_k·G]` to the gradient, and
//!    `JᵀQJ + [h_kl·G]` (21 upper-triangle entries, `J = [I | j_a j_b j_c]`) to the Hessian,
//!    which equals the CPU's per-pair sum because `J` and `h` do not depend on the voxel.
//!    Gradient and Hessian are scaled by `d1 d2` (the score by `−d1`) on the host.
//! 3. Reduction: the 29 per-thread sums (score, 6 gradient, 21 Hessian, correspondence count, all
//!    f64) are reduced over the block ([`super::reduce`]: warp reduce-scatter with shuffles, then
//!    shared memory) and stored as the block's partial; then one atomic per block on the
//!    request's counter. The block that arrives last sums all partials of the request in block
//!    order (deterministic, f64), writes the result and resets the counter.

mod cross;
mod dense;
mod kernel;
pub mod mixed;
mod pair2;
mod point;
mod probes7;
pub mod server;
mod solve_partials;
mod split;
mod vec3;
mod wide;

pub use kernel::{
    build, build_align_device, build_dense, build_dense_cross, build_dense_cross7,
    build_dense_small, build_server, build_variant,
};
pub use solve_partials::build_align_device_opts;
pub use wide::WIDE_RECORD_VALUES;

use crate::kernels::ndt::reduce::WIDTH;
use crate::kernels::ndt::rotation::Pattern;
pub use crate::kernels::ndt::UPPER_PAIRS;
use crate::ptx::*;

/// Threads per block (required).
pub const BLOCK: u32 = 128;
/// Warps per block.
pub const WARPS: u32 = BLOCK / 32;
/// Values per result: score sum, 6 gradient, 21 Hessian (upper triangle, row-major), count.
pub const VALUES: usize = 29;
/// f64 values per partial slot (padded for alignment).
pub const SLOT_VALUES: usize = WIDTH;
/// Bytes per request record.
pub const REQUEST_BYTES: usize = 80;
/// Bytes per result record.
pub const RESULT_BYTES: usize = VALUES * 8;
/// Index of the score sum `Σ e` in a result.
pub const SCORE_INDEX: usize = 0;
/// Index of the first gradient entry in a result.
pub const GRADIENT_INDEX: usize = 1;
/// Index of the correspondence count in a result.
pub const COUNT_INDEX: usize = 28;
/// First probe of the Direct1/Direct7 table in [`PROBES`].
pub const PROBES_DIRECT7: u32 = 0;
/// First probe of the Direct27/Radius table in [`PROBES`].
pub const PROBES_DIRECT27: u32 = 7;
/// Largest |voxel index| (exclusive), as `ndt::voxel_grid::MAX_CELL_INDEX`.
pub const MAX_CELL_INDEX: f64 = (1u64 << 30) as f64;

/// Probe offsets: the Direct7 table (own voxel, then ±x, ±y, ±z), then the Direct27 table (own
/// voxel, then x-fastest over {−1, 0, 1}³ without the centre) — the CPU's tables and order.
pub const PROBES: [[i32; 3]; 34] = {
    let mut t = [[0i32; 3]; 34];
    let d7 = [
        [0, 0, 0],
        [1, 0, 0],
        [-1, 0, 0],
        [0, 1, 0],
        [0, -1, 0],
        [0, 0, 1],
        [0, 0, -1],
    ];
    let mut i = 0;
    while i < 7 {
        t[i] = d7[i];
        i += 1;
    }
    let mut n = 8; // t[7] is the Direct27 centre, [0, 0, 0]
    let mut z = -1;
    while z <= 1 {
        let mut y = -1;
        while y <= 1 {
            let mut x = -1;
            while x <= 1 {
                if !(x == 0 && y == 0 && z == 0) {
                    t[n] = [x, y, z];
                    n += 1;
                }
                x += 1;
            }
            y += 1;
        }
        z += 1;
    }
    t
};

/// Index of Hessian entry `(i, j)`, `i ≤ j < 6`, in a result.
pub const fn hessian_index(i: usize, j: usize) -> usize {
    7 + i * (13 - i) / 2 + (j - i)
}

/// Bytes between a thread's consecutive accumulators in shared memory ([`Variant::shared_acc`]).
pub(super) const ACC_STRIDE: i64 = 8 * BLOCK as i64;

/// Shared-memory index of the translation (after the ten 3×3 matrices).
pub(super) const TRANSLATION_AT: u32 = 90;

/// Probes per group of the dense-table lookup (Direct7's seven are one group; Direct27's 27 are
/// four, the last one slot short).
pub const DENSE_GROUP: u32 = 7;

/// The dense cell table's parameters: `cells` (i32 voxel index per cell, −1 for none, x
/// fastest), the cell index of its first entry and its extent.
#[derive(Clone, Debug)]
pub(super) struct DenseParams {
    pub(super) cells: Param<U64>,
    pub(super) origin: [Param<S32>; 3],
    pub(super) dims: [Param<U32>; 3],
}

/// Registers and symbols every part of the kernel needs.
pub(super) struct Ctx {
    pub(super) points: Reg<U64>,
    pub(super) voxels: Reg<U64>,
    pub(super) slots: Reg<U64>,
    pub(super) slot_mask: Reg<U32>,
    pub(super) inv_resolution: Reg<F64>,
    pub(super) radius_sq: Reg<F64>,
    pub(super) neg_half_d2: Reg<F64>,
    pub(super) neg_d2: Reg<F64>,
    pub(super) probe_start: Reg<U32>,
    pub(super) probe_end: Reg<U32>,
    pub(super) radius: Reg<Pred>,
    pub(super) first: Reg<U32>,
    pub(super) terms: SharedArray<F64>,
    pub(super) probes: SharedArray<U32>,
    pub(super) pattern: Pattern,
    pub(super) acc: [Reg<F64>; VALUES - 1],
    /// [`Variant::shared_acc`]: the shared-memory address of the thread's accumulator 0
    /// (accumulator `k` at `+ k · ACC_STRIDE`); `acc` is then unused until step 3.
    pub(super) acc_shared: Option<Reg<U32>>,
    pub(super) count: Reg<U32>,
    /// The dense-table variant's parameters and scratch (`None`: the hash is probed).
    pub(super) dense: Option<DenseCtx>,
    /// [`Variant::split_point`]: each point shared by two warps.
    pub(super) split: Option<SplitCtx>,
    /// [`Variant::cross`]: `u_b`, `u_c` for the cross-product contributions (`cross.rs`).
    pub(super) cross: Option<cross::CrossRegs>,
    /// [`Variant::wide_records`]: `voxels` holds padded records (`wide.rs`).
    pub(super) wide_records: bool,
    /// [`Variant::acc_pairs`]: `acc_shared` is the pair layout's column (`wide.rs`).
    pub(super) acc_pairs: bool,
    /// [`Variant::probes7`].
    pub(super) probes7: bool,
    /// [`Variant::pair2`].
    pub(super) pair2: bool,
}

/// What the split variant adds to the context.
pub(super) struct SplitCtx {
    /// 0 in even warps, 1 in odd ones: which probes (every other one, from this) and which
    /// [`Variant::split_point`] part of the contributions the thread takes.
    pub(super) phase: Reg<U32>,
    pub(super) tid: Reg<U32>,
    /// The ten pair sums per thread (`E`, `G`, `Q`), `[k · BLOCK + tid]`, for the partner warp.
    pub(super) xchg: SharedArray<F64>,
    /// The pair count per thread.
    pub(super) xfound: SharedArray<U32>,
}

/// Points per block and pass of the split variant (two warps per point).
pub const SPLIT_POINTS_PER_BLOCK: u32 = BLOCK / 2;

/// What the dense-table variant adds to the context.
pub(super) struct DenseCtx {
    pub(super) params: DenseParams,
    /// [`DENSE_GROUP`] voxel indices per thread, `[k · BLOCK + tid]`.
    pub(super) group: SharedArray<S32>,
    pub(super) tid: Reg<U32>,
    /// [`Variant::compact`].
    pub(super) compact: bool,
    /// [`Variant::prefetch`].
    pub(super) prefetch: bool,
    /// [`Variant::linear`]: each probe's offset in the table (`x + y · dims_x + z · dims_x ·
    /// dims_y` of its cell offset), written by thread 0 with the request's terms.
    pub(super) linear: Option<SharedArray<S32>>,
}

/// Build-time variants of `ndt_derivatives`. Three are in the kernel table: the default (hash
/// probes, registers), [`Variant::DENSE`] and [`Variant::DENSE_SMALL`]; the others are
/// experiments the GPU pipeline builds and loads at run time when asked to
/// (`ndt::gpu::variants`), so their extra registers never touch the table's kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    /// Probe the dense cell table (seven more parameters, `cells` .. `cell_dims_z`) instead of
    /// the hash.
    pub dense: bool,
    /// `.minnctapersm`: ptxas caps the registers so that this many blocks fit an SM.
    pub min_blocks_per_sm: Option<u32>,
    /// With `dense`: park only the probes that found a voxel (in probe order) and pair those,
    /// so the lanes of a warp pair their own hits together instead of waiting on each other's
    /// probe positions; and only radius mode computes the radius test. The same sums in the
    /// same order: records stay bit-identical.
    pub compact: bool,
    /// With `compact`: load the next hit's voxel record before computing this hit's terms (a
    /// software pipeline of depth one). The same arithmetic: records stay bit-identical.
    pub prefetch: bool,
    /// With `dense`: points whose cell is not on the box's faces find each probe's entry at the
    /// cell's entry plus the probe's table offset (one shared load and one add instead of the
    /// key and three bounds); the same entries, so records stay bit-identical.
    pub linear: bool,
    /// Keep the 28 f64 accumulators in shared memory (one column per thread) instead of 56
    /// registers, for more resident blocks; same additions in the same order.
    pub shared_acc: bool,
    /// The persistent build ([`server`]): one cooperative launch serves request after request
    /// from a mailbox in mapped host memory; the same sums in the same order per request.
    pub server: bool,
    /// With `dense` (not `linear`): each point is taken by a thread of an even warp and the
    /// same lane of the next warp ([`SPLIT_POINTS_PER_BLOCK`] points per block and pass), each
    /// probing every other offset; their pair sums are added, then the even warp adds count,
    /// score, gradient, translation and mixed Hessian blocks and the odd one the angular block.
    /// Half the dependent work per thread for rounds too small to fill the device; the pair
    /// sums are added in another order, so records differ from the other variants' in the last
    /// bits (within the CPU tolerances).
    pub split_point: bool,
    /// With `server`: the whole Newton solve of one alignment on the device
    /// (`crate::kernels::ndt::solve`); the request comes from the solver, not the host.
    pub solve: bool,
    /// With `dense` (and `compact`): the per-pair and per-point maths in f32 (the transform,
    /// the voxel cell and `x' − μ` stay in f64, the sums in f64; see `mixed.rs`), reading the
    /// inverse covariances from an f32 copy (the `cov32` parameter after the dense ones).
    /// Not bit-identical: records agree with the f64 kernels to about 1e-6 relative.
    pub mixed: bool,
    /// With `mixed`: the 28 per-thread sums in f32 registers (widened to f64 for the block
    /// reduction) instead of the f64 accumulators.
    pub acc32: bool,
    /// With `mixed`: Direct7 probes of a cell at least one cell inside the table's box read
    /// the seven entries at fixed offsets from the cell's entry (no per-probe key or bounds).
    pub fast_probes: bool,
    /// With `mixed`: `x' − μ` as `(x'_hi − μ_hi) + (x'_lo − μ_lo)` in f32 from double-f32
    /// splits of the point (once per point) and of the mean (in the `cov32` record), so a pair
    /// needs no f64 operation outside radius mode.
    pub hilo: bool,
    /// With `mixed`: each pair's `x' − μ`, `C d`, `q` and `e` in f64 exactly as the f64 kernels
    /// compute them, and the score summed in f64, so the score (what the line search compares)
    /// keeps the f64 kernels' accuracy; only the gradient and Hessian terms are f32.
    pub score64: bool,
    /// With `dense` (not `mixed`, not `split_point`): the paired-point contributions with the
    /// angular derivatives as cross products in f64 (`cross.rs`): no derivative matrices per
    /// point; records differ from the matrix form in the last bits only.
    pub cross: bool,
    /// With `solve`: the device solver's build options (`crate::kernels::ndt::solve::OPT_*`
    /// bits; 0 is the table's `ndt_align_device`).
    pub solve_opts: u32,
    /// With `dense` and `cross`: the `voxels` argument holds the records padded to
    /// [`WIDE_RECORD_VALUES`] f64, read with `v2` loads (`wide.rs`); the same values, so
    /// records stay bit-identical.
    pub wide_records: bool,
    /// With `shared_acc` and `cross`: the shared accumulators in pairs, each pair read and
    /// written with one `v2` access (`wide.rs`); the same additions, records bit-identical.
    pub acc_pairs: bool,
    /// With `cross`: values that stay the same for the whole request (`u_b`, `u_c`) are read
    /// from shared memory where they are used instead of held in registers for the whole loop
    /// (fewer registers per thread; the same values, records bit-identical).
    pub late_loads: bool,
    /// With `dense` (not `linear`): a build for Direct7 launches only (`probe_start` and
    /// `probe_count` are ignored), which finds a point's seven table entries at fixed offsets
    /// from its cell's entry (`probes7.rs`); the same entries in the same order as the generic
    /// probes, records bit-identical.
    pub probes7: bool,
    /// With `compact` (not `prefetch`): the pair loop takes two hits per step, both pairs'
    /// terms computed side by side and added in hit order (`pair2.rs`); records bit-identical.
    pub pair2: bool,
}

impl Variant {
    /// The dense-table build the pipeline runs by default (`ndt_derivatives_dense`): compacted
    /// hits, accumulators in shared memory (linear probes measured slower on the H100).
    pub const DENSE: Variant = Variant {
        dense: true,
        min_blocks_per_sm: None,
        compact: true,
        prefetch: false,
        linear: false,
        shared_acc: true,
        server: false,
        split_point: false,
        solve: false,
        mixed: false,
        acc32: false,
        fast_probes: false,
        hilo: false,
        score64: false,
        cross: false,
        solve_opts: 0,
        wide_records: false,
        acc_pairs: false,
        late_loads: false,
        probes7: false,
        pair2: false,
    };
    /// [`Variant::DENSE`] with the next hit's record loaded ahead, for rounds of at most one
    /// block per SM (`ndt_derivatives_dense_small`).
    pub const DENSE_SMALL: Variant = Variant {
        prefetch: true,
        ..Variant::DENSE
    };
    /// [`Variant::DENSE`] with the angular derivatives as cross products
    /// (`ndt_derivatives_dense_cross`): the kernel of every round of a batch of alignments
    /// whose search is not Direct7 (`ndt::gpu::variants`); records differ from
    /// [`Variant::DENSE`]'s in the last bits.
    pub const DENSE_CROSS: Variant = Variant {
        cross: true,
        ..Variant::DENSE
    };
    /// [`Variant::DENSE_CROSS`] for Direct7 launches only (`ndt_derivatives_dense_cross7`, the
    /// batch kernel of pipelines searching Direct7): [`Variant::late_loads`] (96 registers
    /// instead of 127 on sm_90: 5 blocks per SM), [`Variant::acc_pairs`] and the seven probes at
    /// fixed offsets ([`Variant::probes7`]); records bit-identical to [`Variant::DENSE_CROSS`]'s.
    pub const DENSE_CROSS7: Variant = Variant {
        late_loads: true,
        acc_pairs: true,
        probes7: true,
        ..Variant::DENSE_CROSS
    };
    /// [`Variant::DENSE_SMALL`] as a persistent evaluation server (`ndt_derivatives_server`).
    pub const SERVER: Variant = Variant {
        server: true,
        ..Variant::DENSE_SMALL
    };
    /// [`Variant::SERVER`] running the Newton solve itself (`ndt_align_device`).
    pub const SOLVE: Variant = Variant {
        solve: true,
        ..Variant::SERVER
    };
}
