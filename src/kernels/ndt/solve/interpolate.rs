//! The Moré–Thuente trial-step selection and interval update for the device solver: the host's
//! `ndt::line_search::interpolate::step` and its cubic minimiser, operation for operation
//! (`.rn` adds and multiplies, IEEE division and square root, the same comparisons and the same
//! NaN behaviour of `min`/`max`), so a search fed the same values takes the same steps.

use crate::ptx::*;

/// One end of the interval (or the trial): step, `φ`, `φ'`.
#[derive(Clone, Copy)]
pub(super) struct End {
    pub(super) a: Reg<F64>,
    pub(super) f: Reg<F64>,
    pub(super) g: Reg<F64>,
}

impl End {
    /// Fresh registers holding `e`'s values (the interval ends are updated in place).
    pub(super) fn copy(b: &mut KernelBuilder, e: End) -> End {
        End {
            a: b.mov(e.a),
            f: b.mov(e.f),
            g: b.mov(e.g),
        }
    }

    /// `self = e` (registers updated in place).
    pub(super) fn set(&self, b: &mut KernelBuilder, e: End) {
        b.mov_to(self.a, e.a);
        b.mov_to(self.f, e.f);
        b.mov_to(self.g, e.g);
    }

    /// `self = e` where `p` holds.
    pub(super) fn set_if(&self, b: &mut KernelBuilder, p: Reg<Pred>, e: End) {
        b.when(p, |b| self.set(b, e));
    }
}

/// `s · sqrt(max((θ/s)² − (ga/s)(gb/s), 0))` with `s = max(|θ|, |ga|, |gb|)` (the radicand
/// clamped at zero, NaN to zero as `f64::max` does).
fn gamma_of(b: &mut KernelBuilder, theta: Reg<F64>, ga: Reg<F64>, gb: Reg<F64>) -> Reg<F64> {
    let at = b.abs(theta);
    let aa = b.abs(ga);
    let ab = b.abs(gb);
    let s = b.max(at, aa);
    let s = b.max(s, ab);
    let ts = b.div(theta, s);
    let t2 = b.mul(ts, ts);
    let as_ = b.div(ga, s);
    let bs = b.div(gb, s);
    let prod = b.mul(as_, bs);
    let rad = b.sub(t2, prod);
    let rad = b.max(rad, 0.0f64);
    let root = b.sqrt(rad);
    b.mul(s, root)
}

/// `θ = 3 (fa − fb) / (ab − aa) + ga + gb` for ends `x` (first) and `y`.
fn theta_of(b: &mut KernelBuilder, x: End, y: End) -> Reg<F64> {
    let df = b.sub(x.f, y.f);
    let num = b.mul(3.0f64, df);
    let da = b.sub(y.a, x.a);
    let q = b.div(num, da);
    let t = b.add(q, x.g);
    b.add(t, y.g)
}

/// The minimiser of the cubic through `x` and `y`, written relative to `x` (the host's
/// `cubic_min(x, y)`).
fn cubic_min(b: &mut KernelBuilder, x: End, y: End) -> Reg<F64> {
    let theta = theta_of(b, x, y);
    let gamma = gamma_of(b, theta, x.g, y.g);
    let flip = b.setp(Cmp::Lt, y.a, x.a);
    let ng = b.neg(gamma);
    let gamma = b.selp(ng, gamma, flip);
    let gm = b.sub(gamma, x.g);
    let p = b.add(gm, theta);
    let q = b.add(gm, gamma);
    let q = b.add(q, y.g);
    let pq = b.div(p, q);
    let span = b.sub(y.a, x.a);
    let d = b.mul(pq, span);
    b.add(x.a, d)
}

/// The secant step `t.a + (t.g / (t.g − lo.g)) (lo.a − t.a)`.
fn secant(b: &mut KernelBuilder, t: End, lo: End) -> Reg<F64> {
    let dg = b.sub(t.g, lo.g);
    let r = b.div(t.g, dg);
    let span = b.sub(lo.a, t.a);
    let d = b.mul(r, span);
    b.add(t.a, d)
}

/// `|x − a|`.
fn dist(b: &mut KernelBuilder, x: Reg<F64>, a: Reg<F64>) -> Reg<F64> {
    let d = b.sub(x, a);
    b.abs(d)
}

/// `f64::signum`: 1 for +0 and positive, −1 for −0 and negative, NaN for NaN.
fn signum(b: &mut KernelBuilder, x: Reg<F64>) -> Reg<F64> {
    let bits = b.bitcast::<U64, F64>(x);
    let sign = b.and(bits, 1u64 << 63);
    let one = b.or(sign, 1.0f64.to_bits());
    let one = b.bitcast::<F64, U64>(one);
    let nan = b.setp(Cmp::Nan, x, x);
    b.selp(f64::NAN, one, nan)
}

