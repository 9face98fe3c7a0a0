//! CPU-side checks of what the GPU NDT kernel computes, runnable without a GPU: its f64 `exp`,
//! its probe tables, and its factored accumulation (per point `E`, `G`, `Q`, then `JᵀQJ`) against
//! the CPU reference's per-pair sums on the real scans — so a GPU mismatch can only come from the
//! kernel's code, not from its algebra. Also the pipeline's no-GPU error path and the batch
//! helpers.

mod common;
mod ndt_support;

use nalgebra::Isometry3;
use ndt_support::*;
use ptxflow::kernels::ndt::derivatives::{
    hessian_index, COUNT_INDEX, GRADIENT_INDEX, PROBES, PROBES_DIRECT27, SCORE_INDEX, VALUES,
};
use ptxflow::kernels::ndt::fp64::{exp_mirror, EXP_MAX_ARG, EXP_MIN_ARG};
use ptxflow::ndt::angles::{apply, AngleTerms};
use ptxflow::ndt::derivatives::linearize_points;
use ptxflow::ndt::gpu::records::decode_result;
use ptxflow::ndt::search::{DIRECT27_OFFSETS, DIRECT7_OFFSETS};
use ptxflow::ndt::*;
use ptxflow::rng::Rng;

fn ulps(a: f64, b: f64) -> u64 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
}

#[test]
fn kernel_exp_is_within_two_ulp_of_libm() {
    let mut rng = Rng::new(1);
    let mut worst = 0;
    let edges = [
        EXP_MIN_ARG,
        EXP_MAX_ARG,
        0.0,
        -0.0,
        -1e-300,
        1e-17,
        -0.5 * std::f64::consts::LN_2,
        -745.0 + 37.0,
    ];
    for x in edges
        .into_iter()
        .chain((0..1_000_000).map(|_| rng.range(EXP_MIN_ARG, EXP_MAX_ARG)))
    {
        let (got, want) = (exp_mirror(x), x.exp());
        assert!(got.is_normal() && got > 0.0, "exp({x}) = {got}");
        worst = worst.max(ulps(got, want));
    }
    // The arguments the kernel sees most: −d2 q / 2 for q in a few Mahalanobis units.
    for _ in 0..1_000_000 {
        let x = -rng.range(0.0, 50.0);
        worst = worst.max(ulps(exp_mirror(x), x.exp()));
    }
    eprintln!("kernel exp: worst {worst} ulp against libm");
    assert!(worst <= 2, "{worst} ulp");
}

#[test]
fn kernel_probe_tables_are_the_cpu_tables() {
    assert_eq!(&PROBES[..7], &DIRECT7_OFFSETS[..]);
    assert_eq!(&PROBES[PROBES_DIRECT27 as usize..], &DIRECT27_OFFSETS[..]);
}

