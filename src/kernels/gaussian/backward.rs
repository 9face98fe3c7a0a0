//! `gaussian_backward_{f32,f64}`: the fused backward pass. Given g_i = dLoss/df_i it produces,
//! without any B x N intermediate, raw per-Gaussian sums over a chunk of points and per-point sums
//! over a block of Gaussians (the finishing kernels in `reduce` scale and add them up).
//!
//! Per pair (i, j), with e' the kernel exponential of `common` and the order of
//! `crate::gaussian::pair`: v, d = solve; s = back_solve(v); ge = g_i e'; gs = ge s. f32: a
//! Gaussian flagged in `comp` (`common::COMP_STRIDE`; badly conditioned, see
//! `crate::gaussian::layout::COMPENSATE_KAPPA`) replaces v of its live pairs (e' != 0) by
//! `common::solve_compensated` inside a per-pair branch (e' keeps the plain d); a warp none of whose Gaussians is flagged (`vote.any`, once per
//! launch) runs a second copy of the point loop without that branch, so it pays nothing. A pair with
//! e' = 0 (beyond the cutoff) has v replaced by 0 (`selp`), so s = 0 and it adds exactly 0, as
//! the CPU's skip does, and 0 * inf never reaches the sums. (Predicating the pair's instructions
//! instead made ptxas if-convert them into conditional moves: twice the registers.)
//! - Gaussian j accumulates A_j = [gs (3), gs_a v_b for (a,b) = 00 10 11 20 21 22 (6), ge (1)];
//!   `gaussian_finish` turns A into dLoss/d(mu, L, w) with w c 2^o and c 2^o.
//! - Point i accumulates P_i = sum_j (w c 2^o)_j gs_ij (3); dLoss/dx_i = -P_i.
//!
//! Launch: blocks of exactly [`BLOCK`] threads (two warps); grid (n_pad / (BLOCK * Q), S) with Q =
//! [`GAUSSIANS_PER_THREAD_F32`] or [`GAUSSIANS_PER_THREAD_F64`]. Block (x, c) owns Gaussians
//! x * BLOCK * Q + q * BLOCK + tid (q < Q; thread-private, constants and the 10 Q sums in
//! registers for the whole launch) and points [c * chunk_len, min((c + 1) * chunk_len, B)).
//!
//! The block stages its points [`BATCH`] at a time in shared memory (`pts`: x, y, z, g per point,
//! one vector load), then every thread walks the batch in order (broadcast loads). Per point a
//! thread sums its Q Gaussians' point terms, the warp adds the 32 lanes' sums with xor shuffles
//! (`warp_sum3`: three components in 16 operations), lanes 0, 16 and 8 leave the warp totals in
//! `wsum`, and after a barrier thread k of the block adds the two
//! warps' totals for point k and stores them: `partial_points[(x * B + i) * 3 + k]`. At the end
//! each thread stores its Gaussians' sums: `partial_gauss[(c * n_pad + j) * 10 + k]`. Every sum
//! runs in a fixed order: results are bit-identical from run to run. No atomics.

use super::common::*;
use crate::ptx::*;

/// Threads per block (required); also the points per staged batch.
pub const BLOCK: u32 = 64;
/// Points staged in shared memory per batch.
pub const BATCH: u32 = BLOCK;
/// Gaussians each thread owns (f32).
pub const GAUSSIANS_PER_THREAD_F32: u32 = 4;
/// Gaussians each thread owns (f64).
pub const GAUSSIANS_PER_THREAD_F64: u32 = 2;
const WARPS: u32 = BLOCK / 32;

/// f32 module.
pub fn build_f32(target: Target) -> Module {
    build::<F32>(target, GAUSSIANS_PER_THREAD_F32)
}

/// f64 module.
pub fn build_f64(target: Target) -> Module {
    build::<F64>(target, GAUSSIANS_PER_THREAD_F64)
}

