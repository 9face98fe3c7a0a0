//! The f32 backward with the expanded solve (`gaussian_backward_fast_f32`, records from
//! `ptxflow::gaussian::gpu::fast`) against the CPU f64 field, with the measure and tolerance of
//! tests/gaussian_gpu_grad.rs (max |g - g_ref| / sum|terms| <= 1e-4, and within 1e-4 of the CPU
//! f32 field): in the PTX interpreter (built-in kernel and its variants; random, well- and
//! badly-conditioned sets, points far beyond every Gaussian, a set far from the origin whose
//! Gaussians are flagged) and on the GPU (`BackwardKind::Expanded`, outputs poisoned first,
//! results bit-identical from run to run).

mod common;
mod gaussian_support;

use gaussian_support::backward_check::{
    far_from_origin, far_points, measure, program, run, sim_finish, TOL,
};
use gaussian_support::device::{gpu_field, options, random_problem, sanitizing};
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::gpu::fast;
use ptxflow::gaussian::gpu::launch::backward_plan;
use ptxflow::gaussian::gpu::{stage_prepared, BackwardKind};
use ptxflow::gaussian::layout::{self, STRIDE};
use ptxflow::gaussian::GaussianFieldOps;
use ptxflow::kernels::gaussian::backward::{self, FastOptions, FAST_OPTIONS};
use ptxflow::kernels::gaussian::common::{f32_exp_scale, GAUSSIAN_PAD};
use ptxflow::ptx::Target;
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Memory, Program};

/// dLoss/dx and the packed Gaussian gradient from the interpreted expanded backward (`q`
/// Gaussians per thread) and the finishing kernels, staged as `GpuGaussianField` stages them.
fn sim_backward(
    bwd: &Program,
    q: u32,
    packed: &[f32],
    points: &[f32],
    grad: &[f32],
    normalised: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut prepared = Vec::new();
    let eps = options(normalised).diag_eps as f32;
    layout::prepare(packed, normalised, eps, &mut prepared).unwrap();
    let pad = GAUSSIAN_PAD as usize;
    let n_pad = prepared.len().div_ceil(pad) * pad;
    let (mut prep, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prepared, n_pad, &mut prep, &mut comp);
    let o = fast::stage(&prepared, n_pad, f32_exp_scale(), &mut recs);
    let (n, b) = (packed.len() / STRIDE, grad.len());
    // A small resident capacity: several point chunks.
    let plan = backward_plan(n_pad as u32, b as u32, 22, q);
    let nan = f32::NAN;
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &prep);
    let fast_a = mem.upload("fast", &recs);
    let comp_a = mem.upload("comp", &comp);
    let pts_a = mem.upload("points", points);
    let grad_a = mem.upload("grad", grad);
    let pp = mem.upload(
        "partial_points",
        &vec![nan; plan.gauss_blocks as usize * 3 * b],
    );
    let pg = mem.upload(
        "partial_gauss",
        &vec![nan; plan.chunks as usize * n_pad * 10],
    );
    let gp = mem.upload("grad_points", &vec![nan; 3 * b]);
    let gg = mem.upload("grad_gaussians", &vec![nan; n * STRIDE]);
    run(
        bwd,
        (plan.gauss_blocks, plan.chunks),
        backward::BLOCK,
        &[
            prep_a,
            fast_a,
            Arg::U32(n_pad as u32),
            pts_a,
            grad_a,
            Arg::U32(b as u32),
            Arg::U32(plan.chunk_len),
            pp,
            pg,
            comp_a,
            Arg::F32(o[0]),
            Arg::F32(o[1]),
            Arg::F32(o[2]),
        ],
        &mut mem,
    );
    sim_finish(
        &mut mem,
        [pp, pg, prep_a, gp, gg],
        plan.gauss_blocks,
        plan.chunks,
        n_pad,
        n,
        b,
        normalised,
    )
}

fn problems() -> Vec<Problem> {
    let mut v = vec![
        far_points(37, 95, 27),
        random_problem(37, 95, 22),
        random_problem(300, 200, 23),
        well_conditioned(50, 120, 24),
        badly_conditioned(50, 120, 25),
        far_from_origin(40, 90, 29),
    ];
    if !sanitizing() {
        v.push(random_problem(1100, 150, 28));
    }
    v
}

