//! Moré–Thuente line search (Moré & Thuente 1994, "Line search algorithms with guaranteed
//! sufficient decrease"), the search PCL's NDT uses, written as a state machine so the caller can
//! batch the evaluations of many searches.
//!
//! Minimises `φ(α) = f(p + α d)` over `α ∈ [α_min, α_max]` for a descent direction (`φ'(0) < 0`),
//! stopping at the strong Wolfe conditions `φ(α) ≤ φ(0) + μ α φ'(0)` and
//! `|φ'(α)| ≤ η |φ'(0)|`. Trial steps come from the paper's safeguarded cubic / quadratic /
//! secant interpolation on the interval `[α_l, α_u]`, where `α_l` is the best step so far; in the
//! first stage the auxiliary `ψ(α) = φ(α) − φ(0) − μ α φ'(0)` replaces `φ`.
//!
//! Every evaluation carries a payload (the caller's evaluation at that step); the search hands
//! back the payload of the step it returns, so the caller never evaluates the same step twice.
//! The returned step is never worse than the best evaluated one (it may be `α = 0` with the
//! caller's initial payload when nothing along `d` was better).

use interpolate::{step, End};

mod interpolate;

/// Tuning of the search (PCL: μ = 1e-4, η = 0.9, 10 evaluations).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineSearchParams {
    /// Sufficient-decrease constant μ.
    pub mu: f64,
    /// Curvature constant η.
    pub eta: f64,
    /// Evaluations before the best step so far is returned.
    pub max_evaluations: usize,
    /// Relative width of the bracketing interval below which the search stops.
    pub x_tolerance: f64,
}

impl Default for LineSearchParams {
    fn default() -> Self {
        LineSearchParams {
            mu: 1e-4,
            eta: 0.9,
            max_evaluations: 10,
            x_tolerance: 1e-12,
        }
    }
}

/// What the search wants next.
#[derive(Debug)]
pub enum LineStep<T> {
    /// Evaluate `φ` and `φ'` at this step and [`MoreThuente::feed`] the values.
    Trial(f64),
    /// Finished: the step and the payload that was fed for it.
    Done(f64, T),
}

/// The search state; see the module docs.
#[derive(Debug)]
pub struct MoreThuente<T> {
    p: LineSearchParams,
    f0: f64,
    g0: f64,
    lo: End,
    hi: End,
    lo_payload: Option<T>,
    bracketed: bool,
    stage1: bool,
    width: f64,
    width1: f64,
    step_min: f64,
    step_max: f64,
    a_min: f64,
    a_max: f64,
    trial: f64,
    evaluations: usize,
}

impl<T> MoreThuente<T> {
    /// Starts a search from `φ(0) = f0`, `φ'(0) = g0 < 0` (with its payload `at_zero`), first trial
    /// `a_init`, steps limited to `[0, a_max]`. Returns the state and the first trial step.
    pub fn start(
        f0: f64,
        g0: f64,
        at_zero: T,
        a_init: f64,
        a_max: f64,
        p: LineSearchParams,
    ) -> (Self, f64) {
        let a_min = 0.0;
        let trial = a_init.clamp(a_min, a_max);
        let zero = End {
            a: 0.0,
            f: f0,
            g: g0,
        };
        let s = MoreThuente {
            p,
            f0,
            g0,
            lo: zero,
            hi: zero,
            lo_payload: Some(at_zero),
            bracketed: false,
            stage1: true,
            width: a_max - a_min,
            width1: 2.0 * (a_max - a_min),
            step_min: 0.0,
            step_max: trial + 4.0 * trial,
            a_min,
            a_max,
            trial,
            evaluations: 0,
        };
        (s, trial)
    }

    /// Evaluations fed so far.
    pub fn evaluations(&self) -> usize {
        self.evaluations
    }

