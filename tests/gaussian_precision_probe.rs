//! Scratch probe: which f32 roundings dominate the badly-conditioned point-gradient error.
mod gaussian_common;
use gaussian_common::*;
use ptxflow::gaussian::layout::STRIDE;
use ptxflow::rng::Rng;

fn r32(x: f64) -> f64 { x as f32 as f64 }

/// s for one pair with f32 rounding applied at the steps in `mask`.
fn pair_s(g: &[f64], x: &[f64], eps: f64, mask: u32, fused: bool) -> ([f64; 3], [f64; 3]) {
    let rd = |bit: u32, v: f64| if mask & bit != 0 { r32(v) } else { v };
    let r = [rd(1, x[0] - g[0]), rd(1, x[1] - g[1]), rd(1, x[2] - g[2])];
    let a = [rd(2, g[3] + eps), rd(2, g[5] + eps), rd(2, g[8] + eps)];
    let inv = [rd(2, 1.0 / a[0]), rd(2, 1.0 / a[1]), rd(2, 1.0 / a[2])];
    let (l10, l20, l21) = (g[4], g[6], g[7]);
    // ma: c - l*v either fused (one rounding) or two roundings
    let ma = |bit: u32, c: f64, l: f64, v: f64| if fused { rd(bit, c - l * v) } else { rd(bit, c - rd(bit, l * v)) };
    let v0 = rd(4, r[0] * inv[0]);
    let t1 = ma(4, r[1], l10, v0);
    let v1 = rd(4, t1 * inv[1]);
    let t2 = ma(4, r[2], l20, v0);
    let t2 = ma(4, t2, l21, v1);
    let v2 = rd(4, t2 * inv[2]);
    let s2 = rd(8, v2 * inv[2]);
    let t1 = ma(8, v1, l21, s2);
    let s1 = rd(8, t1 * inv[1]);
    let t0 = ma(8, v0, l10, s1);
    let t0 = ma(8, t0, l20, s2);
    let s0 = rd(8, t0 * inv[0]);
    ([v0, v1, v2], [s0, s1, s2])
}

#[test]
fn probe() {
    let eps = 1e-6;
    for (name, p) in [("badly", badly_conditioned(50, 400, 25)), ("well", well_conditioned(50, 400, 24))] {
        let gs = round_to_f32(&p.gaussians);
        let ps = round_to_f32(&p.points);
        let n = gs.len() / STRIDE;
        let b = ps.len() / 3;
        let mut rng = Rng::new(26);
        let gv: Vec<f64> = (0..b).map(|_| r32(rng.range(-1.0, 1.0))).collect();
        for (label, mask, fused) in [("all", 15, false), ("all fma", 15, true), ("r only", 1, false), ("a/inv only", 2, false), ("fwd ops", 4, false), ("back ops", 8, false), ("fwd ops fma", 4, true), ("back ops fma", 8, true), ("no r", 14, true), ("no inv", 13, true)] {
            let mut worst = 0.0f64;
            let mut worst_l = 0.0f64;
            for i in 0..b {
                let x = &ps[i * 3..i * 3 + 3];
                let mut sum = [0.0; 3];
                let mut abs = [0.0; 3];
                for j in 0..n {
                    let g = &gs[j * STRIDE..(j + 1) * STRIDE];
                    let (v, s) = pair_s(g, x, eps, 0, false);
                    let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                    if d > 174.0 { continue; }
                    let q = -g[9] * gv[i] * (-0.5 * d).exp();
                    let (va, sa) = pair_s(g, x, eps, mask, fused);
                    for k in 0..3 {
                        sum[k] += q * (sa[k] - s[k]);
                        abs[k] += (q * s[k]).abs();
                    }
                    // L gradient terms per pair (relative to |q s_a v_b|)
                    for (ra, cb) in [(1usize, 0usize), (2, 0), (2, 1)] {
                        let t = s[ra] * v[cb];
                        if t != 0.0 { worst_l = worst_l.max((sa[ra] * va[cb] - t).abs() / t.abs()); }
                    }
                }
                for k in 0..3 {
                    if abs[k] > 0.0 { worst = worst.max(sum[k].abs() / abs[k]); }
                }
            }
            eprintln!("{name:6} {label:14}: point grad worst rel {worst:.2e}   per-pair s_a v_b worst rel {worst_l:.2e}");
        }
    }
}