fn build<T: KFloat>(target: Target, q_count: u32) -> Module {
    let mut b = KernelBuilder::new(&format!("gaussian_backward_{}", T::SUFFIX));
    b.reqntid(BLOCK, 1, 1);
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
    let comp = b.global_ptr(&comp);
    let pts = b.shared_array::<T>("pts", BATCH * 4);
    let wsum = b.shared_array::<T>("wsum", WARPS * BATCH * 3);

    let tid = b.special(Special::TidX);
    let gblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    // warp_sum3 leaves component 0 in lane 0, 1 in lane 16, 2 in lanes 8 and 24. Kept in two
    // registers (predicates are made where used: they would not all fit the predicate registers):
    // `wbase` = warp * BATCH * 3 + this lane's component (bit 4 + 2 bit 3), and `lane_info` with
    // bits 0..3 zero exactly in lanes 0, 8, 16 (the storing lanes; lane 24 has bits 4 and 3 set),
    // bit 4 = lane bit 4, bit 5 = lane bit 3.
    let bit16 = b.and(lane, 16u32);
    let bit8 = b.and(lane, 8u32);
    let c_hi = b.shr(bit16, 4u32);
    let c_lo = b.shr(bit8, 2u32);
    let lane_comp = b.add(c_hi, c_lo);
    let wbase = b.mul(warp, BATCH * 3);
    let wbase = b.add(wbase, lane_comp);
    let low3 = b.and(lane, 7u32);
    let half = b.shr(lane, 1u32);
    let both = b.and(lane, half);
    let both = b.and(both, 8u32);
    let store_key = b.or(low3, both);
    let bit8_up = b.shl(bit8, 2u32);
    let flags = b.or(bit16, bit8_up);
    let lane_info = b.or(store_key, flags);
    let zero = T::imm(0.0);

    // This thread's Gaussians and their sums.
    let first_j = b.mad(gblock, BLOCK * q_count, tid);
    let mut js = Vec::new();
    let mut gauss = Vec::new();
    let mut acc = Vec::new();
    // f32: per Gaussian, whether it takes the compensated solve.
    let mut comp_on = Vec::new();
    for q in 0..q_count {
        let j = b.add(first_j, q * BLOCK);
        let src = b.index_addr(prep, j, PREP_STRIDE * T::BYTES);
        let pr = load_prepared::<T>(&mut b, Space::GlobalNc, src.into());
        gauss.push(GaussRegs::from_prepared(&pr));
        js.push(j);
        acc.push([(); GRAD_STRIDE as usize].map(|_| b.mov(zero)));
        if T::FUSED {
            let at = b.index_addr(comp, j, COMP_STRIDE * T::BYTES);
            let flag = b.ld::<T>(
                Space::GlobalNc,
                Addr::from(at).off(i64::from(COMP_FLAG * T::BYTES)),
            );
            comp_on.push(b.setp(Cmp::Ne, flag, zero));
        }
    }

    // Warp-uniform: whether any lane of this warp owns a flagged Gaussian. Only such warps run
    // the point loop with the compensated branch; the others run it without (no per-pair test).
    let warp_any = comp_on.split_first().map(|(&first, rest)| {
        let any = rest.iter().fold(first, |acc, &p| b.or(acc, p));
        b.vote_any(any)
    });

    let p_start = b.mul(chunk, chunk_len);
    let p_stop = b.add(p_start, chunk_len);
    let p_end = b.min(p_stop, num_points);
    b.for_range(p_start, p_end, BATCH, |b, batch_start, _| {
        let left = b.sub(p_end, batch_start);
        let count = b.min(left, BATCH);
        let mine = b.setp(Cmp::Lt, tid, count);
        let i = b.add(batch_start, tid);
        b.if_then(mine, |b| {
            let a = b.index_addr(points, i, 3 * T::BYTES);
            let x = [0i64, 1, 2]
                .map(|k| b.ld::<T>(Space::GlobalNc, Addr::from(a).off(k * i64::from(T::BYTES))));
            let ga = b.index_addr(grads, i, T::BYTES);
            let g = b.ld::<T>(Space::GlobalNc, ga);
            let slot = b.shl(tid, 2u32);
            let dst = b.shared_index(&pts, slot);
            store4::<T>(b, dst.into(), [x[0], x[1], x[2], g]);
        });
        b.bar_sync();
        let point_loop = |b: &mut KernelBuilder, with_comp: bool| {
            b.for_range(0u32, count, 1u32, |b, k, _| {
                let slot = b.shl(k, 2u32);
                let src = b.shared_index(&pts, slot);
                let [x0, x1, x2, g] = load4::<T>(b, src.into());
                let pc = [(); 3].map(|_| b.mov(zero));
                for q in 0..q_count as usize {
                    let gr = gauss[q];
                    let (v, d) = solve(b, &gr, [x0, x1, x2]);
                    let e = T::kernel_exp(b, d);
                    // A pair beyond the cutoff (e' = 0) must add exactly 0: with v replaced by 0, s = 0
                    // and every term below is 0 even where v or s would overflow (0 * inf).
                    let live = b.setp(Cmp::Ne, e, zero);
                    if let (true, Some(&on)) = (with_comp, comp_on.get(q)) {
                        // Live pairs of a flagged Gaussian: v from the compensated solve (e keeps the
                        // plain d). A branch, not predication: lanes without one skip it.
                        let j = js[q];
                        let go = b.and(on, live);
                        b.if_then(go, |b| {
                            let at = b.index_addr(comp, j, COMP_STRIDE * T::BYTES);
                            let lo = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at));
                            let hi = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at).off(16));
                            let vc = solve_compensated(
                                b,
                                &gr,
                                [lo[0], lo[1], lo[2]],
                                [hi[0], hi[1], hi[2]],
                                [x0, x1, x2],
                            );
                            for k in 0..3 {
                                b.mov_to(v[k], vc[k]);
                            }
                        });
                    }
                    let v = v.map(|vk| b.selp(vk, zero, live));
                    let ge = b.mul(g, e);
                    let s = back_solve(b, &gr, v);
                    let gs = s.map(|sk| b.mul(ge, sk));
                    let a = &acc[q];
                    for k in 0..3 {
                        let t = b.add(a[k], gs[k]);
                        b.mov_to(a[k], t);
                    }
                    // (a, b) = 00 10 11 20 21 22 -> gradient slots 3..9.
                    for (slot, (ra, cb)) in
                        [(0usize, 0usize), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
                            .into_iter()
                            .enumerate()
                    {
                        let t = mul_add(b, gs[ra], v[cb], a[3 + slot]);
                        b.mov_to(a[3 + slot], t);
                    }
                    let t = b.add(a[9], ge);
                    b.mov_to(a[9], t);
                    for k in 0..3 {
                        let t = mul_add(b, gr.weight_norm, gs[k], pc[k]);
                        b.mov_to(pc[k], t);
                    }
                }
                // wsum[(warp * BATCH + k) * 3 + c]: lanes 0, 16, 8 hold components 0, 1, 2.
                let t16 = b.and(lane_info, 16u32);
                let low16 = b.setp(Cmp::Eq, t16, 0u32);
                let t8 = b.and(lane_info, 32u32);
                let low8 = b.setp(Cmp::Eq, t8, 0u32);
                let total = warp_sum3(b, pc, low16, low8);
                let t_st = b.and(lane_info, 15u32);
                let store_lane = b.setp(Cmp::Eq, t_st, 0u32);
                let wslot = b.mad(k, 3u32, wbase);
                let dst = b.shared_index(&wsum, wslot);
                b.guarded(store_lane, false, |b| b.st(Space::Shared, dst, total));
            })
        };
        match warp_any {
            Some(any) => b.if_else(any, |b| point_loop(b, true), |b| point_loop(b, false)),
            None => point_loop(b, false),
        }
        b.bar_sync();
        b.if_then(mine, |b| {
            let dst = addr2d(b, partial_points, gblock, num_points, i, 3 * T::BYTES);
            let slot = b.mul(tid, 3u32);
            let src = b.shared_index(&wsum, slot);
            for c in 0..3u32 {
                // wsum[(w * BATCH + tid) * 3 + c], warps added in order.
                let mut total =
                    b.ld::<T>(Space::Shared, Addr::from(src).off(i64::from(c * T::BYTES)));
                for w in 1..WARPS {
                    let off = i64::from((w * BATCH * 3 + c) * T::BYTES);
                    let v = b.ld::<T>(Space::Shared, Addr::from(src).off(off));
                    total = b.add(total, v);
                }
                b.st(
                    Space::Global,
                    Addr::from(dst).off(i64::from(c * T::BYTES)),
                    total,
                );
            }
        });
    });

    for q in 0..q_count as usize {
        let dst = addr2d(
            &mut b,
            partial_gauss,
            chunk,
            n_pad,
            js[q],
            GRAD_STRIDE * T::BYTES,
        );
        for (k, a) in acc[q].iter().enumerate() {
            b.st(
                Space::Global,
                Addr::from(dst).off(k as i64 * i64::from(T::BYTES)),
                *a,
            );
        }
    }
    Module::single(target, b.finish())
}

