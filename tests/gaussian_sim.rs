//! The Gaussian field's backward kernels run by the library's PTX interpreter (no GPU needed):
//! the fused backward, the ordered row sums and the gradient finish, on Gaussians prepared and
//! staged as `GpuGaussianField` stages them, against the CPU f64 field with the measure and
//! tolerance of tests/gaussian_gpu_grad.rs (max |g - g_ref| / sum|terms| <= 1e-4 in f32, 1e-12
//! in f64) on random, well- and badly-conditioned sets, and against the CPU f32 field (f32; the
//! same algorithm, compensated solves included). Every access is checked by the interpreter;
//! partial buffers start as NaN so that an unwritten element shows.

mod gaussian_support;

use gaussian_support::device::{options, random_problem, rounded};
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::gpu::launch::{backward_plan, forward_plan};
use ptxflow::gaussian::gpu::stage_prepared;
use ptxflow::gaussian::layout::{self, STRIDE};
use ptxflow::gaussian::{GaussianField, GaussianFieldOps, GpuReal};
use ptxflow::kernels::gaussian::{backward, common, forward, reduce};
use ptxflow::ptx::Target;
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Grid, Memory, Options, Program, SimElem};

fn program(id: ptxflow::kernels::KernelId) -> Program {
    Program::parse(&id.build(Target::Sm75).emit().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

fn run(prog: &Program, grid: (u32, u32), threads: u32, args: &[Arg], mem: &mut Memory) {
    let g = Grid {
        blocks: (grid.0, grid.1, 1),
        threads: (threads, 1, 1),
        dyn_shared_bytes: 0,
    };
    prog.run_with(g, args, mem, Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The device layout of `GpuGaussianField` (prepared constants and compensation records).
fn stage<T: GpuReal>(packed: &[T], normalised: bool) -> (Vec<T>, Vec<T>, usize) {
    let mut prepared = Vec::new();
    let eps = T::from_f64(options(normalised).diag_eps);
    layout::prepare(packed, normalised, eps, &mut prepared).unwrap();
    let pad = common::GAUSSIAN_PAD as usize;
    let n_pad = prepared.len().div_ceil(pad) * pad;
    let (mut prep, mut comp) = (Vec::new(), Vec::new());
    stage_prepared(&prepared, n_pad, &mut prep, &mut comp);
    (prep, comp, n_pad)
}

/// dLoss/dx and the packed Gaussian gradient from the interpreted kernels.
fn sim_backward<T: GpuReal + SimElem>(
    bwd: &Program,
    packed: &[T],
    points: &[T],
    grad: &[T],
    normalised: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (prep, comp, n_pad) = stage(packed, normalised);
    let (n, b) = (packed.len() / STRIDE, grad.len());
    // A small resident capacity, so that the points split into several chunks (11 here or
    // fewer: the row sums take both their four-row and their one-row steps).
    let plan = backward_plan(n_pad as u32, b as u32, 22, T::GAUSSIANS_PER_THREAD);
    let nan = T::from_f64(f64::NAN);
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &prep);
    let comp_a = mem.upload("comp", &comp);
    let pts_a = mem.upload("points", points);
    let grad_a = mem.upload("grad", grad);
    let pp_len = plan.gauss_blocks as usize * 3 * b;
    let pg_len = plan.chunks as usize * n_pad * 10;
    let pp = mem.upload("partial_points", &vec![nan; pp_len]);
    let pg = mem.upload("partial_gauss", &vec![nan; pg_len]);
    let gp = mem.upload("grad_points", &vec![nan; 3 * b]);
    let gg = mem.upload("grad_gaussians", &vec![nan; n * STRIDE]);
    run(
        bwd,
        (plan.gauss_blocks, plan.chunks),
        backward::BLOCK,
        &[
            prep_a,
            Arg::U32(n_pad as u32),
            pts_a,
            grad_a,
            Arg::U32(b as u32),
            Arg::U32(plan.chunk_len),
            pp,
            pg,
            comp_a,
        ],
        &mut mem,
    );
    let scale = if std::mem::size_of::<T>() == 4 {
        Arg::F32(-1.0)
    } else {
        Arg::F64(-1.0)
    };
    let pts3 = (3 * b) as u32;
    run(
        &program(T::REDUCE_ROWS),
        (2, 1),
        reduce::BLOCK,
        &[
            pp,
            Arg::U32(plan.gauss_blocks),
            Arg::U32(pts3),
            Arg::U32(pts3),
            scale,
            gp,
        ],
        &mut mem,
    );
    run(
        &program(T::FINISH),
        (2, 1),
        reduce::BLOCK,
        &[
            pg,
            Arg::U32(plan.chunks),
            Arg::U32(n_pad as u32),
            prep_a,
            Arg::U32(n as u32),
            Arg::U32(u32::from(normalised)),
            gg,
        ],
        &mut mem,
    );
    let get = |name: &str| -> Vec<f64> {
        mem.download::<T>(name)
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect()
    };
    (get("grad_points"), get("grad_gaussians"))
}

/// Worst max_k |g_k - g_ref_k| / S_k per kind [points, Gaussians] of the interpreted kernels
/// against the CPU f64 field, and of the CPU `T` field likewise; prints both.
fn errors<T: GpuReal + SimElem>(
    bwd: &Program,
    p: &Problem,
    normalised: bool,
) -> ([f64; 2], [f64; 2]) {
    let q = rounded::<T>(p);
    let opts = options(normalised);
    let b = q.points.len() / 3;
    let mut rng = Rng::new(26);
    let g: Vec<f64> = (0..b)
        .map(|_| T::from_f64(rng.range(-1.0, 1.0)).to_f64())
        .collect();
    let mut cpu = GaussianField::<f64>::with_gaussians(opts, &q.gaussians).unwrap();
    cpu.forward(&q.points).unwrap();
    let r = cpu.backward(&g).unwrap();
    let reference = [r.points.to_vec(), r.gaussians.to_vec()];
    let (gt, pt, grt) = (
        convert::<T>(&q.gaussians),
        convert::<T>(&q.points),
        convert::<T>(&g),
    );
    let (sp, sg) = sim_backward::<T>(bwd, &gt, &pt, &grt, normalised);
    let mut cpu_t = GaussianField::<T>::with_gaussians(opts, &gt).unwrap();
    cpu_t.forward(&pt).unwrap();
    let rt = cpu_t.backward(&grt).unwrap();
    let cpu_got = [
        rt.points.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
        rt.gaussians.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
    ];
    let cutoff = T::EXP_CUTOFF_D.to_f64();
    let abs = backward_abs_terms(
        &q.gaussians,
        &q.points,
        &g,
        normalised,
        opts.diag_eps,
        cutoff,
    );
    let measure = |got: &[Vec<f64>; 2]| {
        [0, 1].map(|kind| {
            let (a, r, s, fl) = if kind == 0 {
                (&got[0], &reference[0], &abs.points, &abs.flushed_points)
            } else {
                (
                    &got[1],
                    &reference[1],
                    &abs.gaussians,
                    &abs.flushed_gaussians,
                )
            };
            assert!(a.iter().all(|v| v.is_finite()), "non-finite gradient");
            (0..a.len())
                .filter(|&k| s[k] > 0.0)
                .map(|k| ((a[k] - r[k]).abs() - fl[k]).max(0.0) / s[k])
                .fold(0.0, f64::max)
        })
    };
    // Points far beyond every Gaussian (the `far` problem) have no pair within the cutoff: their
    // gradients are exactly 0, as the CPU's skip makes them.
    for (i, p) in q.points.chunks_exact(3).enumerate() {
        if p[0].abs() > 1e30 {
            assert_eq!(&sp[3 * i..3 * i + 3], &[0.0; 3], "far point {i}");
        }
    }
    let sim = measure(&[sp, sg]);
    let cpu_e = measure(&cpu_got);
    eprintln!(
        "sim {} {:17} normalised={normalised:5}: worst |g - g_ref| / sum|terms| points {:.2e} Gaussians {:.2e} (CPU {}: {:.2e} {:.2e})",
        T::NAME,
        p.name,
        sim[0],
        sim[1],
        T::NAME,
        cpu_e[0],
        cpu_e[1]
    );
    (sim, cpu_e)
}

/// A random problem whose every fifth point is moved to about 1e37 (f32 w, y and s' of its pairs
/// would overflow: the kernel must take the guarded body there and add exactly 0).
fn far_points(n: usize, b: usize, seed: u64) -> Problem {
    let mut p = random_problem(n, b, seed);
    for (i, x) in p.points.chunks_exact_mut(3).enumerate() {
        if i % 5 == 2 {
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            x.copy_from_slice(&[sign * 1e37, -sign * 3e36, sign * 2e37]);
        }
    }
    p.name = "far points";
    p
}

fn problems() -> Vec<Problem> {
    vec![
        far_points(37, 95, 27),
        random_problem(37, 95, 22),
        random_problem(300, 200, 23),
        random_problem(1100, 150, 28),
        well_conditioned(50, 120, 24),
        badly_conditioned(50, 120, 25),
        badly_conditioned(50, 400, 25),
    ]
}

/// Checks every problem (printing each), then asserts the worst against `tol`.
fn check<T: GpuReal + SimElem>(tol: f64) {
    let bwd = program(T::BACKWARD);
    let mut worst = Vec::new();
    for p in problems() {
        for normalised in [false, true] {
            let (sim, _) = errors::<T>(&bwd, &p, normalised);
            if sim[0] > tol || sim[1] > tol {
                worst.push(format!("{} normalised={normalised}: {sim:?}", p.name));
            }
        }
    }
    assert!(worst.is_empty(), "{} above {tol:e}: {worst:?}", T::NAME);
}

#[test]
fn interpreted_backward_f32_matches_cpu_f64() {
    check::<f32>(1e-4);
}

#[test]
fn interpreted_backward_f64_matches_cpu_f64() {
    check::<f64>(1e-12);
}

/// The backward's comparison variants (`backward::variant`) on a far-points and a badly
/// conditioned set.
#[test]
fn interpreted_backward_variants_match_cpu_f64() {
    for name in ["pairt", "growth"] {
        for (id, tol) in [(f32::BACKWARD, 1e-4), (f64::BACKWARD, 1e-12)] {
            let m = backward::variant(id, name).expect("a backward variant");
            let prog = Program::parse(&m.emit().unwrap()).unwrap();
            for p in [far_points(37, 95, 27), badly_conditioned(50, 120, 25)] {
                let (sim, _) = if id == f32::BACKWARD {
                    errors::<f32>(&prog, &p, true)
                } else {
                    errors::<f64>(&prog, &p, true)
                };
                assert!(sim[0] <= tol && sim[1] <= tol, "{name} {}: {sim:?}", p.name);
            }
        }
    }
}

/// Field values from the interpreted forward (kernel `fwd`) and row sums, with `slots` resident
/// blocks (so that the Gaussians split into several chunks).
fn sim_forward<T: GpuReal + SimElem>(fwd: &Program, packed: &[T], points: &[T]) -> Vec<f64> {
    let (prep, _, n_pad) = stage(packed, false);
    let b = points.len() / 3;
    let plan = forward_plan(n_pad as u32, b as u32, 7, T::FORWARD_POINTS_PER_BLOCK);
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &prep);
    let pts_a = mem.upload("points", points);
    let nan = T::from_f64(f64::NAN);
    let part = mem.upload("partial", &vec![nan; plan.chunks as usize * b]);
    let out = mem.upload("values", &vec![nan; b]);
    run(
        fwd,
        (plan.point_blocks, plan.chunks),
        forward::BLOCK,
        &[
            prep_a,
            Arg::U32(n_pad as u32),
            Arg::U32(plan.chunk_len),
            pts_a,
            Arg::U32(b as u32),
            part,
        ],
        &mut mem,
    );
    let one = if std::mem::size_of::<T>() == 4 {
        Arg::F32(1.0)
    } else {
        Arg::F64(1.0)
    };
    let bb = b as u32;
    run(
        &program(T::REDUCE_ROWS),
        (1, 1),
        reduce::BLOCK,
        &[
            part,
            Arg::U32(plan.chunks),
            Arg::U32(bb),
            Arg::U32(bb),
            one,
            out,
        ],
        &mut mem,
    );
    mem.download::<T>("values")
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

/// The interpreted forward of the built-in kernel and of every variant in `variants`, against
/// the CPU f64 field: max_i |f_i - f_ref_i| / A_i (A_i = sum_j |w_j| exp(-d_ij / 2)) <= `tol`.
fn check_forward<T: GpuReal + SimElem>(variants: &[&str], tol: f64) {
    let p = random_problem(300, 700, 29);
    let q = rounded::<T>(&p);
    let opts = options(false);
    let mut cpu = GaussianField::<f64>::with_gaussians(opts, &q.gaussians).unwrap();
    let reference = cpu.forward(&q.points).unwrap().to_vec();
    let (n, b) = (q.gaussians.len() / STRIDE, q.points.len() / 3);
    let mut d = vec![0.0; n * b];
    cpu.distances_into(&q.points, &mut d).unwrap();
    let scale: Vec<f64> = (0..b)
        .map(|i| {
            (0..n)
                .map(|j| q.gaussians[j * STRIDE + 9].abs() * (-0.5 * d[i * n + j]).exp())
                .sum()
        })
        .collect();
    let (gt, pt) = (convert::<T>(&q.gaussians), convert::<T>(&q.points));
    let mut progs = vec![("built-in", program(T::FORWARD))];
    for v in variants {
        let m = forward::variant(T::FORWARD, v).expect("a forward variant");
        progs.push((v, Program::parse(&m.emit().unwrap()).unwrap()));
    }
    for (name, prog) in &progs {
        let got = sim_forward::<T>(prog, &gt, &pt);
        let worst = (0..b)
            .map(|i| (got[i] - reference[i]).abs() / scale[i].max(1e-300))
            .fold(0.0, f64::max);
        eprintln!(
            "sim forward {} {name}: worst |f - f_ref| / A = {worst:.2e}",
            T::NAME
        );
        assert!(worst <= tol, "{name}: {worst:e}");
    }
}

#[test]
fn interpreted_forward_matches_cpu_f64() {
    check_forward::<f32>(&["r64", "t2", "r64-t2"], 1e-5);
    check_forward::<f64>(&["t2"], 1e-12);
}

/// The f64 kernels' other exponentials (`exp_f64::ExpF64`, variant part `e<C>`: e0 is session
/// 7's polynomial) and one point per iteration (`-p1`, session 7's loop) against the CPU f64
/// field, with the built-in kernels' tolerances, on every problem (`PTXFLOW_SIM_F64_BWD` names
/// other backward variants, e.g. `batch-e0-p1,batch-r208,batch-e4-u`).
#[test]
fn interpreted_f64_exponential_variants_match_cpu_f64() {
    check_forward::<f64>(&["e0", "e1", "e2", "e3", "e5"], 1e-12);
    let names = std::env::var("PTXFLOW_SIM_F64_BWD").unwrap_or_else(|_| "batch-p1,batch-e1".into());
    for name in names.split(',') {
        let m = backward::variant(f64::BACKWARD, name).expect("a backward variant");
        let prog = Program::parse(&m.emit().unwrap()).unwrap();
        for p in problems() {
            for normalised in [false, true] {
                let (sim, _) = errors::<f64>(&prog, &p, normalised);
                assert!(
                    sim[0] <= 1e-12 && sim[1] <= 1e-12,
                    "{name} {}: {sim:?}",
                    p.name
                );
            }
        }
    }
}
