//! The f32 forward with the expanded solve (`gaussian_forward_fast_f32`, records from
//! `ptxflow::gaussian::gpu::fast`) against the CPU f64 field, with the measure and tolerance of
//! tests/gaussian_gpu.rs (max_i |f_i - f_ref_i| / A_i <= 1e-5, A_i = sum_j |w_j c_j e_ij|, terms
//! beyond the f32 cutoff allowed in full):
//! - its arithmetic on the CPU (operation for operation in f32, the exponential exact), beside
//!   the subtract form's, on every forward set of the GPU tests (the 3 x 1081345 one included)
//!   and on sets far from the origin or with tiny Gaussians, whose Gaussians are flagged;
//! - the kernel in the PTX interpreter, on a set whose tiles mix flagged and plain Gaussians,
//!   and bit-identical to the subtract kernel where every tile is flagged;
//! - the kernel on the GPU (`ForwardKind::Expanded`), the same sets, outputs poisoned first.

mod common;
mod gaussian_support;

use gaussian_support::device::{options, random_problem, rounded, sanitizing};
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::gpu::fast::{self, FAST_G_LIMIT};
use ptxflow::gaussian::gpu::launch::forward_plan;
use ptxflow::gaussian::gpu::{stage_prepared, ForwardKind};
use ptxflow::gaussian::layout::{self, Prepared, STRIDE};
use ptxflow::gaussian::{GaussianFieldOps, GpuGaussianField, GpuReal, Real};
use ptxflow::kernels::gaussian::common::{f32_exp_scale, F32_EXP_OFFSET, GAUSSIAN_PAD};
use ptxflow::kernels::gaussian::forward::BLOCK;
use ptxflow::kernels::gaussian::forward_fast::{self, FAST_FLAG, FAST_STRIDE};
use ptxflow::kernels::gaussian::reduce;
use ptxflow::kernels::gaussian::scaled::sigma;
use ptxflow::kernels::KernelId;
use ptxflow::ptx::Target;
use ptxflow::sim::{Arg, Grid, Memory, Options, Program};

const TOL: f64 = 1e-5;

/// `p` moved by `by` (means and points): translation leaves the field unchanged.
fn shifted(p: &Problem, by: [f64; 3], name: &'static str) -> Problem {
    let mut g = p.gaussians.clone();
    for row in g.chunks_exact_mut(STRIDE) {
        for k in 0..3 {
            row[k] += by[k];
        }
    }
    let pts = p
        .points
        .chunks_exact(3)
        .flat_map(|x| [x[0] + by[0], x[1] + by[1], x[2] + by[2]])
        .collect();
    Problem {
        name,
        gaussians: g,
        points: pts,
    }
}

/// `p` with every `every`-th Gaussian shrunk 100 times (so that it is flagged) and a point
/// near each of them.
fn with_tiny(p: &Problem, every: usize, name: &'static str) -> Problem {
    let mut g = p.gaussians.clone();
    let mut pts = p.points.clone();
    for (j, row) in g.chunks_exact_mut(STRIDE).enumerate() {
        if j % every == 0 {
            for v in &mut row[3..9] {
                *v *= 0.01;
            }
            pts.extend([row[0] + 0.5 * row[3], row[1], row[2] - 0.5 * row[8]]);
        }
    }
    Problem {
        name,
        gaussians: g,
        points: pts,
    }
}

/// Worst (|f_i - f_ref_i| - flushed_i) / A_i of `values` on `q` (inputs already f32-rounded).
fn worst_error(q: &Problem, normalised: bool, values: &[f64]) -> f64 {
    let eps = options(normalised).diag_eps;
    let n = q.gaussians.len() / STRIDE;
    let (reference, abs) = reference_field(&q.gaussians, &q.points, normalised, eps);
    let d = reference_distances(&q.gaussians, &q.points, eps);
    let cutoff = f32::EXP_CUTOFF_D.to_f64();
    let mut worst = 0.0f64;
    for (i, row) in d.chunks_exact(n).enumerate() {
        let mut flushed = 0.0;
        for (j, &dij) in row.iter().enumerate() {
            if dij > cutoff {
                let l = chol_matrix(&q.gaussians, j, eps);
                let c = if normalised {
                    (2.0 * std::f64::consts::PI).powf(-1.5) / l.determinant()
                } else {
                    1.0
                };
                flushed += (q.gaussians[j * STRIDE + 9] * c * (-0.5 * dij).exp()).abs();
            }
        }
        let err = (values[i] - reference[i]).abs();
        assert!(
            err.is_finite(),
            "{} point {i}: {} vs {}",
            q.name,
            values[i],
            reference[i]
        );
        worst = worst.max((err - flushed).max(0.0) / abs[i].max(1e-300));
    }
    worst
}

