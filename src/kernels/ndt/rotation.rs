//! The rotation `R = Rx(a) Ry(b) Rz(c)`, its three first and six second angular derivatives, and
//! their products with points, emitted with exactly the floating-point operations of the CPU
//! reference (`ndt::angles`), so a transformed point — and hence its voxel — is bit-identical on
//! both devices.
//!
//! The CPU multiplies full 3×3 matrices, `c[r][k] = (a[r][0] b[0][k] + a[r][1] b[1][k]) + a[r][2]
//! b[2][k]`, whose entries are sines, cosines, ±1 and 0. Here every entry is a [`Sym`]: known zero,
//! known literal, or a register with a sign. Products with 0 and ±1 and sign flips are exact in
//! IEEE arithmetic, and adding an exact zero changes nothing but the sign of a zero, so skipping
//! them at kernel-build time and emitting `mul.rn`/`add.rn`/`sub.rn` (never contracted into FMAs)
//! for the rest, in the CPU's order, reproduces the CPU's values bit for bit.
//!
//! The ten matrices ([`MATRICES`]: `R`, `∂R/∂a`, `∂R/∂b`, `∂R/∂c`, then the second derivatives in
//! the order `aa, ab, ac, bb, bc, cc`) are computed once per block from the request's sines and
//! cosines; which of their entries are zero is known when the kernel is built ([`Pattern`]).

use crate::ptx::*;

/// A value known at kernel-build time to be zero, a literal, or a register with a sign.
#[derive(Clone, Copy, Debug)]
pub enum Sym {
    /// Exactly zero (of either sign).
    Zero,
    /// A literal (±1 in practice).
    Lit(f64),
    /// `±r`.
    Reg {
        /// The register holding the magnitude.
        r: Reg<F64>,
        /// Whether the entry is `-r`.
        neg: bool,
    },
}

/// What a matrix entry is when the kernel is built: zero, a literal, or a value stored in shared
/// memory by the block's first thread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Entry {
    /// Exactly zero: the kernel skips it.
    Zero,
    /// A literal value folded into the instructions.
    Lit(f64),
    /// Computed per pose and read from shared memory.
    Stored,
}

/// Entry kinds of the ten matrices of [`MATRICES`], row-major.
pub type Pattern = [[Entry; 9]; 10];

/// Derivative orders `(da, db, dc)` of the ten matrices: `R`, the three first derivatives, and
/// the six second derivatives in the order of `ndt::angles::HESSIAN_PAIRS`.
pub const MATRICES: [(usize, usize, usize); 10] = [
    (0, 0, 0),
    (1, 0, 0),
    (0, 1, 0),
    (0, 0, 1),
    (2, 0, 0),
    (1, 1, 0),
    (1, 0, 1),
    (0, 2, 0),
    (0, 1, 1),
    (0, 0, 2),
];

impl Sym {
    /// A register, positive.
    pub fn reg(r: Reg<F64>) -> Sym {
        Sym::Reg { r, neg: false }
    }

    /// The entry kind (a negated register must be materialised before storing).
    fn entry(self) -> Entry {
        match self {
            Sym::Zero => Entry::Zero,
            Sym::Lit(v) => Entry::Lit(v),
            Sym::Reg { .. } => Entry::Stored,
        }
    }
}

/// `x · y`, exact where the CPU's product is (zero and ±1 factors, signs).
pub fn smul(b: &mut KernelBuilder, x: Sym, y: Sym) -> Sym {
    match (x, y) {
        (Sym::Zero, _) | (_, Sym::Zero) => Sym::Zero,
        (Sym::Lit(u), Sym::Lit(v)) => Sym::Lit(u * v),
        (Sym::Lit(u), Sym::Reg { r, neg }) | (Sym::Reg { r, neg }, Sym::Lit(u)) => {
            assert!(
                u.abs() == 1.0,
                "only ±1 literals appear in rotation matrices"
            );
            Sym::Reg {
                r,
                neg: neg ^ (u < 0.0),
            }
        }
        (Sym::Reg { r: a, neg: na }, Sym::Reg { r: c, neg: nc }) => Sym::Reg {
            r: b.mul(a, c),
            neg: na ^ nc,
        },
    }
}

