//! `ndt_align_device` (the whole Newton solve in one kernel) run by the PTX interpreter
//! (`ptxflow::sim`, no GPU needed) against the host solver fed by the interpreted
//! `ndt_derivatives_dense_small` (the launch-per-round path's kernel, same grid, so the same
//! sums): a synthetic scene of noisy planes, with and without the line search, every search
//! mode, an iteration cap and no overlap; starts whose Hessians need the eigen path (on the
//! device in the table build since session 11; builds that ask the host instead cannot run
//! here: `tests/ndt_gpu_solve.rs`).
//! Equal iterations, evaluations and stop reasons; poses equal up to the request's sines and
//! cosines (the kernel's own, within an ulp of `f64::sin_cos`).

mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::sim::{noisy_planes, SimLaunch};
use ptxflow::kernels::ndt::derivatives::build_align_device_opts;
use ptxflow::kernels::ndt::derivatives::server::{GRID_SYNC_WORDS, RESULT_SEQ_WORD};
use ptxflow::kernels::ndt::derivatives::{BLOCK, VALUES};
use ptxflow::kernels::ndt::solve::profile::{OPT_PROFILE, PROF_STATE_WORDS};
use ptxflow::kernels::ndt::solve::{
    DONE, MAILBOX_WORDS, OUT_ASSISTS, OUT_EVALUATIONS, OUT_ITERATIONS, OUT_POSE, OUT_STOP,
    OUT_WORDS, REDUCER_BLOCK0, REDUCER_LAST, STATE_WORDS, STOP_HOST,
};
use ptxflow::kernels::ndt::solve::{
    HOST_EIGEN_OPTS, OPT_CROSS, OPT_DEVICE_EIGEN, OPT_EIGEN_ALL_LANES, OPT_EIGEN_F32_ANGLE,
    OPT_FAST_ASSIST, OPT_FAST_DIV, OPT_LEAN_FINAL, OPT_RELAXED_COUNT, OPT_SAFE_LANES,
    OPT_SHARED_STATE, OPT_XPOSE_PARTIALS, TABLE_OPTS,
};
use ptxflow::kernels::KernelId;
use ptxflow::ndt::derivatives::GaussConstants;
use ptxflow::ndt::gpu::records::{decode_result, pack_request};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::*;
use ptxflow::ptx::Target;
use ptxflow::sim::{Arg, Grid, Memory, Program};

struct Setup<'a> {
    map: &'a VoxelMap,
    cells: DenseCells,
    source: &'a [[f32; 3]],
    search: NeighbourSearch,
    gauss: GaussConstants,
    blocks: u32,
}

impl Setup<'_> {
    /// Buffers and the ordinary kernel's arguments with request 0 = `pose`.
    fn args(&self, mem: &mut Memory, pose: &Pose6, results: Arg) -> Vec<Arg> {
        let launch = SimLaunch {
            map: self.map,
            source: self.source,
            search: self.search,
            dense: Some(&self.cells),
            cov32: false,
        };
        let req = pack_request(pose, 0, self.source.len() as u32);
        launch.args(mem, &[0u64; 20], &req, self.blocks as usize, 1, results)
    }

    fn grid(&self) -> Grid {
        Grid {
            blocks: (self.blocks, 1, 1),
            threads: (BLOCK, 1, 1),
            dyn_shared_bytes: 0,
        }
    }
}

/// The launch-per-round path in the interpreter: `ndt_derivatives_dense_small`, one request.
struct SimRounds<'a> {
    s: &'a Setup<'a>,
    prog: Program,
}

impl Linearize for SimRounds<'_> {
    fn source_count(&self) -> usize {
        1
    }
    fn source_len(&self, _: usize) -> usize {
        self.s.source.len()
    }
    fn linearize(&mut self, reqs: &[LinearizeRequest]) -> ptxflow::Result<Vec<Linearization>> {
        reqs.iter()
            .map(|r| {
                let mut mem = Memory::new();
                let results = mem.upload("results", &[f64::NAN; VALUES]);
                let args = self.s.args(&mut mem, &r.pose, results);
                self.prog.run(self.s.grid(), &args, &mut mem).unwrap();
                let rec = mem.download::<f64>("results").unwrap();
                decode_result(&rec, self.s.gauss, self.s.source.len())
            })
            .collect()
    }
}

