//! Step 2 of `ndt_derivatives` in mixed precision ([`super::Variant::mixed`]), for the rounds
//! of a batch, which are bound by the per-pair and per-point arithmetic rather than by latency.
//!
//! # What stays f64, what becomes f32
//! - f64 (as in `point.rs`): the transform `x' = R x + t` in the CPU's operation order and
//!   the voxel cell (so every point probes the CPU's voxels), `d = x' − μ` (coordinates of tens
//!   of metres; the difference is then below a few metres and rounds to f32 with a relative
//!   error of 2⁻²⁴), the radius test, and all sums across points (the 28 accumulators);
//! - f32: per pair `C d`, `q = dᵀCd`, `e = 2^(q · (−d2/2) log₂e)` with `ex2.approx.ftz` (pairs
//!   whose exponent is below −126 or not a number are skipped: `e < 2⁻¹²⁶` there), `E`, `G`,
//!   `Q`; per paired point the 28 contributions, each widened to f64 before it is added (or,
//!   with [`super::Variant::acc32`], summed per thread in f32 and widened for the block
//!   reduction).
//!
//! # Jacobian without the derivative matrices
//! With `R = Rx(a) Ry(b) Rz(c)` and `r = R x`, each first derivative is a cross product:
//! `j_a = e_x × r`, `j_b = u_b × r`, `j_c = u_c × r` with `u_b = Rx e_y = (0, cos a, sin a)` and
//! `u_c = Rx Ry e_z = (sin b, −sin a cos b, cos a cos b)`, and the second derivatives are
//! `h_kl = u_k × j_l` (k ≤ l in the order a, b, c; `u_a = e_x`), so `h_kl · G = j_l · (G × u_k)`.
//! Thread 0 stores `u_b`, `u_c` once per request (the CPU's matrices give the same values up to
//! rounding); a paired point then needs about 90 f32 operations for all 28 contributions.
//!
//! # Direct7 probes at fixed offsets ([`super::Variant::fast_probes`])
//! For the Direct7 table (a uniform test of the launch's probe range) and a cell at least one
//! cell inside the dense table's box, the seven entries lie at the cell's entry ±1, ±`dims_x`,
//! ±`dims_x · dims_y`: seven loads at fixed offsets instead of a key, three bounds and an index
//! per probe. Other cells and search modes take the bounded path. The same entries either way.
//!
//! Each contribution carries a relative error of a few 2⁻²⁴ instead of 2⁻⁵³; summed over the
//! points with random signs this moves score, gradient and Hessian by about 1e-7 of their
//! scale, far below what moves a converged pose by a millimetre. The records are not equal to
//! the f64 kernels' bit for bit (tests compare them with tolerances).
//!
//! # Memory
//! `cov32`: per voxel 12 f32 (48 bytes, three 16-byte loads): `C00 C01 C02 C11 C12 C22`, then
//! the mean split as `μ_hi = f32(μ)`, `μ_lo = f32(μ − μ_hi)` per axis (`μx_hi μy_hi μz_hi μx_lo
//! μy_lo μz_lo`), beside the f64 records (whose means the f64 difference and radius mode read).
//!
//! # `x' − μ` from double-f32 splits ([`super::Variant::hilo`])
//! With `x'_hi = f32(x')`, `x'_lo = f32(x' − x'_hi)` once per point, `d = (x'_hi − μ_hi) +
//! (x'_lo − μ_lo)`: the first difference is exact when the two lie within a factor of two of
//! each other (a pair's point and mean are at most a few metres apart) and otherwise both are
//! small, so `d` carries an absolute error of about one f32 ulp of `|d|` — as good as rounding
//! the f64 difference — with three f32 subtractions and one addition per axis.

use super::{Ctx, MAX_CELL_INDEX, TRANSLATION_AT};
use crate::kernels::ndt::rotation::{apply_exact, load_matrix, sadd, to_reg, Sym};
use crate::ptx::*;

mod contrib;
mod pair;

use contrib::add_point;
use pair::{compact_and_pair, probes};

/// Bytes per voxel of the `cov32` table.
pub const COV32_BYTES: u32 = 48;
/// f32 values per voxel of the `cov32` table.
pub const COV32_VALUES: usize = 12;

/// Index of `u_b[1]` .. `u_c[2]` in `terms32` (`u_b[0]` is 0).
const UB1: u32 = 0;
const UC0: u32 = 2;

/// The mixed variant's parameter, shared array and switches.
pub(super) struct Mixed {
    /// `u_b[1], u_b[2], u_c[0], u_c[1], u_c[2]` in f32.
    terms32: SharedArray<F32>,
    cov32: Param<U64>,
    acc32: bool,
    fast_probes: bool,
    hilo: bool,
    score64: bool,
}