#[test]
fn worst_pair() {
    let eps = 1e-6;
    let p = badly_conditioned(50, 400, 25);
    let gs = round_to_f32(&p.gaussians);
    let ps = round_to_f32(&p.points);
    let n = gs.len() / STRIDE;
    let i = 276;
    let x = &ps[i * 3..i * 3 + 3];
    for j in 0..n {
        let g = &gs[j * STRIDE..(j + 1) * STRIDE];
        let (v, s) = pair_s(g, x, eps, 0, false);
        let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        if d > 174.0 { continue; }
        let e = (-0.5 * d).exp();
        let (_, sa) = pair_s(g, x, eps, 15, true);
        eprintln!("j={j} d={d:.3} e={e:.3e} w={:.3} kappa={:.2e} x={:?} mu={:?} L={:?}\n   v={v:?}\n   s={s:?}\n   rel err s = {:?}", g[9], chol_condition(&gs, j, eps), x, &g[0..3], &g[3..9], [0,1,2].map(|k| (sa[k]-s[k])/s[k]));
    }
}

fn two_sum(a: f32, b: f32) -> (f32, f32) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}
fn split(x: f64) -> (f32, f32) {
    let h = x as f32;
    (h, (x - h as f64) as f32)
}

/// Unit-triangular formulation L = M D: y = M^-1 r, v = D^-1 y, z = D^-2 y, s = M^-T z.
fn s_unit(g: &[f64], x: &[f64], eps: f64, flags: u32) -> ([f64; 3], [f64; 3]) {
    let a = [g[3] + eps, g[5] + eps, g[8] + eps];
    let m10 = split(g[4] / a[0]);
    let m20 = split(g[6] / a[0]);
    let m21 = split(g[7] / a[1]);
    let inv = [split(1.0 / a[0]), split(1.0 / a[1]), split(1.0 / a[2])];
    let inv2 = [split(1.0 / (a[0] * a[0])), split(1.0 / (a[1] * a[1])), split(1.0 / (a[2] * a[2]))];
    let xf = [x[0] as f32, x[1] as f32, x[2] as f32];
    let muf = [g[0] as f32, g[1] as f32, g[2] as f32];
    let r: Vec<(f32, f32)> = (0..3).map(|k| if flags & 1 != 0 { two_sum(xf[k], -muf[k]) } else { (xf[k] - muf[k], 0.0) }).collect();
    let lo = flags & 2 != 0; // use lo parts of M
    let m = |p: (f32, f32)| if lo { p.1 } else { 0.0 };
    // y0 = rh0 (+ rl0)
    let y0 = r[0].0;
    let y0l = r[0].1;
    let y1h = (-m10.0).mul_add(y0, r[1].0);
    let c1 = (-m(m10)).mul_add(y0, r[1].1);
    let c1 = (-m10.0).mul_add(y0l, c1);
    let y1 = y1h + c1;
    let y2h = (-m20.0).mul_add(y0, r[2].0);
    let y2h = (-m21.0).mul_add(y1, y2h);
    let c2 = (-m(m20)).mul_add(y0, r[2].1);
    let c2 = (-m20.0).mul_add(y0l, c2);
    let c2 = (-m(m21)).mul_add(y1, c2);
    let c2 = if flags & 16 != 0 { (-m21.0).mul_add((y1h - y1) + c1, c2) } else { c2 };
    let y2 = y2h + c2;
    let y0 = if flags & 4 != 0 { y0 + y0l } else { y0 };
    let y = [y0, y1, y2];
    let v = [0, 1, 2].map(|k| y[k] * inv[k].0);
    let z = [0, 1, 2].map(|k| if flags & 8 != 0 { y[k] * inv2[k].0 } else { (y[k] * inv[k].0) * inv[k].0 });
    let s2 = z[2];
    let s1 = (-m21.0).mul_add(s2, z[1]);
    let s1 = (-m(m21)).mul_add(s2, s1);
    let s0 = (-m10.0).mul_add(s1, z[0]);
    let s0 = (-m20.0).mul_add(s2, s0);
    let s0 = (-m(m10)).mul_add(s1, s0);
    let s0 = (-m(m20)).mul_add(s2, s0);
    (v.map(|t| t as f64), [s0 as f64, s1 as f64, s2 as f64])
}