fn prepared(q: &Problem, normalised: bool) -> Vec<Prepared<f32>> {
    let mut prep = Vec::new();
    let eps = options(normalised).diag_eps as f32;
    layout::prepare(&convert::<f32>(&q.gaussians), normalised, eps, &mut prep).unwrap();
    prep
}

/// The kernel's f32 exponential, exactly rounded (`ex2.approx.ftz` flushes below 2^-126).
fn exp2_neg(t: f32) -> f32 {
    let e = (-(t as f64)).exp2();
    if e < f32::MIN_POSITIVE as f64 {
        0.0
    } else {
        e as f32
    }
}

/// The f32 field of both forms on the CPU: (subtract form of `scaled::solve_scaled`, expanded
/// form with the subtract form kept for flagged Gaussians), and how many Gaussians are flagged.
fn emulate(q: &Problem, normalised: bool) -> (Vec<f64>, Vec<f64>, usize) {
    let prep = prepared(q, normalised);
    let mut recs = Vec::new();
    let o = fast::stage(&prep, prep.len(), f32_exp_scale(), &mut recs);
    let off = F32_EXP_OFFSET as f32;
    let s = sigma();
    let scaled: Vec<([f32; 3], [f32; 3])> = prep
        .iter()
        .map(|g| {
            let nl = [g.l10, g.l20, g.l21].map(|l| (-(l as f64) * (1.0 / s)) as f32);
            (nl, g.inv_diag.map(|i| (i as f64 * s) as f32))
        })
        .collect();
    let stride = FAST_STRIDE as usize;
    let flagged = recs
        .chunks_exact(stride)
        .filter(|r| r[FAST_FLAG as usize] != 0.0)
        .count();
    let (mut sub, mut exp) = (Vec::new(), Vec::new());
    for x in convert::<f32>(&q.points).chunks_exact(3) {
        let (mut fs, mut fe) = (0.0f32, 0.0f32);
        for (j, g) in prep.iter().enumerate() {
            let (nl, inv) = scaled[j];
            let r = [x[0] - g.mu[0], x[1] - g.mu[1], x[2] - g.mu[2]];
            let v0 = r[0] * inv[0];
            let v1 = nl[0].mul_add(v0, r[1]) * inv[1];
            let t2 = nl[1].mul_add(v0, r[2]);
            let v2 = nl[2].mul_add(v1, t2) * inv[2];
            let t = v0.mul_add(v0, off);
            let t = v1.mul_add(v1, t);
            let t = v2.mul_add(v2, t);
            let rec = &recs[j * stride..(j + 1) * stride];
            let wn = rec[9];
            let es = exp2_neg(t);
            fs = wn.mul_add(es, fs);
            let ee = if rec[FAST_FLAG as usize] != 0.0 {
                es
            } else {
                exp2_neg(fast::pair_t(rec, [x[0], x[1], x[2]], o, off))
            };
            fe = wn.mul_add(ee, fe);
        }
        sub.push(fs as f64);
        exp.push(fe as f64);
    }
    (sub, exp, flagged)
}

fn problems() -> Vec<Problem> {
    let mut v = vec![
        random_problem(1, 1, 1),
        random_problem(7, 33, 2),
        random_problem(300, 1000, 3),
        random_problem(1000, 2049, 4),
        well_conditioned(50, 400, 5),
        badly_conditioned(50, 400, 6),
    ];
    let base = random_problem(300, 700, 29);
    v.push(shifted(&base, [1000.0, -500.0, 250.0], "far from 0"));
    v.push(with_tiny(&base, 150, "tiny Gaussians"));
    v
}