/// The device solver in the interpreter: (pose, iterations, evaluations, stop code), for
/// builds that never ask the host.
fn device(
    prog: &Program,
    s: &Setup,
    init: &Isometry3<f64>,
    p: &SolverParams,
    reducer: u32,
) -> (Pose6, usize, usize, u32) {
    let (r, assists) = device_counted(prog, s, init, p, reducer);
    assert_eq!(assists, 0, "no eigen-path request");
    r
}

/// [`device`] and the kernel's eigen-path count (`OUT_ASSISTS`).
fn device_counted(
    prog: &Program,
    s: &Setup,
    init: &Isometry3<f64>,
    p: &SolverParams,
    reducer: u32,
) -> ((Pose6, usize, usize, u32), u64) {
    let pose = isometry_to_pose(init);
    let mut mem = Memory::new();
    let answers = mem.upload("answers", &[0u64; OUT_WORDS]);
    let mut args = s.args(&mut mem, &pose, answers);
    let ls = p.line_search.unwrap_or_default();
    args.push(mem.upload("mailbox", &[0u64; MAILBOX_WORDS]));
    args.push(mem.upload("grid_sync", &[0u32; GRID_SYNC_WORDS]));
    args.push(Arg::U64(u64::MAX));
    args.push(Arg::U32(7));
    // Room for the profile build's counters after the state.
    args.push(mem.upload("state", &[0u64; STATE_WORDS + PROF_STATE_WORDS]));
    args.extend((0..6).map(|k| Arg::F64(pose[k])));
    args.push(Arg::U32(p.max_iterations as u32));
    args.push(Arg::F64(p.step_max));
    args.push(Arg::F64(p.translation_epsilon_m));
    args.push(Arg::F64(p.rotation_epsilon_rad));
    args.push(Arg::U32(u32::from(p.line_search.is_some())));
    args.push(Arg::F64(ls.mu));
    args.push(Arg::F64(ls.eta));
    args.push(Arg::U32(ls.max_evaluations as u32));
    args.push(Arg::F64(ls.x_tolerance));
    args.push(Arg::F64(-s.gauss.d1));
    args.push(Arg::F64(s.gauss.d1 * s.gauss.d2));
    args.push(Arg::U32(reducer));
    prog.run(s.grid(), &args, &mut mem).unwrap();
    let out = mem.download::<u64>("answers").unwrap();
    assert_eq!(out[RESULT_SEQ_WORD], DONE | 7, "done word");
    assert_eq!(
        mem.download::<u32>("counters").unwrap(),
        vec![0],
        "counter reset"
    );
    let g = mem.download::<u32>("grid_sync").unwrap();
    assert_eq!(&g[..4], &[0, 0, 0, 0], "barrier and exit counters reset");
    (
        (
            Pose6::from_fn(|k, _| f64::from_bits(out[OUT_POSE + k])),
            out[OUT_ITERATIONS] as u32 as usize,
            out[OUT_EVALUATIONS] as u32 as usize,
            out[OUT_STOP] as u32,
        ),
        out[OUT_ASSISTS] as u32 as u64,
    )
}

fn programs() -> (Program, Program) {
    let solve = KernelId::NdtAlignDevice.build(Target::Sm75).emit().unwrap();
    let small = KernelId::NdtDerivativesDenseSmall
        .build(Target::Sm75)
        .emit()
        .unwrap();
    (
        Program::parse(&solve).unwrap(),
        Program::parse(&small).unwrap(),
    )
}

