//! `gaussian_backward_{f32,f64}`: the fused backward pass. Given g_i = dLoss/df_i it produces,
//! without any B x N intermediate, raw per-Gaussian sums over a chunk of points and per-point sums
//! over a block of Gaussians (the finishing kernels in `reduce` scale and add them up).
//!
//! Per pair (i, j), in the unit-triangular form of `super::unit` (f32: w = U^-1 r, y = w (sigma /
//! a)^2, t = o + w . y, e' = 2^-t, s' = U^-T y = sigma^2 s; f64 keeps the scaled form of
//! `super::scaled` with w = y = v', see `unit::BackConsts`; its e' comes from the table
//! exponential of `super::exp_f64`, the forward's `EXP_F64`, whose table lane 0 stores in shared
//! memory `exp2_table` before the first batch) and with g'_i = g_i / sigma^2
//! staged per point: ge = g' e' and gs = ge s' (= g e' s).
//! - Gaussian j accumulates A_j = [gs (3), gs_a w_b for (a,b) = 00 10 11 20 21 22 (6), ge (1)];
//!   at the end slot 3..9 of column b is multiplied by 1/a_b (unit form: v_b = w_b / a_b) or
//!   1/sigma (scaled form) and slot 9 by sigma^2 (f64 products rounded once), giving [sum g e' s,
//!   sum g e' s_a v_b, sum g e'], which `gaussian_finish` turns into dLoss/d(mu, L, w) with w c
//!   2^o and c 2^o.
//! - Point i accumulates P_i = sum_j (w c 2^o)_j gs_ij (3); dLoss/dx_i = -P_i.
//!
//! Two bodies per point, chosen per warp (`vote.all`, `kernel`) before the point's pairs are
//! formed ([`Check::Growth`]): the unguarded one when, in every lane, the lane's Gaussians are
//! unflagged and |x|_inf <= x_lim, where x_lim comes once per launch from a bound S on how much
//! the per-pair maths can grow |r|_inf (`unit::BackConsts::growth`): S (|x|_inf + max |mu|)
//! <= `KFloat::GROWTH_LIMIT`. Then w, y, s' and every product are finite, and a pair beyond the
//! cutoff (e' = 0) adds exactly 0 through its zero weight. Otherwise the guarded body (`pairs`):
//! a pair with e' = 0 has w and y replaced by 0 (`selp`), so s' = 0 and it adds exactly 0, as the
//! CPU's skip does, and 0 * inf never reaches the sums; and (f32) a Gaussian flagged in `comp`
//! (`common::COMP_STRIDE`; badly conditioned, see `crate::gaussian::layout::COMPENSATE_KAPPA`)
//! takes v of its live pairs from `common::solve_compensated` inside a per-pair branch, w = a v
//! and y = v sigma^2 / a (e' keeps the plain t). ([`Check::PairT`], a variant for comparisons,
//! forms all pairs first and votes on t < `KFloat::SAFE_T` for each.)
//!
//! Launch: blocks of exactly [`BLOCK`] threads (one warp: no block barrier, only warp syncs);
//! grid (n_pad / (BLOCK * Q), S) with Q = [`GAUSSIANS_PER_THREAD_F32`] or
//! [`GAUSSIANS_PER_THREAD_F64`]. Block (x, c) owns Gaussians x * BLOCK * Q + q * BLOCK + tid (q <
//! Q; thread-private, constants and the 10 Q sums in registers for the whole launch) and points
//! [c * chunk_len, min((c + 1) * chunk_len, B)).
//!
//! The warp stages its points [`batch_points`] at a time in shared memory (`pts`: x, y, z, g'
//! per point, one vector store per lane), then every lane walks the batch in order (broadcast
//! loads). Per point a lane sums its Q Gaussians' point terms and stores them in its own row of
//! `psum` (one vector store; no shuffles). After a warp sync lane k adds point k's terms of the
//! 32 lanes in lane order and stores them: `partial_points[(x * B + i) * 3 + k]`. At the end each
//! lane stores its Gaussians' sums: `partial_gauss[(c * n_pad + j) * 10 + k]`. Every sum runs in a
//! fixed order: results are bit-identical from run to run. No atomics.
//!
//! Files: `kernel` builds the kernel, `pairs` the per-pair sums of one point, `smem` the
//! four-scalar shared-memory accesses; this module holds what they share. `fast` and
//! `fast_pairs` build `gaussian_backward_fast_f32`, the f32 backward with the expanded solve of
//! `super::forward_fast` (same launch geometry and outputs; see `fast`'s docs); `lanes` builds
//! `gaussian_backward_lanes_f32`, the same per-pair maths with points in lanes and Gaussians
//! broadcast (its own launch geometry, the same outputs; see `lanes`' docs); `tc` builds
//! `gaussian_backward_tc_f32`, the lanes kernel's inputs and outputs with each Gaussian's sums
//! on the FP64 tensor cores (opt-in; see `tc`'s docs).

