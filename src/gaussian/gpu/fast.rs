//! The expanded records of `gaussian_forward_fast_f32` (`crate::kernels::gaussian::forward_fast`,
//! whose module docs give the maths and the error analysis), staged on the host from the
//! prepared Gaussians: per Gaussian M = L'^-1 (the operator that the subtract form's f32 constants
//! apply, each entry an f64 product rounded once), -b = -M (mu - o) and w c 2^o, and whether its
//! tile must keep the subtract form.

pub use super::fast_kernel::FastKernel;
use super::launch::{self, ForwardPlan};
use crate::gaussian::layout::Prepared;
use crate::gaussian::Real;
use crate::kernels::gaussian::forward_fast::{self, FAST_FLAG, FAST_STRIDE};
use crate::kernels::gaussian::scaled::sigma;

/// Which f32 forward kernel `GpuGaussianField` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardKind {
    /// `gaussian_forward_<T>`: the subtract form.
    Subtract,
    /// `gaussian_forward_fast_f32`: the expanded solve (f32 only; f64 runs the subtract form).
    Expanded,
}

impl ForwardKind {
    /// The default: [`ForwardKind::Expanded`], or [`ForwardKind::Subtract`] where
    /// `PTXFLOW_GAUSS_FORWARD=subtract`.
    pub fn from_env() -> Self {
        match std::env::var("PTXFLOW_GAUSS_FORWARD").as_deref() {
            Ok("subtract") => ForwardKind::Subtract,
            _ => ForwardKind::Expanded,
        }
    }
}

/// The expanded kernel's build options: the variant `PTXFLOW_GAUSS_FAST` names
/// (`forward_fast::variant_options`), else the built-in ones.
pub fn options() -> forward_fast::Options {
    std::env::var("PTXFLOW_GAUSS_FAST")
        .ok()
        .and_then(|n| forward_fast::variant_options(&n))
        .unwrap_or_default()
}

/// Blocks of the expanded forward per resident slot that the plan aims at: `PTXFLOW_GAUSS_FAST_WAVES`
/// (1 to 16), else [`WAVES`].
pub fn waves() -> u32 {
    std::env::var("PTXFLOW_GAUSS_FAST_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|w| (1..=16).contains(w))
        .unwrap_or(WAVES)
}

/// The expanded forward's split of (B points) x (n_pad Gaussians) for a kernel with `slots`
/// resident blocks and `points_per_block`: as [`launch::forward_plan`] with `waves` times the
/// slots where the point blocks alone fill less than one wave (more, shorter Gaussian chunks),
/// else with the slots as they are (the points already make several waves; one Gaussian chunk
/// then writes the values directly).
pub fn plan(n_pad: u32, b: u32, slots: u32, waves: u32, points_per_block: u32) -> ForwardPlan {
    let point_blocks = b.div_ceil(points_per_block).max(1);
    let aim = if point_blocks >= slots {
        slots
    } else {
        slots.saturating_mul(waves.max(1))
    };
    launch::forward_plan(n_pad, b, aim, points_per_block)
}

/// The expanded forward's plan aims at this many resident waves of blocks (more, shorter
/// Gaussian chunks): blocks of one SM finish at different times (the scheduler favours older
/// warps), and with one wave the SM then idles with fewer warps than it holds (ncu, H100, one
/// wave: 17.6 of 24 warps active on average). Later waves fill the slots that early blocks
/// leave. The built-in kernel's chunk schedule (`super::fast_schedule`) starts from this plan
/// (its point blocks, and its chunk as the longest where that is longer than the schedule's).
pub const WAVES: u32 = 4;

/// A Gaussian whose G = max_k (|M| |mu - o|)_k exceeds this (or is not finite) is flagged: its
/// tile runs the subtract form (see `forward_fast`'s error analysis).
pub const FAST_G_LIMIT: f64 = 16.0;

/// The origin o: the centre of the means' bounding box, rounded to `T` (0 without Gaussians).
pub fn origin<T: Real>(prepared: &[Prepared<T>]) -> [T; 3] {
    let mut o = [T::ZERO; 3];
    for (k, ok) in o.iter_mut().enumerate() {
        let (lo, hi) = prepared
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), g| {
                let m = g.mu[k].to_f64();
                (l.min(m), h.max(m))
            });
        if lo <= hi {
            *ok = T::from_f64(0.5 * (lo + hi));
        }
    }
    o
}