/// `x + y` with IEEE semantics of the CPU's `x + y` (up to the sign of a zero).
pub fn sadd(b: &mut KernelBuilder, x: Sym, y: Sym) -> Sym {
    match (x, y) {
        (Sym::Zero, s) | (s, Sym::Zero) => s,
        (Sym::Lit(u), Sym::Lit(v)) if u + v == 0.0 => Sym::Zero,
        (Sym::Lit(u), Sym::Lit(v)) => Sym::Lit(u + v),
        (Sym::Lit(u), Sym::Reg { r, neg }) | (Sym::Reg { r, neg }, Sym::Lit(u)) => {
            // u + r, or u + (−r) = u − r; addition commutes exactly.
            Sym::reg(if neg { b.sub(u, r) } else { b.add(u, r) })
        }
        (Sym::Reg { r: a, neg: na }, Sym::Reg { r: c, neg: nc }) => match (na, nc) {
            (false, false) => Sym::reg(b.add(a, c)),
            (true, true) => Sym::Reg {
                r: b.add(a, c),
                neg: true,
            },
            (false, true) => Sym::reg(b.sub(a, c)),
            (true, false) => Sym::reg(b.sub(c, a)),
        },
    }
}

/// A negated register turned into a positive one (`neg.f64` is exact).
pub fn materialize(b: &mut KernelBuilder, x: Sym) -> Sym {
    match x {
        Sym::Reg { r, neg: true } => Sym::reg(b.neg(r)),
        s => s,
    }
}

/// The value as a register (zero and literals moved in).
pub fn to_reg(b: &mut KernelBuilder, x: Sym) -> Reg<F64> {
    match materialize(b, x) {
        Sym::Zero => b.mov(0.0f64),
        Sym::Lit(v) => b.mov(v),
        Sym::Reg { r, .. } => r,
    }
}

/// `m · v` in the CPU's order: `(m0 v0 + m1 v1) + m2 v2` per row.
pub fn apply_exact(b: &mut KernelBuilder, m: &[Sym; 9], v: [Sym; 3]) -> [Sym; 3] {
    let mut out = [Sym::Zero; 3];
    for (row, o) in out.iter_mut().enumerate() {
        let p0 = smul(b, m[3 * row], v[0]);
        let p1 = smul(b, m[3 * row + 1], v[1]);
        let s = sadd(b, p0, p1);
        let p2 = smul(b, m[3 * row + 2], v[2]);
        *o = sadd(b, s, p2);
    }
    out
}

/// `a · b` for matrices of [`Sym`] in the CPU's order (`ndt::angles::mul`).
fn mat_mul(b: &mut KernelBuilder, x: &[Sym; 9], y: &[Sym; 9]) -> [Sym; 9] {
    let mut c = [Sym::Zero; 9];
    for r in 0..3 {
        for k in 0..3 {
            let p0 = smul(b, x[3 * r], y[k]);
            let p1 = smul(b, x[3 * r + 1], y[3 + k]);
            let s = sadd(b, p0, p1);
            let p2 = smul(b, x[3 * r + 2], y[6 + k]);
            c[3 * r + k] = sadd(b, s, p2);
        }
    }
    c
}

/// One axis matrix entry: 0, 1, ±sin, ±cos.
#[derive(Clone, Copy)]
enum A {
    O,
    I,
    S(bool),
    C(bool),
}

use A::{C, I, O, S};

/// `[R, R', R'']` of one axis, row-major, as in `ndt::angles::AngleTerms::new`.
const AXIS_X: [[A; 9]; 3] = [
    [I, O, O, O, C(false), S(true), O, S(false), C(false)],
    [O, O, O, O, S(true), C(true), O, C(false), S(true)],
    [O, O, O, O, C(true), S(false), O, S(true), C(true)],
];
const AXIS_Y: [[A; 9]; 3] = [
    [C(false), O, S(false), O, I, O, S(true), O, C(false)],
    [S(true), O, C(false), O, O, O, C(true), O, S(true)],
    [C(true), O, S(true), O, O, O, S(false), O, C(true)],
];
const AXIS_Z: [[A; 9]; 3] = [
    [C(false), S(true), O, S(false), C(false), O, O, O, I],
    [S(true), C(true), O, C(false), S(true), O, O, O, O],
    [C(true), S(false), O, S(true), C(true), O, O, O, O],
];

