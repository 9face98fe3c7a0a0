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
//! - C (every block, redundantly and identically): warp 0 adds the shift (first pass), factors
//!   `G = R^T R` (lane owns columns {l, 47 - l} for l < 16 and {l} for l >= 16, balancing the
//!   trailing updates; `bar.warp.sync` between steps) and inverts R column by column into the
//!   shared G array; block 0 also multiplies R_total;
//! - D: each slab is restaged and overwritten by `Q = Y R^{-1}` (f64 fma over a ascending, then
//!   rounded to f32): thread t computes row t / 8, columns t % 8 + 8q.
//!
//! Shared memory: the slab (6 KiB f32), G/X and R (18 KiB f64 each), reduction scratch (2 KiB).

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

/// Columns owned by `lane` in the Cholesky: (column, valid) pairs.
fn lane_columns(b: &mut KernelBuilder, lane: Reg<U32>) -> [(Reg<U32>, Reg<Pred>); 2] {
    let c1 = b.sub(47u32, lane);
    let v1 = b.setp(Cmp::Lt, lane, 16u32);
    let always = b.setp(Cmp::Eq, lane, lane);
    [(lane, always), (c1, v1)]
}

fn cholesky_and_inverse(b: &mut KernelBuilder, gs: &SharedArray<F64>, rs: &SharedArray<F64>, lane: Reg<U32>) {
    let cols = lane_columns(b, lane);
    b.for_range(0u32, WIDTH, 1u32, |b, j, _| {
        let jj = b.mad(j, WIDTH + 1, 0u32);
        let da = b.shared_index(gs, jj);
        let d = b.ld::<F64>(Space::Shared, da);
        let pos = b.setp(Cmp::Gt, d, 0.0f64);
        let sq = b.sqrt(d);
        let rjj = b.selp(sq, 1.0f64, pos);
        for &(c, valid) in &cols {
            b.if_then(valid, |b| {
                let e = b.mad(j, WIDTH, c);
                let ga = b.shared_index(gs, e);
                let g = b.ld::<F64>(Space::Shared, ga);
                let q = b.div(g, rjj);
                let q = b.selp(q, 0.0f64, pos);
                let above = b.setp(Cmp::Gt, c, j);
                let on = b.setp(Cmp::Eq, c, j);
                let v = b.selp(q, 0.0f64, above);
                let v = b.selp(rjj, v, on);
                let ra = b.shared_index(rs, e);
                b.st(Space::Shared, ra, v);
            });
        }
        b.warp_sync(FULL_MASK);
        for &(c, valid) in &cols {
            let above = b.setp(Cmp::Gt, c, j);
            let go = b.and(valid, above);
            b.if_then(go, |b| {
                let rjc_i = b.mad(j, WIDTH, c);
                let rjc_a = b.shared_index(rs, rjc_i);
                let rjc = b.ld::<F64>(Space::Shared, rjc_a);
                let start = b.add(j, 1u32);
                let end = b.add(c, 1u32);
                b.for_range(start, end, 1u32, |b, a, _| {
                    let rja_i = b.mad(j, WIDTH, a);
                    let rja_a = b.shared_index(rs, rja_i);
                    let rja = b.ld::<F64>(Space::Shared, rja_a);
                    let nrja = b.neg(rja);
                    let gi = b.mad(a, WIDTH, c);
                    let ga = b.shared_index(gs, gi);
                    let g = b.ld::<F64>(Space::Shared, ga);
                    let ng = b.fma(nrja, rjc, g);
                    b.st(Space::Shared, ga, ng);
                });
            });
        }
        b.warp_sync(FULL_MASK);
    });
    // X = R^{-1}, column c by its lane, into the G array (G is no longer needed).
    for &(c, valid) in &cols {
        b.if_then(valid, |b| {
            let cc = b.mad(c, WIDTH + 1, 0u32);
            let ra = b.shared_index(rs, cc);
            let rcc = b.ld::<F64>(Space::Shared, ra);
            let one = b.mov(1.0f64);
            let xcc = b.div(one, rcc);
            let xa = b.shared_index(gs, cc);
            b.st(Space::Shared, xa, xcc);
            // Rows below the diagonal are zero.
            let below = b.add(c, 1u32);
            b.for_range(below, WIDTH, 1u32, |b, i, _| {
                let e = b.mad(i, WIDTH, c);
                let a = b.shared_index(gs, e);
                b.st(Space::Shared, a, 0.0f64);
            });
            // Rows above, from the diagonal up: x_ic = -(sum_{k=i+1..=c} r_ik x_kc) / r_ii.
            let i = b.mov(c);
            b.loop_forever(|b, brk, _| {
                let done = b.setp(Cmp::Eq, i, 0u32);
                b.bra_if(done, brk);
                let im = b.sub(i, 1u32);
                b.mov_to(i, im);
                let s = b.mov(0.0f64);
                let k0 = b.add(i, 1u32);
                let k1 = b.add(c, 1u32);
                b.for_range(k0, k1, 1u32, |b, k, _| {
                    let rik_i = b.mad(i, WIDTH, k);
                    let rik_a = b.shared_index(rs, rik_i);
                    let rik = b.ld::<F64>(Space::Shared, rik_a);
                    let xkc_i = b.mad(k, WIDTH, c);
                    let xkc_a = b.shared_index(gs, xkc_i);
                    let xkc = b.ld::<F64>(Space::Shared, xkc_a);
                    let ns = b.fma(rik, xkc, s);
                    b.mov_to(s, ns);
                });
                let ii = b.mad(i, WIDTH + 1, 0u32);
                let ria = b.shared_index(rs, ii);
                let rii = b.ld::<F64>(Space::Shared, ria);
                let negs = b.neg(s);
                let x = b.div(negs, rii);
                let e = b.mad(i, WIDTH, c);
                let xa = b.shared_index(gs, e);
                b.st(Space::Shared, xa, x);
            });
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
    let gs = b.shared_array::<F64>("g", WW);
    let rs = b.shared_array::<F64>("r", WW);
    let red = b.shared_array::<F64>("red", 256);
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
            let abase: Addr = { let i = b.mul(ti, 3u32); b.shared_index(&ys, i).into() };
            let bbase: Addr = { let j = b.mul(tj, 3u32); b.shared_index(&ys, j).into() };
            for r in 0..SLAB {
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
        // C: every block factors and inverts the same G.
        for q in 0..9u32 {
            let e = b.add(tid, 256 * q);
            let ga = b.index_addr(gram, e, 8);
            let v = b.ld::<F64>(Space::Global, ga);
            let sa = b.shared_index(&gs, e);
            b.st(Space::Shared, sa, v);
        }
        b.bar_sync();
        let warp0 = b.setp(Cmp::Eq, warp, 0u32);
        b.if_then(warp0, |b| {
            let first_pass = b.setp(Cmp::Eq, pass, 0u32);
            b.if_then(first_pass, |b| {
                // trace over the first l diagonal entries, then the shift on them.
                let part = b.mov(0.0f64);
                for q in 0..2u32 {
                    let c = b.add(lane, 32 * q);
                    let inside = b.setp(Cmp::Lt, c, l);
                    b.if_then(inside, |b| {
                        let d = b.mad(c, WIDTH + 1, 0u32);
                        let a = b.shared_index(&gs, d);
                        let v = b.ld::<F64>(Space::Shared, a);
                        let s = b.add(part, v);
                        b.mov_to(part, s);
                    });
                }
                let trace = b.warp_sum(part);
                let rl = b.mul(rows, l);
                let l1 = b.add(l, 1u32);
                let ll = b.mul(l, l1);
                let cnt = b.add(rl, ll);
                let cnt = b.cvt::<F64, U32>(cnt);
                let k = b.mul(cnt, SHIFT_C);
                let shift = b.mul(k, trace);
                for q in 0..2u32 {
                    let c = b.add(lane, 32 * q);
                    let inside = b.setp(Cmp::Lt, c, l);
                    b.if_then(inside, |b| {
                        let d = b.mad(c, WIDTH + 1, 0u32);
                        let a = b.shared_index(&gs, d);
                        let v = b.ld::<F64>(Space::Shared, a);
                        let s = b.add(v, shift);
                        b.st(Space::Shared, a, s);
                    });
                }
                b.warp_sync(FULL_MASK);
            });
            cholesky_and_inverse(b, &gs, &rs, lane);
        });
        b.bar_sync();
        // Block 0: R_total <- R R_total (pass 0: R), ping-pong between the two rt slots.
        let blk0 = b.setp(Cmp::Eq, blk, 0u32);
        b.if_then(blk0, |b| {
            let slot = b.and(pass, 1u32);
            let dst = b.mul(slot, WW);
            let src = b.sub(WW, dst);
            for q in 0..9u32 {
                let e = b.add(tid, 256 * q);
                let i = b.div(e, WIDTH);
                let j = b.rem(e, WIDTH);
                let v = b.mov(0.0f64);
                let first_pass = b.setp(Cmp::Eq, pass, 0u32);
                b.if_else(
                    first_pass,
                    |b| {
                        let a = b.shared_index(&rs, e);
                        let r = b.ld::<F64>(Space::Shared, a);
                        b.mov_to(v, r);
                    },
                    |b| {
                        b.for_range(0u32, WIDTH, 1u32, |b, k, _| {
                            let ri = b.mad(i, WIDTH, k);
                            let ra = b.shared_index(&rs, ri);
                            let r = b.ld::<F64>(Space::Shared, ra);
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
        // D: Q = Y X over the block's slabs, in place.
        let r_row = b.shr(tid, 3u32);
        let cq = b.and(tid, 7u32);
        b.for_range(blk, nslabs, nblk, |b, slab, _| {
            stage_slab(b, y, slab, &ys, tid);
            b.bar_sync();
            let yrow: Addr = { let i = b.mul(r_row, WIDTH); b.shared_index(&ys, i).into() };
            for q in 0..6u32 {
                let c = b.add(cq, 8 * q);
                let xcol: Addr = b.shared_index(&gs, c).into();
                let s = b.mov(0.0f64);
                for a in 0..WIDTH {
                    let yv = b.ld::<F32>(Space::Shared, yrow.off(4 * i64::from(a)));
                    let yv = b.cvt::<F64, F32>(yv);
                    let xv = b.ld::<F64>(Space::Shared, xcol.off(8 * i64::from(a * WIDTH)));
                    let ns = b.fma(yv, xv, s);
                    b.mov_to(s, ns);
                }
                let out = b.cvt::<F32, F64>(s);
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