/// One Gaussian's record ([`FAST_STRIDE`] scalars): M00 M10 M11 M20 M21 M22, -b0 -b1 -b2, w c 2^o
/// (`exp_scale` = 2^o), the flag (1 or 0), 0.
pub fn record<T: Real>(g: &Prepared<T>, o: [T; 3], exp_scale: f64) -> [T; FAST_STRIDE as usize] {
    let s = sigma();
    let f = |x: T| x.to_f64();
    let [i0, i1, i2] = g.inv_diag.map(f);
    // The subtract form's constants: -L_ab as stored (negated exactly), 1 / a_k as rounded.
    let (n10, n20, n21) = (-f(g.l10), -f(g.l20), -f(g.l21));
    let exact = [
        s * i0,
        s * i1 * n10 * i0,
        s * i1,
        s * i2 * (n20 * i0 + n21 * i1 * n10 * i0),
        s * i2 * n21 * i1,
        s * i2,
    ];
    let m = exact.map(T::from_f64);
    let mf = m.map(f);
    let mu = [0, 1, 2].map(|k| f(g.mu[k]) - f(o[k]));
    let rows = [
        (mf[0] * mu[0], mf[0].abs() * mu[0].abs()),
        (
            mf[1] * mu[0] + mf[2] * mu[1],
            mf[1].abs() * mu[0].abs() + mf[2].abs() * mu[1].abs(),
        ),
        (
            mf[3] * mu[0] + mf[4] * mu[1] + mf[5] * mu[2],
            mf[3].abs() * mu[0].abs() + mf[4].abs() * mu[1].abs() + mf[5].abs() * mu[2].abs(),
        ),
    ];
    let g_max = rows.iter().fold(0.0f64, |a, r| a.max(r.1));
    let nb = rows.map(|r| T::from_f64(-r.0));
    let fine = g_max <= FAST_G_LIMIT
        && m.iter().chain(&nb).all(|v| v.to_f64().is_finite())
        && g.weight_norm.to_f64().is_finite();
    let flag = if fine { T::ZERO } else { T::ONE };
    let rec = [
        m[0],
        m[1],
        m[2],
        m[3],
        m[4],
        m[5],
        nb[0],
        nb[1],
        nb[2],
        T::from_f64(g.weight_norm.to_f64() * exp_scale),
        flag,
        T::ZERO,
    ];
    debug_assert_eq!(rec[FAST_FLAG as usize], flag);
    rec
}

/// The records of `prepared`, padded with zero records to `n_pad` Gaussians (a zero record adds
/// exactly 0: w c 2^o = 0 and v' = 0), into `out`; returns the origin.
pub fn stage<T: Real>(
    prepared: &[Prepared<T>],
    n_pad: usize,
    exp_scale: f64,
    out: &mut Vec<T>,
) -> [T; 3] {
    let o = origin(prepared);
    let stride = FAST_STRIDE as usize;
    out.clear();
    out.resize(n_pad * stride, T::ZERO);
    for (g, rec) in prepared.iter().zip(out.chunks_exact_mut(stride)) {
        rec.copy_from_slice(&record(g, o, exp_scale));
    }
    o
}

