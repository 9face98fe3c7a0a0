//! Step 2 of `ndt_derivatives` (see [`super`]): one source point — transform,
//! voxel, hash probes of the search mode's offsets, per-pair sums `E`, `G`, `Q`, and the point's
//! score, gradient and Hessian contributions added to the thread's accumulators.

use super::{
    hessian_index, Ctx, ACC_STRIDE, GRADIENT_INDEX, MAX_CELL_INDEX, SCORE_INDEX, TRANSLATION_AT,
    UPPER_PAIRS,
};
use crate::kernels::ndt::fp64::{exp_f64, EXP_MAX_ARG, EXP_MIN_ARG};
use crate::kernels::ndt::rotation::*;
use crate::ptx::*;

/// Step 2 for point `i` of the request.
pub(super) fn point(b: &mut KernelBuilder, cx: &Ctx, i: Reg<U32>) {
    let (x, xt, cell, inside) = transform(b, cx, i);
    b.if_then(inside, |b| neighbours(b, cx, x, xt, cell));
}

/// The point, its transform and its voxel cell (and whether the cell is in range).
#[allow(clippy::type_complexity)]
pub(super) fn transform(
    b: &mut KernelBuilder,
    cx: &Ctx,
    i: Reg<U32>,
) -> ([Reg<F64>; 3], [Reg<F64>; 3], [Reg<S32>; 3], Reg<Pred>) {
    b.comment("point: load, x' = R x + t (CPU order), voxel cell");
    let gi = b.add(cx.first, i);
    let pa: Addr = b.index_addr(cx.points, gi, 12).into();
    let x: [Reg<F64>; 3] = std::array::from_fn(|k| {
        let v = b.ld::<F32>(Space::GlobalNc, pa.off(4 * k as i64));
        b.cvt::<F64, F32>(v)
    });
    let rot = load_matrix(b, &cx.terms, &cx.pattern, 0);
    let r = apply_exact(b, &rot, x.map(Sym::reg));
    let mut inside: Option<Reg<Pred>> = None;
    // Per axis: the transformed coordinate and its voxel index.
    let axes: [(Reg<F64>, Reg<S32>); 3] = std::array::from_fn(|k| {
        let t = b.ld::<F64>(Space::Shared, cx.terms.at(TRANSLATION_AT + k as u32));
        let s = sadd(b, r[k], Sym::reg(t));
        let xt = to_reg(b, s);
        let scaled = b.mul(xt, cx.inv_resolution);
        let f = b.cvt_round::<F64, F64>(Round::Rmi, scaled);
        let a = b.abs(f);
        // False for NaN too, as the CPU's `!(f.abs() < MAX)`.
        let ok = b.setp(Cmp::Lt, a, MAX_CELL_INDEX);
        inside = Some(match inside {
            None => ok,
            Some(p) => b.and(p, ok),
        });
        (xt, b.cvt::<S32, F64>(f))
    });
    let (xt, cell) = (axes.map(|a| a.0), axes.map(|a| a.1));
    (x, xt, cell, inside.expect("three axes"))
}

/// Which of a paired point's contributions a thread adds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// All of them (one thread per point).
    All,
    /// Count, score, gradient, the translation block and the mixed block of the Hessian.
    First,
    /// The angular block of the Hessian.
    Second,
}

/// The per-point sums over its paired voxels (registers updated in probe order).
pub(super) struct PairSums {
    pub(super) e_sum: Reg<F64>,
    pub(super) g: [Reg<F64>; 3],
    /// `Q00 Q01 Q02 Q11 Q12 Q22`.
    pub(super) q: [Reg<F64>; 6],
    pub(super) found: Reg<U32>,
}

/// The probes of one point and, when a voxel was paired, its contributions.
fn neighbours(
    b: &mut KernelBuilder,
    cx: &Ctx,
    x: [Reg<F64>; 3],
    xt: [Reg<F64>; 3],
    cell: [Reg<S32>; 3],
) {
    b.comment("probes of the search mode: voxel lookup, pair sums E G Q");
    let sums = PairSums {
        e_sum: b.mov(0.0f64),
        g: [(); 3].map(|_| b.mov(0.0f64)),
        q: [(); 6].map(|_| b.mov(0.0f64)),
        found: b.mov(0u32),
    };
    match &cx.dense {
        Some(d) => super::dense::dense_probes(b, cx, d, &sums, xt, cell),
        None => {
            b.comment("hash lookups, one probe after the other");
            b.for_range(cx.probe_start, cx.probe_end, 1u32, |b, o, _| {
                let key = probe_key(b, cx, o, cell);
                let v = probe(b, cx, key);
                pair(b, cx, &sums, xt, v);
            });
        }
    }
    let paired = b.setp(Cmp::Ne, sums.found, 0u32);
    b.if_then(paired, |b| match &cx.cross {
        Some(c) => {
            // r = x' − t: the rotated point (to rounding), for the cross products.
            let r = [0, 1, 2].map(|k| {
                let t = b.ld::<F64>(Space::Shared, cx.terms.at(TRANSLATION_AT + k as u32));
                b.sub(xt[k], t)
            });
            super::cross::add_point(b, cx, c, r, &sums)
        }
        None => add_point(b, cx, x, &sums),
    });
}