#[test]
fn probe_unit() {
    let eps = 1e-6;
    for (name, p) in [("badly", badly_conditioned(50, 400, 25)), ("well", well_conditioned(50, 400, 24)), ("random", { let mut rng = Rng::new(23); let g = ptxflow::gaussian::generate::random_gaussians(&mut rng, 300, &Default::default()); let pts = ptxflow::gaussian::generate::sample_points(&mut rng, &g, 1000, 1.5); Problem { name: "random", gaussians: g, points: pts } })] {
        let gs = round_to_f32(&p.gaussians);
        let ps = round_to_f32(&p.points);
        let n = gs.len() / STRIDE;
        let b = ps.len() / 3;
        let mut rng = Rng::new(26);
        let gv: Vec<f64> = (0..b).map(|_| r32(rng.range(-1.0, 1.0))).collect();
        for flags in [3u32, 19, 27, 31] {
            let mut worst = 0.0f64;
            for i in 0..b {
                let x = &ps[i * 3..i * 3 + 3];
                let mut sum = [0.0; 3];
                let mut abs = [0.0; 3];
                for j in 0..n {
                    let g = &gs[j * STRIDE..(j + 1) * STRIDE];
                    let (v, s) = pair_s(g, x, eps, 0, false);
                    let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                    if d > 174.0 { continue; }
                    let q = -g[9] * gv[i] * (-0.5 * d).exp();
                    let (_, sa) = s_unit(g, x, eps, flags);
                    for k in 0..3 {
                        sum[k] += q * (sa[k] - s[k]);
                        abs[k] += (q * s[k]).abs();
                    }
                }
                for k in 0..3 {
                    if abs[k] > 0.0 { worst = worst.max(sum[k].abs() / abs[k]); }
                }
            }
            eprintln!("{name:6} unit flags {flags:2}: point grad worst rel {worst:.2e}");
        }
    }
}

/// Unit formulation in f64 with f32 rounding at the steps in `mask` (fma = one rounding).
fn s_unit_mask(g: &[f64], x: &[f64], eps: f64, mask: u32) -> [f64; 3] {
    let rd = |bit: u32, v: f64| if mask & bit != 0 { r32(v) } else { v };
    let a = [g[3] + eps, g[5] + eps, g[8] + eps];
    let m10 = rd(2, g[4] / a[0]);
    let m20 = rd(2, g[6] / a[0]);
    let m21 = rd(2, g[7] / a[1]);
    let inv2 = [rd(16, 1.0 / (a[0] * a[0])), rd(16, 1.0 / (a[1] * a[1])), rd(16, 1.0 / (a[2] * a[2]))];
    let r = [rd(1, x[0] - g[0]), rd(1, x[1] - g[1]), rd(1, x[2] - g[2])];
    let y0 = r[0];
    let y1 = rd(4, r[1] - m10 * y0);
    let y2 = rd(8, r[2] - m20 * y0);
    let y2 = rd(8, y2 - m21 * y1);
    let z = [rd(32, y0 * inv2[0]), rd(32, y1 * inv2[1]), rd(32, y2 * inv2[2])];
    let s2 = z[2];
    let s1 = rd(64, z[1] - m21 * s2);
    let s0 = rd(128, z[0] - m10 * s1);
    let s0 = rd(128, s0 - m20 * s2);
    [s0, s1, s2]
}