fn check_interpreted(o: FastOptions, sets: &[Problem]) {
    let prog = program(&backward::build_fast(Target::Sm75, o));
    let mut bad = Vec::new();
    for p in sets {
        for normalised in [false, true] {
            let (rel, gap) = measure(p, normalised, |g, x, gr| {
                sim_backward(&prog, o.q, g, x, gr, normalised)
            });
            if rel.iter().chain(&gap).any(|&e| e > TOL) {
                bad.push(format!(
                    "{} normalised={normalised}: {rel:?} {gap:?}",
                    p.name
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{o:?} above {TOL:e}: {bad:?}");
}

#[test]
fn interpreted_expanded_backward_matches_cpu_f64() {
    check_interpreted(FAST_OPTIONS, &problems());
}

#[test]
fn interpreted_expanded_backward_variants_match_cpu_f64() {
    for name in ["q8", "q8-n0", "n0", "p2", "q8-p2"] {
        let o = backward::fast_variant_options(name).unwrap();
        check_interpreted(o, &[far_points(37, 95, 27), badly_conditioned(50, 120, 25)]);
    }
}

#[test]
fn gpu_expanded_backward_matches_cpu_f64() {
    let Some(gpu) = common::gpu_or_skip("gpu_expanded_backward_matches_cpu_f64") else {
        return;
    };
    let mut sets = problems();
    if !sanitizing() {
        sets.push(random_problem(300, 1000, 23));
    }
    for p in &sets {
        for normalised in [false, true] {
            let mut field = gpu_field::<f32>(&gpu, normalised);
            field.set_backward_kind(BackwardKind::Expanded);
            let mut first: Option<Vec<u32>> = None;
            for _ in 0..2 {
                let mut bits = Vec::new();
                let (rel, gap) = measure(p, normalised, |g, x, gr| {
                    field.set_gaussians(g).unwrap();
                    field.poison_device_outputs().unwrap();
                    field.forward(x).unwrap();
                    field.poison_device_outputs().unwrap();
                    let r = field.backward(gr).unwrap();
                    bits.extend(r.points.iter().chain(r.gaussians).map(|v| v.to_bits()));
                    let w = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
                    (w(r.points), w(r.gaussians))
                });
                assert!(
                    rel.iter().chain(&gap).all(|&e| e <= TOL),
                    "{} normalised={normalised}: {rel:?} {gap:?}",
                    p.name
                );
                if let Some(f) = &first {
                    assert_eq!(f, &bits, "{}: not bit-identical across runs", p.name);
                }
                first = Some(bits);
            }
        }
    }
}

/// Writes the PTX of the variants named in `PTXFLOW_BWD_FAST_DUMP` ("dir:name,name,...") for
/// inspection with ptxas (not a check; ignored by default).
#[test]
#[ignore]
fn dump_expanded_backward_variants() {
    let Ok(spec) = std::env::var("PTXFLOW_BWD_FAST_DUMP") else {
        return;
    };
    let (dir, names) = spec.split_once(':').expect("dir:name,...");
    for name in names.split(',') {
        let o = backward::fast_variant_options(name).expect("a variant name");
        let ptx = backward::build_fast(Target::Sm75, o).emit().unwrap();
        std::fs::write(format!("{dir}/{name}.ptx"), ptx).unwrap();
    }
}

/// Prints the fraction of flagged records and compensated Gaussians of the bench's problem
/// (inspection only; ignored by default).
#[test]
#[ignore]
fn print_flag_fractions() {
    use ptxflow::gaussian::generate::{random_gaussians, sample_points, GaussianSpec};
    let mut rng = Rng::new(0x6A55);
    let g = random_gaussians(&mut rng, 10000, &GaussianSpec::default());
    let _ = sample_points(&mut rng, &g, 10, 1.5);
    let g32 = convert::<f32>(&g);
    let mut prepared = Vec::new();
    layout::prepare(&g32, true, 0.0f32, &mut prepared).unwrap();
    let n_pad = prepared.len().div_ceil(512) * 512;
    let (mut prep, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prepared, n_pad, &mut prep, &mut comp);
    let o = fast::stage(&prepared, n_pad, f32_exp_scale(), &mut recs);
    let flagged: Vec<bool> = recs.chunks_exact(12).map(|r| r[10] != 0.0).collect();
    let comped: Vec<bool> = comp.chunks_exact(8).map(|r| r[3] != 0.0).collect();
    let nf = flagged.iter().filter(|&&f| f).count();
    let nc = comped.iter().filter(|&&f| f).count();
    let warps = |q: usize| {
        (0..n_pad / (32 * q))
            .filter(|w| (w * 32 * q..(w + 1) * 32 * q).any(|j| flagged[j] || comped[j]))
            .count()
    };
    eprintln!(
        "origin {o:?}: flagged {nf}, compensated {nc} of {}; warps with one (q4) {} of {}, (q8) {} of {}",
        prepared.len(),
        warps(4),
        n_pad / 128,
        warps(8),
        n_pad / 256
    );
}
