//! The f32 backward with each Gaussian's sums on the FP64 tensor cores
//! (`gaussian_backward_tc_f32`, opt-in `BackwardKind::Tc`) against the CPU f64 field, with the
//! measure and tolerance of tests/gaussian_backward_lanes.rs (max |g - g_ref| / sum|terms| <=
//! 1e-4, and within 1e-4 of the CPU f32 field): in the PTX interpreter (its `mma.sync` f64
//! model; default build and variants; random and well-conditioned sets, points far beyond every
//! Gaussian (subtract-form tiles), a set far from the origin whose Gaussians are flagged) and
//! on the GPU (outputs poisoned first, results bit-identical from run to run).

mod common;
mod gaussian_support;

use gaussian_support::backward_check::{
    far_from_origin, far_points, measure, program, run, sim_finish, TOL,
};
use gaussian_support::device::{gpu_field, options, random_problem, sanitizing};
use gaussian_support::*;
use ptxflow::gaussian::gpu::lanes_backward::{plan_blocks, records_fit};
use ptxflow::gaussian::gpu::tc_backward::plan_grouped;
use ptxflow::gaussian::gpu::{fast, stage_prepared, BackwardKind};
use ptxflow::gaussian::layout::{self, STRIDE};
use ptxflow::gaussian::GaussianFieldOps;
use ptxflow::kernels::gaussian::backward::{self, TcOptions, TC_OPTIONS};
use ptxflow::kernels::gaussian::common::{f32_exp_scale, GAUSSIAN_PAD};
use ptxflow::sim::{Arg, Memory, Program};

/// dLoss/dx and the packed Gaussian gradient from the interpreted tc backward (options `o`)
/// and the finishing kernels, staged as `GpuGaussianField` stages them; None where the field
/// would run the unit kernel instead.
fn sim_backward(
    bwd: &Program,
    o: TcOptions,
    packed: &[f32],
    points: &[f32],
    grad: &[f32],
    normalised: bool,
) -> Option<(Vec<f64>, Vec<f64>)> {
    let mut prepared = Vec::new();
    let eps = options(normalised).diag_eps as f32;
    layout::prepare(packed, normalised, eps, &mut prepared).unwrap();
    let pad = GAUSSIAN_PAD as usize;
    let n_pad = prepared.len().div_ceil(pad) * pad;
    let (mut prep, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prepared, n_pad, &mut prep, &mut comp);
    let orig = fast::stage(&prepared, n_pad, f32_exp_scale(), &mut recs);
    if !records_fit(&recs) || prepared.iter().any(|g| g.compensated) {
        return None;
    }
    let (n, b) = (packed.len() / STRIDE, grad.len());
    // A small resident capacity: several Gaussian chunks.
    let plan = if o.cap > 0 {
        plan_grouped(n_pad as u32, b as u32, 6, o.points_per_block(), o.cap)
    } else {
        plan_blocks(n_pad as u32, b as u32, 6, o.points_per_block())
    };
    let nan = f32::NAN;
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &prep);
    let fast_a = mem.upload("fast", &recs);
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
        (plan.chunks, plan.gauss_blocks),
        o.block(),
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
            Arg::F32(orig[0]),
            Arg::F32(orig[1]),
            Arg::F32(orig[2]),
        ],
        &mut mem,
    );
    Some(sim_finish(
        &mut mem,
        [pp, pg, prep_a, gp, gg],
        plan.gauss_blocks,
        plan.chunks,
        n_pad,
        n,
        b,
        normalised,
    ))
}

fn problems() -> Vec<Problem> {
    let mut v = vec![
        far_points(37, 95, 27),
        random_problem(37, 95, 22),
        well_conditioned(50, 120, 24),
        far_from_origin(40, 90, 29),
    ];
    if !sanitizing() {
        v.push(random_problem(300, 200, 23));
    }
    v
}

fn check_interpreted(o: TcOptions, sets: &[Problem]) {
    let prog = program(&backward::build_tc(o.target(), o));
    let mut bad = Vec::new();
    for p in sets {
        for normalised in [false, true] {
            let (rel, gap) = measure(p, normalised, |g, x, gr| {
                sim_backward(&prog, o, g, x, gr, normalised)
                    .unwrap_or_else(|| panic!("{}: the tc kernel runs this set", p.name))
            });
            eprintln!("{o:?} {} normalised={normalised}: {rel:?} {gap:?}", p.name);
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
fn interpreted_tc_backward_matches_cpu_f64() {
    check_interpreted(TC_OPTIONS, &problems());
}

#[test]
fn interpreted_tc_backward_variants_match_cpu_f64() {
    for name in [
        "k8-w8-m8-c0",
        "k3-w2-m8-c0",
        "k5-w4-m8-c0",
        "k4-w8-c0",
        "k3-w2-c0",
        "k3-w2-c128-m8",
        "k3-w2-c128",
        "k4-m8-c0-s1",
        "k3-w2-c128-s1",
    ] {
        let o = backward::tc_variant_options(name).unwrap();
        check_interpreted(o, &[far_points(37, 95, 27), random_problem(37, 300, 22)]);
    }
}

#[test]
fn gpu_tc_backward_matches_cpu_f64() {
    let Some(gpu) = common::gpu_or_skip("gpu_tc_backward_matches_cpu_f64") else {
        return;
    };
    let mut sets = problems();
    sets.push(badly_conditioned(50, 120, 25));
    if !sanitizing() {
        sets.push(random_problem(300, 1000, 23));
        sets.push(random_problem(2000, 5000, 31));
    }
    for p in &sets {
        for normalised in [false, true] {
            let mut field = gpu_field::<f32>(&gpu, normalised);
            field.set_backward_kind(BackwardKind::Tc);
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
                eprintln!("gpu tc {} normalised={normalised}: {rel:?} {gap:?}", p.name);
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
