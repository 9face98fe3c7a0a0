//! `gaussian_backward_{f32,f64}`: the fused backward pass. Given g_i = dLoss/df_i it produces,
//! without any B x N intermediate, raw per-Gaussian sums over a chunk of points and per-point sums
//! over a block of Gaussians (the finishing kernels in `reduce` scale and add them up).
//!
//! Per pair (i, j), in the scaled form of `super::scaled` (v' = sigma v, s' = L'^-T v' = sigma^2
//! s, t = o + |v'|^2, e' = 2^-t) and with g'_i = g_i / sigma^2 staged per point: ge = g' e' and
//! gs = ge s' (= g e' s), in the order of `crate::gaussian::pair`.
//! - Gaussian j accumulates A_j = [gs (3), gs_a v'_b for (a,b) = 00 10 11 20 21 22 (6), ge (1)];
//!   at the end slots 3..9 are multiplied by 1/sigma and slot 9 by sigma^2 (f64 products rounded
//!   once), giving [sum g e' s, sum g e' s_a v_b, sum g e'], which `gaussian_finish` turns into
//!   dLoss/d(mu, L, w) with w c 2^o and c 2^o.
//! - Point i accumulates P_i = sum_j (w c 2^o)_j gs_ij (3); dLoss/dx_i = -P_i.
//!
//! Two bodies per point, chosen per warp (`vote.all`, `kernel`): the unguarded one when, in every
//! lane, the point's pairs have t < `KFloat::SAFE_T` and the lane's Gaussians are unflagged with
//! scaled constants at most `KFloat::SAFE_CONST` (checked once per launch). Then v', s' and every
//! product are finite, and a pair beyond the cutoff (e' = 0) adds exactly 0 through its zero
//! weight. Otherwise the guarded body (`pairs`): a pair with e' = 0 has v' replaced by 0
//! (`selp`), so s' = 0 and it adds exactly 0, as the CPU's skip does, and 0 * inf never reaches
//! the sums; and (f32) a Gaussian flagged in `comp` (`common::COMP_STRIDE`; badly conditioned,
//! see `crate::gaussian::layout::COMPENSATE_KAPPA`) replaces v' of its live pairs by sigma times
//! `common::solve_compensated` inside a per-pair branch (e' keeps the plain t). (Predicating the
//! pair's instructions instead made ptxas if-convert them into conditional moves: twice the
//! registers.)
//!
//! Launch: blocks of exactly [`BLOCK`] threads (two warps); grid (n_pad / (BLOCK * Q), S) with Q =
//! [`GAUSSIANS_PER_THREAD_F32`] or [`GAUSSIANS_PER_THREAD_F64`]. Block (x, c) owns Gaussians
//! x * BLOCK * Q + q * BLOCK + tid (q < Q; thread-private, constants and the 10 Q sums in
//! registers for the whole launch) and points [c * chunk_len, min((c + 1) * chunk_len, B)).
//!
//! The block stages its points [`batch_points`] at a time in shared memory (`pts`: x, y, z, g'
//! per point, one vector load), then every thread walks the batch in order (broadcast loads). Per
//! point a thread sums its Q Gaussians' point terms and stores them in its own row of `psum` (one
//! vector store; no shuffles, no per-point exchange between lanes). After a barrier thread k adds
//! point k's terms of the block's 64 threads in thread order and stores them:
//! `partial_points[(x * B + i) * 3 + k]`. At the end each thread stores its Gaussians' sums:
//! `partial_gauss[(c * n_pad + j) * 10 + k]`. Every sum runs in a fixed order: results are
//! bit-identical from run to run. No atomics.
//!
//! Files: `kernel` builds the kernel, `pairs` the per-pair sums of one point, `smem` the
//! four-scalar shared-memory accesses; this module holds what they share.

use super::common::*;
use super::scaled::PairConsts;
use crate::ptx::*;

mod kernel;
mod pairs;
mod smem;

pub use kernel::build;

/// Threads per block (required).
pub const BLOCK: u32 = 64;
/// Gaussians each thread owns (f32: 252 registers, 4 blocks per SM on sm_90; at 10000 x 100000 on
/// the H100 the backward takes 1.78 ms against 1.91 at 4).
pub const GAUSSIANS_PER_THREAD_F32: u32 = 8;
/// Gaussians each thread owns (f64: 226 registers; 4.72 ms against 5.86 at 2).
pub const GAUSSIANS_PER_THREAD_F64: u32 = 4;

// The padded Gaussian count is a multiple of every block's Gaussians.
const _: () = assert!(GAUSSIAN_PAD.is_multiple_of(BLOCK * GAUSSIANS_PER_THREAD_F32));
const _: () = assert!(GAUSSIAN_PAD.is_multiple_of(BLOCK * GAUSSIANS_PER_THREAD_F64));

/// Threads' rows of `psum` added per step of the final per-point sums.
pub(super) const ROWS_PER_STEP: u32 = 8;

/// Points staged per batch: 32 (f32) or 16 (f64), so that the per-thread rows of point terms
/// (`psum`, [`psum_row`]) take about 33 KB of shared memory in both types.
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

/// f32 module.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target, GAUSSIANS_PER_THREAD_F32)
}

/// f64 module.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target, GAUSSIANS_PER_THREAD_F64)
}

/// One owned Gaussian: index, scaled constants, sums, and (f32) its compensation flag.
pub(super) struct Owned<T: KFloat> {
    pub(super) j: Reg<U32>,
    pub(super) g: PairConsts<T>,
    pub(super) acc: [Reg<T>; GRAD_STRIDE as usize],
    pub(super) comp_on: Option<Reg<Pred>>,
}

/// What the per-pair sums of one point read.
pub(super) struct PointCtx<'a, T: KFloat> {
    pub(super) own: &'a [Owned<T>],
    /// (v', e') per owned Gaussian.
    pub(super) pairs: &'a [([Reg<T>; 3], Reg<T>)],
    /// g / sigma^2 of the point.
    pub(super) g: Reg<T>,
    pub(super) x: [Reg<T>; 3],
    /// The point's terms summed over this thread's Gaussians.
    pub(super) pc: [Reg<T>; 3],
    pub(super) prep: Reg<U64>,
    /// The compensation records (f32).
    pub(super) comp: Option<Reg<U64>>,
}
