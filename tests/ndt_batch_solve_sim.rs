//! `ndt_batch_solve` (the batch device solve's solver step, `kernels::ndt::solve::batch`) run
//! by the PTX interpreter (`ptxflow::sim`, no GPU needed) in the pipeline's round loop: each
//! round the batch evaluation kernel `ndt_derivatives_dense_cross7` over rows `1..=bound`
//! (row 0 an empty request in the parameters), then the solver kernel, which appends the next
//! round's requests and publishes their count; the next round's bound is its count (lag 0)
//! or the count one round behind (lag 1), as `pipeline/batch/run.rs` does. Against the host
//! solver's lockstep batch fed by the same kernel with the same grid (one block per request,
//! so the same sums for the same pose): equal iterations, evaluations and stop reasons for
//! every alignment, poses equal up to the device's sines and cosines and the eigen path's
//! rounding. The starts include Hessians that take the eigen path and one without overlap.

mod ndt_support;

use ndt_support::sim::{noisy_planes, SimLaunch};
use ptxflow::kernels::ndt::derivatives::{BLOCK, VALUES};
use ptxflow::kernels::ndt::solve::batch::{
    build_batch_solve, BATCH_OUT_ASSISTS, BATCH_OUT_EVALUATIONS, BATCH_OUT_ITERATIONS,
    BATCH_OUT_POSE, BATCH_OUT_STOP, BATCH_OUT_WORDS, BATCH_THREADS,
};
use ptxflow::kernels::ndt::solve::STATE_WORDS;
use ptxflow::kernels::KernelId;
use ptxflow::ndt::derivatives::GaussConstants;
use ptxflow::ndt::gpu::records::{decode_result, pack_request, REQUEST_WORDS};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::*;
use ptxflow::ptx::Target;
use ptxflow::sim::{Arg, Grid, Memory, Program};

struct Scene {
    map: VoxelMap,
    cells: DenseCells,
    source: Vec<[f32; 3]>,
    gauss: GaussConstants,
}

impl Scene {
    fn new() -> Scene {
        let target = noisy_planes(3000, 1, 3, 1.0, 2.0);
        let map = VoxelMap::build(&target, 1.0).unwrap();
        Scene {
            cells: DenseCells::build(&map).unwrap(),
            map,
            source: noisy_planes(300, 2, 3, 1.0, 2.0),
            gauss: GaussConstants::new(1.0, 0.55).unwrap(),
        }
    }

    fn launch(&self) -> SimLaunch<'_> {
        SimLaunch {
            map: &self.map,
            source: &self.source,
            search: NeighbourSearch::Direct7,
            dense: Some(&self.cells),
            cov32: false,
        }
    }
}

/// The host solver's rounds: the batch kernel, one request per launch, one block.
struct SimRounds<'a> {
    s: &'a Scene,
    eval: Program,
}

impl Linearize for SimRounds<'_> {
    fn source_count(&self) -> usize {
        1
    }
    fn source_len(&self, _: usize) -> usize {
        self.s.source.len()
    }
    fn linearize(&mut self, reqs: &[LinearizeRequest]) -> ptxflow::Result<Vec<Linearization>> {
        let launch = self.s.launch();
        reqs.iter()
            .map(|r| {
                let rec = launch.run(&self.eval, &[r.pose], 1);
                decode_result(&rec, self.s.gauss, self.s.source.len())
            })
            .collect()
    }
}

/// One alignment's device result: pose, iterations, evaluations, stop code, eigen steps.
type Device = (Pose6, usize, usize, u32, u64);