/// The kernel's per-pair arithmetic on the CPU, operation for operation in `T` (`mul_add` for
/// each multiply-add), for tests and error studies: the negated exponent t = o_exp + |v'|^2 of
/// point `x` against `rec` (the exponential is the kernel's `ex2.approx`, not modelled here).
pub fn pair_t(rec: &[f32], x: [f32; 3], o: [f32; 3], exp2_offset: f32) -> f32 {
    let xt = [x[0] - o[0], x[1] - o[1], x[2] - o[2]];
    let v0 = rec[0].mul_add(xt[0], rec[6]);
    let s1 = rec[2].mul_add(xt[1], rec[7]);
    let v1 = rec[1].mul_add(xt[0], s1);
    let s2 = rec[5].mul_add(xt[2], rec[8]);
    let s2 = rec[4].mul_add(xt[1], s2);
    let v2 = rec[3].mul_add(xt[0], s2);
    let t = v0.mul_add(v0, exp2_offset);
    let t = v1.mul_add(v1, t);
    v2.mul_add(v2, t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gaussian::layout::{pack, prepare};
    use crate::kernels::gaussian::forward::BLOCK;

    #[test]
    fn record_solves_like_the_subtract_form_near_the_origin() {
        let packed = pack(
            [0.25f64, -0.5, 0.75],
            [0.3, 0.1, 0.2, -0.05, 0.08, 0.25],
            1.0,
        );
        let packed: Vec<f32> = packed.iter().map(|&v| v as f32).collect();
        let mut prep = Vec::new();
        prepare(&packed, false, 0.0f32, &mut prep).unwrap();
        let o = origin(&prep);
        assert_eq!(o, [0.25, -0.5, 0.75]);
        let rec = record(&prep[0], o, 1.0);
        assert_eq!(rec[FAST_FLAG as usize], 0.0);
        // At the mean v' = 0; one unit along x0 gives |v'|^2 = d log2(e) / 2.
        assert_eq!(pair_t(&rec, [0.25, -0.5, 0.75], o, 0.0), 0.0);
        let (v, d) = crate::gaussian::pair::solve(&prep[0], [1.25, -0.5, 0.75]);
        let _ = v;
        let t = pair_t(&rec, [1.25, -0.5, 0.75], o, 0.0) as f64;
        let want = d as f64 * std::f64::consts::LOG2_E / 2.0;
        assert!((t - want).abs() <= 1e-6 * want, "{t} vs {want}");
    }

    #[test]
    fn plan_adds_waves_only_where_the_points_fill_less_than_one() {
        let (slots, ppb) = (132 * 6, BLOCK * 6);
        // 10000 x 100000 (the bench): 131 point blocks, 23 chunks of 448 (3.8 waves).
        let p = plan(10240, 100_000, slots, WAVES, ppb);
        assert_eq!((p.point_blocks, p.chunks, p.chunk_len), (131, 23, 448));
        // As many point blocks as slots or more: one chunk, as the subtract kernel's plan.
        for b in [slots * ppb, 1_081_345] {
            let p = plan(512, b, slots, WAVES, ppb);
            assert_eq!(p.chunks, 1, "{p:?}");
            assert_eq!(p, launch::forward_plan(512, b, slots, ppb));
        }
        // One wave asked for: the subtract kernel's plan.
        assert_eq!(
            plan(10240, 100_000, slots, 1, ppb),
            launch::forward_plan(10240, 100_000, slots, ppb)
        );
        // Few points: chunks of CHUNK_ALIGN Gaussians at most.
        assert_eq!(plan(10240, 500, slots, WAVES, ppb).chunk_len, 32);
    }

    #[test]
    fn far_or_small_gaussians_are_flagged() {
        let mk = |mu: [f64; 3], a: f64| {
            let packed = pack(mu, [a, 0.0, a, 0.0, 0.0, a], 1.0);
            let packed: Vec<f32> = packed.iter().map(|&v| v as f32).collect();
            let mut prep = Vec::new();
            prepare(&packed, false, 0.0f32, &mut prep).unwrap();
            prep[0]
        };
        let o = [0.0f32; 3];
        // G = sigma |mu| / a: 0.85 * 1 / 0.1 = 8.5 (fast), 0.85 * 100 / 0.1 = 850 (flagged).
        assert_eq!(record(&mk([1.0, 0.0, 0.0], 0.1), o, 1.0)[10], 0.0);
        assert_eq!(record(&mk([100.0, 0.0, 0.0], 0.1), o, 1.0)[10], 1.0);
        assert_eq!(record(&mk([1.0, 0.0, 0.0], 0.001), o, 1.0)[10], 1.0);
    }
}
