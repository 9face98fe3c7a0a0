//! `rnn_small_eig`: the randomized SVD's small step on the GPU, one block: the eigenproblem of
//! B^T's Gram `G` (`l x l` f64, l <= 48) by parallel cyclic Jacobi, then the Gram route's
//! factors and their check, so that the host only reads S and a status word. The maths, the
//! pair ordering and every rounding are those of the CPU mirror `crate::rnn::jacobi`
//! (`small_step`): the same `fma.rn`/`mul.rn`/`div.rn`/`sqrt.rn`/`rcp.rn` in the same order, so
//! the two agree bit for bit.
//!
//! Parameters: `gram` (`W x W` f64, lower triangle read), `l`, `k`, `zw` (out: `Z_k` then
//! `Z_k Sigma_k^-1`, `W x W` f64 each, first k columns, zeros elsewhere), `out` (f64, see
//! `crate::rnn::jacobi::OUT_LEN`: S in `[0, k)`, then status, sweeps, check value, rounds with rotations).
//!
//! Launch: one block of [`THREADS`] threads. Shared memory: `a` (the matrix, `W x W` f64 with
//! rows [`LDA`] apart, both triangles), `v` (the eigenvectors, `V[r][c]` = component r of vector c), the round's
//! rotations (per pair: p, q, c, s, t, rotates), 16 flag words, the order and the values.
//! Per sweep (while some pair is above the threshold, checked by all 256 threads over
//! `a` and one vote per warp): `ne - 1` rounds of two phases and two barriers each:
//! - R: lane P < ne / 2 of warp 0 computes pair P's rotation from the round's matrix;
//!   (a round in which no pair rotates ends there: U and its barrier are skipped);
//! - U: thread t updates the `2 x 2` blocks t and t + 256 of the upper block triangle
//!   (numbered row by row; the blocks of rows P and columns Q >= P, written with their
//!   mirrors), and lane P of warp w rotates columns (p, q) of V in rows w, w + 8, ...
//!
//! Cost (H100, the 4096^2 rank-32 bench, `rsvd-3.log` of session 11): 317.9 us for 7 sweeps
//! (258 of 287 rounds with rotations), 1.11 us per round; ncu: L1/TEX (shared memory) 49% busy,
//! 9.1 cycles per issued instruction at 8 warps: phase U's shared traffic (both rotations'
//! parameters per block, four loads and eight stores of `a`, and V's 42 x 21 column pairs, all
//! f64) and the two barriers bind it. Next: `a` as one triangle (half the stores), V's columns
//! held by pair in registers, and the next round's rotations computed while U runs.
//!
//! Then the finish (`finish.rs`): ranks, S, `C = G Z Sigma^-1` (thread t: row t % 48, columns
//! t / 48 + 5 j), `D = C^T Z Sigma^-1` and its defect, the packed factors.

mod finish;
mod sweep;

use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;
/// Padded width (the rSVD's sketch width).
pub const W: u32 = 48;
/// Row stride (f64) of the shared matrix `a`: odd, so that a column's entries (what the
/// threads of one block row read and write together) fall in different banks; with 48 every
/// row starts in the same bank and phase U serialised up to 24-way.
pub const LDA: u32 = W + 1;
/// Most pairs per round.
pub(super) const PAIRS: u32 = W / 2;
/// Flag words: 0..8 the convergence vote, 8..16 the finiteness vote (one per warp), then two
/// for "some pair of the round rotates" (rounds alternate between them).
pub(super) const FLAGS: u32 = 18;
/// The first of the two round flags.
pub(super) const ROUND_FLAG: u32 = 16;