/// The batch device solve's round loop in the interpreter; also returns the rounds run.
fn device_batch(
    s: &Scene,
    eval: &Program,
    solve: &Program,
    starts: &[Pose6],
    p: &SolverParams,
    lag: usize,
) -> (Vec<Device>, usize) {
    let h = starts.len();
    let n = s.source.len() as u32;
    let rounds = 400usize;
    let mut mem = Memory::new();
    let mut req = vec![0u64; REQUEST_WORDS * (h + 1)];
    let mut state = vec![0u64; STATE_WORDS * h];
    let mut hyp = vec![0u32; 2 * (h + 1)];
    for (k, pose) in starts.iter().enumerate() {
        req[REQUEST_WORDS * (k + 1)..REQUEST_WORDS * (k + 2)]
            .copy_from_slice(&pack_request(pose, 0, n));
        for i in 0..6 {
            state[STATE_WORDS * k + i] = pose[i].to_bits();
        }
        hyp[k + 1] = k as u32;
    }
    let results = mem.upload("results", &vec![f64::NAN; VALUES * (h + 1)]);
    let launch = s.launch();
    let eval_args = launch.args(
        &mut mem,
        &req,
        &[0u64; REQUEST_WORDS],
        h + 1,
        h + 1,
        results,
    );
    let requests = eval_args[4];
    let state = mem.upload("state", &state);
    let hyp_at = mem.upload("hyp", &hyp).bits();
    let mut counts = vec![0u32; 2 * (rounds + 2)];
    counts[0] = h as u32;
    let counts_at = mem.upload("counts", &counts).bits();
    let host_at = mem.upload("host_rows", &vec![u64::MAX; rounds + 2]).bits();
    let points = mem.upload("points", &vec![u64::from(n) << 32; h]);
    let out = mem.upload("out", &vec![0u64; BATCH_OUT_WORDS * h]);
    let ls = p.line_search.unwrap_or_default();
    let mut bound = h;
    let mut r = 0usize;
    loop {
        let grid = Grid {
            blocks: (1, bound as u32 + 1, 1),
            threads: (BLOCK, 1, 1),
            dyn_shared_bytes: 0,
        };
        eval.run(grid, &eval_args, &mut mem).unwrap();
        let table = 4 * (h as u64 + 1);
        let args = vec![
            state,
            results,
            Arg::U64(counts_at + 4 * r as u64),
            Arg::U64(hyp_at + table * (r as u64 % 2)),
            Arg::U64(counts_at + 4 * (r as u64 + 1)),
            Arg::U64(hyp_at + table * ((r as u64 + 1) % 2)),
            Arg::U64(counts_at + 4 * (rounds as u64 + 2) + 4 * r as u64),
            Arg::U64(host_at + 8 * (r as u64 + 1)),
            requests,
            points,
            out,
            Arg::U32(p.max_iterations as u32),
            Arg::F64(p.step_max),
            Arg::F64(p.translation_epsilon_m),
            Arg::F64(p.rotation_epsilon_rad),
            Arg::U32(u32::from(p.line_search.is_some())),
            Arg::F64(ls.mu),
            Arg::F64(ls.eta),
            Arg::U32(ls.max_evaluations as u32),
            Arg::F64(ls.x_tolerance),
            Arg::F64(-s.gauss.d1),
            Arg::F64(s.gauss.d1 * s.gauss.d2),
        ];
        let grid = Grid {
            blocks: (bound as u32, 1, 1),
            threads: (BATCH_THREADS, 1, 1),
            dyn_shared_bytes: 0,
        };
        solve.run(grid, &args, &mut mem).unwrap();
        let host = mem.download::<u64>("host_rows").unwrap();
        let c = mem.download::<u32>("counts").unwrap();
        assert_eq!(
            host[r + 1],
            u64::MAX << 32 | u64::from(c[r + 1]),
            "published"
        );
        assert_eq!(c[rounds + 2 + r], bound as u32, "every block counted");
        // The host's bound for round r + 1: its count (lag 0) or round r's (lag 1).
        if c[r + 1] == 0 {
            break;
        }
        bound = c[r + 1 - lag] as usize;
        r += 1;
        assert!(r < rounds, "the batch ends");
    }
    // Every request row the next round might read beyond the count holds no points.
    let req = mem.download::<u64>("requests").unwrap();
    for row in 1..=h {
        assert_eq!(req[REQUEST_WORDS * row + 9], 0, "row {row} cleared");
    }
    let o = mem.download::<u64>("out").unwrap();
    let res = (0..h)
        .map(|k| {
            let w = &o[BATCH_OUT_WORDS * k..BATCH_OUT_WORDS * (k + 1)];
            (
                Pose6::from_fn(|i, _| f64::from_bits(w[BATCH_OUT_POSE + i])),
                w[BATCH_OUT_ITERATIONS] as u32 as usize,
                w[BATCH_OUT_EVALUATIONS] as u32 as usize,
                w[BATCH_OUT_STOP] as u32,
                w[BATCH_OUT_ASSISTS] as u32 as u64,
            )
        })
        .collect();
    (res, r + 1)
}

