//! What the f32 backward kernels' tests share: the PTX interpreter's runs, the measure and
//! tolerance of tests/gaussian_gpu_grad.rs against the CPU f64 and f32 fields, and the problem
//! sets that exercise the guarded paths (points far beyond every Gaussian, Gaussians far from
//! the records' origin).

use super::device::{options, random_problem, rounded};
use super::{backward_abs_terms, well_conditioned, Problem};
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::layout::STRIDE;
use ptxflow::gaussian::{GaussianField, GaussianFieldOps, Real};
use ptxflow::ptx::Module;
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Grid, Memory, Options, Program};

/// The tolerance of tests/gaussian_gpu_grad.rs.
pub const TOL: f64 = 1e-4;

pub fn program(m: &Module) -> Program {
    Program::parse(&m.emit().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

pub fn run(prog: &Program, grid: (u32, u32), threads: u32, args: &[Arg], mem: &mut Memory) {
    let g = Grid {
        blocks: (grid.0, grid.1, 1),
        threads: (threads, 1, 1),
        dyn_shared_bytes: 0,
    };
    prog.run_with(g, args, mem, Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The finishing kernels on a backward kernel's partial rows, as `GpuGaussianField` runs them:
/// the `gauss_blocks` rows of per-point partials `pp` summed into `gp` (dLoss/dx), the `chunks`
/// rows of per-Gaussian partials `pg` finished into `gg` (the packed Gaussian gradient, with the
/// staged Gaussians `prep`); returns both as f64.
#[allow(clippy::too_many_arguments)] // the kernels' buffers and sizes
pub fn sim_finish(
    mem: &mut Memory,
    [pp, pg, prep, gp, gg]: [Arg; 5],
    gauss_blocks: u32,
    chunks: u32,
    n_pad: usize,
    n: usize,
    b: usize,
    normalised: bool,
) -> (Vec<f64>, Vec<f64>) {
    use ptxflow::gaussian::GpuReal;
    use ptxflow::kernels::gaussian::reduce;
    use ptxflow::ptx::Target;
    let pts3 = (3 * b) as u32;
    run(
        &program(&f32::REDUCE_ROWS.build(Target::Sm75)),
        (2, 1),
        reduce::BLOCK,
        &[
            pp,
            Arg::U32(gauss_blocks),
            Arg::U32(pts3),
            Arg::U32(pts3),
            Arg::F32(-1.0),
            gp,
        ],
        mem,
    );
    run(
        &program(&f32::FINISH.build(Target::Sm75)),
        (2, 1),
        reduce::BLOCK,
        &[
            pg,
            Arg::U32(chunks),
            Arg::U32(n_pad as u32),
            prep,
            Arg::U32(n as u32),
            Arg::U32(u32::from(normalised)),
            gg,
        ],
        mem,
    );
    let get = |name: &str| -> Vec<f64> {
        mem.download::<f32>(name)
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    };
    (get("grad_points"), get("grad_gaussians"))
}

/// The gradients of one computation `got` = (points, Gaussians) against the CPU f64 field and
/// the CPU f32 field: [relative error to sum|terms| (points, Gaussians)] and [gap to CPU f32].
pub fn measure(
    p: &Problem,
    normalised: bool,
    got: impl FnOnce(&[f32], &[f32], &[f32]) -> (Vec<f64>, Vec<f64>),
) -> ([f64; 2], [f64; 2]) {
    let q = rounded::<f32>(p);
    let opts = options(normalised);
    let b = q.points.len() / 3;
    let mut rng = Rng::new(26);
    let g: Vec<f64> = (0..b)
        .map(|_| f64::from(rng.range(-1.0, 1.0) as f32))
        .collect();
    let mut cpu = GaussianField::<f64>::with_gaussians(opts, &q.gaussians).unwrap();
    cpu.forward(&q.points).unwrap();
    let r = cpu.backward(&g).unwrap();
    let reference = [r.points.to_vec(), r.gaussians.to_vec()];
    let (gt, pt, grt) = (
        convert::<f32>(&q.gaussians),
        convert::<f32>(&q.points),
        convert::<f32>(&g),
    );
    let (sp, sg) = got(&gt, &pt, &grt);
    let mut cpu32 = GaussianField::<f32>::with_gaussians(opts, &gt).unwrap();
    cpu32.forward(&pt).unwrap();
    let r32 = cpu32.backward(&grt).unwrap();
    let c32 = [
        r32.points.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        r32.gaussians
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>(),
    ];
    let abs = backward_abs_terms(
        &q.gaussians,
        &q.points,
        &g,
        normalised,
        opts.diag_eps,
        f32::EXP_CUTOFF_D.to_f64(),
    );
    for (i, x) in q.points.chunks_exact(3).enumerate() {
        if x[0].abs() > 1e30 {
            assert_eq!(&sp[3 * i..3 * i + 3], &[0.0; 3], "far point {i}");
        }
    }
    let got = [sp, sg];
    let mut rel = [0.0f64; 2];
    let mut gap = [0.0f64; 2];
    for kind in 0..2 {
        let (s, fl) = if kind == 0 {
            (&abs.points, &abs.flushed_points)
        } else {
            (&abs.gaussians, &abs.flushed_gaussians)
        };
        let a = &got[kind];
        assert_eq!(a.len(), reference[kind].len());
        assert!(a.iter().all(|v| v.is_finite()), "non-finite gradient");
        for k in 0..a.len() {
            if s[k] > 0.0 {
                let e = ((a[k] - reference[kind][k]).abs() - fl[k]).max(0.0) / s[k];
                rel[kind] = rel[kind].max(e);
                gap[kind] = gap[kind].max((a[k] - c32[kind][k]).abs() / s[k]);
            }
        }
    }
    eprintln!(
        "{:17} normalised={normalised:5}: worst |g - g_ref| / sum|terms| points {:.2e} Gaussians {:.2e}; vs CPU f32 {:.2e} {:.2e}",
        p.name, rel[0], rel[1], gap[0], gap[1]
    );
    (rel, gap)
}

/// A random problem whose every fifth point is moved to about 1e37 (its pairs' v' overflow: the
/// guarded body must add exactly 0).
pub fn far_points(n: usize, b: usize, seed: u64) -> Problem {
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

/// `p` moved far from the origin with one Gaussian left near it (the origin is the means' box
/// centre, so the far Gaussians' G exceeds the limit: flagged, subtract form; the rest mixed).
pub fn far_from_origin(n: usize, b: usize, seed: u64) -> Problem {
    let mut p = well_conditioned(n, b, seed);
    for row in p.gaussians.chunks_exact_mut(STRIDE).skip(1) {
        row[0] += 300.0;
    }
    for (i, x) in p.points.chunks_exact_mut(3).enumerate() {
        if i % 3 != 0 {
            x[0] += 300.0;
        }
    }
    p.name = "far from origin";
    p
}
