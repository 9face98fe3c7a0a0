//! Alignment on real scans: the Velodyne pair against its published ground truth, the inverse
//! problem, perturbed starts, PCL's bunny test and cuPCL's degenerate target.

mod ndt_support;

use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ndt_support::*;
use ptxflow::ndt::*;

const VELODYNE_MODES: [NeighbourSearch; 3] = [
    NeighbourSearch::Direct7,
    NeighbourSearch::Direct27,
    NeighbourSearch::Radius,
];
const MAX_TRANSLATION_M: f64 = 0.05;
const MAX_ROTATION_DEG: f64 = 1.0;

struct Velodyne {
    target: PointCloud,
    source: PointCloud,
    truth: Isometry3<f64>,
}

fn velodyne() -> Option<Velodyne> {
    let dir = pointclouds_dir()?;
    Some(Velodyne {
        target: filtered(&dir, "251370668.pcd", 0.1),
        source: filtered(&dir, "251371071.pcd", 0.1),
        truth: matrix_file(&dir, "251370668_251371071_relative_fast_gicp.txt"),
    })
}

fn check(what: &str, r: &NdtResult, truth: &Isometry3<f64>) {
    let (et, er) = pose_error(&r.t_target_source, truth);
    eprintln!(
        "{what}: {} after {} iterations ({} evaluations), error {et:.4} m {er:.3} deg, score {:.1}, {} / {} matched",
        r.stop, r.iterations, r.evaluations, r.score, r.correspondences, r.source_points
    );
    assert_eq!(r.stop, StopReason::Converged, "{what}");
    assert!(
        et < MAX_TRANSLATION_M && er < MAX_ROTATION_DEG,
        "{what}: error {et} m {er} deg"
    );
}

#[test]
fn velodyne_pair_from_identity_in_every_mode_but_direct1() {
    let Some(v) = velodyne() else { return };
    for search in VELODYNE_MODES {
        let params = NdtParams {
            search,
            ..Default::default()
        };
        let t0 = std::time::Instant::now();
        let r = align_clouds(
            &v.target.points,
            &v.source.points,
            &Isometry3::identity(),
            &params,
        )
        .unwrap();
        check(&format!("{search:?} ({:.0?})", t0.elapsed()), &r, &v.truth);
        assert!((r.likelihood_per_point - r.score / v.source.len() as f64).abs() < 1e-12);
        assert!(
            r.hessian.symmetric_eigenvalues().iter().all(|&l| l < 0.0),
            "score Hessian negative definite"
        );
    }
}

#[test]
fn velodyne_inverse_problem_gives_the_inverse_pose() {
    let Some(v) = velodyne() else { return };
    for search in VELODYNE_MODES {
        let params = NdtParams {
            search,
            ..Default::default()
        };
        let r = align_clouds(
            &v.source.points,
            &v.target.points,
            &Isometry3::identity(),
            &params,
        )
        .unwrap();
        check(&format!("inverse {search:?}"), &r, &v.truth.inverse());
    }
}

#[test]
fn velodyne_perturbed_starts_converge() {
    let Some(v) = velodyne() else { return };
    // Up to 1 m and 10 degrees away from the truth.
    let perturbations: [([f64; 3], [f64; 3]); 4] = [
        ([1.0, 0.0, 0.0], [0.0, 0.0, 10.0]),
        ([0.0, -0.7, 0.3], [5.0, -5.0, 8.0]),
        ([-0.7, 0.7, 0.0], [0.0, 0.0, -10.0]),
        ([0.5, 0.5, 0.5], [3.0, 3.0, -3.0]),
    ];
    for search in VELODYNE_MODES {
        let params = NdtParams {
            search,
            ..Default::default()
        };
        for (t, a) in perturbations {
            let rot = UnitQuaternion::from_euler_angles(
                a[0].to_radians(),
                a[1].to_radians(),
                a[2].to_radians(),
            );
            let init = Isometry3::from_parts(Translation3::new(t[0], t[1], t[2]), rot) * v.truth;
            let r = align_clouds(&v.target.points, &v.source.points, &init, &params).unwrap();
            check(&format!("{search:?} from {t:?} m {a:?} deg"), &r, &v.truth);
        }
    }
}

#[test]
fn velodyne_batch_equals_single_alignments() {
    let Some(v) = velodyne() else { return };
    let params = NdtParams::default();
    let map = VoxelMap::build(&v.target.points, params.resolution_m).unwrap();
    let half: Vec<[f32; 3]> = v.source.points.iter().copied().step_by(2).collect();
    let mut lin = CpuLinearizer::new(
        &map,
        vec![&v.source.points, &half],
        params.search,
        params.outlier_ratio,
    )
    .unwrap();
    let shifted = Isometry3::translation(0.3, -0.2, 0.0) * v.truth;
    let jobs = [
        AlignJob {
            source: 0,
            init: Isometry3::identity(),
        },
        AlignJob {
            source: 1,
            init: Isometry3::identity(),
        },
        AlignJob {
            source: 0,
            init: shifted,
        },
    ];
    let batch = align_batch(&mut lin, &jobs, &params.solver).unwrap();
    for (job, b) in jobs.iter().zip(&batch) {
        let single = align(&mut lin, job.source, &job.init, &params.solver).unwrap();
        assert_eq!(&single, b);
        check(&format!("batch job {job:?}"), b, &v.truth);
    }
    assert!(align_batch(
        &mut lin,
        &[AlignJob {
            source: 2,
            init: Isometry3::identity()
        }],
        &params.solver
    )
    .is_err());
}