/// Trial-step selection and interval update (`lo` the best end, `hi` the other, `t` the new
/// trial; `lo`, `hi` and `bracketed` are updated in place; `yes` is a predicate that holds).
/// Returns the next trial and whether `lo` moved to `t`.
#[allow(clippy::too_many_arguments)] // the host's `step` arguments, the builder and `yes`
pub(super) fn step(
    b: &mut KernelBuilder,
    lo: End,
    hi: End,
    t: End,
    bracketed: Reg<Pred>,
    smin: Reg<F64>,
    smax: Reg<F64>,
    yes: Reg<Pred>,
) -> (Reg<F64>, Reg<Pred>) {
    let sg = signum(b, lo.g);
    let sgnd = b.mul(t.g, sg);
    let next = b.reg::<F64>();
    let higher = b.setp(Cmp::Gt, t.f, lo.f);
    let opposite = b.setp(Cmp::Lt, sgnd, 0.0f64);
    let atg = b.abs(t.g);
    let alg = b.abs(lo.g);
    let decreasing = b.setp(Cmp::Lt, atg, alg);
    let done = b.label("mt_step_done");
    // Case 1: higher value; bracketed.
    b.if_then(higher, |b| {
        let c = cubic_min(b, lo, t);
        let df = b.sub(lo.f, t.f);
        let span = b.sub(t.a, lo.a);
        let slope = b.div(df, span);
        let den = b.add(slope, lo.g);
        let r = b.div(lo.g, den);
        let r = b.div(r, 2.0f64);
        let d = b.mul(r, span);
        let q = b.add(lo.a, d);
        let dc = dist(b, c, lo.a);
        let dq = dist(b, q, lo.a);
        let closer = b.setp(Cmp::Lt, dc, dq);
        let qc = b.sub(q, c);
        let h = b.div(qc, 2.0f64);
        let avg = b.add(c, h);
        let v = b.selp(c, avg, closer);
        b.mov_to(next, v);
        b.mov_to(bracketed, yes);
        b.bra(&done);
    });
    // Case 2: derivatives of opposite sign; bracketed.
    b.if_then(opposite, |b| {
        let c = cubic_min(b, t, lo);
        let sec = secant(b, t, lo);
        let dc = dist(b, c, t.a);
        let ds = dist(b, sec, t.a);
        let farther = b.setp(Cmp::Gt, dc, ds);
        let v = b.selp(c, sec, farther);
        b.mov_to(next, v);
        b.mov_to(bracketed, yes);
        b.bra(&done);
    });
    // Case 3: same sign, derivative magnitude decreasing.
    b.if_then(decreasing, |b| {
        let theta = theta_of(b, lo, t);
        let gamma = gamma_of(b, theta, lo.g, t.g);
        let right = b.setp(Cmp::Gt, t.a, lo.a);
        let ng = b.neg(gamma);
        let gamma = b.selp(ng, gamma, right);
        let gt = b.sub(gamma, t.g);
        let p = b.add(gt, theta);
        let dg = b.sub(lo.g, t.g);
        let q = b.add(gamma, dg);
        let q = b.add(q, gamma);
        let r = b.div(p, q);
        let neg_r = b.setp(Cmp::Lt, r, 0.0f64);
        let nonzero = b.setp(Cmp::Ne, gamma, 0.0f64);
        let inner = b.and(neg_r, nonzero);
        let span = b.sub(lo.a, t.a);
        let d = b.mul(r, span);
        let ci = b.add(t.a, d);
        let bound = b.selp(smax, smin, right);
        let c = b.selp(ci, bound, inner);
        let sec = secant(b, t, lo);
        let dc = dist(b, c, t.a);
        let ds = dist(b, sec, t.a);
        b.if_else(
            bracketed,
            |b| {
                let nearer = b.setp(Cmp::Lt, dc, ds);
                let pick = b.selp(c, sec, nearer);
                let w = b.sub(hi.a, t.a);
                let w = b.mul(0.66f64, w);
                let limit = b.add(t.a, w);
                let lo_lim = b.min(pick, limit);
                let hi_lim = b.max(pick, limit);
                let v = b.selp(lo_lim, hi_lim, right);
                b.mov_to(next, v);
            },
            |b| {
                let farther = b.setp(Cmp::Gt, dc, ds);
                let pick = b.selp(c, sec, farther);
                let lo_b = b.min(smin, smax);
                let hi_b = b.max(smax, smin);
                let v = clamp(b, pick, lo_b, hi_b);
                b.mov_to(next, v);
            },
        );
        b.bra(&done);
    });
    // Case 4: same sign, derivative not decreasing.
    b.if_else(
        bracketed,
        |b| {
            let v = cubic_min(b, t, hi);
            b.mov_to(next, v);
        },
        |b| {
            let right = b.setp(Cmp::Gt, t.a, lo.a);
            let v = b.selp(smax, smin, right);
            b.mov_to(next, v);
        },
    );
    b.place(&done);
    // The interval update.
    let moved = b.not(higher);
    let swap = b.and(moved, opposite);
    b.when(higher, |b| hi.set(b, t));
    hi.set_if(b, swap, lo);
    lo.set_if(b, moved, t);
    (next, moved)
}

/// `f64::clamp(x, lo, hi)` for `lo ≤ hi`: NaN stays NaN.
pub(super) fn clamp(
    b: &mut KernelBuilder,
    x: Reg<F64>,
    lo: impl Operand<F64> + Copy,
    hi: impl Operand<F64> + Copy,
) -> Reg<F64> {
    let below = b.setp(Cmp::Lt, x, lo);
    let x = b.selp(lo, x, below);
    let above = b.setp(Cmp::Gt, x, hi);
    b.selp(hi, x, above)
}
