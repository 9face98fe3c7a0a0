//! Step 2 of `ndt_derivatives` in mixed precision ([`super::Variant::mixed`]), for the rounds
//! of a batch, which are bound by the per-pair and per-point arithmetic rather than by latency.
//!
//! # What stays f64, what becomes f32
//! - f64 (as in [`super::point`]): the transform `x' = R x + t` in the CPU's operation order and
//!   the voxel cell (so every point probes the CPU's voxels), `d = x' − μ` (coordinates of tens
//!   of metres; the difference is then below a few metres and rounds to f32 with a relative
//!   error of 2⁻²⁴), the radius test, and all sums across points (the 28 accumulators);
//! - f32: per pair `C d`, `q = dᵀCd`, `e = 2^(q · (−d2/2) log₂e)` with `ex2.approx.ftz` (pairs
//!   whose exponent is below −126 or not a number are skipped: `e < 2⁻¹²⁶` there), `E`, `G`,
//!   `Q`; per paired point the Jacobian and second-derivative columns from f32 copies of the ten
//!   matrices and the 28 contributions, each widened to f64 before it is added.
//!
//! Each contribution carries a relative error of a few 2⁻²⁴ instead of 2⁻⁵³; summed over the
//! points with random signs this moves score, gradient and Hessian by about 1e-7 of their
//! scale, far below what moves a converged pose by a millimetre. The records are not equal to
//! the f64 kernels' bit for bit (tests compare them with tolerances).
//!
//! # Memory
//! `cov32`: per voxel 8 f32, `C00 C01 C02 C11 C12 C22` and two pads (32 bytes: one 16-byte and
//! one 8-byte load), beside the f64 records whose means are still read.

use super::point::probe_key;
use super::{
    hessian_index, Ctx, DenseCtx, ACC_STRIDE, DENSE_GROUP, GRADIENT_INDEX, MAX_CELL_INDEX,
    SCORE_INDEX, TRANSLATION_AT, UPPER_PAIRS,
};
use crate::kernels::ndt::rotation::{apply_exact, load_matrix, sadd, to_reg, Entry, Pattern, Sym};
use crate::ptx::*;

/// Bytes per voxel of the `cov32` table.
pub const COV32_BYTES: u32 = 32;
/// f32 values per voxel of the `cov32` table.
pub const COV32_VALUES: usize = 8;

/// The mixed variant's parameter and shared array.
pub(super) struct Mixed {
    /// The ten matrices' stored entries rounded to f32, at `9 m + e` like `terms`.
    terms32: SharedArray<F32>,
    cov32: Param<U64>,
}

/// Registers the per-point code reads.
pub(super) struct MixedRegs {
    terms32: SharedArray<F32>,
    cov: Reg<U64>,
    /// `−d2/2 · log₂e`: `e = 2^(q · arg_scale)`.
    arg_scale: Reg<F32>,
    neg_d2: Reg<F32>,
}

impl Mixed {
    /// Declares the `cov32` parameter and the f32 terms.
    pub(super) fn declare(b: &mut KernelBuilder) -> Mixed {
        Mixed {
            terms32: b.shared_array::<F32>("terms32", 90),
            cov32: b.param::<U64>("cov32"),
        }
    }

    /// Thread 0: the stored entries of the ten matrices, rounded to f32.
    pub(super) fn store_terms(&self, b: &mut KernelBuilder, mats: &[[Sym; 9]; 10]) {
        for (m, mat) in mats.iter().enumerate() {
            for (e, s) in mat.iter().enumerate() {
                if let Sym::Reg { r, .. } = s {
                    let f = b.cvt::<F32, F64>(*r);
                    b.st(Space::Shared, self.terms32.at((9 * m + e) as u32), f);
                }
            }
        }
    }

    /// The registers of the per-point code (once per request).
    pub(super) fn regs(&self, b: &mut KernelBuilder, cx: &Ctx) -> MixedRegs {
        let cov = b.global_ptr(&self.cov32);
        let s = b.mul(cx.neg_half_d2, std::f64::consts::LOG2_E);
        MixedRegs {
            terms32: self.terms32.clone(),
            cov,
            arg_scale: b.cvt::<F32, F64>(s),
            neg_d2: b.cvt::<F32, F64>(cx.neg_d2),
        }
    }
}

/// The per-point sums over its paired voxels, f32.
struct Sums32 {
    e_sum: Reg<F32>,
    g: [Reg<F32>; 3],
    /// `Q00 Q01 Q02 Q11 Q12 Q22`.
    q: [Reg<F32>; 6],
    found: Reg<U32>,
}