fn axis(table: &[A; 9], s: Reg<F64>, c: Reg<F64>) -> [Sym; 9] {
    table.map(|e| match e {
        O => Sym::Zero,
        I => Sym::Lit(1.0),
        S(neg) => Sym::Reg { r: s, neg },
        C(neg) => Sym::Reg { r: c, neg },
    })
}

/// Sines and cosines of the three angles of a pose.
#[derive(Clone, Copy, Debug)]
pub struct SinCos {
    /// sin of the angle about x.
    pub sa: Reg<F64>,
    /// cos of the angle about x.
    pub ca: Reg<F64>,
    /// sin of the angle about y.
    pub sb: Reg<F64>,
    /// cos of the angle about y.
    pub cb: Reg<F64>,
    /// sin of the angle about z.
    pub sc: Reg<F64>,
    /// cos of the angle about z.
    pub cc: Reg<F64>,
}

/// Emits the ten matrices of [`MATRICES`] (registers materialised positive) and their pattern.
pub fn angle_matrices(b: &mut KernelBuilder, t: &SinCos) -> ([[Sym; 9]; 10], Pattern) {
    let xs = AXIS_X.map(|m| axis(&m, t.sa, t.ca));
    let ys = AXIS_Y.map(|m| axis(&m, t.sb, t.cb));
    let zs = AXIS_Z.map(|m| axis(&m, t.sc, t.cc));
    // Products X^(da) Y^(db), shared between matrices with the same (da, db).
    let mut xy: Vec<((usize, usize), [Sym; 9])> = Vec::new();
    let mut mats = [[Sym::Zero; 9]; 10];
    let mut pattern = [[Entry::Zero; 9]; 10];
    for (m, &(da, db, dc)) in MATRICES.iter().enumerate() {
        let left = match xy.iter().find(|(k, _)| *k == (da, db)) {
            Some((_, p)) => *p,
            None => {
                let p = mat_mul(b, &xs[da], &ys[db]);
                xy.push(((da, db), p));
                p
            }
        };
        let full = mat_mul(b, &left, &zs[dc]);
        for e in 0..9 {
            mats[m][e] = materialize(b, full[e]);
            pattern[m][e] = mats[m][e].entry();
        }
    }
    (mats, pattern)
}

/// Reads matrix `m` back from shared memory (`base + 9 m + e`) as [`Sym`]s following `pattern`.
pub fn load_matrix(
    b: &mut KernelBuilder,
    terms: &SharedArray<F64>,
    pattern: &Pattern,
    m: usize,
) -> [Sym; 9] {
    let mut out = [Sym::Zero; 9];
    for (e, o) in out.iter_mut().enumerate() {
        *o = match pattern[m][e] {
            Entry::Zero => Sym::Zero,
            Entry::Lit(v) => Sym::Lit(v),
            Entry::Stored => Sym::reg(b.ld::<F64>(Space::Shared, terms.at((9 * m + e) as u32))),
        };
    }
    out
}

/// `m · x` with fused multiply-adds, skipping known zeros (for derivative terms, where the exact
/// CPU order does not matter). `None` is a row known to be zero.
pub fn apply_fma(b: &mut KernelBuilder, m: &[Sym; 9], x: [Reg<F64>; 3]) -> [Option<Reg<F64>>; 3] {
    let mut out = [None; 3];
    for (row, o) in out.iter_mut().enumerate() {
        let mut acc: Option<Reg<F64>> = None;
        for k in 0..3 {
            let term = match m[3 * row + k] {
                Sym::Zero => continue,
                Sym::Lit(v) => (None, v),
                Sym::Reg { r, neg } => {
                    assert!(!neg, "matrices are materialised before use");
                    (Some(r), 0.0)
                }
            };
            acc = Some(match (acc, term) {
                (None, (Some(r), _)) => b.mul(r, x[k]),
                (None, (None, v)) => b.mul(x[k], v),
                (Some(a), (Some(r), _)) => b.fma(r, x[k], a),
                (Some(a), (None, v)) => b.fma(x[k], v, a),
            });
        }
        *o = acc;
    }
    out
}