    /// Feeds `φ(trial) = f`, `φ'(trial) = g` and the payload for the trial step.
    pub fn feed(&mut self, f: f64, g: f64, payload: T) -> LineStep<T> {
        self.evaluations += 1;
        let a = self.trial;
        let gtest = self.p.mu * self.g0;
        let ftest = self.f0 + a * gtest;
        if !(f.is_finite() && g.is_finite()) {
            // Treat a non-finite value as "far too high": shrink towards the best end.
            return self.finish_or_shrink(payload, a);
        }
        if f <= ftest && g.abs() <= self.p.eta * (-self.g0) {
            return LineStep::Done(a, payload);
        }
        let rounding = self.bracketed && (a <= self.step_min || a >= self.step_max);
        let narrow =
            self.bracketed && self.step_max - self.step_min <= self.p.x_tolerance * self.step_max;
        let at_max = a == self.a_max && f <= ftest && g <= gtest;
        let at_min = a == self.a_min && (f > ftest || g >= gtest);
        if at_max {
            return LineStep::Done(a, payload);
        }
        if rounding || narrow || at_min || self.evaluations >= self.p.max_evaluations {
            return self.best(a, f, payload);
        }
        if self.stage1 && f <= ftest && g >= self.p.mu.min(self.p.eta) * self.g0 {
            self.stage1 = false;
        }
        let t = End { a, f, g };
        let moved_lo = if self.stage1 && f <= self.lo.f && f > ftest {
            // First stage: step on ψ (φ shifted by the sufficient-decrease line).
            let m = |e: End| End {
                a: e.a,
                f: e.f - e.a * gtest,
                g: e.g - gtest,
            };
            let (mut lo, mut hi) = (m(self.lo), m(self.hi));
            let (next, moved) = step(
                &mut lo,
                &mut hi,
                m(t),
                &mut self.bracketed,
                self.step_min,
                self.step_max,
            );
            let un = |e: End| End {
                a: e.a,
                f: e.f + e.a * gtest,
                g: e.g + gtest,
            };
            self.lo = un(lo);
            self.hi = un(hi);
            self.trial = next;
            moved
        } else {
            let (next, moved) = step(
                &mut self.lo,
                &mut self.hi,
                t,
                &mut self.bracketed,
                self.step_min,
                self.step_max,
            );
            self.trial = next;
            moved
        };
        if moved_lo {
            self.lo_payload = Some(payload);
        }
        if self.bracketed {
            let w = (self.hi.a - self.lo.a).abs();
            if w >= 0.66 * self.width1 {
                self.trial = self.lo.a + 0.5 * (self.hi.a - self.lo.a);
            }
            self.width1 = self.width;
            self.width = w;
            self.step_min = self.lo.a.min(self.hi.a);
            self.step_max = self.lo.a.max(self.hi.a);
        } else {
            self.step_min = self.trial + 1.1 * (self.trial - self.lo.a);
            self.step_max = self.trial + 4.0 * (self.trial - self.lo.a);
        }
        self.trial = self.trial.clamp(self.a_min, self.a_max);
        let stuck = self.bracketed
            && (self.trial <= self.step_min
                || self.trial >= self.step_max
                || self.step_max - self.step_min <= self.p.x_tolerance * self.step_max);
        if stuck || !self.trial.is_finite() {
            return LineStep::Done(self.lo.a, self.take_lo());
        }
        LineStep::Trial(self.trial)
    }

    /// The better of the best end and the current trial.
    fn best(&mut self, a: f64, f: f64, payload: T) -> LineStep<T> {
        if f < self.lo.f {
            LineStep::Done(a, payload)
        } else {
            LineStep::Done(self.lo.a, self.take_lo())
        }
    }

    fn finish_or_shrink(&mut self, payload: T, a: f64) -> LineStep<T> {
        drop(payload);
        let next = self.lo.a + 0.5 * (a - self.lo.a);
        if self.evaluations >= self.p.max_evaluations
            || (next - self.lo.a).abs() <= self.p.x_tolerance * a.abs()
        {
            return LineStep::Done(self.lo.a, self.take_lo());
        }
        self.trial = next;
        LineStep::Trial(next)
    }
}

impl<T> MoreThuente<T> {
    /// The best end's payload; present until the search returns `Done`, after which the caller
    /// drops the search (feeding it again is a broken invariant of the caller).
    fn take_lo(&mut self) -> T {
        self.lo_payload
            .take()
            .expect("MoreThuente: feed called after the search finished")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search on `phi` (value and derivative) and returns (step, evaluations).
    fn run(phi: impl Fn(f64) -> (f64, f64), a_init: f64, a_max: f64) -> (f64, usize) {
        let (f0, g0) = phi(0.0);
        let (mut ls, mut a) =
            MoreThuente::start(f0, g0, 0.0, a_init, a_max, LineSearchParams::default());
        loop {
            let (f, g) = phi(a);
            match ls.feed(f, g, a) {
                LineStep::Trial(next) => a = next,
                LineStep::Done(step, payload) => {
                    assert_eq!(step, payload, "payload belongs to the returned step");
                    return (step, ls.evaluations());
                }
            }
        }
    }

    #[test]
    fn quadratic_accepts_or_finds_the_minimum() {
        let phi = |a: f64| ((a - 0.3).powi(2), 2.0 * (a - 0.3));
        let (a, n) = run(phi, 0.3, 1.0);
        assert_eq!((a, n), (0.3, 1));
        let (a, _) = run(phi, 1.0, 1.0);
        let (f, g) = phi(a);
        assert!(
            f <= 0.09 + 1e-4 * a * -0.6 && g.abs() <= 0.9 * 0.6,
            "strong Wolfe at {a}"
        );
        // Initial step too short: extrapolation finds a Wolfe point.
        let (a, _) = run(phi, 0.001, 1.0);
        assert!(phi(a).1.abs() <= 0.9 * 0.6 && a > 0.01, "{a}");
    }

    #[test]
    fn capped_interval_returns_the_cap() {
        // Minimum at 5 but steps capped at 0.1: the full step at the cap is taken.
        let phi = |a: f64| ((a - 5.0).powi(2), 2.0 * (a - 5.0));
        assert_eq!(run(phi, 0.1, 0.1).0, 0.1);
    }

    #[test]
    fn nonconvex_function_meets_wolfe() {
        // φ(a) = −a / (a² + 2) (Moré–Thuente's first test function), minimum at √2.
        let phi = |a: f64| (-a / (a * a + 2.0), (a * a - 2.0) / (a * a + 2.0).powi(2));
        for a0 in [1e-3, 1e-1, 10.0, 1000.0] {
            let (a, n) = run(phi, a0, 1e4);
            let (f, g) = phi(a);
            let g0 = phi(0.0).1;
            assert!(
                f <= 1e-4 * a * g0 && g.abs() <= 0.9 * g0.abs(),
                "a0 {a0}: a {a} after {n}"
            );
        }
    }
}
