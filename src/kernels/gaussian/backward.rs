//! `gaussian_backward_{f32,f64}`: the fused backward pass. Given g_i = dLoss/df_i it produces,
//! without any B x N intermediate, raw per-Gaussian sums over a chunk of points and per-point sums
//! over a block of Gaussians (the finishing kernels in `reduce` scale and add them up).
//!
//! Per pair (i, j), with e' the kernel exponential of `common` and the order of
//! `crate::gaussian::pair`: v, d = solve; s = back_solve(v); ge = g_i e'; gs = ge s. f32: a
//! Gaussian flagged in `comp` (`common::COMP_STRIDE`; badly conditioned, see
//! `crate::gaussian::layout::COMPENSATE_KAPPA`) replaces v, d by `common::solve_compensated`
//! inside a branch, so warps without a flagged Gaussian pay one predicate test per pair. A pair with
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
//! thread sums its Q Gaussians' point terms, the warp adds the 32 lanes' sums with xor shuffles,
//! lane 0 leaves the warp total in `wsum`, and after a barrier thread k of the block adds the two
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
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
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
            let flag = b.ld::<T>(Space::GlobalNc, Addr::from(at).off(i64::from(COMP_FLAG * T::BYTES)));
            comp_on.push(b.setp(Cmp::Ne, flag, zero));
        }
    }

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
            let x = [0i64, 1, 2].map(|k| b.ld::<T>(Space::GlobalNc, Addr::from(a).off(k * i64::from(T::BYTES))));
            let ga = b.index_addr(grads, i, T::BYTES);
            let g = b.ld::<T>(Space::GlobalNc, ga);
            let slot = b.shl(tid, 2u32);
            let dst = b.shared_index(&pts, slot);
            store4::<T>(b, dst.into(), [x[0], x[1], x[2], g]);
        });
        b.bar_sync();
        b.for_range(0u32, count, 1u32, |b, k, _| {
            let slot = b.shl(k, 2u32);
            let src = b.shared_index(&pts, slot);
            let [x0, x1, x2, g] = load4::<T>(b, src.into());
            let pc = [(); 3].map(|_| b.mov(zero));
            for q in 0..q_count as usize {
                let gr = gauss[q];
                let (v, d) = solve(b, &gr, [x0, x1, x2]);
                if let Some(&on) = comp_on.get(q) {
                    // A branch, not predication: warps without a flagged Gaussian skip it.
                    let j = js[q];
                    b.if_then(on, |b| {
                        let at = b.index_addr(comp, j, COMP_STRIDE * T::BYTES);
                        let lo = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at));
                        let hi = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at).off(16));
                        let (vc, dc) = solve_compensated(b, &gr, [lo[0], lo[1], lo[2]], [hi[0], hi[1], hi[2]], [x0, x1, x2]);
                        for k in 0..3 {
                            b.mov_to(v[k], vc[k]);
                        }
                        b.mov_to(d, dc);
                    });
                }
                let e = T::kernel_exp(b, d);
                // A pair beyond the cutoff (e' = 0) must add exactly 0: with v replaced by 0, s = 0
                // and every term below is 0 even where v or s would overflow (0 * inf).
                let live = b.setp(Cmp::Ne, e, zero);
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
                for (slot, (ra, cb)) in [(0usize, 0usize), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)].into_iter().enumerate() {
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
            let wslot = b.mad(warp, BATCH, k);
            let wslot = b.mul(wslot, 3u32);
            let dst = b.shared_index(&wsum, wslot);
            for (c, p) in pc.iter().enumerate() {
                let total = b.warp_sum(*p);
                b.guarded(lane0, false, |b| b.st(Space::Shared, Addr::from(dst).off(c as i64 * i64::from(T::BYTES)), total));
            }
        });
        b.bar_sync();
        b.if_then(mine, |b| {
            let dst = addr2d(b, partial_points, gblock, num_points, i, 3 * T::BYTES);
            let slot = b.mul(tid, 3u32);
            let src = b.shared_index(&wsum, slot);
            for c in 0..3u32 {
                // wsum[(w * BATCH + tid) * 3 + c], warps added in order.
                let mut total = b.ld::<T>(Space::Shared, Addr::from(src).off(i64::from(c * T::BYTES)));
                for w in 1..WARPS {
                    let off = i64::from((w * BATCH * 3 + c) * T::BYTES);
                    let v = b.ld::<T>(Space::Shared, Addr::from(src).off(off));
                    total = b.add(total, v);
                }
                b.st(Space::Global, Addr::from(dst).off(i64::from(c * T::BYTES)), total);
            }
        });
    });

    for q in 0..q_count as usize {
        let dst = addr2d(&mut b, partial_gauss, chunk, n_pad, js[q], GRAD_STRIDE * T::BYTES);
        for (k, a) in acc[q].iter().enumerate() {
            b.st(Space::Global, Addr::from(dst).off(k as i64 * i64::from(T::BYTES)), *a);
        }
    }
    Module::single(target, b.finish())
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