/// Step 2 for point `i` of the request.
pub(super) fn point(b: &mut KernelBuilder, cx: &Ctx, mx: &MixedRegs, i: Reg<U32>) {
    b.comment("mixed point: load, x' = R x + t in f64 (CPU order), voxel cell");
    let gi = b.add(cx.first, i);
    let pa: Addr = b.index_addr(cx.points, gi, 12).into();
    let x32: [Reg<F32>; 3] =
        std::array::from_fn(|k| b.ld::<F32>(Space::GlobalNc, pa.off(4 * k as i64)));
    let x: [Reg<F64>; 3] = std::array::from_fn(|k| b.cvt::<F64, F32>(x32[k]));
    let rot = load_matrix(b, &cx.terms, &cx.pattern, 0);
    let r = apply_exact(b, &rot, x.map(Sym::reg));
    let mut inside: Option<Reg<Pred>> = None;
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
    let inside = inside.expect("three axes");
    let d = cx
        .dense
        .as_ref()
        .expect("the mixed variant reads the dense cell table");
    b.if_then(inside, |b| {
        let sums = Sums32 {
            e_sum: b.mov(0.0f32),
            g: [(); 3].map(|_| b.mov(0.0f32)),
            q: [(); 6].map(|_| b.mov(0.0f32)),
            found: b.mov(0u32),
        };
        probes(b, cx, d, mx, &sums, xt, cell);
        let paired = b.setp(Cmp::Ne, sums.found, 0u32);
        b.if_then(paired, |b| add_point(b, cx, mx, x32, &sums));
    });
}

/// The dense-table probes in groups of [`DENSE_GROUP`], hits compacted into the thread's
/// column of `d.group` (as the compact path of `dense.rs`), then the pairs in probe order.
fn probes(
    b: &mut KernelBuilder,
    cx: &Ctx,
    d: &DenseCtx,
    mx: &MixedRegs,
    sums: &Sums32,
    xt: [Reg<F64>; 3],
    cell: [Reg<S32>; 3],
) {
    b.comment("dense cell table: a group of probes loads its voxel indices at once");
    let cells = b.ld_param(&d.params.cells);
    let cells = b.to_global(cells);
    let origin = d.params.origin.clone().map(|p| b.ld_param(&p));
    let dims = d.params.dims.clone().map(|p| b.ld_param(&p));
    let last = b.sub(cx.probe_end, 1u32);
    const COLUMN_STRIDE: u32 = 4 * super::BLOCK;
    let col = b.shared_index(&d.group, d.tid);
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
            pair(b, cx, mx, sums, xt, v);
        });
    });
}