/// A CPU linearizer that offers two groups in flight ([`SplitLinearize`]): a submitted round
/// is evaluated when it is completed, as a device would have run it meanwhile.
struct SplitCpu<'a> {
    cpu: CpuLinearizer<'a>,
    pending: [Option<Vec<LinearizeRequest>>; 2],
    jobs: usize,
    completed: usize,
    /// What [`SplitLinearize::merge_tail`] answers.
    merge: usize,
}

impl Linearize for SplitCpu<'_> {
    fn source_count(&self) -> usize {
        self.cpu.source_count()
    }

    fn source_len(&self, source: usize) -> usize {
        self.cpu.source_len(source)
    }

    fn linearize(&mut self, requests: &[LinearizeRequest]) -> ptxflow::Result<Vec<Linearization>> {
        self.cpu.linearize(requests)
    }

    fn split(&mut self, jobs: usize) -> Option<&mut dyn SplitLinearize> {
        self.jobs = jobs;
        Some(self)
    }
}

impl SplitLinearize for SplitCpu<'_> {
    fn merge_tail(&self) -> usize {
        self.merge
    }

    fn submit(&mut self, group: usize, requests: &[LinearizeRequest]) -> ptxflow::Result<()> {
        // Group 0 holds the first ceil(jobs / 2) alignments, group 1 the rest.
        let room = if group == 0 {
            self.jobs.div_ceil(2)
        } else {
            self.jobs / 2
        };
        assert!(
            !requests.is_empty() && requests.len() <= room,
            "group {group}"
        );
        assert!(
            self.pending[group].is_none(),
            "one round per group in flight"
        );
        self.pending[group] = Some(requests.to_vec());
        Ok(())
    }

    fn complete(&mut self, group: usize) -> ptxflow::Result<Vec<Linearization>> {
        let r = self.pending[group]
            .take()
            .expect("a round of the group in flight");
        self.completed += 1;
        self.cpu.linearize(&r)
    }
}

#[test]
fn split_batch_equals_the_lockstep_batch() {
    let Some(v) = velodyne() else { return };
    let params = NdtParams::default();
    let map = VoxelMap::build(&v.target.points, params.resolution_m).unwrap();
    let source: Vec<[f32; 3]> = v.source.points.iter().copied().step_by(8).collect();
    let lin = || CpuLinearizer::new(&map, vec![&source], params.search, params.outlier_ratio);
    // 65 hypotheses: at least the 64 a split needs, and groups of 33 and 32.
    let inits = hypotheses(&Isometry3::identity(), 65, 1.0, 10.0, 11).unwrap();
    let lockstep = align_hypotheses(&mut lin().unwrap(), 0, &inits, &params.solver).unwrap();
    let mut split = SplitCpu {
        cpu: lin().unwrap(),
        pending: [None, None],
        jobs: 0,
        completed: 0,
        merge: 0,
    };
    let r = align_hypotheses(&mut split, 0, &inits, &params.solver).unwrap();
    let rounds = |r: &[NdtResult]| r.iter().map(|r| r.evaluations).max().unwrap_or(0);
    let (a, b) = r.results.split_at(33);
    assert_eq!(split.jobs, 65);
    assert_eq!(
        split.completed,
        rounds(a) + rounds(b),
        "one round per group step"
    );
    assert!(split.pending.iter().all(Option::is_none));
    assert_eq!(r, lockstep);
    // Below 64 jobs the batch runs in lockstep even when a split is offered.
    let mut few = SplitCpu {
        cpu: lin().unwrap(),
        pending: [None, None],
        jobs: 0,
        completed: 0,
        merge: 0,
    };
    align_hypotheses(&mut few, 0, &inits[..63], &params.solver).unwrap();
    assert_eq!((few.jobs, few.completed), (0, 0));
}

