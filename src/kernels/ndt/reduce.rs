//! Deterministic reduction of 32 f64 values per thread over a block.
//!
//! # Warp stage: reduce-scatter
//! Each lane holds 32 values; after five butterfly steps lane `L` holds the warp's sum of value
//! `L`. In the step with distance `m` (16, 8, 4, 2, 1) a lane keeps the half of its remaining
//! values selected by bit `m` of its lane id, sends the other half to lane `L ^ m` and adds what it
//! receives: 16 + 8 + 4 + 2 + 1 = 31 shuffles (of two 32-bit halves each) instead of 32 × 5 for
//! separate warp sums.
//!
//! # Block stage
//! Lane `L` of warp `w` stores its total in the shared array at `32 w + L`; after a barrier,
//! thread `t < 32` adds the warps' entries `32 w + t` in warp order. Every sum is taken in a fixed
//! order, so the result is bit-reproducible run to run.

use crate::ptx::*;

/// Values reduced per thread (callers pad with zeros).
pub const WIDTH: usize = 32;

/// After the call, lane `L` holds the warp's sum of `vals[L]`. Every lane of the warp must call
/// it (full-mask shuffles).
pub fn warp_reduce_scatter(
    b: &mut KernelBuilder,
    vals: &[Reg<F64>; WIDTH],
    lane: Reg<U32>,
) -> Reg<F64> {
    let mut v: Vec<Reg<F64>> = vals.to_vec();
    for m in [16u32, 8, 4, 2, 1] {
        let bit = b.and(lane, m);
        let upper = b.setp(Cmp::Ne, bit, 0u32);
        let half = v.len() / 2;
        let mut next = Vec::with_capacity(half);
        for j in 0..half {
            let (lo, hi) = (v[j], v[j + half]);
            // The upper lane of the pair keeps the upper half and sends the lower half.
            let send = b.selp(lo, hi, upper);
            let keep = b.selp(hi, lo, upper);
            let got = b.shfl(Shfl::Xor, send, m);
            next.push(b.add(keep, got));
        }
        v = next;
    }
    v[0]
}

/// Block-wide sums of `vals` (see the module docs): the returned register of thread `t < 32`
/// holds the block's sum of `vals[t]`; other threads hold 0. Contains a barrier: every thread of
/// the block must call it. `part` needs `32 · warps` elements and is free again after the next
/// barrier.
pub fn block_reduce(
    b: &mut KernelBuilder,
    vals: &[Reg<F64>; WIDTH],
    tid: Reg<U32>,
    warps: u32,
    part: &SharedArray<F64>,
) -> Reg<F64> {
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let mine = warp_reduce_scatter(b, vals, lane);
    let at = b.mad(warp, WIDTH as u32, lane);
    let slot = b.shared_index(part, at);
    b.st(Space::Shared, slot, mine);
    b.bar_sync();
    let total = b.mov(0.0f64);
    let first_warp = b.setp(Cmp::Lt, tid, WIDTH as u32);
    let base = b.shared_index(part, tid);
    b.guarded(first_warp, false, |b| {
        let mut sum = b.ld::<F64>(Space::Shared, base);
        for w in 1..warps {
            let v = b.ld::<F64>(
                Space::Shared,
                Addr::from(base).off(i64::from(w) * WIDTH as i64 * 8),
            );
            sum = b.add(sum, v);
        }
        b.mov_to(total, sum);
    });
    total
}
