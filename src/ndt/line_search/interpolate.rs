//! The Moré–Thuente trial-step selection (the paper's four cases: safeguarded cubic, quadratic
//! and secant steps) and the update of the interval `[α_l, α_u]` that [`super::MoreThuente`]
//! keeps, with the interval end type they work on.

/// One end of the interval: step, `φ`, `φ'`.
#[derive(Clone, Copy, Debug)]
pub(super) struct End {
    pub(super) a: f64,
    pub(super) f: f64,
    pub(super) g: f64,
}

/// Minimiser of the cubic through `(a, fa, ga)` and `(b, fb, gb)`, written relative to `a`.
/// `sign` picks the root orientation as in the paper; the radicand is clamped at zero.
fn cubic_min(a: End, b: End) -> f64 {
    let theta = 3.0 * (a.f - b.f) / (b.a - a.a) + a.g + b.g;
    let s = theta.abs().max(a.g.abs()).max(b.g.abs());
    let mut gamma = s
        * ((theta / s).powi(2) - (a.g / s) * (b.g / s))
            .max(0.0)
            .sqrt();
    if b.a < a.a {
        gamma = -gamma;
    }
    let p = (gamma - a.g) + theta;
    let q = ((gamma - a.g) + gamma) + b.g;
    a.a + (p / q) * (b.a - a.a)
}

/// Moré–Thuente trial-step selection and interval update. `lo` is the best end, `hi` the other,
/// `t` the new trial. Returns the next trial and whether `lo` moved to `t`.
pub(super) fn step(
    lo: &mut End,
    hi: &mut End,
    t: End,
    bracketed: &mut bool,
    smin: f64,
    smax: f64,
) -> (f64, bool) {
    let sgnd = t.g * lo.g.signum();
    let next = if t.f > lo.f {
        // Case 1: higher value; the minimum is bracketed. Prefer the cubic step when it is closer
        // to the best end, else average it with the quadratic one.
        let c = cubic_min(*lo, t);
        let q = lo.a + (lo.g / ((lo.f - t.f) / (t.a - lo.a) + lo.g)) / 2.0 * (t.a - lo.a);
        *bracketed = true;
        if (c - lo.a).abs() < (q - lo.a).abs() {
            c
        } else {
            c + (q - c) / 2.0
        }
    } else if sgnd < 0.0 {
        // Case 2: derivatives of opposite sign; bracketed. Take the step farther from the trial.
        let c = cubic_min(t, *lo);
        let sec = t.a + (t.g / (t.g - lo.g)) * (lo.a - t.a);
        *bracketed = true;
        if (c - t.a).abs() > (sec - t.a).abs() {
            c
        } else {
            sec
        }
    } else if t.g.abs() < lo.g.abs() {
        // Case 3: same sign, derivative magnitude decreasing. The cubic may not have a minimiser
        // in the right direction; then extrapolate to the bound.
        let theta = 3.0 * (lo.f - t.f) / (t.a - lo.a) + lo.g + t.g;
        let s = theta.abs().max(lo.g.abs()).max(t.g.abs());
        let mut gamma = s
            * ((theta / s).powi(2) - (lo.g / s) * (t.g / s))
                .max(0.0)
                .sqrt();
        if t.a > lo.a {
            gamma = -gamma;
        }
        let p = (gamma - t.g) + theta;
        let q = (gamma + (lo.g - t.g)) + gamma;
        let r = p / q;
        let c = if r < 0.0 && gamma != 0.0 {
            t.a + r * (lo.a - t.a)
        } else if t.a > lo.a {
            smax
        } else {
            smin
        };
        let sec = t.a + (t.g / (t.g - lo.g)) * (lo.a - t.a);
        if *bracketed {
            let pick = if (c - t.a).abs() < (sec - t.a).abs() {
                c
            } else {
                sec
            };
            let limit = t.a + 0.66 * (hi.a - t.a);
            if t.a > lo.a {
                pick.min(limit)
            } else {
                pick.max(limit)
            }
        } else {
            let pick = if (c - t.a).abs() > (sec - t.a).abs() {
                c
            } else {
                sec
            };
            pick.clamp(smin.min(smax), smax.max(smin))
        }
    } else if *bracketed {
        // Case 4: same sign, derivative not decreasing, bracketed: cubic between trial and `hi`.
        cubic_min(t, *hi)
    } else if t.a > lo.a {
        smax
    } else {
        smin
    };
    let moved = if t.f > lo.f {
        *hi = t;
        false
    } else {
        if sgnd < 0.0 {
            *hi = *lo;
        }
        *lo = t;
        true
    };
    (next, moved)
}