#[test]
fn split_batch_with_a_merged_tail_equals_the_lockstep_batch() {
    let Some(v) = velodyne() else { return };
    let params = NdtParams::default();
    let map = VoxelMap::build(&v.target.points, params.resolution_m).unwrap();
    let source: Vec<[f32; 3]> = v.source.points.iter().copied().step_by(8).collect();
    let lin = || CpuLinearizer::new(&map, vec![&source], params.search, params.outlier_ratio);
    let inits = hypotheses(&Isometry3::identity(), 65, 1.0, 10.0, 11).unwrap();
    let lockstep = align_hypotheses(&mut lin().unwrap(), 0, &inits, &params.solver).unwrap();
    let rounds = |r: &[NdtResult]| r.iter().map(|r| r.evaluations).max().unwrap_or(0);
    let (a, b) = lockstep.results.split_at(33);
    // From 20 unfinished on, then (the solver clamps it to group 0's room) from 33 on.
    let mut launches = Vec::new();
    for merge in [20, 1000] {
        let mut split = SplitCpu {
            cpu: lin().unwrap(),
            pending: [None, None],
            jobs: 0,
            completed: 0,
            merge,
        };
        let r = align_hypotheses(&mut split, 0, &inits, &params.solver).unwrap();
        assert_eq!(r, lockstep, "merge at {merge}");
        assert!(split.pending.iter().all(Option::is_none));
        assert!(
            rounds(a).max(rounds(b)) <= split.completed && split.completed < rounds(a) + rounds(b),
            "merge at {merge}: {} rounds for {} + {} group rounds",
            split.completed,
            rounds(a),
            rounds(b)
        );
        launches.push(split.completed);
    }
    assert!(launches[1] <= launches[0]);
}

#[test]
fn iteration_cap_is_never_called_converged() {
    let Some(v) = velodyne() else { return };
    let mut params = NdtParams::default();
    params.solver.max_iterations = 2;
    let r = align_clouds(
        &v.target.points,
        &v.source.points,
        &Isometry3::identity(),
        &params,
    )
    .unwrap();
    assert_eq!((r.stop, r.iterations), (StopReason::MaxIterations, 2));
    assert!(!r.stop.converged());
}

#[test]
fn plain_capped_newton_steps_also_converge() {
    let Some(v) = velodyne() else { return };
    let mut params = NdtParams::default();
    params.solver.line_search = None;
    let r = align_clouds(
        &v.target.points,
        &v.source.points,
        &Isometry3::identity(),
        &params,
    )
    .unwrap();
    check("no line search", &r, &v.truth);
}

#[test]
fn bunny_pair_as_in_pcl_test() {
    let Some(dir) = pointclouds_dir() else { return };
    let target = cloud(&dir, "bun4.pcd");
    let source = cloud(&dir, "bun0.pcd");
    // PCL's test/registration/test_ndt.cpp settings: resolution 0.025, step 0.05, 50 iterations.
    let mut params = NdtParams {
        resolution_m: 0.025,
        ..Default::default()
    };
    params.solver.step_max = 0.05;
    params.solver.max_iterations = 50;
    let before = mean_sq_nn(&source.points, &target.points);
    for search in NeighbourSearch::ALL {
        let r = align_clouds(&target.points, &source.points, &Isometry3::identity(), &{
            NdtParams { search, ..params }
        })
        .unwrap();
        let after = mean_sq_nn(
            &source.transformed(&r.t_target_source).points,
            &target.points,
        );
        eprintln!(
            "bunny {search:?}: {} after {} iterations, fitness {before:.6} -> {after:.6} m²",
            r.stop, r.iterations
        );
        assert_eq!(r.stop, StopReason::Converged, "{search:?}");
        assert!(
            after < 0.001 && after < before,
            "{search:?}: fitness {after}"
        );
    }
}

#[test]
fn cupcl_degenerate_voxels_give_finite_results() {
    let Some(dir) = pointclouds_dir() else { return };
    let target = cloud(&dir, "cupcl_test_Q.pcd");
    let source = cloud(&dir, "cupcl_test_P.pcd");
    let map = VoxelMap::build(&target.points, 1.0).unwrap();
    let s = map.stats();
    eprintln!("cuPCL target map: {s:?}");
    assert!(
        s.degenerate > 0 && s.regularised > 0,
        "the data has coincident and flat voxels"
    );
    for (c, ic) in map.covariances().iter().zip(map.inv_covariances()) {
        let (c, ic) = (
            nalgebra::Matrix3::from_row_slice(c),
            nalgebra::Matrix3::from_row_slice(ic),
        );
        assert!(ic.iter().all(|v| v.is_finite()));
        assert!((c * ic - nalgebra::Matrix3::identity()).abs().max() < 1e-6);
    }
    for search in NeighbourSearch::ALL {
        let params = NdtParams {
            search,
            ..Default::default()
        };
        let r = align_clouds(
            &target.points,
            &source.points,
            &Isometry3::identity(),
            &params,
        )
        .unwrap();
        eprintln!(
            "cuPCL {search:?}: {} after {} iterations, pose {:?}",
            r.stop,
            r.iterations,
            r.pose.as_slice()
        );
        assert!(r.pose.iter().all(|v| v.is_finite()) && r.score.is_finite() && r.score > 0.0);
        assert!(
            r.hessian.iter().all(|v| v.is_finite()) && r.gradient.iter().all(|v| v.is_finite())
        );
        assert!(r.correspondences > 0);
    }
}