/// The kernel's accumulation, in f64 on the CPU: per point `E = Σe`, `G = Σe·Cd`,
/// `Q = Σe(C − d2 (Cd)(Cd)ᵀ)` over its voxels, then the point's score, gradient `[G, j·G]` and
/// Hessian `JᵀQJ + h·G` into a result record, decoded as the pipeline decodes the GPU's.
fn factored(
    map: &VoxelMap,
    pts: &[[f32; 3]],
    pose: &Pose6,
    search: NeighbourSearch,
    g: GaussConstants,
) -> Linearization {
    let t = AngleTerms::new(pose);
    let mut v = vec![0.0f64; VALUES];
    let dot = |a: [f64; 3], b: [f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    for p in pts {
        let x = [p[0] as f64, p[1] as f64, p[2] as f64];
        let xt = t.transform(x);
        let (mut e_sum, mut gs, mut q, mut found) = (0.0, [0.0; 3], [[0.0; 3]; 3], false);
        map.for_each_neighbour(xt, search, |vox| {
            found = true;
            let (mu, c) = (map.means()[vox], &map.inv_covariances()[vox]);
            let d = [xt[0] - mu[0], xt[1] - mu[1], xt[2] - mu[2]];
            let cd = apply(c, d);
            let arg = (-0.5 * g.d2) * dot(d, cd);
            if !(EXP_MIN_ARG..=EXP_MAX_ARG).contains(&arg) {
                return;
            }
            let e = exp_mirror(arg);
            e_sum += e;
            for i in 0..3 {
                gs[i] += e * cd[i];
                for j in 0..3 {
                    q[i][j] += e * c[3 * i + j] - g.d2 * e * cd[i] * cd[j];
                }
            }
        });
        if !found {
            continue;
        }
        v[COUNT_INDEX] += 1.0;
        v[SCORE_INDEX] += e_sum;
        let ja = [0, 1, 2].map(|k| apply(&t.jacobian[k], x));
        let qj = ja.map(|j| [dot(q[0], j), dot(q[1], j), dot(q[2], j)]);
        for k in 0..3 {
            v[GRADIENT_INDEX + k] += gs[k];
            v[GRADIENT_INDEX + 3 + k] += dot(ja[k], gs);
            for i in k..3 {
                v[hessian_index(k, i)] += q[k][i];
            }
            for r in 0..3 {
                v[hessian_index(r, 3 + k)] += qj[k][r];
            }
        }
        for (m, (k, l)) in [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
            .into_iter()
            .enumerate()
        {
            let h = apply(&t.hessian[m], x);
            v[hessian_index(3 + k, 3 + l)] += dot(ja[k], qj[l]) + dot(h, gs);
        }
    }
    decode_result(&v, g, pts.len()).expect("emulated record is well formed")
}

/// Largest |a − b| over the entries divided by the largest |b|.
pub fn rel(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-300);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}

#[test]
fn factored_accumulation_matches_the_cpu_reference() {
    let Some(dir) = pointclouds_dir() else { return };
    let tgt = filtered(&dir, "251370668.pcd", 0.1);
    let src = filtered(&dir, "251371071.pcd", 0.1);
    let map = VoxelMap::build(&tgt.points, 1.0).unwrap();
    let g = GaussConstants::new(1.0, 0.55).unwrap();
    let mut rng = Rng::new(3);
    for search in NeighbourSearch::ALL {
        for _ in 0..3 {
            let pose = Pose6::new(
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
                rng.range(-0.2, 0.2),
                rng.range(-0.1, 0.1),
                rng.range(-0.1, 0.1),
                rng.range(-0.3, 0.3),
            );
            let a = factored(&map, &src.points, &pose, search, g);
            let b = linearize_points(&map, &src.points, &pose, search, g);
            assert_eq!(a.correspondences, b.correspondences, "{search:?}");
            let (es, eg, eh) = (
                rel(&[a.score], &[b.score]),
                rel(a.gradient.as_slice(), b.gradient.as_slice()),
                rel(a.hessian.as_slice(), b.hessian.as_slice()),
            );
            eprintln!("{search:?}: score {es:.1e}, gradient {eg:.1e}, Hessian {eh:.1e}");
            assert!(
                es < 1e-12 && eg < 1e-12 && eh < 1e-12,
                "{search:?}: {es} {eg} {eh}"
            );
        }
    }
}

#[test]
fn pipeline_without_a_gpu_is_a_no_device_error() {
    let cap = GpuCapacity {
        points: 100,
        voxels: 10,
        requests: 1,
    };
    match ptxflow::runtime::Gpu::open_default() {
        Err(_) => {
            let e = GpuDerivativePipeline::open_default(cap, NeighbourSearch::Direct7, 0.55)
                .err()
                .expect("no GPU here");
            assert!(e.is_no_device(), "{e}");
            let tgt = [[0.0f32; 3]; 10];
            // The CPU path still works on the same machine.
            assert!(
                align_clouds(&tgt, &tgt, &Isometry3::identity(), &NdtParams::default()).is_err()
            );
        }
        Ok(gpu) => {
            let bad = GpuDerivativePipeline::new(gpu.clone(), cap, NeighbourSearch::Direct7, 1.5)
                .err()
                .expect("bad ratio");
            assert!(matches!(bad, ptxflow::Error::Input { .. }), "{bad}");
            let zero = GpuDerivativePipeline::new(
                gpu,
                GpuCapacity { requests: 0, ..cap },
                NeighbourSearch::Direct7,
                0.55,
            )
            .err();
            assert!(matches!(zero, Some(ptxflow::Error::Input { .. })));
        }
    }
}

#[test]
fn best_hypothesis_prefers_converged_then_score() {
    let Some(dir) = pointclouds_dir() else { return };
    let tgt = filtered(&dir, "251370668.pcd", 0.1);
    let src = filtered(&dir, "251371071.pcd", 0.1);
    let truth = matrix_file(&dir, "251370668_251371071_relative_fast_gicp.txt");
    let params = NdtParams::default();
    let map = VoxelMap::build(&tgt.points, params.resolution_m).unwrap();
    let mut lin =
        CpuLinearizer::new(&map, vec![&src.points], params.search, params.outlier_ratio).unwrap();
    let inits = hypotheses(&truth, 6, 1.0, 10.0, 9).unwrap();
    assert_eq!(inits[0], truth);
    let report = align_hypotheses(&mut lin, 0, &inits, &params.solver).unwrap();
    let best = report.best_result().unwrap();
    for r in &report.results {
        assert!(!r.stop.converged() || !best.stop.converged() || r.score <= best.score);
    }
    let (et, er) = pose_error(&best.t_target_source, &truth);
    eprintln!(
        "best of {}: {} {et:.4} m {er:.3} deg",
        inits.len(),
        best.stop
    );
    assert!(best.stop.converged() && et < 0.05 && er < 1.0);
    assert_eq!(best_result(&[]), None);
    assert!(hypotheses(&truth, 3, -1.0, 1.0, 0).is_err());
}
