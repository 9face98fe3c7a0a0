//! Steps 3 and 4 of the GRU kernels (see `gru`'s module notes): gathering a batch group's new
//! hidden state from the tagged exchange words of every block of the group, and the in-place
//! layer norm and dropout of those rows.
//!
//! Exchange words: `hx[e][t][row][unit]` is `f32 bits | tag << 32`, `tag = epoch + t + 1`. A
//! thread owns pairs of consecutive units (one 16-byte load, two single-copy atomic 8-byte
//! elements), up to [`IN_FLIGHT`] pairs at once so that one L2 round trip covers them; it
//! re-loads the pairs whose tags are not yet this step's, all in one round.

use super::{Exchange, THREADS};
use crate::kernels::rnn::barrier::give_up_when_late;
use crate::kernels::rnn::mathf::hash32;
use crate::ptx::*;

/// Pairs a thread has in flight on the shared-memory path (Bg = 8, H = 256: 4 pairs per thread;
/// 6 or more spill on sm_90). The weight-stationary path passes 2: its 64 held weights leave no
/// room for more (3 or 4 spill).
pub const IN_FLIGHT: u32 = 4;

/// How [`gather`] runs: pairs in flight per thread, whether the block's own units are skipped
/// (j0 .. j1, even bounds: the cell wrote them), `H / 2` when it is known when the kernel is built
/// (the unit of a pair is then a mask, not a division), and whether to gather at all.
pub(super) struct Gather<'a> {
    pub in_flight: u32,
    pub skip_own: bool,
    pub half_h: Option<u32>,
    /// When given and false, nothing is gathered (no pair is live).
    pub on: Option<Reg<Pred>>,
    /// Bench instrumentation: called once per pass of the calling thread with `%clock64` at the
    /// pass's start, when its first poll round was checked and at its end, and the rounds it
    /// polled (meaningful where a thread makes one pass: `threads x in_flight` >= the pairs).
    pub probe: Option<&'a Probe<'a>>,
    /// Work done in each thread's first pass between issuing its first poll loads and checking
    /// them (the loads' round trip hides it). Runs only where the thread makes a pass: every
    /// thread of the group must have one (`threads` <= the live pairs) unless `on` is false.
    pub between: Option<&'a dyn Fn(&mut KernelBuilder)>,
}

/// `probe(b, [start, first round checked, end], rounds)` of [`Gather`].
pub(super) type Probe<'a> = dyn Fn(&mut KernelBuilder, [Reg<U64>; 3], Reg<U32>) + 'a;

/// Step 3: the group's rows of `hx[e][t]` into the shared h (all threads; no barrier inside).
/// Each round re-loads every pair of the thread that is not ready yet, so waiting costs one L2
/// round trip after the last producer's store, not one per pair.
pub(super) fn gather(b: &mut KernelBuilder, ex: &Exchange<'_>, t: Reg<U32>, g: &Gather) {
    gather_by(b, ex, t, g, THREADS, ex.tid);
}

/// [`gather`] by `threads` threads of the block (`tid`: the calling thread's index among them).
pub(super) fn gather_by(
    b: &mut KernelBuilder,
    ex: &Exchange<'_>,
    t: Reg<U32>,
    g: &Gather,
    threads: u32,
    tid: Reg<U32>,
) {
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
    b.for_range(tid, pairs, threads * g.in_flight, |b, base, _| {
        // Rows are contiguous in both hx and the shared h: pair i starts at word/float 2 i, and
        // pair base + threads u sits 2 threads u further (constant address offsets).
        let off = b.shl(base, 1u32);
        let wi = b.add(base_w, off);
        let addr: Addr = b.index_addr(p.hx, wi, 8).into();
        let si = b.add(ex.o_h, off);
        let saddr: Addr = b.shared_index(ex.smem, si).into();
        let probe = g.probe.map(|_| {
            let start = b.clock64();
            (start, b.mov(0u64), b.mov(0u32))
        });
        let mut pend = Vec::with_capacity(g.in_flight as usize);
        for u in 0..g.in_flight {
            let idx = b.add(base, threads * u);
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
            let a = addr.off(i64::from(16 * threads * u));
            // Loaded straight into the pair's registers (0 when not live): a copy through fresh
            // registers would leave them alive across the loop (on the stationary kernel, a spill).
            let w = [b.mov(0u64), b.mov(0u64)];
            b.guarded(live, false, |b| b.ld_relaxed_gpu_v2_to(w, a.clone()));
            pend.push((live, a, w));
        }
        if let Some(f) = g.between {
            let first = b.setp(Cmp::Eq, base, tid);
            b.if_then(first, f);
        }
        b.loop_forever(|b, brk, _| {
            let mut all = None;
            let mut stale = Vec::with_capacity(pend.len());
            for (live, _, w) in &pend {
                let (_, t0) = b.unpack64(w[0]);
                let (_, t1) = b.unpack64(w[1]);
                let ok0 = b.setp(Cmp::Eq, t0, tag);
                let ok1 = b.setp(Cmp::Eq, t1, tag);
                let ok = b.and(ok0, ok1);
                let idle = b.not(*live);
                let ok = b.or(ok, idle);
                all = Some(match all {
                    None => ok,
                    Some(a) => b.and(a, ok),
                });
                stale.push(ok);
            }
            if let Some((_, _, rounds)) = probe {
                let r = b.add(rounds, 1u32);
                b.mov_to(rounds, r);
            }
            b.bra_if(all.expect("in_flight >= 1"), brk);
            if let Some((_, first, rounds)) = probe {
                // After the branch on the loaded tags: the clock follows their arrival.
                let now = b.clock64();
                let one = b.setp(Cmp::Eq, rounds, 1u32);
                let f = b.selp(now, first, one);
                b.mov_to(first, f);
            }
            give_up_when_late(b, start, status, brk);
            for ((_, a, w), ok) in pend.iter().zip(stale) {
                b.guarded(ok, true, |b| b.ld_relaxed_gpu_v2_to(*w, a.clone()));
            }
        });
        if let (Some(f), Some((t0, first, rounds))) = (g.probe, probe) {
            let end = b.clock64();
            let one = b.setp(Cmp::Eq, rounds, 1u32);
            let first = b.selp(end, first, one);
            f(b, [t0, first, end], rounds);
        }
        for (u, (live, _, w)) in pend.iter().enumerate() {
            b.guarded(*live, false, |b| {
                let (v0, _) = b.unpack64(w[0]);
                let (v1, _) = b.unpack64(w[1]);
                b.st_v2::<U32>(
                    Space::Shared,
                    saddr.off(8 * i64::from(threads) * u as i64),
                    [v0, v1],
                );
            });
        }
    });
}

