//! The mixed build's probes and pairs (see the parent module): the dense-table probes with
//! their hits compacted per thread, and each pair's terms in f32 (or, with `score64`, the
//! score's part in f64).

use super::super::point::probe_key;
use super::super::{Ctx, DenseCtx, DENSE_GROUP, UPPER_PAIRS};
use super::{MixedRegs, PointTerms, Sums32, COV32_BYTES};
use crate::kernels::ndt::fp64::{exp_f64, EXP_MAX_ARG, EXP_MIN_ARG};
use crate::ptx::*;

/// The dense-table probes in groups of [`DENSE_GROUP`], each group's table loads in flight at
/// once (as the compact path of `dense.rs`), then its hits paired.
pub(super) fn probes(
    b: &mut KernelBuilder,
    cx: &Ctx,
    d: &DenseCtx,
    mx: &MixedRegs,
    sums: &Sums32,
    pt: &PointTerms,
    cell: [Reg<S32>; 3],
) {
    b.comment("dense cell table: a group of probes loads its voxel indices at once");
    let cells = b.ld_param(&d.params.cells);
    let cells = b.to_global(cells);
    let origin = d.params.origin.clone().map(|p| b.ld_param(&p));
    let dims = d.params.dims.clone().map(|p| b.ld_param(&p));
    let last = b.sub(cx.probe_end, 1u32);
    b.for_range(cx.probe_start, cx.probe_end, DENSE_GROUP, |b, first, _| {
        let found: [Reg<S32>; DENSE_GROUP as usize] = std::array::from_fn(|k| {
            let o = b.add(first, k as u32);
            let valid = b.setp(Cmp::Lt, o, cx.probe_end);
            // Past the end of the last group: read the last probe (in bounds), masked below.
            let o = b.min(o, last);
            let key = probe_key(b, cx, o, cell);
            let mut ok = valid;
            let rel: [Reg<U32>; 3] = std::array::from_fn(|a| {
                let r = b.sub(key[a], origin[a]);
                let r = b.bitcast::<U32, S32>(r);
                // Negative offsets wrap to large values and fail the bound too.
                let inside = b.setp(Cmp::Lt, r, dims[a]);
                ok = b.and(ok, inside);
                r
            });
            let row = b.mad(rel[2], dims[1], rel[1]);
            let at = b.mad(row, dims[0], rel[0]);
            let v = b.mov(-1i32);
            b.guarded(ok, false, |b| {
                let a = b.index_addr(cells, at, 4);
                let got = b.ld::<S32>(Space::GlobalNc, a);
                b.mov_to(v, got);
            });
            v
        });
        compact_and_pair(b, cx, d, mx, sums, pt, &found);
    });
}

/// Parks the hits among `found` (−1: none) at the front of the thread's column of `d.group`,
/// in probe order, then pairs them: the lanes of a warp pair their own hits together.
pub(super) fn compact_and_pair(
    b: &mut KernelBuilder,
    cx: &Ctx,
    d: &DenseCtx,
    mx: &MixedRegs,
    sums: &Sums32,
    pt: &PointTerms,
    found: &[Reg<S32>],
) {
    const COLUMN_STRIDE: u32 = 4 * super::super::BLOCK;
    let col = b.shared_index(&d.group, d.tid);
    let at = b.mov(col);
    for v in found.iter() {
        let hit = b.setp(Cmp::Ne, *v, -1i32);
        b.guarded(hit, false, |b| b.st(Space::Shared, at, *v));
        let next = b.add(at, COLUMN_STRIDE);
        let next = b.selp(next, at, hit);
        b.mov_to(at, next);
    }
    let end = b.sub(at, col);
    b.for_range(0u32, end, COLUMN_STRIDE, |b, off, _| {
        let slot = b.add(col, off);
        let v = b.ld::<S32>(Space::Shared, slot);
        pair(b, cx, mx, sums, pt, v);
    });
}

