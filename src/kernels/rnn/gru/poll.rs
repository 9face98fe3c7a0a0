//! Step 3 of the GRU kernels with staggered polls (`rnn_gru_held48s` / `rnn_gru_held64s`): the
//! same tagged exchange words and result as [`super::exchange::gather`], but each pair a thread
//! owns has two loads in flight, issued [`STAGGER_CYCLES`] apart and each re-issued as soon as it
//! returns stale. A word that lands in L2 is then seen about half an L2 round trip after it
//! lands on average, not a whole one: with one load per pair, a poll that just missed it costs
//! a full round trip more.

use super::exchange::Gather;
use super::{Exchange, THREADS};
use crate::kernels::rnn::barrier::give_up_when_late;
use crate::ptx::*;

/// Cycles between a pair's two loads (about half an L2 round trip on an H100).
pub const STAGGER_CYCLES: u64 = 300;

/// Bound on the stagger's clock reads (each takes well over STAGGER_CYCLES / SPIN_TRIPS
/// cycles on a GPU; the interpreter's `%clock64` is 0).
const SPIN_TRIPS: u32 = 64;

/// One pair a thread owns: whether it is live, its address, its shared address offset and the
/// two loads' registers.
struct Slot {
    left: Reg<U32>,
    addr: Addr,
    sidx: i64,
    w: [[Reg<U64>; 2]; 2],
}

/// [`super::exchange::gather`] with two staggered loads per pair (see the module notes).
pub(super) fn gather_staggered(b: &mut KernelBuilder, ex: &Exchange<'_>, t: Reg<U32>, g: &Gather) {
    let p = ex.p;
    let tag = b.add(ex.epoch, t);
    let tag = b.add(tag, 1u32);
    let half = match g.half_h {
        Some(hh) => b.mov(hh),
        None => b.shr(p.h, 1u32),
    };
    let pairs = b.mul(ex.rows, half);
    let pairs = match g.on {
        Some(on) => b.selp(pairs, 0u32, on),
        None => pairs,
    };
    let zero = b.mov(0u32);
    let base_w = ex.word_index(b, t, zero);
    let state_bytes = b.mul_wide(ex.e, 16u32);
    let status = b.add(p.state, state_bytes);
    let status = b.add(status, 8u64);
    let start = b.clock64();
    b.for_range(ex.tid, pairs, THREADS * g.in_flight, |b, base, _| {
        let off = b.shl(base, 1u32);
        let wi = b.add(base_w, off);
        let addr: Addr = b.index_addr(p.hx, wi, 8).into();
        let si = b.add(ex.o_h, off);
        let saddr: Addr = b.shared_index(ex.smem, si).into();
        let mut slots = Vec::with_capacity(g.in_flight as usize);
        for u in 0..g.in_flight {
            let idx = b.add(base, THREADS * u);
            let live = b.setp(Cmp::Lt, idx, pairs);
            let live = if g.skip_own {
                let u = match g.half_h {
                    Some(hh) => b.and(idx, hh - 1),
                    None => b.rem(idx, half),
                };
                let u = b.shl(u, 1u32);
                let below = b.setp(Cmp::Lt, u, ex.j0);
                let above = b.setp(Cmp::Ge, u, ex.j1);
                let other = b.or(below, above);
                b.and(live, other)
            } else {
                live
            };
            let a = addr.off(i64::from(16 * THREADS * u));
            let w0 = [b.mov(0u64), b.mov(0u64)];
            b.guarded(live, false, |b| b.ld_relaxed_gpu_v2_to(w0, a.clone()));
            let w1 = [b.mov(0u64), b.mov(0u64)];
            slots.push(Slot {
                left: b.selp(1u32, 0u32, live),
                addr: a,
                sidx: 8 * i64::from(THREADS) * i64::from(u),
                w: [w0, w1],
            });
        }
        b.comment("the second load of each pair, STAGGER_CYCLES later");
        // (At most SPIN_TRIPS clock reads: the interpreter's clock stands still.)
        let issued = b.clock64();
        let trips = b.mov(0u32);
        b.loop_forever(|b, brk, _| {
            let now = b.clock64();
            let waited = b.sub(now, issued);
            let due = b.setp(Cmp::Ge, waited, STAGGER_CYCLES);
            b.bra_if(due, brk);
            let n = b.add(trips, 1u32);
            b.mov_to(trips, n);
            let enough = b.setp(Cmp::Ge, n, SPIN_TRIPS);
            b.bra_if(enough, brk);
        });
        for s in &slots {
            let live = b.setp(Cmp::Ne, s.left, 0u32);
            b.guarded(live, false, |b| {
                b.ld_relaxed_gpu_v2_to(s.w[1], s.addr.clone())
            });
        }
        b.loop_forever(|b, brk, _| {
            for k in 0..2 {
                // Load set k: take the pairs whose tags are this step's, then re-issue the rest.
                let mut any = None;
                for s in &slots {
                    let w = s.w[k];
                    let (v0, t0) = b.unpack64(w[0]);
                    let (v1, t1) = b.unpack64(w[1]);
                    let ok0 = b.setp(Cmp::Eq, t0, tag);
                    let ok1 = b.setp(Cmp::Eq, t1, tag);
                    let ok = b.and(ok0, ok1);
                    let wanted = b.setp(Cmp::Ne, s.left, 0u32);
                    let take = b.and(ok, wanted);
                    b.guarded(take, false, |b| {
                        b.st_v2::<U32>(Space::Shared, saddr.off(s.sidx), [v0, v1]);
                        b.mov_to(s.left, 0u32);
                    });
                    let still = b.setp(Cmp::Ne, s.left, 0u32);
                    any = Some(match any {
                        None => still,
                        Some(a) => b.or(a, still),
                    });
                }
                let any = any.expect("in_flight >= 1");
                let done = b.not(any);
                b.bra_if(done, brk);
                give_up_when_late(b, start, status, brk);
                for s in &slots {
                    let still = b.setp(Cmp::Ne, s.left, 0u32);
                    b.guarded(still, false, |b| {
                        b.ld_relaxed_gpu_v2_to(s.w[k], s.addr.clone())
                    });
                }
            }
        });
    });
}