/// `body(b, c, its shared address, its 4 values)` of [`row_chunks`].
type ChunkBody<'a> = dyn Fn(&mut KernelBuilder, Reg<U32>, Reg<U32>, [Reg<F32>; 4]) + 'a;

/// For each 128-float chunk c of a row (this lane's float4 at shared offset `rbase + 128 c`):
/// `body(b, c, its shared address, its 4 values)`.
fn row_chunks(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    chunks: Reg<U32>,
    rbase: Reg<U32>,
    body: &ChunkBody<'_>,
) {
    b.for_range(0u32, chunks, 1u32, |b, c, _| {
        let k = b.mad(c, 128u32, rbase);
        let sa = b.shared_index(smem, k);
        let v = b.ld_v4::<F32>(Space::Shared, sa);
        body(b, c, sa, v);
    });
}

/// Step 4: layer norm (two warp sums: mean, then variance about the mean) and dropout (hash of
/// (e, t, row, unit) vs a threshold, kept values times 1/(1-p)) in place, one warp per row,
/// float4 per lane; the block's own units also go to `out[e][t]`.
pub(super) fn transform(b: &mut KernelBuilder, ex: &Exchange<'_>, t: Reg<U32>) {
    let p = ex.p;
    let smem = ex.smem;
    let chunks = b.shr(p.h, 7u32);
    let lane4 = b.shl(ex.lane, 2u32);
    let hf = b.cvt::<F32, U32>(p.h);
    let j1 = ex.j1;
    b.for_range(ex.warp, ex.rows, THREADS / 32, |b, row, _| {
        let rbase = b.mad(row, p.h, lane4);
        let rbase = b.add(rbase, ex.o_h);
        let sum = b.mov(0.0f32);
        row_chunks(b, smem, chunks, rbase, &|b, _, _, v| {
            for x in v {
                let s = b.add(sum, x);
                b.mov_to(sum, s);
            }
        });
        let mean = b.mov(0.0f32);
        let rstd = b.mov(1.0f32);
        b.if_then(p.ln, |b| {
            let total = b.warp_sum(sum);
            let m = b.div(total, hf);
            b.mov_to(mean, m);
            let sq = b.mov(0.0f32);
            row_chunks(b, smem, chunks, rbase, &|b, _, _, v| {
                for x in v {
                    let d = b.sub(x, m);
                    let s = b.fma(d, d, sq);
                    b.mov_to(sq, s);
                }
            });
            let var = b.warp_sum(sq);
            let var = b.div(var, hf);
            let ve = b.add(var, p.eps);
            let sd = b.sqrt(ve);
            let one = b.mov(1.0f32);
            let rs = b.div(one, sd);
            b.mov_to(rstd, rs);
        });
        let out_row = ex.word_index(b, t, row);
        let grow = b.add(ex.row0, row);
        row_chunks(b, smem, chunks, rbase, &|b, c, sa, v| {
            let unit0 = b.mad(c, 128u32, lane4);
            let mut outv = [v[0]; 4];
            for (i, &x) in v.iter().enumerate() {
                let unit = b.add(unit0, i as u32);
                let y = b.mov(x);
                b.if_then(p.ln, |b| {
                    let d = b.sub(x, mean);
                    let nrm = b.mul(d, rstd);
                    let gi = b.mad(ex.e, p.h, unit);
                    let ga = b.index_addr(p.gain, gi, 4);
                    let g = b.ld::<F32>(Space::GlobalNc, ga);
                    let ba = b.index_addr(p.beta, gi, 4);
                    let bt = b.ld::<F32>(Space::GlobalNc, ba);
                    let v = b.fma(nrm, g, bt);
                    b.mov_to(y, v);
                });
                b.if_then(p.drop, |b| {
                    let etb = b.add(ex.member_steps, t);
                    let etb = b.mad(etb, p.batch, grow);
                    let ctr = b.mad(etb, p.h, unit);
                    let hsh = hash32(b, ctr, p.seed_lo, p.seed_hi);
                    let keep = b.setp(Cmp::Ge, hsh, p.drop_threshold);
                    let scaled = b.mul(y, p.scale);
                    let v = b.selp(scaled, 0.0f32, keep);
                    b.mov_to(y, v);
                });
                let lo = b.setp(Cmp::Ge, unit, ex.j0);
                let hi = b.setp(Cmp::Lt, unit, j1);
                let mine = b.and(lo, hi);
                b.if_then(mine, |b| {
                    let oi = b.add(out_row, unit);
                    let oa = b.index_addr(p.out, oi, 4);
                    b.st(Space::Global, oa, y);
                });
                outv[i] = y;
            }
            b.st_v4(Space::Shared, sa, outv);
        });
    });
}