/// Registers the per-point code reads (set once per request, after the barrier).
pub(super) struct MixedRegs {
    cov: Reg<U64>,
    /// `−d2/2 · log₂e`: `e = 2^(q · arg_scale)`.
    arg_scale: Reg<F32>,
    neg_d2: Reg<F32>,
    /// `u_b` (first entry 0) and `u_c`.
    ub: [Reg<F32>; 2],
    uc: [Reg<F32>; 3],
    /// [`super::Variant::acc32`]: the thread's 28 sums.
    acc32: Option<[Reg<F32>; 28]>,
    /// [`super::Variant::fast_probes`]: the Direct7 launch test and the dense table's
    /// geometry.
    fast: Option<Fast>,
    hilo: bool,
    /// [`super::Variant::score64`] with [`super::Variant::acc32`]: the score's f64 sum.
    score_acc: Option<Reg<F64>>,
    score64: bool,
}

/// What the Direct7 fast path needs.
struct Fast {
    direct7: Reg<Pred>,
    cells: Reg<U64>,
    origin: [Reg<S32>; 3],
    /// `dims − 2` per axis (interior test: `rel − 1 < dims − 2` unsigned).
    inner: [Reg<U32>; 3],
    dims: [Reg<U32>; 3],
    /// Byte strides of one cell in y and z.
    sy: Reg<U64>,
    sz: Reg<U64>,
}

impl Mixed {
    /// Declares the `cov32` parameter and the f32 terms.
    pub(super) fn declare(b: &mut KernelBuilder, v: super::Variant) -> Mixed {
        Mixed {
            terms32: b.shared_array::<F32>("terms32", 8),
            cov32: b.param::<U64>("cov32"),
            acc32: v.acc32,
            fast_probes: v.fast_probes,
            hilo: v.hilo && !v.score64,
            score64: v.score64,
        }
    }

    /// Thread 0: `u_b` and `u_c` from the request's sines and cosines `w` (`sin a, cos a,
    /// sin b, cos b, ...`), rounded to f32.
    pub(super) fn store_terms(&self, b: &mut KernelBuilder, w: &[Reg<F64>]) {
        let (sa, ca, sb, cb) = (w[0], w[1], w[2], w[3]);
        let sacb = b.mul(sa, cb);
        let uc1 = b.neg(sacb);
        let uc2 = b.mul(ca, cb);
        for (k, v) in [ca, sa, sb, uc1, uc2].into_iter().enumerate() {
            let f = b.cvt::<F32, F64>(v);
            b.st(Space::Shared, self.terms32.at(UB1 + k as u32), f);
        }
    }

    /// The registers of the per-point code (once per request).
    pub(super) fn regs(&self, b: &mut KernelBuilder, cx: &Ctx) -> MixedRegs {
        let cov = b.global_ptr(&self.cov32);
        let s = b.mul(cx.neg_half_d2, std::f64::consts::LOG2_E);
        let ld = |b: &mut KernelBuilder, k: u32| b.ld::<F32>(Space::Shared, self.terms32.at(k));
        let ub = [ld(b, UB1), ld(b, UB1 + 1)];
        let uc = [ld(b, UC0), ld(b, UC0 + 1), ld(b, UC0 + 2)];
        let fast = match (&cx.dense, self.fast_probes) {
            (Some(d), true) => {
                let is0 = b.setp(Cmp::Eq, cx.probe_start, super::PROBES_DIRECT7);
                let count = b.sub(cx.probe_end, cx.probe_start);
                let is7 = b.setp(Cmp::Eq, count, 7u32);
                let cells = b.ld_param(&d.params.cells);
                let dims = d.params.dims.clone().map(|p| b.ld_param(&p));
                let dxy = b.mul(dims[0], dims[1]);
                Some(Fast {
                    direct7: b.and(is0, is7),
                    cells: b.to_global(cells),
                    origin: d.params.origin.clone().map(|p| b.ld_param(&p)),
                    inner: dims.map(|v| b.sub(v, 2u32)),
                    dims,
                    sy: b.mul_wide(dims[0], 4u32),
                    sz: b.mul_wide(dxy, 4u32),
                })
            }
            _ => None,
        };
        MixedRegs {
            cov,
            arg_scale: b.cvt::<F32, F64>(s),
            neg_d2: b.cvt::<F32, F64>(cx.neg_d2),
            ub,
            uc,
            acc32: self.acc32.then(|| [(); 28].map(|_| b.mov(0.0f32))),
            fast,
            hilo: self.hilo,
            score_acc: (self.score64 && self.acc32).then(|| b.mov(0.0f64)),
            score64: self.score64,
        }
    }
}