use super::common::*;
use super::exp_f64::{Exp2, ExpF64};
use super::unit::BackConsts;
use crate::ptx::*;

mod fast;
mod fast_pairs;
mod kernel;
mod lanes;
mod lanes_parts;
mod pairs;
mod smem;
mod tc;
mod tc_options;
mod tc_parts;

pub use fast::{build_fast, build_fast_f32, fast_variant_options, FastOptions, FAST_OPTIONS};
pub use kernel::build;
pub use lanes::{
    build_lanes, build_lanes_f32, lanes_variant_options, LanesOptions, LANES_OPTIONS,
    POINTS_PER_THREAD as LANES_POINTS_PER_THREAD, TILE as LANES_TILE,
};
pub use tc::{build_tc, build_tc_f32, tc_variant_options, TcOptions, TC_OPTIONS, TILE as TC_TILE};
/// Threads per block of `gaussian_backward_lanes_f32`.
pub const LANES_BLOCK: u32 = lanes::BLOCK;

/// Threads per block (required): one warp.
pub const BLOCK: u32 = 32;
/// Gaussians each thread owns (f32: 255 registers on sm_90, 8 one-warp blocks per SM; fewer
/// registers spill).
pub const GAUSSIANS_PER_THREAD_F32: u32 = 8;
/// Gaussians each thread owns (f64: 244 registers on sm_90).
pub const GAUSSIANS_PER_THREAD_F64: u32 = 4;

// The padded Gaussian count is a multiple of every block's Gaussians.
const _: () = assert!(GAUSSIAN_PAD.is_multiple_of(BLOCK * GAUSSIANS_PER_THREAD_F32));
const _: () = assert!(GAUSSIAN_PAD.is_multiple_of(BLOCK * GAUSSIANS_PER_THREAD_F64));

/// Threads' rows of `psum` added per step of the final per-point sums.
pub(super) const ROWS_PER_STEP: u32 = 8;

/// Points staged per batch: 32 (f32) or 16 (f64), so that the per-lane rows of point terms
/// (`psum`, [`psum_row`]) take about 17 KB of shared memory in both types.
pub fn batch_points<T: KFloat>() -> u32 {
    if T::BYTES == 4 {
        32
    } else {
        16
    }
}

/// Scalars per thread row of `psum`: 4 per point of a batch, plus 16 bytes of padding so that the
/// 32 lanes' 16-byte stores of one point fall in distinct bank groups (4 wavefronts, the minimum).
pub fn psum_row<T: KFloat>() -> u32 {
    batch_points::<T>() * 4 + 16 / T::BYTES
}

/// How the kernel tells, per point, that the unguarded body is safe for every pair of the warp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Before forming the point's pairs: |x|_inf <= x_lim, from the growth bound of the lane's
    /// Gaussians (`unit::BackConsts::growth`), three instructions per point; each pair is then
    /// formed and summed in one go (few registers live).
    Growth,
    /// After forming every pair of the point (all held in registers until the vote): t <
    /// `KFloat::SAFE_T` for each, one comparison per pair.
    PairT,
    /// As [`Check::Growth`] once per staged batch: the batch's largest |x|_inf against the
    /// smallest x_lim of the warp (warp-wide max and min), then one body for all its points
    /// (no vote or branch per point).
    Batch,
}

/// Build options besides the type and Gaussians per thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The unguarded-body test.
    pub check: Check,
    /// The f64 exponential (`super::exp_f64`; f32 ignores it).
    pub exp: ExpF64,
    /// f64: the unit-triangular per-pair form (f32 always takes it, `KFloat::UNIT_BACKWARD`).
    pub unit: bool,
    /// `.maxnreg`: a register cap (more resident one-warp blocks), or none.
    pub max_registers: Option<u32>,
    /// Two points per iteration of the point loop (more independent pairs in flight).
    pub two_points: bool,
    /// f32 with one point per iteration: walk the staged points by shared-memory address (one
    /// add per point for the point and its row entry; f64 ignores it). Off in the built-in
    /// kernel: 1.1% fewer instructions, but ptxas schedules the loop worse (H100, same
    /// process: backward 1657 us against 1587 without; issue slots 67.8% against 71.4%).
    pub walk: bool,
}

