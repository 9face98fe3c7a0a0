//! Builds `rnn_orth` (see `orth`'s module notes for the phases).

use super::elim::Elim;
use super::skip::skip_check;
use super::total::{total_r, Factors};
use super::{stamp, LD, SHIFT_C, SLAB, THREADS, WIDTH, WW, YS};
use crate::kernels::rnn::barrier::GridBarrier;
use crate::kernels::rnn::slab::{stage_slab, SlabCopy};
use crate::kernels::rnn::stamps::stamping;
use crate::ptx::*;

/// Builds the module.
pub fn build(target: Target) -> Module {
    build_with(target, false)
}

/// Builds `rnn_orth_skip`: `rnn_orth` with the a-posteriori check of [`super::SKIP_TOL`] on passes after
/// the first (see the module notes).
pub fn build_skip(target: Target) -> Module {
    build_with(target, true)
}

fn build_with(target: Target, skip: bool) -> Module {
    let mut b = KernelBuilder::new(if skip { "rnn_orth_skip" } else { "rnn_orth" });
    b.reqntid(THREADS, 1, 1);
    let py = b.param::<U64>("y");
    let prows = b.param::<U32>("rows");
    let pl = b.param::<U32>("l");
    let ppasses = b.param::<U32>("passes");
    let ppart = b.param::<U64>("partial");
    let pgram = b.param::<U64>("gram");
    let prt = b.param::<U64>("rt");
    let pbar = b.param::<U64>("bar");
    let pstamps = b.param::<U64>("stamps");
    let pgram_only = b.param::<U32>("gram_only");
    let (y, partial, gram, rt, bar) = (
        b.global_ptr(&py),
        b.global_ptr(&ppart),
        b.global_ptr(&pgram),
        b.global_ptr(&prt),
        b.global_ptr(&pbar),
    );
    let (rows, l, passes) = (b.ld_param(&prows), b.ld_param(&pl), b.ld_param(&ppasses));
    let ys = b.shared_array::<F32>("slab", SLAB * YS);
    let staged = SlabCopy {
        src: y,
        space: Space::Global,
        dst: &ys,
        stride: YS,
    };
    let lcol = b.shared_array::<F64>("lcol", WIDTH * LD);
    let erow = b.shared_array::<F64>("erow", WIDTH * LD);
    let red = b.shared_array::<F64>("red", 256);
    let svec = b.shared_array::<F64>("scale", WIDTH);
    let rdiag = b.shared_array::<F64>("rdiag", WIDTH);
    let rscale = b.shared_array::<F64>("rscale", WIDTH);
    let skip_cnt = skip.then(|| b.shared_array::<U32>("skip_bad", 1));
    b.comment("setup: block and thread indices, grid barrier");
    let tid = b.special(Special::TidX);
    let blk = b.special(Special::CtaidX);
    let nblk = b.special(Special::NctaidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let exit = b.add(bar, 4u64);
    let status = b.add(bar, 8u64);
    let gb = GridBarrier::new(&mut b, bar, exit, status, nblk);
    let nslabs = b.div(rows, SLAB);
    let ti = b.shr(tid, 4u32);
    let tj = b.and(tid, 15u32);
    b.comment("each value of the elimination this thread owns: row, column, shared addresses");
    let elim = Elim::new(&mut b, tid, &lcol, &erow);
    b.comment("clock stamps (thread 0 of block 0, when on)");
    let stamps = b.ld_param(&pstamps);
    let stamping = stamping(&mut b, stamps, tid, |_| blk);
    let stamps = b.to_global(stamps);
    b.bar_sync();
    let z = b.mov(0u32);
    stamp(&mut b, stamping, stamps, z);

    let gram_only = b.ld_param(&pgram_only);
    let gram_only = b.setp(Cmp::Ne, gram_only, 0u32);
    b.for_range(0u32, passes, 1u32, |b, pass, exit| {
        let sbase = b.mad(pass, 6u32, 1u32);
        let at = |b: &mut KernelBuilder, i: u32| {
            let idx = b.add(sbase, i);
            stamp(b, stamping, stamps, idx);
        };
        // Every pass starts from lcol = 0, erow = I: the elimination reads their never-published
        // parts as zeros and ones, and block 0's `total_r` overwrote both at the end of the
        // previous pass (the barriers of A and the grid barrier order this before C).
        elim.init_shared(b, tid, &lcol, &erow);
        // A: partial Gram blocks.
        b.comment("A: partial Gram blocks of the block's slabs (f64)");
        let acc: Vec<Reg<F64>> = (0..9).map(|_| b.mov(0.0f64)).collect();
        b.for_range(blk, nslabs, nblk, |b, slab, _| {
            stage_slab(b, &staged, slab, tid);
            b.bar_sync();
            // Rows in groups of 4 (a runtime loop keeps register pressure low).
            b.for_range(0u32, SLAB, 4u32, |b, r0, _| {
                let ia = b.mad(r0, YS, 0u32);
                let ia = b.mad(ti, 3u32, ia);
                let abase: Addr = b.shared_index(&ys, ia).into();
                let ib = b.mad(r0, YS, 0u32);
                let ib = b.mad(tj, 3u32, ib);
                let bbase: Addr = b.shared_index(&ys, ib).into();
                for r in 0..4u32 {
                    let row = i64::from(r * YS * 4);
                    let av: Vec<Reg<F64>> = (0..3)
                        .map(|i| {
                            let v = b.ld::<F32>(Space::Shared, abase.off(row + 4 * i));
                            b.cvt::<F64, F32>(v)
                        })
                        .collect();
                    let bv: Vec<Reg<F64>> = (0..3)
                        .map(|j| {
                            let v = b.ld::<F32>(Space::Shared, bbase.off(row + 4 * j));
                            b.cvt::<F64, F32>(v)
                        })
                        .collect();
                    for i in 0..3 {
                        for j in 0..3 {
                            let s = b.fma(av[i], bv[j], acc[i * 3 + j]);
                            b.mov_to(acc[i * 3 + j], s);
                        }
                    }
                }
            });
            b.bar_sync();
        });
        let pbase = b.mul(blk, WW);
        for i in 0..3u32 {
            for j in 0..3u32 {
                let r = b.mad(ti, 3u32, i);
                let c = b.mad(tj, 3u32, j);
                let e = b.mad(r, WIDTH, c);
                let e = b.add(e, pbase);
                let a = b.index_addr(partial, e, 8);
                b.st(Space::Global, a, acc[(i * 3 + j) as usize]);
            }
        }
        b.comment("grid barrier (partials written)");
        at(b, 0);
        gb.sync(b);
        at(b, 1);
        // B: reduce the partials, 32 entries per chunk.
        b.comment("B: gram = ordered sum of the partials");
        b.for_range(blk, WW / 32, nblk, |b, chunk, _| {
            let e = b.mad(chunk, 32u32, lane);
            let s = b.mov(0.0f64);
            // Four independent loads per trip (p, p + 8, p + 16, p + 24), added in that order:
            // the same sum, in the same order, as one partial per trip.
            b.for_range(warp, nblk, 32u32, |b, p, _| {
                let vs: Vec<Reg<F64>> = (0..4u32)
                    .map(|u| {
                        let pu = b.add(p, 8 * u);
                        let ok = b.setp(Cmp::Lt, pu, nblk);
                        let v = b.mov(0.0f64);
                        let pi = b.mad(pu, WW, e);
                        let pa = b.index_addr(partial, pi, 8);
                        b.guarded(ok, false, |b| {
                            let x = b.ld::<F64>(Space::Global, pa);
                            b.mov_to(v, x);
                        });
                        v
                    })
                    .collect();
                for v in vs {
                    let ns = b.add(s, v);
                    b.mov_to(s, ns);
                }
            });
            let slot = b.shared_index(&red, tid);
            b.st(Space::Shared, slot, s);
            b.bar_sync();
            let first = b.setp(Cmp::Lt, tid, 32u32);
            b.if_then(first, |b| {
                let lane_a: Addr = b.shared_index(&red, lane).into();
                let t = b.ld::<F64>(Space::Shared, lane_a.clone());
                let t = (1..8).fold(t, |t, q| {
                    let v = b.ld::<F64>(Space::Shared, lane_a.off(8 * 32 * q));
                    b.add(t, v)
                });
                let ga = b.index_addr(gram, e, 8);
                b.st(Space::Global, ga, t);
            });
            b.bar_sync();
        });
        at(b, 2);
        b.comment("grid barrier (gram written)");
        // Gram-only launches stop here: `gram` holds G of the input (the kernel's end publishes it).
        b.bra_if(gram_only, exit);
        gb.sync(b);
        at(b, 3);
        let go = skip.then(|| {
            b.comment("check: passes after the first skip C and D when |G - I| <= SKIP_TOL");
            skip_check(b, &skip_cnt, gram, rt, tid, blk, pass, l)
        });
        let factor_and_apply = |b: &mut KernelBuilder| {
            // C: every block factors the same G (see `elim`).
            b.comment("C: load G; shift its diagonal on the first pass");
            let vals = elim.load(b, gram);
            let first_pass = b.setp(Cmp::Eq, pass, 0u32);
            b.if_then(first_pass, |b| {
                let mine = b.setp(Cmp::Lt, tid, WIDTH);
                b.if_then(mine, |b| {
                    let d = b.mul(tid, WIDTH + 1);
                    let ga = b.index_addr(gram, d, 8);
                    let v = b.ld::<F64>(Space::Global, ga);
                    let a = b.shared_index(&svec, tid);
                    b.st(Space::Shared, a, v);
                });
                b.bar_sync();
                let trace = b.mov(0.0f64);
                b.for_range(0u32, l, 1u32, |b, j, _| {
                    let a = b.shared_index(&svec, j);
                    let v = b.ld::<F64>(Space::Shared, a);
                    let t = b.add(trace, v);
                    b.mov_to(trace, t);
                });
                let rl = b.mul(rows, l);
                let l1 = b.add(l, 1u32);
                let ll = b.mul(l, l1);
                let cnt = b.add(rl, ll);
                let cnt = b.cvt::<F64, U32>(cnt);
                let k = b.mul(cnt, SHIFT_C);
                let shift = b.mul(k, trace);
                elim.add_shift(b, &vals, shift, l);
            });
            b.comment("C: elimination G = L D L^T, E = L^-1 (one barrier per step)");
            elim.eliminate(b, &vals, &lcol, l);
            b.comment("C: column scales 1 / sqrt(d) and R's diagonal");
            let diag_thread = b.setp(Cmp::Lt, tid, WIDTH);
            b.if_then(diag_thread, |b| {
                let dj = b.mul(tid, LD + 1);
                let da = b.shared_index(&lcol, dj);
                let d = b.ld::<F64>(Space::Shared, da);
                let live = b.setp(Cmp::Gt, d, 0.0f64);
                let sq = b.sqrt(d);
                // rcp.rn is div.rn(1, x): the same correctly rounded value, fewer instructions.
                let sc = b.rcp(sq);
                let s_v = b.selp(sc, 1.0f64, live);
                let rd = b.selp(sq, 1.0f64, live);
                let rs_v = b.selp(sc, 0.0f64, live);
                let a = b.shared_index(&svec, tid);
                b.st(Space::Shared, a, s_v);
                let a = b.shared_index(&rdiag, tid);
                b.st(Space::Shared, a, rd);
                let a = b.shared_index(&rscale, tid);
                b.st(Space::Shared, a, rs_v);
            });
            b.bar_sync();
            at(b, 4);
            b.comment("R of the first pass into rt (block 0)");
            // Block 0, first pass: R into rt slot 0: R_ik = rdiag_i (k = i), U_ik rscale_i (k > i),
            // 0 (k < i). Later passes multiply it in at the end of the pass.
            let blk0 = b.setp(Cmp::Eq, blk, 0u32);
            let r_first = b.and(blk0, first_pass);
            b.if_then(r_first, |b| {
                for q in 0..9u32 {
                    let e = b.add(tid, 256 * q);
                    let i = b.div(e, WIDTH);
                    let k = b.rem(e, WIDTH);
                    let rda = b.shared_index(&rdiag, i);
                    let rd = b.ld::<F64>(Space::Shared, rda);
                    let rsa = b.shared_index(&rscale, i);
                    let rsc = b.ld::<F64>(Space::Shared, rsa);
                    let se = b.mad(i, LD, k);
                    let ua = b.shared_index(&lcol, se);
                    let u = b.ld::<F64>(Space::Shared, ua);
                    let t = b.mul(u, rsc);
                    let above = b.setp(Cmp::Gt, k, i);
                    let t = b.selp(t, 0.0f64, above);
                    let on = b.setp(Cmp::Eq, k, i);
                    let v = b.selp(rd, t, on);
                    let ra = b.index_addr(rt, e, 8);
                    b.st(Space::Global, ra, v);
                }
            });
            // D: Q = Y R^{-1} over the block's slabs, in place: q_c = (sum_a y_a E_ca) s_c.
            b.comment("D: Q = Y R^-1 over the block's slabs, in place");
            let r_row = b.shr(tid, 3u32);
            let cq = b.and(tid, 7u32);
            // With one slab per block, the slab staged in A is still in shared memory.
            let restage = b.setp(Cmp::Ne, nblk, nslabs);
            b.for_range(blk, nslabs, nblk, |b, slab, _| {
                b.if_then(restage, |b| stage_slab(b, &staged, slab, tid));
                b.bar_sync();
                let yrow: Addr = {
                    let i = b.mul(r_row, YS);
                    b.shared_index(&ys, i).into()
                };
                for q in 0..6u32 {
                    let c = b.add(cq, 8 * q);
                    let erow: Addr = {
                        let i = b.mul(c, LD);
                        b.shared_index(&erow, i).into()
                    };
                    let s = b.mov(0.0f64);
                    for a in 0..WIDTH {
                        let yv = b.ld::<F32>(Space::Shared, yrow.off(4 * i64::from(a)));
                        let yv = b.cvt::<F64, F32>(yv);
                        let ev = b.ld::<F64>(Space::Shared, erow.off(8 * i64::from(a)));
                        let ns = b.fma(yv, ev, s);
                        b.mov_to(s, ns);
                    }
                    let sa = b.shared_index(&svec, c);
                    let sc = b.ld::<F64>(Space::Shared, sa);
                    let v = b.mul(s, sc);
                    let out = b.cvt::<F32, F64>(v);
                    let grow = b.mad(slab, SLAB, r_row);
                    let e = b.mad(grow, WIDTH, c);
                    let ga = b.index_addr(y, e, 4);
                    b.st(Space::Global, ga, out);
                }
                b.bar_sync();
            });
            b.comment("R_total = R R_total (block 0, passes after the first)");
            let later = b.setp(Cmp::Ne, pass, 0u32);
            let r_later = b.and(blk0, later);
            b.if_then(r_later, |b| {
                let factors = Factors {
                    lcol: &lcol,
                    erow: &erow,
                    rdiag: &rdiag,
                    rscale: &rscale,
                };
                total_r(b, pass, rt, tid, &factors)
            });
        };
        match go {
            Some(go) => b.if_then(go, factor_and_apply),
            None => factor_and_apply(b),
        }
        at(b, 5);
    });
    b.comment("exit: count the block out (the last resets the barrier)");
    gb.finish(&mut b);
    Module::single(target, b.finish())
}