/// Device and host runs of one case; returns the host result.
fn compare(
    solve: &Program,
    small: &Program,
    s: &Setup,
    init: &Isometry3<f64>,
    p: &SolverParams,
    what: &str,
) -> Option<NdtResult> {
    let mut rounds = SimRounds {
        s,
        prog: small.clone(),
    };
    let host = align(&mut rounds, 0, init, p).unwrap();
    let (pose, iterations, evaluations, code) = device(solve, s, init, p, REDUCER_BLOCK0);
    // The server's rule (the last block reduces) gives the same result.
    assert_eq!(
        device(solve, s, init, p, REDUCER_LAST),
        (pose, iterations, evaluations, code),
        "{what}: last-block reducer"
    );
    if code == STOP_HOST {
        // Allowed only where the host needed its eigen path (its iterations then differ).
        eprintln!(
            "{what}: handed back after {evaluations} evaluations (host: {:?} after {})",
            host.stop, host.evaluations
        );
        return None;
    }
    assert_eq!(
        (iterations, evaluations, code),
        (host.iterations, host.evaluations, host.stop as u32),
        "{what}: iterations, evaluations, stop"
    );
    let d = (pose - host.pose).abs().max();
    assert!(d <= 1e-9, "{what}: pose differs by {d:e}");
    eprintln!(
        "{what}: {:?} after {} evaluations, pose within {d:.1e}",
        host.stop, host.evaluations
    );
    Some(host)
}