#[test]
fn probe_unit_mask() {
    let eps = 1e-6;
    let p = badly_conditioned(50, 400, 25);
    let gs = round_to_f32(&p.gaussians);
    let ps = round_to_f32(&p.points);
    let n = gs.len() / STRIDE;
    let b = ps.len() / 3;
    let mut rng = Rng::new(26);
    let gv: Vec<f64> = (0..b).map(|_| r32(rng.range(-1.0, 1.0))).collect();
    for (label, mask) in [("all", 255u32), ("r", 1), ("M", 2), ("y1", 4), ("y2", 8), ("inv2", 16), ("z", 32), ("s1", 64), ("s0", 128), ("all but r,M", 252)] {
        let mut worst = (0.0f64, 0, 0);
        for i in 0..b {
            let x = &ps[i * 3..i * 3 + 3];
            let mut sum = [0.0; 3];
            let mut abs = [0.0; 3];
            for j in 0..n {
                let g = &gs[j * STRIDE..(j + 1) * STRIDE];
                let (v, s) = pair_s(g, x, eps, 0, false);
                let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                if d > 174.0 { continue; }
                let q = -g[9] * gv[i] * (-0.5 * d).exp();
                let sa = s_unit_mask(g, x, eps, mask);
                for k in 0..3 {
                    sum[k] += q * (sa[k] - s[k]);
                    abs[k] += (q * s[k]).abs();
                }
            }
            for k in 0..3 {
                if abs[k] > 0.0 && sum[k].abs() / abs[k] > worst.0 { worst = (sum[k].abs() / abs[k], i, k); }
            }
        }
        eprintln!("unit mask {label:12}: point grad worst rel {:.2e} at point {} comp {}", worst.0, worst.1, worst.2);
    }
}

/// L formulation, f32 with fma: v0, v1 two-term by remainders; flags: 1 r two-sum, 2 al, 4 v2 remainder.
fn s_lrem(g: &[f64], x: &[f64], eps: f64, flags: u32) -> ([f64; 3], [f64; 3]) {
    let a = [g[3] + eps, g[5] + eps, g[8] + eps];
    let ah = a.map(|t| split(t));
    let al = |k: usize| if flags & 2 != 0 { ah[k].1 } else { 0.0 };
    let inv = a.map(|t| (1.0 / t) as f32);
    let nl10 = -(g[4] as f32);
    let nl20 = -(g[6] as f32);
    let nl21 = -(g[7] as f32);
    let xf = [x[0] as f32, x[1] as f32, x[2] as f32];
    let muf = [g[0] as f32, g[1] as f32, g[2] as f32];
    let r: Vec<(f32, f32)> = (0..3).map(|k| if flags & 1 != 0 { two_sum(xf[k], -muf[k]) } else { (xf[k] - muf[k], 0.0) }).collect();
    let v0h = r[0].0 * inv[0];
    let rem0 = (-ah[0].0).mul_add(v0h, r[0].0) + (-al(0)).mul_add(v0h, r[0].1);
    let v0l = rem0 * inv[0];
    let (t1, t1l) = if flags & 16 != 0 {
        let e = r[1].0 as f64 + nl10 as f64 * v0h as f64;
        let (h, l) = split(e);
        (h, l + nl10.mul_add(v0l, r[1].1))
    } else { (nl10.mul_add(v0h, r[1].0) + nl10.mul_add(v0l, r[1].1), 0.0) };
    let v1h = t1 * inv[1];
    let v1l = ((-ah[1].0).mul_add(v1h, t1) + t1l - al(1) * v1h) * inv[1];
    let t2m = if flags & 8 != 0 { (r[2].0 as f64 + nl20 as f64 * v0h as f64 + nl21 as f64 * v1h as f64) as f32 } else { nl21.mul_add(v1h, nl20.mul_add(v0h, r[2].0)) };
    let t2 = t2m + nl21.mul_add(v1l, nl20.mul_add(v0l, r[2].1));
    let v2h = t2 * inv[2];
    let v2 = if flags & 4 != 0 { v2h + ((-ah[2].0).mul_add(v2h, t2) - al(2) * v2h) * inv[2] } else { v2h };
    let v = [v0h + v0l, v1h + v1l, v2];
    let s2 = v[2] * inv[2];
    let (s1, s0) = if flags & 32 != 0 {
        let s1 = (nl21.mul_add(s2, v1h) + v1l) * inv[1];
        (s1, (nl20.mul_add(s2, nl10.mul_add(s1, v0h)) + v0l) * inv[0])
    } else {
        let s1 = nl21.mul_add(s2, v[1]) * inv[1];
        (s1, nl20.mul_add(s2, nl10.mul_add(s1, v[0])) * inv[0])
    };
    (v.map(|t| t as f64), [s0 as f64, s1 as f64, s2 as f64])
}

