//! The backward kernel's body: setup, the point batches, the per-point choice of body, the lane
//! sums of the point terms and the final stores (see the module docs of [`super`]).

use super::pairs::{pair_sums, GS_W_SLOTS};
use super::smem::{load4, store4};
use super::{batch_points, psum_row, Check, Options, Owned, Pair, PointCtx, BLOCK, ROWS_PER_STEP};
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::exp_f64::Exp2;
use crate::kernels::gaussian::scaled::sigma;
use crate::kernels::gaussian::unit::BackConsts;
use crate::ptx::*;

/// Where a point of the staged batch is: its index, or its address in `pts`.
#[derive(Clone, Copy)]
enum At {
    Index(Reg<U32>),
    Addr(Reg<U32>),
}

/// Every lane of the warp.
const ALL_LANES: u32 = 0xffff_ffff;

/// The kernel with `q_count` Gaussians per thread and `opts` (`gaussian_backward_<T>`).
pub fn build<T: KFloat>(target: Target, q_count: u32, opts: Options) -> Module {
    let Options {
        check,
        exp,
        unit,
        max_registers,
        two_points,
        walk,
    } = opts;
    let mut b = KernelBuilder::new(&format!("gaussian_backward_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
    if let Some(r) = max_registers {
        b.maxnreg(r);
    }
    let prep = b.param::<U64>("prep");
    let n_pad = b.param::<U32>("n_pad");
    let points = b.param::<U64>("points");
    let grads = b.param::<U64>("grad_values");
    let num_points = b.param::<U32>("num_points");
    let chunk_len = b.param::<U32>("chunk_len");
    let partial_points = b.param::<U64>("partial_points");
    let partial_gauss = b.param::<U64>("partial_gauss");
    let comp = b.param::<U64>("comp");
    let prep = b.global_ptr(&prep);
    let n_pad = b.ld_param(&n_pad);
    let points = b.global_ptr(&points);
    let grads = b.global_ptr(&grads);
    let num_points = b.ld_param(&num_points);
    let chunk_len = b.ld_param(&chunk_len);
    let partial_points = b.global_ptr(&partial_points);
    let partial_gauss = b.global_ptr(&partial_gauss);
    // f64 never compensates: no flags, no pointer.
    let comp = T::COMPENSATES.then(|| b.global_ptr(&comp));
    let pts = b.shared_array::<T>("pts", batch_points::<T>() * 4);
    let psum = b.shared_array::<T>("psum", BLOCK * psum_row::<T>());

    let tid = b.special(Special::TidX);
    let gblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let zero = T::imm(0.0);
    // (f64 table kinds: the warp sync after each batch's staging orders the table's stores
    // before the first read.)
    let exp = Exp2::setup::<T>(&mut b, exp, tid);

    b.comment("this thread's Gaussians: unit-form constants, sums, compensation flags");
    let first_j = b.mad(gblock, BLOCK * q_count, tid);
    let mut own: Vec<Owned<T>> = Vec::new();
    for q in 0..q_count {
        let j = b.add(first_j, q * BLOCK);
        let src = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
        let pr = load_prepared::<T>(&mut b, Space::GlobalNc, src.into());
        let g = BackConsts::from_prepared_form(&mut b, &pr, T::UNIT_BACKWARD || unit);
        let acc = [(); GRAD_STRIDE as usize].map(|_| b.mov(zero));
        let comp_on = comp.map(|comp| {
            let at = b.index_addr(comp, j, COMP_STRIDE * T::BYTES);
            let flag = b.ld::<T>(
                Space::GlobalNc,
                Addr::from(at).off(i64::from(COMP_FLAG * T::BYTES)),
            );
            b.setp(Cmp::Ne, flag, zero)
        });
        own.push(Owned { j, g, acc, comp_on });
    }
    // `plain`: none of this thread's Gaussians is flagged and (Check::PairT) every constant is
    // bounded (`BackConsts::bounded`) or (Check::Growth) their growth bound S is at most
    // T::GROWTH_LIMIT. A point takes the unguarded body when, in every lane, `plain` holds and
    // (PairT) each of its pairs has t < T::SAFE_T or (Growth) S (|x|_inf + M) <= T::GROWTH_LIMIT,
    // i.e. |x|_inf <= x_lim; any other point the guarded one (cutoff selects, compensation).
    let mut plain: Option<Reg<Pred>> = None;
    let mut growth: Option<(Reg<T>, Reg<T>)> = None;
    for o in &own {
        let p = match check {
            Check::PairT => Some(o.g.bounded(&mut b)),
            Check::Growth | Check::Batch => {
                let (gs, gm) = o.g.growth(&mut b);
                growth = Some(match growth {
                    None => (gs, gm),
                    Some((s0, m0)) => (b.max(s0, gs), b.max(m0, gm)),
                });
                None
            }
        };
        let off = o.comp_on.map(|on| b.not(on));
        for q in [p, off].into_iter().flatten() {
            plain = Some(match plain {
                None => q,
                Some(a) => b.and(a, q),
            });
        }
    }
    let x_lim = match growth {
        Some((gs, gm)) => {
            let sane = b.setp(Cmp::Le, gs, T::imm(T::GROWTH_LIMIT));
            plain = Some(match plain {
                None => sane,
                Some(a) => b.and(a, sane),
            });
            let r = b.div(T::imm(T::GROWTH_LIMIT), gs);
            b.sub(r, gm)
        }
        None => b.mov(zero),
    };
    let plain = plain.unwrap_or_else(|| unreachable!("at least one Gaussian per thread"));
    // Check::Batch: whether every lane is `plain`, and the smallest x_lim of the warp.
    let warp_lim = (check == Check::Batch).then(|| {
        let all_plain = b.vote_all(plain);
        let mut m = x_lim;
        for k in [16u32, 8, 4, 2, 1] {
            let o = b.shfl(Shfl::Xor, m, k);
            m = b.min(m, o);
        }
        (all_plain, m)
    });

    // This thread's row of per-point sums: psum[tid * row + k * 4 + c].
    let batch = batch_points::<T>();
    let row = psum_row::<T>();
    let my_row = b.mul(tid, row);
    let pad = b.mov(zero);
    // f32 with one point per iteration and `walk`: the point loop walks `pts` by address (16
    // bytes per point, as a row entry of `psum`), one add per point for both addresses.
    let walking = walk && T::BYTES == 4 && !two_points;
    let (walk_from, to_row) = if walking {
        let pts0 = b.shared_index(&pts, 0u32);
        let row0 = b.shared_index(&psum, my_row);
        (Some(pts0), Some(b.sub(row0, pts0)))
    } else {
        (None, None)
    };

    let p_start = b.mul(chunk, chunk_len);
    let p_stop = b.add(p_start, chunk_len);
    let p_end = b.min(p_stop, num_points);
    b.for_range(p_start, p_end, batch, |b, batch_start, _| {
        b.comment("stage a batch of points and g / sigma^2");
        let left = b.sub(p_end, batch_start);
        let count = b.min(left, batch);
        let mine = b.setp(Cmp::Lt, tid, count);
        let i = b.add(batch_start, tid);
        // Check::Batch: |x|_inf of this lane's point (0 without one).
        let x_mag = b.mov(zero);
        b.if_then(mine, |b| {
            let a = b.index_addr(points, i, 3 * T::BYTES);
            let x = [0i64, 1, 2]
                .map(|k| b.ld::<T>(Space::GlobalNc, Addr::from(a).off(k * i64::from(T::BYTES))));
            if warp_lim.is_some() {
                let ax = x.map(|v| b.abs(v));
                let m = b.max(ax[0], ax[1]);
                let m = b.max(m, ax[2]);
                b.mov_to(x_mag, m);
            }
            let ga = b.index_addr(grads, i, T::BYTES);
            let g = b.ld::<T>(Space::GlobalNc, ga);
            let s = sigma();
            let g = T::scale_const(b, g, 1.0 / (s * s));
            let slot = b.shl(tid, 2u32);
            let dst = b.shared_index(&pts, slot);
            store4::<T>(b, dst.into(), [x[0], x[1], x[2], g]);
        });
        b.warp_sync(ALL_LANES);
        // `body`: None chooses per point (vote), Some(guarded) takes that body for every point.
        // `at`: the point's index k, or (`walk`) its address in `pts`.
        let point = |b: &mut KernelBuilder, at: At, body: Option<bool>| {
            b.comment("point k: distances and exponentials of this thread's Gaussians");
            let src = match at {
                At::Index(k) => {
                    let slot = b.shl(k, 2u32);
                    b.shared_index(&pts, slot)
                }
                At::Addr(a) => a,
            };
            let [x0, x1, x2, g] = load4::<T>(b, src.into());
            let x = [x0, x1, x2];
            // Growth, Batch: the pairs are formed inside the chosen body; PairT: all of them
            // first.
            let (ok, pairs) = match check {
                Check::Batch => (plain, None),
                Check::Growth => {
                    let ax = x.map(|v| b.abs(v));
                    let m = b.max(ax[0], ax[1]);
                    let m = b.max(m, ax[2]);
                    let fits = b.setp(Cmp::Le, m, x_lim);
                    (b.and(plain, fits), None)
                }
                Check::PairT => {
                    let mut ok = plain;
                    let mut pairs = Vec::new();
                    for o in &own {
                        let (w, y, t) = o.g.solve(b, x);
                        let e = exp.eval(b, t);
                        let fin = b.setp(Cmp::Lt, t, T::imm(T::SAFE_T));
                        ok = b.and(ok, fin);
                        pairs.push(Pair { w, y, e });
                    }
                    (ok, Some(pairs))
                }
            };
            let pc = [(); 3].map(|_| b.mov(zero));
            let ctx = PointCtx {
                own: &own,
                pairs: pairs.as_deref(),
                g,
                x,
                pc,
                prep,
                comp,
                exp,
            };
            let unguarded = |b: &mut KernelBuilder| {
                b.comment("unguarded: every pair's products are finite");
                pair_sums(b, &ctx, false)
            };
            let guarded = |b: &mut KernelBuilder| {
                b.comment("guarded: cutoff selects, compensated solves of flagged Gaussians");
                pair_sums(b, &ctx, true)
            };
            match body {
                None => {
                    let all = b.vote_all(ok);
                    b.if_else(all, unguarded, guarded);
                }
                Some(false) => unguarded(b),
                Some(true) => guarded(b),
            }
            b.comment("this thread's terms of point k into its row");
            match at {
                At::Index(k) => {
                    let slot = b.mad(k, 4u32, my_row);
                    let dst = b.shared_index(&psum, slot);
                    store4::<T>(b, dst.into(), [pc[0], pc[1], pc[2], pad]);
                }
                At::Addr(a) => {
                    // (The fourth scalar of a row entry is never read.)
                    let to_row =
                        to_row.unwrap_or_else(|| unreachable!("addresses only when walking"));
                    let dst = b.add(a, to_row);
                    store4::<T>(b, dst.into(), [pc[0], pc[1], pc[2], pc[2]]);
                }
            }
        };
        // (Two points per iteration made ptxas interleave them and spill; `two_points` tries
        // it again: the pairs of two points in flight, the last odd point alone.)
        let points_loop = |b: &mut KernelBuilder, body: Option<bool>| {
            if two_points {
                let even = b.and(count, !1u32);
                b.for_range(0u32, even, 2u32, |b, k, _| {
                    point(b, At::Index(k), body);
                    let k1 = b.add(k, 1u32);
                    point(b, At::Index(k1), body);
                });
                let odd = b.setp(Cmp::Ne, even, count);
                b.if_then(odd, |b| point(b, At::Index(even), body));
            } else if let Some(pts0) = walk_from {
                let len = b.shl(count, 4u32);
                let end = b.add(pts0, len);
                b.for_range(pts0, end, 16u32, |b, a, _| point(b, At::Addr(a), body));
            } else {
                b.for_range(0u32, count, 1u32, |b, k, _| point(b, At::Index(k), body));
            }
        };
        match warp_lim {
            None => points_loop(b, None),
            Some((all_plain, lim)) => {
                b.comment(
                    "one body for the whole batch: its largest |x|_inf against the warp's x_lim",
                );
                let mut m = x_mag;
                for k in [16u32, 8, 4, 2, 1] {
                    let o = b.shfl(Shfl::Xor, m, k);
                    m = b.max(m, o);
                }
                let fits = b.setp(Cmp::Le, m, lim);
                let ok = b.and(all_plain, fits);
                b.if_else(
                    ok,
                    |b| points_loop(b, Some(false)),
                    |b| points_loop(b, Some(true)),
                );
            }
        }
        b.warp_sync(ALL_LANES);
        b.comment("point tid: add the rows of every lane in order and store");
        b.if_then(mine, |b| {
            let slot = b.shl(tid, 2u32);
            let src = b.shared_index(&psum, slot);
            // Rows in lane order, ROWS_PER_STEP loads in flight per step (a full unroll would
            // keep 32 rows' loads in registers).
            let sums = [(); 3].map(|_| b.mov(zero));
            let step_bytes = ROWS_PER_STEP * row * T::BYTES;
            b.for_range(0u32, BLOCK / ROWS_PER_STEP, 1u32, |b, r, _| {
                let off = b.mul(r, step_bytes);
                let at = b.add(src, off);
                for l in 0..ROWS_PER_STEP {
                    let [v0, v1, v2, _] =
                        load4::<T>(b, Addr::from(at).off(i64::from(l * row * T::BYTES)));
                    for (acc, v) in sums.iter().zip([v0, v1, v2]) {
                        let t = b.add(*acc, v);
                        b.mov_to(*acc, t);
                    }
                }
            });
            let [s0, s1, s2] = sums;
            let dst = addr2d(b, partial_points, gblock, num_points, i, 3 * T::BYTES);
            for (c, v) in [s0, s1, s2].into_iter().enumerate() {
                b.st(
                    Space::Global,
                    Addr::from(dst).off(c as i64 * i64::from(T::BYTES)),
                    v,
                );
            }
        });
    });

    b.comment("undo the scale in the sums and store them");
    // With s' = sigma^2 s and g' = g / sigma^2: slots 0..3 are exact, slot 3 + k (gs_a w_b)
    // becomes sum g e s_a v_b with v_b = w_b / a_b, slot 9 carries a factor 1 / sigma^2.
    let s = sigma();
    for o in &own {
        let src = b.index_addr(prep, o.j, PREP_STRIDE * T::BYTES);
        let pr = load_prepared::<T>(&mut b, Space::GlobalNc, src.into());
        let inv = [pr[6], pr[7], pr[8]];
        let dst = addr2d(
            &mut b,
            partial_gauss,
            chunk,
            n_pad,
            o.j,
            GRAD_STRIDE * T::BYTES,
        );
        for (k, a) in o.acc.iter().enumerate() {
            let v = match k {
                0..=2 => *a,
                3..=8 => o.g.unscale_w(&mut b, *a, &inv, GS_W_SLOTS[k - 3].1),
                _ => T::scale_const(&mut b, *a, s * s),
            };
            b.st(
                Space::Global,
                Addr::from(dst).off(k as i64 * i64::from(T::BYTES)),
                v,
            );
        }
    }
    Module::single(target, b.finish())
}