#[test]
fn interpreted_device_solve_equals_the_host_solver() {
    let (solve, small) = programs();
    let target = noisy_planes(3000, 1, 3, 1.0, 2.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let source = noisy_planes(300, 2, 3, 1.0, 2.0);
    // A start from which every Newton step takes the Cholesky path (the eigen path's starts:
    // `interpreted_device_eigen_path_equals_the_host_solver`).
    let init = pose_to_isometry(&Pose6::new(0.1, -0.05, 0.02, 0.0, 0.0, 0.01));
    let base = SolverParams::default();
    for search in NeighbourSearch::ALL {
        let s = Setup {
            map: &map,
            cells: DenseCells::build(&map).unwrap(),
            source: &source,
            search,
            gauss: GaussConstants::new(1.0, 0.55).unwrap(),
            blocks: 3,
        };
        let r = compare(&solve, &small, &s, &init, &base, &format!("{search:?}"));
        if search == NeighbourSearch::Direct7 {
            let r = r.expect("Direct7: solved on the device");
            assert!(r.evaluations > 3, "a real search");
            let plain = SolverParams {
                line_search: None,
                ..base
            };
            compare(&solve, &small, &s, &init, &plain, "no line search").expect("solved");
            let capped = SolverParams {
                max_iterations: 2,
                ..base
            };
            let c = compare(&solve, &small, &s, &init, &capped, "two iterations").expect("solved");
            assert_eq!(c.stop, StopReason::MaxIterations);
            let far = pose_to_isometry(&Pose6::new(50.0, 0.0, 0.0, 0.0, 0.0, 0.0));
            let n = compare(&solve, &small, &s, &far, &base, "no overlap").expect("solved");
            assert_eq!(n.stop, StopReason::NoCorrespondences);
        }
    }
}

/// The device solver's other builds (`Variant::solve_opts`) solve exactly like session 10's
/// table build (188); the builds with the cross-product point derivatives (`OPT_CROSS`, the
/// table's since session 11) to the last bits of the sums: the same iterations, evaluations
/// and stop, poses within rounding.
#[test]
fn interpreted_device_solve_builds_equal_the_table_kernel() {
    let (table, _) = programs();
    let s10 = HOST_EIGEN_OPTS;
    let solve =
        Program::parse(&build_align_device_opts(Target::Sm75, s10).emit().unwrap()).unwrap();
    let target = noisy_planes(3000, 1, 3, 1.0, 2.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let source = noisy_planes(300, 2, 3, 1.0, 2.0);
    let init = pose_to_isometry(&Pose6::new(0.1, -0.05, 0.02, 0.0, 0.0, 0.01));
    let base = SolverParams::default();
    let s = Setup {
        map: &map,
        cells: DenseCells::build(&map).unwrap(),
        source: &source,
        search: NeighbourSearch::Direct7,
        gauss: GaussConstants::new(1.0, 0.55).unwrap(),
        blocks: 3,
    };
    let want = device(&solve, &s, &init, &base, REDUCER_BLOCK0);
    let close = |got: (Pose6, usize, usize, u32), what: &str| {
        assert_eq!((got.1, got.2, got.3), (want.1, want.2, want.3), "{what}");
        let d = (got.0 - want.0).abs().max();
        assert!(d <= 1e-12, "{what}: pose differs by {d:e}");
    };
    close(device(&table, &s, &init, &base, REDUCER_BLOCK0), "table");
    for opts in [
        OPT_PROFILE,
        OPT_RELAXED_COUNT,
        OPT_SHARED_STATE,
        OPT_FAST_DIV,
        OPT_XPOSE_PARTIALS,
        OPT_SAFE_LANES,
        OPT_LEAN_FINAL,
        ptxflow::ndt::gpu::DEVICE_SOLVE_OPTS_DEFAULT,
        s10 | OPT_DEVICE_EIGEN,
        s10 | OPT_DEVICE_EIGEN | OPT_EIGEN_ALL_LANES | OPT_EIGEN_F32_ANGLE,
        OPT_SHARED_STATE | OPT_FAST_DIV | OPT_XPOSE_PARTIALS | OPT_SAFE_LANES | OPT_FAST_ASSIST,
        OPT_PROFILE
            | OPT_RELAXED_COUNT
            | OPT_SHARED_STATE
            | OPT_FAST_DIV
            | OPT_XPOSE_PARTIALS
            | OPT_SAFE_LANES
            | OPT_FAST_ASSIST
            | OPT_LEAN_FINAL,
    ] {
        let prog = build_align_device_opts(Target::Sm75, opts).emit().unwrap();
        let prog = Program::parse(&prog).unwrap();
        let got = device(&prog, &s, &init, &base, REDUCER_BLOCK0);
        if opts & OPT_CROSS == 0 {
            assert_eq!(got, want, "build options {opts}");
        } else {
            close(got, &format!("build options {opts}"));
        }
    }
}

/// [`OPT_DEVICE_EIGEN`]: starts whose Newton steps need the eigen path (an indefinite Hessian)
/// solve on the device with no host round trip, with the host solver's iterations,
/// evaluations and stop reason, the pose within rounding of the host's (the Jacobi
/// decomposition's increment equals nalgebra's `SymmetricEigen` one up to rounding only).
#[test]
fn interpreted_device_eigen_path_equals_the_host_solver() {
    let (_, small) = programs();
    let opts: u32 = std::env::var("PTXFLOW_SIM_OPTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TABLE_OPTS);
    let prog = build_align_device_opts(Target::Sm75, opts).emit().unwrap();
    let prog = Program::parse(&prog).unwrap();
    let target = noisy_planes(3000, 1, 3, 1.0, 2.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let source = noisy_planes(300, 2, 3, 1.0, 2.0);
    let base = SolverParams::default();
    let s = Setup {
        map: &map,
        cells: DenseCells::build(&map).unwrap(),
        source: &source,
        search: NeighbourSearch::Direct7,
        gauss: GaussConstants::new(1.0, 0.55).unwrap(),
        blocks: 3,
    };
    let mut eigen_steps = 0;
    for (k, start) in [
        Pose6::new(0.1, -0.05, 0.02, 0.0, 0.0, 0.01),
        Pose6::new(0.6, -0.4, 0.3, 0.05, -0.04, 0.2),
        Pose6::new(-0.8, 0.5, -0.2, -0.1, 0.08, -0.3),
        Pose6::new(0.9, 0.9, 0.4, 0.15, 0.1, 0.4),
    ]
    .iter()
    .enumerate()
    {
        let init = pose_to_isometry(start);
        let mut rounds = SimRounds {
            s: &s,
            prog: small.clone(),
        };
        let host = align(&mut rounds, 0, &init, &base).unwrap();
        let ((pose, iterations, evaluations, code), assists) =
            device_counted(&prog, &s, &init, &base, REDUCER_BLOCK0);
        let d = (pose - host.pose).abs().max();
        eprintln!(
            "start {k}: {:?} after {} evaluations, {assists} eigen-path steps on the device, pose within {d:.1e}",
            host.stop, host.evaluations
        );
        assert_eq!(
            (iterations, evaluations, code),
            (host.iterations, host.evaluations, host.stop as u32),
            "start {k}: iterations, evaluations, stop"
        );
        assert!(d <= 1e-9, "start {k}: pose differs by {d:e}");
        eigen_steps += assists;
    }
    assert!(eigen_steps > 0, "the eigen path ran");
}