fn problems() -> Vec<(&'static str, Problem)> {
    let mut rng = Rng::new(23);
    let g = ptxflow::gaussian::generate::random_gaussians(&mut rng, 300, &Default::default());
    let pts = ptxflow::gaussian::generate::sample_points(&mut rng, &g, 1000, 1.5);
    vec![("badly", badly_conditioned(50, 400, 25)), ("well", well_conditioned(50, 400, 24)), ("random", Problem { name: "random", gaussians: g, points: pts }), ("badly2", badly_conditioned(50, 400, 6)), ("badly3", badly_conditioned(200, 2000, 99))]
}

fn eval(f: &dyn Fn(&[f64], &[f64]) -> [f64; 3]) {
    let eps = 1e-6;
    for (name, p) in problems() {
        let gs = round_to_f32(&p.gaussians);
        let ps = round_to_f32(&p.points);
        let n = gs.len() / STRIDE;
        let b = ps.len() / 3;
        let mut rng = Rng::new(26);
        let gv: Vec<f64> = (0..b).map(|_| r32(rng.range(-1.0, 1.0))).collect();
        let mut worst = (0.0f64, 0, 0);
        for i in 0..b {
            let x = &ps[i * 3..i * 3 + 3];
            let mut sum = [0.0; 3];
            let mut abs = [0.0; 3];
            for j in 0..n {
                let g = &gs[j * STRIDE..(j + 1) * STRIDE];
                let (v, s) = pair_s(g, x, eps, 0, false);
                let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
                if d > 174.0 { continue; }
                let q = -g[9] * gv[i] * (-0.5 * d).exp();
                let sa = f(g, x);
                for k in 0..3 {
                    sum[k] += q * (sa[k] - s[k]);
                    abs[k] += (q * s[k]).abs();
                }
            }
            for k in 0..3 {
                if abs[k] > 0.0 && sum[k].abs() / abs[k] > worst.0 { worst = (sum[k].abs() / abs[k], i, k); }
            }
        }
        eprint!("  {name}: {:.2e}", worst.0);
    }
    eprintln!();
}

#[test]
fn probe_lrem() {
    eprint!("baseline fma:"); eval(&|g, x| pair_s(g, x, 1e-6, 15, true).1);
    for flags in [3u32, 19, 27, 59] {
        eprint!("lrem flags {flags}:"); eval(&|g, x| s_lrem(g, x, 1e-6, flags).1);
    }
}

fn kappa_f(g: &[f64], eps: f64) -> f64 {
    let (a0, a1, a2) = (g[3] + eps, g[5] + eps, g[8] + eps);
    let (l10, l20, l21) = (g[4], g[6], g[7]);
    // inverse of lower triangular
    let i10 = -l10 / (a0 * a1);
    let i21 = -l21 / (a1 * a2);
    let i20 = (l21 * l10 / a1 - l20) / (a0 * a2);
    let nl = (a0 * a0 + a1 * a1 + a2 * a2 + l10 * l10 + l20 * l20 + l21 * l21).sqrt();
    let ni = (1.0 / (a0 * a0) + 1.0 / (a1 * a1) + 1.0 / (a2 * a2) + i10 * i10 + i20 * i20 + i21 * i21).sqrt();
    nl * ni
}

#[test]
fn probe_kappa() {
    let mut rng = Rng::new(5);
    let g = ptxflow::gaussian::generate::random_gaussians(&mut rng, 100000, &Default::default());
    for (name, gs) in [("default", g), ("badly", badly_conditioned(2000, 1, 25).gaussians), ("well", well_conditioned(2000, 1, 24).gaussians)] {
        let ks: Vec<f64> = gs.chunks_exact(STRIDE).map(|g| kappa_f(g, 1e-6)).collect();
        let cnt = |t: f64| ks.iter().filter(|&&k| k > t).count() as f64 / ks.len() as f64;
        eprintln!("{name}: max {:.1}  >16 {:.4} >32 {:.4} >64 {:.4} >128 {:.4} >256 {:.4}", ks.iter().cloned().fold(0.0, f64::max), cnt(16.0), cnt(32.0), cnt(64.0), cnt(128.0), cnt(256.0));
    }
}