/// Thresholds and status codes shared with the CPU mirror (`crate::rnn::jacobi`).
pub mod abi {
    /// A pair rotates while `|a_pq| > JACOBI_TOL sqrt(a_pp a_qq)`. Jacobi converges
    /// quadratically: on graded Grams (`crate::rnn::jacobi`'s tests) the largest relative
    /// off-diagonal goes 1e-5 -> 1e-11..1e-14 in one sweep, and 1e-15 would cost one more sweep
    /// (of five) for nothing an f32 result can show: the check's value stays near 1e-14 and S
    /// moves by the square of what is left.
    pub const JACOBI_TOL: f64 = 1e-10;
    /// `JACOBI_TOL^2`: the test runs in squares, `a_pq^2 > JACOBI_TOL2 a_pp a_qq`.
    pub const JACOBI_TOL2: f64 = 1e-20;
    /// Sweeps allowed before giving up.
    pub const JACOBI_MAX_SWEEPS: u32 = 30;
    /// `sigma_k >= EIGEN_MIN_RATIO sigma_1` (as `crate::rnn::rsvd_small`).
    pub const EIGEN_MIN_RATIO: f64 = 1e-6;
    /// The check's bound (as `crate::rnn::rsvd_small::EIGEN_ORTHO_TOL`).
    pub const EIGEN_ORTHO_TOL: f64 = 1e-8;
    /// Status codes.
    pub const SMALL_OK: u32 = 0;
    /// G is not finite.
    pub const SMALL_NOT_FINITE: u32 = 1;
    /// No convergence within the sweeps allowed.
    pub const SMALL_NO_CONVERGENCE: u32 = 2;
    /// `sigma_k` too small against `sigma_1` (or `sigma_1` not positive and finite).
    pub const SMALL_RATIO: u32 = 3;
    /// The check failed (or was not finite).
    pub const SMALL_CHECK: u32 = 4;
    /// Slots of `out` after the k singular values.
    pub const OUT_STATUS: u32 = 48;
    /// Sweeps taken.
    pub const OUT_SWEEPS: u32 = 49;
    /// The check's value.
    pub const OUT_DEFECT: u32 = 50;
    /// Rounds in which some pair rotated.
    pub const OUT_ROUNDS: u32 = 51;
    /// Length of `out` (f64).
    pub const OUT_LEN: u32 = 64;
}

/// The kernel's shared arrays.
pub(super) struct Smem {
    pub a: SharedArray<F64>,
    pub v: SharedArray<F64>,
    pub rp: SharedArray<U32>,
    pub rq: SharedArray<U32>,
    pub rc: SharedArray<F64>,
    pub rs: SharedArray<F64>,
    pub rt: SharedArray<F64>,
    pub ron: SharedArray<U32>,
    pub flags: SharedArray<U32>,
    pub ord: SharedArray<U32>,
    pub dv: SharedArray<F64>,
    pub sv: SharedArray<F64>,
    pub inv: SharedArray<F64>,
}

/// Thread indices every phase uses.
pub(super) struct Ids {
    pub tid: Reg<U32>,
    pub lane: Reg<U32>,
    pub warp: Reg<U32>,
}

/// Block-wide "any" of `p` through one vote per warp and flag words `base..base + 8`; every
/// thread must reach it (one barrier; the caller keeps a barrier between two uses of a slot set).
pub(super) fn block_any(
    b: &mut KernelBuilder,
    p: Reg<Pred>,
    sm: &Smem,
    ids: &Ids,
    base: u32,
) -> Reg<Pred> {
    let v = b.vote_any(p);
    let word = b.selp(1u32, 0u32, v);
    let first = b.setp(Cmp::Eq, ids.lane, 0u32);
    let slot = b.add(ids.warp, base);
    let sa = b.shared_index(&sm.flags, slot);
    b.guarded(first, false, |b| b.st(Space::Shared, sa, word));
    b.bar_sync();
    let acc = b.mov(0u32);
    for w in 0..THREADS / 32 {
        let a = b.shared_index(&sm.flags, base + w);
        let x = b.ld::<U32>(Space::Shared, a);
        let o = b.or(acc, x);
        b.mov_to(acc, o);
    }
    b.setp(Cmp::Ne, acc, 0u32)
}

