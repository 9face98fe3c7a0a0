//! `rnn_orth`: CholeskyQR of a tall f32 matrix in place, `passes` times, as one persistent
//! cooperative kernel (the maths and its CPU mirror: `crate::rnn::cholqr`).
//!
//! Data: `y` is `rows x W` f32 row-major (W = [`WIDTH`] = 48; columns `l..W` are zero padding;
//! `rows % SLAB == 0`). Scratch: `partial` (`blocks x W x W` f64), `gram` (`W x W` f64). Output:
//! `y` holds Q; `rt` (`2 x W x W` f64) holds R_total in slot `(passes - 1) % 2` (block 0 writes
//! it). `bar` holds the grid barrier's `arrive`, `exit` and `status` words.
//!
//! Launch: cooperative, `blocks` <= co-resident capacity, [`THREADS`] threads. Block b owns the
//! row slabs b, b + blocks, ... of [`SLAB`] rows. Per pass:
//! - A: thread (ti, tj) = (t / 16, t % 16) accumulates the 3 x 3 block `G[3ti.., 3tj..]` over the
//!   block's slabs (staged in shared memory; f32 -> f64, fma) and writes it to `partial[b]`;
//! - grid barrier; B: `gram[e] = sum_p partial[p][e]`, 32 entries per block at a time: eight
//!   threads per entry sum p = q, q + 8, ... and thread q = 0 adds the eight in order
//!   (deterministic); grid barrier;
//! - C (every block, redundantly and identically): loads `[G | I]` (48 x 96 f64), adds the shift
//!   on the first pass (every thread sums the trace itself, j ascending), then eliminates: step
//!   j updates rows a > j, L entries each (left columns > j, right columns <= j), one entry per
//!   thread-iteration (`m = G'_aj / d_j`, `fma(-m, row_j, row_a)`), barrier; finally the
//!   per-column scales `1 / sqrt(d_c)` and R's diagonal; block 0 also multiplies R_total;
//! - D: each slab is restaged and overwritten by `Q = Y R^{-1}`: `q_c = (sum_a y_a E_ca) s_c`
//!   (f64 fma over a ascending, then rounded to f32): thread t computes row t / 8, columns
//!   t % 8 + 8q.
//!
//! Shared memory: the slab (6 KiB f32), `[G | I]` (36 KiB f64), reduction scratch (2 KiB),
//! three 48-entry f64 vectors.

use super::barrier::GridBarrier;
use crate::ptx::*;

/// Padded sketch width: the GPU randomized SVD supports rank + oversampling <= 48.
pub const WIDTH: u32 = 48;
/// Rows per slab.
pub const SLAB: u32 = 32;
/// Threads per block.
pub const THREADS: u32 = 256;
/// The shifted-CholQR constant: shift = SHIFT_C * (rows l + l (l + 1)) * trace(G), SHIFT_C =
/// 11 * 2^-53.
pub const SHIFT_C: f64 = 11.0 * f64::EPSILON * 0.5;

const WW: u32 = WIDTH * WIDTH;