fn compare(s: &Scene, starts: &[Pose6], p: &SolverParams, what: &str) -> Vec<NdtResult> {
    let eval = KernelId::NdtDerivativesDenseCross7
        .build(Target::Sm75)
        .emit()
        .unwrap();
    let eval = Program::parse(&eval).unwrap();
    let solve = Program::parse(&build_batch_solve(Target::Sm75).emit().unwrap()).unwrap();
    let jobs: Vec<AlignJob> = starts
        .iter()
        .map(|p| AlignJob {
            source: 0,
            init: pose_to_isometry(p),
        })
        .collect();
    let mut rounds = SimRounds {
        s,
        eval: eval.clone(),
    };
    let host = align_batch(&mut rounds, &jobs, p).unwrap();
    let (dev, n_rounds) = device_batch(s, &eval, &solve, starts, p, 1);
    let (dev0, n_rounds0) = device_batch(s, &eval, &solve, starts, p, 0);
    assert_eq!(
        (&dev0, n_rounds0),
        (&dev, n_rounds),
        "{what}: lag 0 and 1 alike"
    );
    let mut eigen = 0;
    for (k, (h, d)) in host.iter().zip(&dev).enumerate() {
        let diff = (d.0 - h.pose).abs().max();
        eprintln!(
            "{what} {k}: {:?} after {} evaluations, {} eigen-path steps, pose within {diff:.1e}",
            h.stop, h.evaluations, d.4
        );
        assert_eq!(
            (d.1, d.2, d.3),
            (h.iterations, h.evaluations, h.stop as u32),
            "{what} {k}: iterations, evaluations, stop"
        );
        assert!(diff <= 1e-9, "{what} {k}: pose differs by {diff:e}");
        eigen += d.4;
    }
    let most = host.iter().map(|h| h.evaluations).max().unwrap();
    assert_eq!(
        n_rounds, most,
        "{what}: rounds = the longest alignment's evaluations"
    );
    eprintln!("{what}: {n_rounds} rounds, {eigen} eigen-path steps");
    host
}

#[test]
fn interpreted_batch_device_solve_equals_the_host_solver() {
    let s = Scene::new();
    let starts = [
        Pose6::new(0.1, -0.05, 0.02, 0.0, 0.0, 0.01),
        Pose6::new(0.6, -0.4, 0.3, 0.05, -0.04, 0.2),
        Pose6::new(-0.8, 0.5, -0.2, -0.1, 0.08, -0.3),
        Pose6::new(0.9, 0.9, 0.4, 0.15, 0.1, 0.4),
        Pose6::new(50.0, 0.0, 0.0, 0.0, 0.0, 0.0),
    ];
    let base = SolverParams::default();
    let host = compare(&s, &starts, &base, "line search");
    assert_eq!(host[4].stop, StopReason::NoCorrespondences);
    let plain = SolverParams {
        line_search: None,
        max_iterations: 4,
        ..base
    };
    compare(&s, &starts[..3], &plain, "no line search, 4 iterations");
}