/// Sums three per-lane values over the warp in 16 operations instead of 3 x 10: the first
/// exchange (xor 16) swaps a for b so each lane carries one of them, the second (xor 8) swaps
/// that for c, then xor 4, 2, 1 finish. Lane 0 ends with sum(a), lane 16 with sum(b), lanes 8 and
/// 24 with sum(c). Fixed order: bit-identical from run to run. `low16` / `low8`: lane bit 4 / 3
/// clear.
fn warp_sum3<T: KFloat>(
    b: &mut KernelBuilder,
    v: [Reg<T>; 3],
    low16: Reg<Pred>,
    low8: Reg<Pred>,
) -> Reg<T> {
    let send = b.selp(v[1], v[0], low16);
    let keep = b.selp(v[0], v[1], low16);
    let got = b.shfl(Shfl::Xor, send, 16u32);
    let x = b.add(keep, got);
    let other_c = b.shfl(Shfl::Xor, v[2], 16u32);
    let c = b.add(v[2], other_c);
    let send = b.selp(c, x, low8);
    let keep = b.selp(x, c, low8);
    let got = b.shfl(Shfl::Xor, send, 8u32);
    let mut y = b.add(keep, got);
    for k in [4u32, 2, 1] {
        let o = b.shfl(Shfl::Xor, y, k);
        y = b.add(y, o);
    }
    y
}

fn store4<T: KFloat>(b: &mut KernelBuilder, addr: Addr, v: [Reg<T>; 4]) {
    if T::BYTES == 4 {
        b.st_v4(Space::Shared, addr, v);
    } else {
        b.st_v2(Space::Shared, addr.clone(), [v[0], v[1]]);
        b.st_v2(Space::Shared, addr.off(16), [v[2], v[3]]);
    }
}

fn load4<T: KFloat>(b: &mut KernelBuilder, addr: Addr) -> [Reg<T>; 4] {
    if T::BYTES == 4 {
        b.ld_v4::<T>(Space::Shared, addr)
    } else {
        let [a, c] = b.ld_v2::<T>(Space::Shared, addr.clone());
        let [d, e] = b.ld_v2::<T>(Space::Shared, addr.off(16));
        [a, c, d, e]
    }
}