/// Voxel `v` (a hit) paired with `xt`: the CPU's radius rule in f64, then the terms in f32.
fn pair(
    b: &mut KernelBuilder,
    cx: &Ctx,
    mx: &MixedRegs,
    sums: &Sums32,
    xt: [Reg<F64>; 3],
    v: Reg<S32>,
) {
    let next = b.label("mixed_next");
    let vu = b.bitcast::<U32, S32>(v);
    let va: Addr = b.index_addr(cx.voxels, vu, 72).into();
    let mu: [Reg<F64>; 3] =
        std::array::from_fn(|k| b.ld::<F64>(Space::GlobalNc, va.off(8 * k as i64)));
    let ca: Addr = b.index_addr(mx.cov, vu, COV32_BYTES).into();
    let c4 = b.ld_v4::<F32>(Space::GlobalNc, ca.clone());
    let c2 = b.ld_v2::<F32>(Space::GlobalNc, ca.off(16));
    let d64 = [0, 1, 2].map(|k| b.sub(xt[k], mu[k]));
    // Radius mode: the CPU's `(p−μ)² summed left to right > r²` test, bit for bit (the branch
    // is uniform: a launch parameter).
    let near = b.label("mixed_radius_ok");
    b.bra_uni_unless(cx.radius, &near);
    let dd0 = b.mul(d64[0], d64[0]);
    let dd1 = b.mul(d64[1], d64[1]);
    let dd2 = b.mul(d64[2], d64[2]);
    let dd = b.add(dd0, dd1);
    let dd = b.add(dd, dd2);
    let far = b.setp(Cmp::Gt, dd, cx.radius_sq);
    b.bra_if(far, &next);
    b.place(&near);
    b.mov_to(sums.found, 1u32);
    let d = d64.map(|v| b.cvt::<F32, F64>(v));
    let c = [
        c4[0], c4[1], c4[2], c4[1], c4[3], c2[0], c4[2], c2[0], c2[1],
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

/// A matrix entry for the f32 maths: zero, a literal or a register.
#[derive(Clone, Copy)]
enum E32 {
    Zero,
    Lit(f32),
    Reg(Reg<F32>),
}

/// Matrix `m` of the f32 terms, following `pattern`.
fn load_matrix32(
    b: &mut KernelBuilder,
    terms32: &SharedArray<F32>,
    pattern: &Pattern,
    m: usize,
) -> [E32; 9] {
    std::array::from_fn(|e| match pattern[m][e] {
        Entry::Zero => E32::Zero,
        Entry::Lit(v) => E32::Lit(v as f32),
        Entry::Stored => E32::Reg(b.ld::<F32>(Space::Shared, terms32.at((9 * m + e) as u32))),
    })
}

/// `m · x` with FMAs, skipping known zeros; `None` is a row known to be zero.
fn apply32(b: &mut KernelBuilder, m: &[E32; 9], x: [Reg<F32>; 3]) -> [Option<Reg<F32>>; 3] {
    std::array::from_fn(|row| {
        let mut acc: Option<Reg<F32>> = None;
        for (k, &xk) in x.iter().enumerate() {
            acc = match (m[3 * row + k], acc) {
                (E32::Zero, a) => a,
                (E32::Lit(v), None) => Some(b.mul(xk, v)),
                (E32::Lit(v), Some(a)) => Some(b.fma(xk, v, a)),
                (E32::Reg(r), None) => Some(b.mul(r, xk)),
                (E32::Reg(r), Some(a)) => Some(b.fma(r, xk, a)),
            };
        }
        acc
    })
}

/// `Σ a_k v_k` over the entries of `a` that are not known zero.
fn dot32(b: &mut KernelBuilder, a: &[Option<Reg<F32>>; 3], v: [Reg<F32>; 3]) -> Option<Reg<F32>> {
    let mut s: Option<Reg<F32>> = None;
    for k in 0..3 {
        if let Some(ak) = a[k] {
            s = Some(match s {
                None => b.mul(ak, v[k]),
                Some(t) => b.fma(ak, v[k], t),
            });
        }
    }
    s
}

/// A paired point's 28 contributions in f32, each widened and added to its f64 accumulator.
fn add_point(b: &mut KernelBuilder, cx: &Ctx, mx: &MixedRegs, x: [Reg<F32>; 3], s: &Sums32) {
    b.comment("mixed paired point: contributions in f32, accumulated in f64");
    let c1 = b.add(cx.count, 1u32);
    b.mov_to(cx.count, c1);
    let acc = |b: &mut KernelBuilder, idx: usize, v: Reg<F32>| {
        let w = b.cvt::<F64, F32>(v);
        match cx.acc_shared {
            Some(col) => {
                let a = Addr::from(col).off(idx as i64 * ACC_STRIDE);
                let old = b.ld::<F64>(Space::Shared, a.clone());
                let sum = b.add(old, w);
                b.st(Space::Shared, a, sum);
            }
            None => {
                let sum = b.add(cx.acc[idx], w);
                b.mov_to(cx.acc[idx], sum);
            }
        }
    };
    let (g, q) = (s.g, s.q);
    acc(b, SCORE_INDEX, s.e_sum);
    let ja: [[Option<Reg<F32>>; 3]; 3] = std::array::from_fn(|k| {
        let m = load_matrix32(b, &mx.terms32, &cx.pattern, 1 + k);
        apply32(b, &m, x)
    });
    for k in 0..3 {
        acc(b, GRADIENT_INDEX + k, g[k]);
        if let Some(v) = dot32(b, &ja[k], g) {
            acc(b, GRADIENT_INDEX + 3 + k, v);
        }
    }
    for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
        acc(b, hessian_index(i, j), q[m]);
    }
    let qm = [q[0], q[1], q[2], q[1], q[3], q[4], q[2], q[4], q[5]];
    // Q j_k, rows of Q times the entries of j_k that are not known zero.
    let mut qj = [[None::<Reg<F32>>; 3]; 3];
    for k in 0..3 {
        for r in 0..3 {
            let mut t: Option<Reg<F32>> = None;
            for c in 0..3 {
                if let Some(jc) = ja[k][c] {
                    t = Some(match t {
                        None => b.mul(qm[3 * r + c], jc),
                        Some(a) => b.fma(qm[3 * r + c], jc, a),
                    });
                }
            }
            let v = t.unwrap_or_else(|| b.mov(0.0f32));
            qj[k][r] = Some(v);
            acc(b, hessian_index(r, 3 + k), v);
        }
    }
    let qj: [[Reg<F32>; 3]; 3] =
        qj.map(|row| row.map(|v| v.expect("every row of Q j_k is set above")));
    b.comment("mixed angular Hessian block: j_k . (Q j_l) + h_kl . G");
    for (m, (k, l)) in UPPER_PAIRS.into_iter().enumerate() {
        let hm = load_matrix32(b, &mx.terms32, &cx.pattern, 4 + m);
        let h = apply32(b, &hm, x);
        let a = dot32(b, &ja[k], qj[l]);
        let c = dot32(b, &h, g);
        let v = match (a, c) {
            (Some(a), Some(c)) => b.add(a, c),
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => continue,
        };
        acc(b, hessian_index(3 + k, 3 + l), v);
    }
}