/// The voxel key of probe `o` (an index into the probe table) around `cell`.
pub(super) fn probe_key(
    b: &mut KernelBuilder,
    cx: &Ctx,
    o: Reg<U32>,
    cell: [Reg<S32>; 3],
) -> [Reg<S32>; 3] {
    let wa = b.shared_index(&cx.probes, o);
    let word = b.ld::<U32>(Space::Shared, wa);
    std::array::from_fn(|k| {
        // Byte k of the word (shift and mask: the interpreter has no `bfe`).
        let shifted = if k == 0 {
            word
        } else {
            b.shr(word, 8 * k as u32)
        };
        let biased = b.and(shifted, 0xFFu32);
        let biased = b.bitcast::<S32, U32>(biased);
        let c1 = b.add(cell[k], biased);
        b.sub(c1, 1i32)
    })
}

/// Voxel `v` (−1: none) paired with the transformed point `xt`: adds its terms to `sums`
/// unless radius mode rejects it or its exponent is out of range (the CPU's rules).
pub(super) fn pair(
    b: &mut KernelBuilder,
    cx: &Ctx,
    sums: &PairSums,
    xt: [Reg<F64>; 3],
    v: Reg<S32>,
) {
    let next = b.label("probe_next");
    let miss = b.setp(Cmp::Eq, v, -1i32);
    b.bra_if(miss, &next);
    let w = super::wide::load_record(b, cx, v);
    pair_terms(b, cx, sums, xt, &w, &next);
    b.place(&next);
}

/// The terms of the voxel record `w` paired with `xt` (see [`pair`]); branches to `next` when
/// radius mode rejects the pair or its exponent is out of range.
pub(super) fn pair_terms(
    b: &mut KernelBuilder,
    cx: &Ctx,
    sums: &PairSums,
    xt: [Reg<F64>; 3],
    w: &[Reg<F64>; 9],
    next: &Label,
) {
    let d = [0, 1, 2].map(|k| b.sub(xt[k], w[k]));
    // Radius mode: the CPU's `(p−μ)² summed left to right > r²` test, bit for bit.
    let radius_test = |b: &mut KernelBuilder| {
        let dd0 = b.mul(d[0], d[0]);
        let dd1 = b.mul(d[1], d[1]);
        let dd2 = b.mul(d[2], d[2]);
        let dd = b.add(dd0, dd1);
        let dd = b.add(dd, dd2);
        b.setp(Cmp::Gt, dd, cx.radius_sq)
    };
    if cx.dense.as_ref().is_some_and(|d| d.compact) {
        // Only radius mode pays for the test (the branch is uniform: a launch parameter).
        let near = b.label("radius_ok");
        b.bra_uni_unless(cx.radius, &near);
        let far = radius_test(b);
        b.bra_if(far, next);
        b.place(&near);
    } else {
        let far = radius_test(b);
        let skip = b.and(far, cx.radius);
        b.bra_if(skip, next);
    }
    b.mov_to(sums.found, 1u32);
    // C = [[c00 c01 c02] [c01 c11 c12] [c02 c12 c22]] from w[3..9].
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
    b.comment("pair: e = exp(-d2 q / 2), then E, G, Q");
    let e = exp_f64(b, arg);
    let s = b.add(sums.e_sum, e);
    b.mov_to(sums.e_sum, s);
    let ecd = cd.map(|v| b.mul(e, v));
    for (gk, ek) in sums.g.iter().zip(ecd) {
        let s = b.add(*gk, ek);
        b.mov_to(*gk, s);
    }
    let t = ecd.map(|v| b.mul(v, cx.neg_d2));
    for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
        let s = b.fma(e, c[3 * i + j], sums.q[m]);
        let s = b.fma(t[i], cd[j], s);
        b.mov_to(sums.q[m], s);
    }
}

/// Hash probe for `key`: the voxel index, or −1 (see `ndt::voxel_hash` for hash and probing).
fn probe(b: &mut KernelBuilder, cx: &Ctx, key: [Reg<S32>; 3]) -> Reg<S32> {
    b.comment("hash probe: mix the cell key, linear probing to the key or an empty slot");
    let k = key.map(|r| b.bitcast::<U32, S32>(r));
    let h0 = b.mul(k[0], 0x9E37_79B1u32);
    let h1 = b.mul(k[1], 0x85EB_CA77u32);
    let h2 = b.mul(k[2], 0xC2B2_AE3Du32);
    let h = b.xor(h0, h1);
    let h = b.xor(h, h2);
    let s = b.shr(h, 16u32);
    let h = b.xor(h, s);
    let h = b.mul(h, 0x7FEB_352Du32);
    let s = b.shr(h, 15u32);
    let h = b.xor(h, s);
    let at = b.and(h, cx.slot_mask);
    let voxel = b.mov(-1i32);
    b.loop_forever(|b, brk, _| {
        let a = b.index_addr(cx.slots, at, 16);
        let s = b.ld_v4::<S32>(Space::GlobalNc, a);
        let empty = b.setp(Cmp::Eq, s[3], -1i32);
        b.bra_if(empty, brk);
        let ex = b.setp(Cmp::Eq, s[0], key[0]);
        let ey = b.setp(Cmp::Eq, s[1], key[1]);
        let ez = b.setp(Cmp::Eq, s[2], key[2]);
        let same = b.and(ex, ey);
        let same = b.and(same, ez);
        b.guarded(same, false, |b| b.mov_to(voxel, s[3]));
        b.bra_if(same, brk);
        let nx = b.add(at, 1u32);
        let nx = b.and(nx, cx.slot_mask);
        b.mov_to(at, nx);
    });
    voxel
}