impl MixedRegs {
    /// The f32 sums ([`super::Variant::acc32`]), for the block reduction.
    pub(super) fn acc32(&self) -> Option<&[Reg<F32>; 28]> {
        self.acc32.as_ref()
    }

    /// The score's f64 sum when the other sums are f32 ([`super::Variant::score64`] with
    /// [`super::Variant::acc32`]): it replaces `acc32()[0]` in the block reduction.
    pub(super) fn score_acc(&self) -> Option<Reg<F64>> {
        self.score_acc
    }
}

/// What a pair needs of its point: `x'` in f64 and, with [`super::Variant::hilo`], its
/// double-f32 split per axis.
struct PointTerms {
    xt: [Reg<F64>; 3],
    split: Option<[(Reg<F32>, Reg<F32>); 3]>,
}

/// The per-point sums over its paired voxels, f32.
struct Sums32 {
    e_sum: Reg<F32>,
    /// [`super::Variant::score64`]: `E` in f64 (then `e_sum` is unused).
    e64: Option<Reg<F64>>,
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
    let x: [Reg<F64>; 3] = std::array::from_fn(|k| {
        let v = b.ld::<F32>(Space::GlobalNc, pa.off(4 * k as i64));
        b.cvt::<F64, F32>(v)
    });
    let rot = load_matrix(b, &cx.terms, &cx.pattern, 0);
    let r = apply_exact(b, &rot, x.map(Sym::reg));
    let mut inside: Option<Reg<Pred>> = None;
    let axes: [(Reg<F64>, Reg<S32>, Reg<F32>); 3] = std::array::from_fn(|k| {
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
        let rk = to_reg(b, r[k]);
        (xt, b.cvt::<S32, F64>(f), b.cvt::<F32, F64>(rk))
    });
    let (xt, cell, r32) = (axes.map(|a| a.0), axes.map(|a| a.1), axes.map(|a| a.2));
    let inside = inside.expect("three axes");
    let split = mx.hilo.then(|| {
        xt.map(|v| {
            let hi = b.cvt::<F32, F64>(v);
            let back = b.cvt::<F64, F32>(hi);
            let rest = b.sub(v, back);
            (hi, b.cvt::<F32, F64>(rest))
        })
    });
    let pt = PointTerms { xt, split };
    let d = cx
        .dense
        .as_ref()
        .expect("the mixed variant reads the dense cell table");
    b.if_then(inside, |b| {
        let sums = Sums32 {
            e_sum: b.mov(0.0f32),
            e64: mx.score64.then(|| b.mov(0.0f64)),
            g: [(); 3].map(|_| b.mov(0.0f32)),
            q: [(); 6].map(|_| b.mov(0.0f32)),
            found: b.mov(0u32),
        };
        match &mx.fast {
            Some(f) => {
                // Interior: 1 ≤ cell − origin < dims − 1 on every axis (unsigned wrap).
                let mut ok = f.direct7;
                let rel: [Reg<U32>; 3] = std::array::from_fn(|a| {
                    let r = b.sub(cell[a], f.origin[a]);
                    let r = b.bitcast::<U32, S32>(r);
                    let m = b.sub(r, 1u32);
                    let lt = b.setp(Cmp::Lt, m, f.inner[a]);
                    ok = b.and(ok, lt);
                    r
                });
                b.if_else(
                    ok,
                    |b| {
                        let row = b.mad(rel[2], f.dims[1], rel[1]);
                        let at = b.mad(row, f.dims[0], rel[0]);
                        let a0 = b.index_addr(f.cells, at, 4);
                        let ay = b.add(a0, f.sy);
                        let ay_ = b.sub(a0, f.sy);
                        let az = b.add(a0, f.sz);
                        let az_ = b.sub(a0, f.sz);
                        // Direct7 order: own cell, +x, −x, +y, −y, +z, −z.
                        let addrs: [Addr; 7] = [
                            Addr::from(a0),
                            Addr::from(a0).off(4),
                            Addr::from(a0).off(-4),
                            Addr::from(ay),
                            Addr::from(ay_),
                            Addr::from(az),
                            Addr::from(az_),
                        ];
                        let found = addrs.map(|a| b.ld::<S32>(Space::GlobalNc, a));
                        compact_and_pair(b, cx, d, mx, &sums, &pt, &found);
                    },
                    |b| probes(b, cx, d, mx, &sums, &pt, cell),
                );
            }
            None => probes(b, cx, d, mx, &sums, &pt, cell),
        }
        let paired = b.setp(Cmp::Ne, sums.found, 0u32);
        b.if_then(paired, |b| add_point(b, cx, mx, r32, &sums));
    });
}