/// The options of the built-in kernels (f32 ignores `exp` and always takes the unit form).
pub const OPTIONS: Options = Options {
    check: Check::Batch,
    exp: super::forward::EXP_F64,
    unit: false,
    max_registers: None,
    two_points: false,
    walk: false,
};

/// f32 module.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target, GAUSSIANS_PER_THREAD_F32, OPTIONS)
}

/// The options of the built-in f64 kernel: two points per iteration (H100, 10000 x 100000, same
/// process: backward 4077 us against 4105 with one point per iteration).
pub const OPTIONS_F64: Options = Options {
    two_points: true,
    ..OPTIONS
};

/// f64 module.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target, GAUSSIANS_PER_THREAD_F64, OPTIONS_F64)
}

/// A variant of the built-in backward kernel `id` for comparisons (`PTXFLOW_GAUSS_BWD`, see
/// `crate::gaussian::gpu::launch`): `pairt` ([`Check::PairT`]), `growth` ([`Check::Growth`])
/// or `batch` ([`Check::Batch`]), optionally followed by `-e<C>` for the f64 exponential
/// `ExpF64::from_code(C)`, `-u` for the f64 unit-triangular form, `-r<N>` for a register cap
/// of N, `-p2` / `-p1` for two points per iteration or one, `-w0` / `-w1` without / with the
/// f32 address walk (`batch-e1-u`, `batch-e4-r208`, `batch-p1`, `batch-w0`); the f64 variants start from [`OPTIONS_F64`]; same parameters, block and
/// Gaussians per thread. None for other names or kernels.
pub fn variant(id: crate::kernels::KernelId, name: &str) -> Option<Module> {
    use crate::kernels::KernelId;
    let mut parts = name.split('-');
    let mut o = if id == KernelId::GaussianBackwardF64 {
        OPTIONS_F64
    } else {
        OPTIONS
    };
    o.check = match parts.next()? {
        "pairt" => Check::PairT,
        "growth" => Check::Growth,
        "batch" => Check::Batch,
        _ => return None,
    };
    for part in parts {
        match part.split_at(1.min(part.len())) {
            ("e", code) => o.exp = ExpF64::from_code(code.parse().ok()?)?,
            ("u", "") => o.unit = true,
            ("r", n) => o.max_registers = Some(n.parse().ok()?),
            ("p", "1") => o.two_points = false,
            ("p", "2") => o.two_points = true,
            ("w", "0") => o.walk = false,
            ("w", "1") => o.walk = true,
            _ => return None,
        }
    }
    match id {
        KernelId::GaussianBackwardF32 => {
            Some(build::<F32>(Target::Sm75, GAUSSIANS_PER_THREAD_F32, o))
        }
        KernelId::GaussianBackwardF64 => {
            Some(build::<F64>(Target::Sm75, GAUSSIANS_PER_THREAD_F64, o))
        }
        _ => None,
    }
}

/// One owned Gaussian: index, unit-form constants, sums, and (f32) its compensation flag.
pub(super) struct Owned<T: KFloat> {
    pub(super) j: Reg<U32>,
    pub(super) g: BackConsts<T>,
    pub(super) acc: [Reg<T>; GRAD_STRIDE as usize],
    pub(super) comp_on: Option<Reg<Pred>>,
}

/// What the per-pair sums of one point read.
pub(super) struct PointCtx<'a, T: KFloat> {
    pub(super) own: &'a [Owned<T>],
    /// (w, y, e') per owned Gaussian when formed before the vote (`Check::PairT`).
    pub(super) pairs: Option<&'a [Pair<T>]>,
    /// g / sigma^2 of the point.
    pub(super) g: Reg<T>,
    pub(super) x: [Reg<T>; 3],
    /// The point's terms summed over this thread's Gaussians.
    pub(super) pc: [Reg<T>; 3],
    pub(super) prep: Reg<U64>,
    /// The compensation records (f32).
    pub(super) comp: Option<Reg<U64>>,
    /// The kernel's exponential.
    pub(super) exp: Exp2,
}

/// One pair's values before the sums: w, y and e'.
pub(super) struct Pair<T: KFloat> {
    pub(super) w: [Reg<T>; 3],
    pub(super) y: [Reg<T>; 3],
    pub(super) e: Reg<T>,
}