fn stage_slab(b: &mut KernelBuilder, y: Reg<U64>, slab: Reg<U32>, ys: &SharedArray<F32>, tid: Reg<U32>) {
    for j in 0..2u32 {
        let idx = b.add(tid, 256 * j);
        let live = b.setp(Cmp::Lt, idx, SLAB * WIDTH / 4);
        b.if_then(live, |b| {
            let row = b.div(idx, WIDTH / 4);
            let ch = b.rem(idx, WIDTH / 4);
            let grow = b.mad(slab, SLAB, row);
            let col = b.shl(ch, 2u32);
            let e = b.mad(grow, WIDTH, col);
            let ga = b.index_addr(y, e, 4);
            let v = b.ld_v4::<F32>(Space::Global, ga);
            let le = b.mad(row, WIDTH, col);
            let sa = b.shared_index(ys, le);
            b.st_v4(Space::Shared, sa, v);
        });
    }
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_orth");
    b.reqntid(THREADS, 1, 1);
    let py = b.param::<U64>("y");
    let prows = b.param::<U32>("rows");
    let pl = b.param::<U32>("l");
    let ppasses = b.param::<U32>("passes");
    let ppart = b.param::<U64>("partial");
    let pgram = b.param::<U64>("gram");
    let prt = b.param::<U64>("rt");
    let pbar = b.param::<U64>("bar");
    let (y, partial, gram, rt, bar) = (b.global_ptr(&py), b.global_ptr(&ppart), b.global_ptr(&pgram), b.global_ptr(&prt), b.global_ptr(&pbar));
    let (rows, l, passes) = (b.ld_param(&prows), b.ld_param(&pl), b.ld_param(&ppasses));
    let ys = b.shared_array::<F32>("slab", SLAB * WIDTH);
    let aug = b.shared_array::<F64>("aug", 2 * WW);
    let red = b.shared_array::<F64>("red", 256);
    let svec = b.shared_array::<F64>("scale", WIDTH);
    let rdiag = b.shared_array::<F64>("rdiag", WIDTH);
    let rscale = b.shared_array::<F64>("rscale", WIDTH);
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

    b.for_range(0u32, passes, 1u32, |b, pass, _| {
        // A: partial Gram blocks.
        let acc: Vec<Reg<F64>> = (0..9).map(|_| b.mov(0.0f64)).collect();
        b.for_range(blk, nslabs, nblk, |b, slab, _| {
            stage_slab(b, y, slab, &ys, tid);
            b.bar_sync();
            // Rows in groups of 4 (a runtime loop keeps register pressure low).
            b.for_range(0u32, SLAB, 4u32, |b, r0, _| {
                let ia = b.mad(r0, WIDTH, 0u32);
                let ia = b.mad(ti, 3u32, ia);
                let abase: Addr = b.shared_index(&ys, ia).into();
                let ib = b.mad(r0, WIDTH, 0u32);
                let ib = b.mad(tj, 3u32, ib);
                let bbase: Addr = b.shared_index(&ys, ib).into();
                for r in 0..4u32 {
                    let row = i64::from(r * WIDTH * 4);
                    let av: Vec<Reg<F64>> = (0..3).map(|i| { let v = b.ld::<F32>(Space::Shared, abase.off(row + 4 * i)); b.cvt::<F64, F32>(v) }).collect();
                    let bv: Vec<Reg<F64>> = (0..3).map(|j| { let v = b.ld::<F32>(Space::Shared, bbase.off(row + 4 * j)); b.cvt::<F64, F32>(v) }).collect();
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
        gb.sync(b);
        // B: reduce the partials, 32 entries per chunk.
        b.for_range(blk, WW / 32, nblk, |b, chunk, _| {
            let e = b.mad(chunk, 32u32, lane);
            let s = b.mov(0.0f64);
            b.for_range(warp, nblk, 8u32, |b, p, _| {
                let pi = b.mad(p, WW, e);
                let pa = b.index_addr(partial, pi, 8);
                let v = b.ld::<F64>(Space::Global, pa);
                let ns = b.add(s, v);
                b.mov_to(s, ns);
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
        gb.sync(b);
        // C: every block eliminates the same [G | I].
        for q in 0..9u32 {
            let e = b.add(tid, 256 * q);
            let ga = b.index_addr(gram, e, 8);
            let v = b.ld::<F64>(Space::Global, ga);
            let i = b.div(e, WIDTH);
            let c = b.rem(e, WIDTH);
            let left = b.mad(i, 2 * WIDTH, c);
            let la = b.shared_index(&aug, left);
            b.st(Space::Shared, la, v);
            let on = b.setp(Cmp::Eq, i, c);
            let one = b.selp(1.0f64, 0.0f64, on);
            let right = b.add(left, WIDTH);
            let ra = b.shared_index(&aug, right);
            b.st(Space::Shared, ra, one);
        }
        b.bar_sync();
        let first_pass = b.setp(Cmp::Eq, pass, 0u32);
        b.if_then(first_pass, |b| {
            let trace = b.mov(0.0f64);
            b.for_range(0u32, l, 1u32, |b, j, _| {
                let d = b.mul(j, 2 * WIDTH + 1);
                let a = b.shared_index(&aug, d);
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
            b.bar_sync();
            let mine = b.setp(Cmp::Lt, tid, l);
            b.if_then(mine, |b| {
                let d = b.mul(tid, 2 * WIDTH + 1);
                let a = b.shared_index(&aug, d);
                let v = b.ld::<F64>(Space::Shared, a);
                let v = b.add(v, shift);
                b.st(Space::Shared, a, v);
            });
            b.bar_sync();
        });
        b.for_range(0u32, WIDTH, 1u32, |b, j, _| {
            let dj = b.mul(j, 2 * WIDTH + 1);
            let da = b.shared_index(&aug, dj);
            let d = b.ld::<F64>(Space::Shared, da);
            let live = b.setp(Cmp::Gt, d, 0.0f64);
            let one = b.mov(1.0f64);
            let inv = b.div(one, d);
            let inv = b.selp(inv, 0.0f64, live);
            let left_n = b.sub(WIDTH - 1, j);
            let total = b.mul(left_n, WIDTH);
            let j1 = b.add(j, 1u32);
            let rowj = b.mul(j, 2 * WIDTH);
            b.for_range(tid, total, THREADS, |b, e, _| {
                let ar = b.div(e, WIDTH);
                let ci = b.rem(e, WIDTH);
                let a = b.add(j1, ar);
                let is_left = b.setp(Cmp::Lt, ci, left_n);
                let cl = b.add(j1, ci);
                let cr = b.sub(ci, left_n);
                let cr = b.add(cr, WIDTH);
                let col = b.selp(cl, cr, is_left);
                let rowa = b.mul(a, 2 * WIDTH);
                let maj = b.add(rowa, j);
                let maa = b.shared_index(&aug, maj);
                let gaj = b.ld::<F64>(Space::Shared, maa);
                let m = b.mul(gaj, inv);
                let nm = b.neg(m);
                let src = b.add(rowj, col);
                let sa = b.shared_index(&aug, src);
                let sv = b.ld::<F64>(Space::Shared, sa);
                let dst = b.add(rowa, col);
                let dsa = b.shared_index(&aug, dst);
                let dv = b.ld::<F64>(Space::Shared, dsa);
                let nv = b.fma(nm, sv, dv);
                b.st(Space::Shared, dsa, nv);
            });
            b.bar_sync();
        });
        let diag_thread = b.setp(Cmp::Lt, tid, WIDTH);
        b.if_then(diag_thread, |b| {
            let dj = b.mul(tid, 2 * WIDTH + 1);
            let da = b.shared_index(&aug, dj);
            let d = b.ld::<F64>(Space::Shared, da);
            let live = b.setp(Cmp::Gt, d, 0.0f64);
            let sq = b.sqrt(d);
            let one = b.mov(1.0f64);
            let sc = b.div(one, sq);
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
        // Block 0: R_total <- R R_total (pass 0: R), ping-pong between the two rt slots. R is
        // formed on the fly: R_ik = rdiag_i (k = i), U_ik rscale_i (k > i), 0 (k < i).
        let blk0 = b.setp(Cmp::Eq, blk, 0u32);
        b.if_then(blk0, |b| {
            let slot = b.and(pass, 1u32);
            let dst = b.mul(slot, WW);
            let src = b.sub(WW, dst);
            let first = b.setp(Cmp::Eq, pass, 0u32);
            for q in 0..9u32 {
                let e = b.add(tid, 256 * q);
                let i = b.div(e, WIDTH);
                let j = b.rem(e, WIDTH);
                let rda = b.shared_index(&rdiag, i);
                let rd = b.ld::<F64>(Space::Shared, rda);
                let rsa = b.shared_index(&rscale, i);
                let rsc = b.ld::<F64>(Space::Shared, rsa);
                let rowi = b.mul(i, 2 * WIDTH);
                let r_of = |b: &mut KernelBuilder, k: Reg<U32>| {
                    let ui = b.add(rowi, k);
                    let ua = b.shared_index(&aug, ui);
                    let u = b.ld::<F64>(Space::Shared, ua);
                    let t = b.mul(u, rsc);
                    let above = b.setp(Cmp::Gt, k, i);
                    let t = b.selp(t, 0.0f64, above);
                    let on = b.setp(Cmp::Eq, k, i);
                    b.selp(rd, t, on)
                };
                let v = b.mov(0.0f64);
                b.if_else(
                    first,
                    |b| {
                        let r = r_of(b, j);
                        b.mov_to(v, r);
                    },
                    |b| {
                        b.for_range(0u32, WIDTH, 1u32, |b, k, _| {
                            let r = r_of(b, k);
                            let ti_ = b.mad(k, WIDTH, j);
                            let ti_ = b.add(ti_, src);
                            let ta = b.index_addr(rt, ti_, 8);
                            let t = b.ld::<F64>(Space::Global, ta);
                            let nv = b.fma(r, t, v);
                            b.mov_to(v, nv);
                        });
                    },
                );
                let di = b.add(e, dst);
                let da = b.index_addr(rt, di, 8);
                b.st(Space::Global, da, v);
            }
        });
        // D: Q = Y R^{-1} over the block's slabs, in place: q_c = (sum_a y_a E_ca) s_c.
        let r_row = b.shr(tid, 3u32);
        let cq = b.and(tid, 7u32);
        b.for_range(blk, nslabs, nblk, |b, slab, _| {
            stage_slab(b, y, slab, &ys, tid);
            b.bar_sync();
            let yrow: Addr = {
                let i = b.mul(r_row, WIDTH);
                b.shared_index(&ys, i).into()
            };
            for q in 0..6u32 {
                let c = b.add(cq, 8 * q);
                let erow: Addr = {
                    let i = b.mad(c, 2 * WIDTH, WIDTH);
                    b.shared_index(&aug, i).into()
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
    });
    gb.finish(&mut b);
    Module::single(target, b.finish())
}