/// Voxel `v` (a hit) paired with `xt`: the CPU's radius rule in f64, then the terms in f32.
fn pair(
    b: &mut KernelBuilder,
    cx: &Ctx,
    mx: &MixedRegs,
    sums: &Sums32,
    pt: &PointTerms,
    v: Reg<S32>,
) {
    let next = b.label("mixed_next");
    let vu = b.bitcast::<U32, S32>(v);
    let va: Addr = b.index_addr(cx.voxels, vu, 72).into();
    let ca: Addr = b.index_addr(mx.cov, vu, COV32_BYTES).into();
    let c4 = b.ld_v4::<F32>(Space::GlobalNc, ca.clone());
    let m4 = b.ld_v4::<F32>(Space::GlobalNc, ca.off(16));
    // The CPU's `(p−μ)² summed left to right > r²` test, bit for bit.
    let radius_test = |b: &mut KernelBuilder, d64: &[Reg<F64>; 3]| {
        let dd0 = b.mul(d64[0], d64[0]);
        let dd1 = b.mul(d64[1], d64[1]);
        let dd2 = b.mul(d64[2], d64[2]);
        let dd = b.add(dd0, dd1);
        let dd = b.add(dd, dd2);
        let far = b.setp(Cmp::Gt, dd, cx.radius_sq);
        b.bra_if(far, &next);
    };
    let mu64 = |b: &mut KernelBuilder| -> [Reg<F64>; 3] {
        std::array::from_fn(|k| {
            let m = b.ld::<F64>(Space::GlobalNc, va.off(8 * k as i64));
            b.sub(pt.xt[k], m)
        })
    };
    if mx.score64 {
        pair_score64(
            b,
            cx,
            mx,
            sums,
            pt,
            &va,
            [c4[0], c4[1], c4[2], c4[3], m4[0], m4[1]],
            &next,
        );
        b.place(&next);
        return;
    }
    let d: [Reg<F32>; 3] = match &pt.split {
        Some(split) => {
            // Radius mode (a uniform launch parameter) reads the f64 mean for the exact test.
            let near = b.label("mixed_radius_ok");
            b.bra_uni_unless(cx.radius, &near);
            let d64 = mu64(b);
            radius_test(b, &d64);
            b.place(&near);
            let m8 = b.ld_v4::<F32>(Space::GlobalNc, ca.off(32));
            let mu_hi = [m4[2], m4[3], m8[0]];
            let mu_lo = [m8[1], m8[2], m8[3]];
            std::array::from_fn(|k| {
                let h = b.sub(split[k].0, mu_hi[k]);
                let l = b.sub(split[k].1, mu_lo[k]);
                b.add(h, l)
            })
        }
        None => {
            let d64 = mu64(b);
            let near = b.label("mixed_radius_ok");
            b.bra_uni_unless(cx.radius, &near);
            radius_test(b, &d64);
            b.place(&near);
            d64.map(|v| b.cvt::<F32, F64>(v))
        }
    };
    b.mov_to(sums.found, 1u32);
    let c = [
        c4[0], c4[1], c4[2], c4[1], c4[3], m4[0], c4[2], m4[0], m4[1],
    ];
    let cd: [Reg<F32>; 3] = std::array::from_fn(|r| {
        let t = b.mul(c[3 * r], d[0]);
        let t = b.fma(c[3 * r + 1], d[1], t);
        b.fma(c[3 * r + 2], d[2], t)
    });
    let qf = b.mul(d[0], cd[0]);
    let qf = b.fma(d[1], cd[1], qf);
    let qf = b.fma(d[2], cd[2], qf);
    let arg = b.mul(qf, mx.arg_scale);
    // e ≥ 2⁻¹²⁶ (normal) and finite; false for NaN.
    let lo = b.setp(Cmp::Ge, arg, -126.0f32);
    let hi = b.setp(Cmp::Le, arg, 127.0f32);
    let ok = b.and(lo, hi);
    b.bra_unless(ok, &next);
    b.comment("mixed pair: e = 2^(q * arg_scale), then E, G, Q in f32");
    let e = b.ex2_approx_ftz(arg);
    let s = b.add(sums.e_sum, e);
    b.mov_to(sums.e_sum, s);
    let ecd = cd.map(|v| b.mul(e, v));
    for (gk, ek) in sums.g.iter().zip(ecd) {
        let s = b.add(*gk, ek);
        b.mov_to(*gk, s);
    }
    let t = ecd.map(|v| b.mul(v, mx.neg_d2));
    for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
        let s = b.fma(e, c[3 * i + j], sums.q[m]);
        let s = b.fma(t[i], cd[j], s);
        b.mov_to(sums.q[m], s);
    }
    b.place(&next);
}