#[test]
fn expanded_arithmetic_matches_cpu_f64_like_the_subtract_form() {
    let mut sets = problems();
    if !sanitizing() {
        // The GPU tests' one-chunk set (132 SMs), whose tail points stress the exponent.
        sets.push(random_problem(3, 132 * 16 * 512 + 1, 7));
    }
    for p in &sets {
        for normalised in [false, true] {
            let q = rounded::<f32>(p);
            let (sub, exp, flagged) = emulate(&q, normalised);
            let (es, ee) = (
                worst_error(&q, normalised, &sub),
                worst_error(&q, normalised, &exp),
            );
            eprintln!(
                "cpu emulation {:17} N={:5} B={:7} normalised={normalised:5}: subtract {es:.2e}, expanded {ee:.2e} ({flagged} flagged, G limit {FAST_G_LIMIT})",
                q.name,
                q.gaussians.len() / STRIDE,
                q.points.len() / 3
            );
            assert!(ee <= TOL, "{}: {ee:e}", q.name);
        }
    }
}

fn program_of(m: &ptxflow::ptx::Module) -> Program {
    Program::parse(&m.emit().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

fn run(prog: &Program, grid: (u32, u32), args: &[Arg], mem: &mut Memory, threads: u32) {
    let g = Grid {
        blocks: (grid.0, grid.1, 1),
        threads: (threads, 1, 1),
        dyn_shared_bytes: 0,
    };
    prog.run_with(g, args, mem, Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Field values of the interpreted forward (`fast`: the expanded kernel, else the subtract one)
/// with 7 resident blocks (several Gaussian chunks), and the row sums.
fn sim_forward(q: &Problem, normalised: bool, fast_kernel: bool) -> Vec<f64> {
    let prep = prepared(q, normalised);
    let n_pad = prep.len().div_ceil(GAUSSIAN_PAD as usize) * GAUSSIAN_PAD as usize;
    let (mut staged, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prep, n_pad, &mut staged, &mut comp);
    let o = fast::stage(&prep, n_pad, f32_exp_scale(), &mut recs);
    let points = convert::<f32>(&q.points);
    let b = points.len() / 3;
    let plan = forward_plan(n_pad as u32, b as u32, 7, f32::FORWARD_POINTS_PER_BLOCK);
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &staged);
    let fast_a = mem.upload("fast", &recs);
    let pts_a = mem.upload("points", &points);
    let part = mem.upload("partial", &vec![f32::NAN; plan.chunks as usize * b]);
    let out = mem.upload("values", &vec![f32::NAN; b]);
    let grid = (plan.point_blocks, plan.chunks);
    let (np, cl, bb) = (
        Arg::U32(n_pad as u32),
        Arg::U32(plan.chunk_len),
        Arg::U32(b as u32),
    );
    if fast_kernel {
        let prog = program_of(&KernelId::GaussianForwardFastF32.build(Target::Sm75));
        let mut args = vec![
            prep_a,
            fast_a,
            np,
            cl,
            pts_a,
            bb,
            part,
            Arg::F32(o[0]),
            Arg::F32(o[1]),
            Arg::F32(o[2]),
        ];
        // The built-in kernel's fused row sum writes `values` too (the row sums below then
        // write the same values); its chunk starts are the plan's equal chunks.
        let built_in = forward_fast::Options::default();
        if built_in.fused {
            let counters = vec![0u32; plan.point_blocks as usize];
            args.extend([out, mem.upload("counters", &counters)]);
        }
        if built_in.schedule.is_some() {
            let starts: Vec<u32> = (0..=plan.chunks)
                .map(|c| (c * plan.chunk_len).min(n_pad as u32))
                .collect();
            args.push(mem.upload("starts", &starts));
        }
        run(&prog, grid, &args, &mut mem, BLOCK);
    } else {
        let prog = program_of(&KernelId::GaussianForwardF32.build(Target::Sm75));
        run(
            &prog,
            grid,
            &[prep_a, np, cl, pts_a, bb, part],
            &mut mem,
            BLOCK,
        );
    }
    let rows = program_of(&KernelId::GaussianReduceRowsF32.build(Target::Sm75));
    let args = [part, Arg::U32(plan.chunks), bb, bb, Arg::F32(1.0), out];
    run(&rows, (1, 1), &args, &mut mem, reduce::BLOCK);
    mem.download::<f32>("values")
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect()
}

#[test]
fn interpreted_expanded_forward_matches_cpu_f64() {
    let base = random_problem(300, 700, 29);
    for p in [
        base.clone_named("random"),
        with_tiny(&base, 150, "tiny Gaussians"),
    ] {
        let q = rounded::<f32>(&p);
        let got = sim_forward(&q, false, true);
        let worst = worst_error(&q, false, &got);
        eprintln!(
            "sim expanded forward {}: worst |f - f_ref| / A = {worst:.2e}",
            q.name
        );
        assert!(worst <= TOL, "{}: {worst:e}", q.name);
    }
}

#[test]
fn interpreted_expanded_forward_keeps_flagged_tiles_bit_identical() {
    // Every Gaussian tiny, so far from the origin in its own metric: every tile is flagged and
    // runs the subtract form, in the subtract kernel's order.
    let p = with_tiny(&random_problem(300, 700, 30), 1, "all tiny");
    let q = rounded::<f32>(&p);
    let (_, _, flagged) = emulate(&q, true);
    assert_eq!(flagged, 300);
    let fast_values = sim_forward(&q, true, true);
    let sub_values = sim_forward(&q, true, false);
    assert_eq!(fast_values, sub_values);
}

trait CloneNamed {
    fn clone_named(&self, name: &'static str) -> Problem;
}
impl CloneNamed for Problem {
    fn clone_named(&self, name: &'static str) -> Problem {
        Problem {
            name,
            gaussians: self.gaussians.clone(),
            points: self.points.clone(),
        }
    }
}

fn gpu_values(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    q: &Problem,
    normalised: bool,
    kind: ForwardKind,
) -> Vec<f64> {
    let mut f = GpuGaussianField::<f32>::new(gpu.clone(), options(normalised)).unwrap();
    f.set_forward_kind(kind);
    f.set_gaussians(&convert::<f32>(&q.gaussians)).unwrap();
    f.poison_device_outputs().unwrap();
    f.forward(&convert::<f32>(&q.points))
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect()
}

#[test]
fn gpu_expanded_forward_matches_cpu_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_expanded_forward_matches_cpu_f64_reference") else {
        return;
    };
    let mut sets = problems();
    if !sanitizing() {
        sets.push(random_problem(3, 132 * 16 * 512 + 1, 7));
        sets.push(random_problem(10000, 3000, 8));
    }
    for p in &sets {
        for normalised in [false, true] {
            let q = rounded::<f32>(p);
            let got = gpu_values(&gpu, &q, normalised, ForwardKind::Expanded);
            let worst = worst_error(&q, normalised, &got);
            let sub = gpu_values(&gpu, &q, normalised, ForwardKind::Subtract);
            let worst_sub = worst_error(&q, normalised, &sub);
            eprintln!(
                "forward gpu f32 expanded {:17} N={:5} B={:7} normalised={normalised:5}: worst |f - f_ref| / A = {worst:.2e} (subtract kernel {worst_sub:.2e}, required {TOL:.0e})",
                q.name,
                q.gaussians.len() / STRIDE,
                q.points.len() / 3
            );
            assert!(worst <= TOL, "{}: {worst:e}", q.name);
        }
    }
}

#[test]
fn gpu_expanded_forward_keeps_flagged_tiles_bit_identical() {
    let Some(gpu) = common::gpu_or_skip("gpu_expanded_forward_keeps_flagged_tiles_bit_identical")
    else {
        return;
    };
    let p = with_tiny(&random_problem(700, 5000, 31), 1, "all tiny");
    let q = rounded::<f32>(&p);
    let fast_values = gpu_values(&gpu, &q, true, ForwardKind::Expanded);
    let sub_values = gpu_values(&gpu, &q, true, ForwardKind::Subtract);
    assert_eq!(fast_values, sub_values);
}