/// `(c x - s y, s x + c y)` rounded as the CPU mirror's `rot`.
pub(super) fn rot(
    b: &mut KernelBuilder,
    c: Reg<F64>,
    s: Reg<F64>,
    x: Reg<F64>,
    y: Reg<F64>,
) -> (Reg<F64>, Reg<F64>) {
    let sy = b.mul(s, y);
    let nsy = b.neg(sy);
    let first = b.fma(c, x, nsy);
    let cy = b.mul(c, y);
    let second = b.fma(s, x, cy);
    (first, second)
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_small_eig");
    b.reqntid(THREADS, 1, 1);
    // One block per launch: without it ptxas caps sm_86/sm_89 at 128 registers and spills.
    b.minnctapersm(1);
    let pgram = b.param::<U64>("gram");
    let pl = b.param::<U32>("l");
    let pk = b.param::<U32>("k");
    let pzw = b.param::<U64>("zw");
    let pout = b.param::<U64>("out");
    let (gram, zw, out) = (
        b.global_ptr(&pgram),
        b.global_ptr(&pzw),
        b.global_ptr(&pout),
    );
    let (l, k) = (b.ld_param(&pl), b.ld_param(&pk));
    let sm = Smem {
        a: b.shared_array::<F64>("a", W * LDA),
        v: b.shared_array::<F64>("v", W * W),
        rp: b.shared_array::<U32>("rot_p", PAIRS),
        rq: b.shared_array::<U32>("rot_q", PAIRS),
        rc: b.shared_array::<F64>("rot_c", PAIRS),
        rs: b.shared_array::<F64>("rot_s", PAIRS),
        rt: b.shared_array::<F64>("rot_t", PAIRS),
        ron: b.shared_array::<U32>("rot_on", PAIRS),
        flags: b.shared_array::<U32>("flags", FLAGS),
        ord: b.shared_array::<U32>("order", W),
        dv: b.shared_array::<F64>("vals", W),
        sv: b.shared_array::<F64>("sigma", W),
        inv: b.shared_array::<F64>("inv_sigma", W),
    };
    b.comment("setup: thread indices");
    let tid = b.special(Special::TidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let ids = Ids { tid, lane, warp };
    b.comment("load G (lower triangle mirrored, zero beyond l), V = I; vote on finiteness");
    let bad = b.mov(0u32);
    for q in 0..(W * W).div_ceil(THREADS) {
        let e = b.add(tid, THREADS * q);
        let inside = b.setp(Cmp::Lt, e, W * W);
        b.if_then(inside, |b| {
            let i = b.div(e, W);
            let j = b.rem(e, W);
            let il = b.setp(Cmp::Lt, i, l);
            let jl = b.setp(Cmp::Lt, j, l);
            let live = b.and(il, jl);
            let hi = b.max(i, j);
            let lo = b.min(i, j);
            let src = b.mad(hi, W, lo);
            let ga = b.index_addr(gram, src, 8);
            let g = b.mov(0.0f64);
            b.guarded(live, false, |b| {
                let x = b.ld::<F64>(Space::Global, ga);
                b.mov_to(g, x);
            });
            let mag = b.abs(g);
            let fin = b.setp(Cmp::Lt, mag, f64::INFINITY);
            let nb = b.selp(0u32, 1u32, fin);
            let nb = b.or(bad, nb);
            b.mov_to(bad, nb);
            let ae = b.mad(i, LDA, j);
            let aa = b.shared_index(&sm.a, ae);
            b.st(Space::Shared, aa, g);
            let diag = b.setp(Cmp::Eq, i, j);
            let one = b.selp(1.0f64, 0.0f64, diag);
            let va = b.shared_index(&sm.v, e);
            b.st(Space::Shared, va, one);
        });
    }
    let badp = b.setp(Cmp::Ne, bad, 0u32);
    let not_finite = block_any(&mut b, badp, &sm, &ids, 8);
    let status = b.selp(abi::SMALL_NOT_FINITE, abi::SMALL_OK, not_finite);
    let sweeps = b.mov(0u32);
    let rounds = b.mov(0u32);
    b.comment("Jacobi sweeps while some pair is above the threshold");
    let finite = b.not(not_finite);
    b.if_then(finite, |b| {
        sweep::sweeps(b, &sm, &ids, l, status, (sweeps, rounds));
    });
    b.comment("finish: ranks, S, the check and the packed factors");
    finish::finish(
        &mut b,
        &sm,
        &ids,
        finish::Io {
            gram,
            zw,
            out,
            l,
            k,
            status,
            sweeps,
            rounds,
        },
    );
    Module::single(target, b.finish())
}