/// [`pair`] with the score exact ([`super::super::Variant::score64`]): `d`, `C d`, `q`, the range
/// test and `e` as in [`super::super::point`] (f64 record, `exp_f64`), `E` in f64; `e` and `C d`
/// rounded to f32 for `G` and `Q` with the f32 inverse covariance `c32` (`C00 C01 C02 C11 C12
/// C22`). Branches to `next` for a rejected pair.
#[allow(clippy::too_many_arguments)]
fn pair_score64(
    b: &mut KernelBuilder,
    cx: &Ctx,
    mx: &MixedRegs,
    sums: &Sums32,
    pt: &PointTerms,
    va: &Addr,
    c32: [Reg<F32>; 6],
    next: &Label,
) {
    let w: [Reg<F64>; 9] =
        std::array::from_fn(|k| b.ld::<F64>(Space::GlobalNc, va.off(8 * k as i64)));
    let d = [0, 1, 2].map(|k| b.sub(pt.xt[k], w[k]));
    let near = b.label("mixed_radius_ok");
    b.bra_uni_unless(cx.radius, &near);
    let dd0 = b.mul(d[0], d[0]);
    let dd1 = b.mul(d[1], d[1]);
    let dd2 = b.mul(d[2], d[2]);
    let dd = b.add(dd0, dd1);
    let dd = b.add(dd, dd2);
    let far = b.setp(Cmp::Gt, dd, cx.radius_sq);
    b.bra_if(far, next);
    b.place(&near);
    b.mov_to(sums.found, 1u32);
    let c = [w[3], w[4], w[5], w[4], w[6], w[7], w[5], w[7], w[8]];
    let cd: [Reg<F64>; 3] = std::array::from_fn(|r| {
        let t = b.mul(c[3 * r], d[0]);
        let t = b.fma(c[3 * r + 1], d[1], t);
        b.fma(c[3 * r + 2], d[2], t)
    });
    let qf = b.mul(d[0], cd[0]);
    let qf = b.fma(d[1], cd[1], qf);
    let qf = b.fma(d[2], cd[2], qf);
    let arg = b.mul(cx.neg_half_d2, qf);
    let lo = b.setp(Cmp::Ge, arg, EXP_MIN_ARG);
    let hi = b.setp(Cmp::Le, arg, EXP_MAX_ARG);
    let ok = b.and(lo, hi);
    b.bra_unless(ok, next);
    b.comment("mixed pair, exact score: e in f64, then G, Q in f32");
    let e = exp_f64(b, arg);
    let e64 = sums.e64.expect("score64 sums carry E in f64");
    let s = b.add(e64, e);
    b.mov_to(e64, s);
    let e = b.cvt::<F32, F64>(e);
    let cd = cd.map(|v| b.cvt::<F32, F64>(v));
    let c = [
        c32[0], c32[1], c32[2], c32[1], c32[3], c32[4], c32[2], c32[4], c32[5],
    ];
    let ecd = cd.map(|v| b.mul(e, v));
    for (gk, ek) in sums.g.iter().zip(ecd) {
        let s = b.add(*gk, ek);
        b.mov_to(*gk, s);
    }
    let t = ecd.map(|v| b.mul(v, mx.neg_d2));
    for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
        let s = b.fma(e, c[3 * i + j], sums.q[m]);
        let s = b.fma(t[i], cd[j], s);
        b.mov_to(sums.q[m], s);
    }
}