/// Adds a paired point's score, gradient and Hessian sums (`E`, `G`, `Q` over its voxels).
fn add_point(b: &mut KernelBuilder, cx: &Ctx, x: [Reg<F64>; 3], sums: &PairSums) {
    add_point_part(b, cx, x, sums, Part::All);
}

/// [`add_point`], or one [`Part`] of it.
pub(super) fn add_point_part(
    b: &mut KernelBuilder,
    cx: &Ctx,
    x: [Reg<F64>; 3],
    sums: &PairSums,
    part: Part,
) {
    let (first, second) = (part != Part::Second, part != Part::First);
    let (e_sum, g, q) = (sums.e_sum, sums.g, sums.q);
    b.comment("paired point: score, gradient and Hessian contributions");
    if first {
        let c1 = b.add(cx.count, 1u32);
        b.mov_to(cx.count, c1);
    }
    let acc = |b: &mut KernelBuilder, idx: usize, v: Reg<F64>| match cx.acc_shared {
        Some(col) => {
            let a = Addr::from(col).off(idx as i64 * ACC_STRIDE);
            let old = b.ld::<F64>(Space::Shared, a.clone());
            let s = b.add(old, v);
            b.st(Space::Shared, a, s);
        }
        None => {
            let s = b.add(cx.acc[idx], v);
            b.mov_to(cx.acc[idx], s);
        }
    };
    if first {
        acc(b, SCORE_INDEX, e_sum);
    }
    // Jacobian columns j_k = (∂R/∂θ_k) x.
    let mut ja = [[None; 3]; 3];
    for (k, jk) in ja.iter_mut().enumerate() {
        let m = load_matrix(b, &cx.terms, &cx.pattern, 1 + k);
        *jk = apply_fma(b, &m, x);
    }
    // dot(a, v) over the rows of `a` that are not known zero.
    let dot =
        |b: &mut KernelBuilder, a: &[Option<Reg<F64>>; 3], v: [Reg<F64>; 3]| -> Option<Reg<F64>> {
            let mut s: Option<Reg<F64>> = None;
            for k in 0..3 {
                if let Some(ak) = a[k] {
                    s = Some(match s {
                        None => b.mul(ak, v[k]),
                        Some(t) => b.fma(ak, v[k], t),
                    });
                }
            }
            s
        };
    for k in 0..3 {
        if !first {
            break;
        }
        acc(b, GRADIENT_INDEX + k, g[k]);
        if let Some(v) = dot(b, &ja[k], g) {
            acc(b, GRADIENT_INDEX + 3 + k, v);
        }
    }
    // Q as a full symmetric matrix.
    let qm = [q[0], q[1], q[2], q[1], q[3], q[4], q[2], q[4], q[5]];
    for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
        if first {
            acc(b, hessian_index(i, j), q[m]);
        }
    }
    // Q j_k (3-vectors; rows of Q times the non-zero entries of j_k).
    let mut qj = [[cx.inv_resolution; 3]; 3];
    #[allow(clippy::needless_range_loop)] // k and r index ja, qm and qj together
    for k in 0..3 {
        for r in 0..3 {
            let row = [Some(qm[3 * r]), Some(qm[3 * r + 1]), Some(qm[3 * r + 2])];
            let jk = ja[k].map(|v| v.unwrap_or(cx.inv_resolution));
            // Multiply only where j_k is not known zero: mask the row instead.
            let masked = [0, 1, 2].map(|c| if ja[k][c].is_some() { row[c] } else { None });
            qj[k][r] = dot(b, &masked, jk).unwrap_or_else(|| b.mov(0.0f64));
        }
        for r in 0..3 {
            if first {
                acc(b, hessian_index(r, 3 + k), qj[k][r]);
            }
        }
    }
    if !second {
        return;
    }
    b.comment("angular Hessian block: j_k . (Q j_l) + h_kl . G");
    // Angular block: j_k · (Q j_l) + h_kl · G.
    for (m, (k, l)) in UPPER_PAIRS.into_iter().enumerate() {
        let hm = load_matrix(b, &cx.terms, &cx.pattern, 4 + m);
        let h = apply_fma(b, &hm, x);
        let a = dot(b, &ja[k], qj[l]);
        let c = dot(b, &h, g);
        let v = match (a, c) {
            (Some(a), Some(c)) => b.add(a, c),
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => continue,
        };
        acc(b, hessian_index(3 + k, 3 + l), v);
    }
}
