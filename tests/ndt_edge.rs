//! Degenerate inputs: empty and all-NaN clouds, no overlap, vanishing Hessians, bad settings.
//! Each gives a clear error or a result whose stop reason says what happened; none panics.

use nalgebra::Isometry3;
use ptxflow::ndt::io::parse_cloud;
use ptxflow::ndt::*;
use ptxflow::rng::Rng;
use ptxflow::Error;
use std::path::Path;

/// Points on three noisy planes (floor and two walls) of a 6 m room corner.
fn corner(seed: u64, n: usize) -> Vec<[f32; 3]> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let (u, v, w) = (
                rng.range(0.0, 6.0),
                rng.range(0.0, 3.0),
                0.005 * rng.normal(),
            );
            match i % 3 {
                0 => [u, 2.0 * v, w],
                1 => [u, w, v],
                _ => [w, 2.0 * v, u / 2.0],
            }
            .map(|c| c as f32)
        })
        .collect()
}

fn input_error(r: ptxflow::Result<NdtResult>) -> String {
    match r {
        Err(e @ Error::Input { .. }) => e.to_string(),
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn empty_and_all_nan_clouds_are_clear_errors() {
    let target = corner(1, 3000);
    let id = Isometry3::identity();
    let p = NdtParams::default();
    let e = input_error(align_clouds(&target, &[], &id, &p));
    assert!(e.contains("source cloud has no"), "{e}");
    let e = input_error(align_clouds(&[], &target, &id, &p));
    assert!(e.contains("no voxel"), "{e}");
    let e = input_error(align_clouds(&target[..5], &target, &id, &p));
    assert!(e.contains("no voxel"), "{e}");

    let nan_pcd = "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 3\nHEIGHT 1\nPOINTS 3\nDATA ascii\nnan nan nan\nnan 1 2\n1 inf 2\n";
    let cloud = parse_cloud(Path::new("nan.pcd"), nan_pcd.as_bytes()).unwrap();
    assert_eq!((cloud.len(), cloud.dropped_non_finite), (0, 3));
    assert!(align_clouds(&target, &cloud.points, &id, &p).is_err());
    assert!(voxel_grid_filter(&cloud, 0.1).unwrap().is_empty());
}

#[test]
fn no_overlap_stops_with_no_correspondences() {
    let target = corner(2, 3000);
    let far = Isometry3::translation(1000.0, 0.0, 0.0);
    for search in NeighbourSearch::ALL {
        let r = align_clouds(
            &target,
            &corner(3, 2000),
            &far,
            &NdtParams {
                search,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            (r.stop, r.correspondences, r.iterations),
            (StopReason::NoCorrespondences, 0, 0)
        );
        assert_eq!(r.t_target_source, far);
        assert_eq!(r.score, 0.0);
    }
    // Through the seam directly: an empty map and an empty source.
    let empty = VoxelMap::build(&[], 1.0).unwrap();
    let src = corner(4, 100);
    let mut lin =
        CpuLinearizer::new(&empty, vec![&src, &[]], NeighbourSearch::Direct7, 0.55).unwrap();
    for source in [0, 1] {
        let r = align(
            &mut lin,
            source,
            &Isometry3::identity(),
            &SolverParams::default(),
        )
        .unwrap();
        assert_eq!(r.stop, StopReason::NoCorrespondences);
        assert!(r.likelihood_per_point == 0.0);
    }
}

#[test]
fn vanishing_hessian_stops_as_singular() {
    // A voxel whose points spread over 1 mm: a source point half a metre from its mean pairs with
    // it, but exp(−d2 q / 2) underflows, so score, gradient and Hessian are all zero.
    let mut rng = Rng::new(5);
    let target: Vec<[f32; 3]> = (0..20)
        .map(|_| [0.5, 0.5, 0.5].map(|c: f64| (c + 0.001 * rng.f64()) as f32))
        .collect();
    let source = vec![[0.05f32, 0.05, 0.05], [0.95, 0.9, 0.1]];
    let r = align_clouds(
        &target,
        &source,
        &Isometry3::identity(),
        &NdtParams::default(),
    )
    .unwrap();
    assert_eq!(r.stop, StopReason::SingularHessian);
    assert_eq!(r.correspondences, 2);
    assert!(!r.stop.converged());
}

#[test]
fn bad_settings_are_input_errors() {
    let t = corner(6, 3000);
    let id = Isometry3::identity();
    let bad = [
        NdtParams {
            resolution_m: 0.0,
            ..Default::default()
        },
        NdtParams {
            resolution_m: f64::NAN,
            ..Default::default()
        },
        NdtParams {
            outlier_ratio: 1.0,
            ..Default::default()
        },
        NdtParams {
            solver: SolverParams {
                step_max: -1.0,
                ..Default::default()
            },
            ..Default::default()
        },
        NdtParams {
            solver: SolverParams {
                translation_epsilon_m: 0.0,
                ..Default::default()
            },
            ..Default::default()
        },
    ];
    for p in bad {
        input_error(align_clouds(&t, &t, &id, &p));
    }
    let nan_init = Isometry3::translation(f64::NAN, 0.0, 0.0);
    input_error(align_clouds(&t, &t, &nan_init, &NdtParams::default()));
    assert!(VoxelMap::build(&[[f32::NAN, 0.0, 0.0]], 1.0).is_err());
}

#[test]
fn identical_clouds_align_to_identity() {
    let t = corner(7, 6000);
    let init = Isometry3::translation(0.2, -0.1, 0.05);
    for search in [
        NeighbourSearch::Direct7,
        NeighbourSearch::Direct27,
        NeighbourSearch::Radius,
    ] {
        let r = align_clouds(
            &t,
            &t,
            &init,
            &NdtParams {
                search,
                ..Default::default()
            },
        )
        .unwrap();
        let (et, er) = pose_error(&r.t_target_source, &Isometry3::identity());
        assert_eq!(r.stop, StopReason::Converged, "{search:?}");
        assert!(et < 0.01 && er < 0.1, "{search:?}: {et} m {er} deg");
    }
}
