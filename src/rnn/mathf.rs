//! CPU mirrors of the kernels' f32 transcendentals (`crate::kernels::rnn::mathf`): the same
//! IEEE-rounded operations in the same order, so they give the kernels' bits, and a model of the
//! GRU cell's SFU forms ([`sfu_model`]), which no CPU can reproduce bit for bit. Used to measure
//! the kernels' accuracy against f64 without a GPU, and by the dropout mask on both sides.

use crate::kernels::rnn::mathf::*;

/// e^x as the kernels compute it.
pub fn expf(x: f32) -> f32 {
    // Rust's max/min, like PTX's, return the non-NaN operand (clamp would keep a NaN).
    #[allow(clippy::manual_clamp)]
    let x = x.max(EXP_MIN).min(EXP_MAX);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = p.mul_add(r, c);
    }
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// 1 / (1 + e^-x) as the kernels compute it.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (expf(-x) + 1.0)
}

/// tanh(x) as the kernels compute it.
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let q = 2.0 / (expf(a + a) + 1.0);
    let big = 1.0 - q;
    let big = if x < 0.0 { -big } else { big };
    if a < TANH_SMALL {
        tanh_small(x)
    } else {
        big
    }
}

/// tanh's odd Taylor polynomial for |x| < `TANH_SMALL`, as the kernels compute it.
fn tanh_small(x: f32) -> f32 {
    let s = x * x;
    let mut p = TANH_POLY[0];
    for &c in &TANH_POLY[1..] {
        p = p.mul_add(s, c);
    }
    x.mul_add(s * p, x)
}

/// Models of the GRU cell's SFU forms (`sigmoid_sfu`, `tanh_sfu` of the kernels), for accuracy
/// studies without a GPU: the f32 steps as the kernel does them, with each SFU result
/// (`ex2.approx.ftz`, `rcp.approx.ftz`) taken exact and pushed [`SFU_ULPS`](sfu_model::SFU_ULPS) ulps in the direction
/// `dir` (+1 or -1). CUDA documents 2 ulp for `exp2f` (which is `ex2.approx`) and for
/// `__fdividef`; the model assumes twice that.
pub mod sfu_model {
    use super::{LOG2E, TANH_SMALL};

    /// Ulps each SFU result is pushed by.
    pub const SFU_ULPS: f64 = 4.0;

    fn push(v: f64, dir: f64) -> f32 {
        (v * (1.0 + dir * SFU_ULPS * f64::from(f32::EPSILON) / 2.0)) as f32
    }

    fn ex2(t: f32, dir: f64) -> f32 {
        push(f64::from(t).exp2(), dir)
    }

    fn rcp(d: f32, dir: f64) -> f32 {
        push(1.0 / f64::from(d), dir)
    }

    /// `sigmoid_sfu` with its SFU errors pushed in direction `dir`.
    pub fn sigmoid(x: f32, dir: f64) -> f32 {
        rcp(ex2(x * -LOG2E, dir) + 1.0, dir)
    }

    /// `tanh_sfu` with its SFU errors pushed in direction `dir`.
    pub fn tanh(x: f32, dir: f64) -> f32 {
        let a = x.abs();
        if a < TANH_SMALL {
            return super::tanh_small(x);
        }
        let q = rcp(ex2(a * (2.0 * LOG2E), dir) + 1.0, dir);
        let big = q.mul_add(-2.0, 1.0);
        if x < 0.0 {
            -big
        } else {
            big
        }
    }
}

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(FMIX[0]);
    h ^= h >> 13;
    h = h.wrapping_mul(FMIX[1]);
    h ^ (h >> 16)
}

/// The kernels' counter-based random bits: 32 bits for counter `i` under `seed`.
pub fn hash32(i: u32, seed: u64) -> u32 {
    let h = fmix32(i ^ seed as u32);
    fmix32(h ^ (seed >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    fn rel(got: f32, want: f64) -> f64 {
        ((f64::from(got) - want) / want.abs().max(f64::MIN_POSITIVE)).abs()
    }

    #[test]
    fn expf_is_within_two_ulp_over_its_range() {
        let mut worst = 0.0f64;
        for x in sweep(-87.0, 88.0, 2_000_003) {
            let want = f64::from(x).exp();
            if want < f64::from(f32::MIN_POSITIVE) {
                continue; // subnormal results: absolute error below 2^-149 is all that is meaningful
            }
            worst = worst.max(rel(expf(x), want));
        }
        assert!(
            worst < 2.0 * f64::from(f32::EPSILON),
            "worst relative error {worst:e}"
        );
        assert_eq!(expf(0.0), 1.0);
        assert!(expf(-1000.0) < 1e-37 && expf(1000.0).is_finite());
    }

    #[test]
    fn sigmoid_and_tanh_are_accurate() {
        let (mut ws, mut wt) = (0.0f64, 0.0f64);
        for x in sweep(-30.0, 30.0, 1_000_001) {
            let xd = f64::from(x);
            ws = ws.max(rel(sigmoid(x), 1.0 / (1.0 + (-xd).exp())));
            if x != 0.0 {
                wt = wt.max(rel(tanh(x), xd.tanh()));
            }
        }
        for x in sweep(-0.3, 0.3, 600_001) {
            if x != 0.0 {
                wt = wt.max(rel(tanh(x), f64::from(x).tanh()));
            }
        }
        assert!(
            ws < 3.0 * f64::from(f32::EPSILON),
            "sigmoid worst relative error {ws:e}"
        );
        assert!(wt < 1e-6, "tanh worst relative error {wt:e}");
        assert_eq!(tanh(40.0), 1.0);
        assert_eq!(tanh(-40.0), -1.0);
        assert_eq!(sigmoid(-200.0), 0.0f32.max(sigmoid(-200.0)));
    }

    #[test]
    fn hash_bits_look_uniform() {
        let n = 1 << 16;
        let mut ones = [0u32; 32];
        for i in 0..n {
            let h = hash32(i, 0x1234_5678_9abc_def0);
            for (b, o) in ones.iter_mut().enumerate() {
                *o += (h >> b) & 1;
            }
        }
        for o in ones {
            let f = f64::from(o) / f64::from(n);
            assert!((f - 0.5).abs() < 0.01, "bit frequency {f}");
        }
        assert_ne!(hash32(1, 7), hash32(1, 8));
        assert_ne!(hash32(1, 7), hash32(1, 7 | (1 << 40)));
    }
}