#[test]
fn probe_point() {
    use ptxflow::gaussian::layout::prepare;
    use ptxflow::gaussian::pair;
    let eps = 1e-6;
    let p = badly_conditioned(50, 400, 25);
    let gs = round_to_f32(&p.gaussians);
    let ps = round_to_f32(&p.points);
    let g32: Vec<f32> = gs.iter().map(|&v| v as f32).collect();
    let mut prep = Vec::new();
    prepare(&g32, false, 1e-6f32, &mut prep).unwrap();
    let n = gs.len() / STRIDE;
    let i: usize = std::env::var("PT").map(|v| v.parse().unwrap()).unwrap_or(176);
    let x = &ps[i * 3..i * 3 + 3];
    let xf = [x[0] as f32, x[1] as f32, x[2] as f32];
    for j in 0..n {
        let g = &gs[j * STRIDE..(j + 1) * STRIDE];
        let (v, s) = pair_s(g, x, eps, 0, false);
        let d = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        if d > 174.0 { continue; }
        let e = (-0.5 * d).exp();
        let (vc, _) = pair::solve_compensated(&prep[j], xf);
        let sc = pair::back_solve(&prep[j], vc);
        let (vf, _) = pair::solve(&prep[j], xf);
        let sf = pair::back_solve(&prep[j], vf);
        eprintln!("j={j} d={d:.2} e={e:.2e} kf={:.1} comp={} s={s:?}\n  rel err comp s {:?} v {:?}\n  rel err fast s {:?}", kappa_f(g, eps), prep[j].compensated,
            [0,1,2].map(|k| (sc[k] as f64 - s[k]) / s[k]), [0,1,2].map(|k| (vc[k] as f64 - v[k]) / v[k]), [0,1,2].map(|k| (sf[k] as f64 - s[k]) / s[k]));
    }
}

#[test]
fn probe_threshold() {
    use ptxflow::gaussian::layout::prepare;
    use ptxflow::gaussian::pair;
    let mut rng = Rng::new(5);
    let g = ptxflow::gaussian::generate::random_gaussians(&mut rng, 100000, &Default::default());
    let ks: Vec<f64> = g.chunks_exact(STRIDE).map(|g| kappa_f(g, 1e-6)).collect();
    for t in [6.0, 8.0, 10.0, 12.0, 16.0] {
        eprintln!("default spec: fraction > {t}: {:.2e}", ks.iter().filter(|&&k| k > t).count() as f64 / ks.len() as f64);
    }
    for t in [6.0f64, 8.0, 12.0, 16.0, 24.0] {
        for fused in [false, true] {
            eprint!("threshold {t} fused {fused}:");
            eval(&|g, x| {
                let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
                let mut prep = Vec::new();
                prepare(&g32, false, 1e-6f32, &mut prep).unwrap();
                let xf = [x[0] as f32, x[1] as f32, x[2] as f32];
                if kappa_f(g, 1e-6) > t {
                    let (v, _) = pair::solve_compensated(&prep[0], xf);
                    if fused {
                        let pr = &prep[0];
                        let s2 = v[2] * pr.inv_diag[2];
                        let s1 = (-pr.l21).mul_add(s2, v[1]) * pr.inv_diag[1];
                        let s0 = (-pr.l20).mul_add(s2, (-pr.l10).mul_add(s1, v[0])) * pr.inv_diag[0];
                        return [s0 as f64, s1 as f64, s2 as f64];
                    }
                    pair::back_solve(&prep[0], v).map(|t| t as f64)
                } else if fused {
                    pair_s(g, x, 1e-6, 15, true).1
                } else {
                    let (v, _) = pair::solve(&prep[0], xf);
                    pair::back_solve(&prep[0], v).map(|t| t as f64)
                }
            });
        }
    }
}
