//! `ndt_derivatives` run by the PTX interpreter (`ptxflow::sim`, no GPU needed) against the CPU
//! reference: a synthetic scene (noisy planes), two requests in one launch (request 0 in the
//! parameters, request 1 from memory), every search mode, the hash probe and the dense cell
//! table (the dense [`Variant`]). The two lookups must give bit-identical records (same voxels,
//! same order).

mod ndt_support;

use ndt_support::sim::{differences, noisy_planes, SimLaunch};
use ptxflow::kernels::ndt::derivatives::{build_variant, Variant};
use ptxflow::kernels::KernelId;
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::{NeighbourSearch, Pose6, VoxelMap};
use ptxflow::ptx::Target;
use ptxflow::sim::Program;

#[test]
fn interpreted_kernel_matches_the_cpu_with_hash_and_dense_cells() {
    let ptx = KernelId::NdtDerivatives.build(Target::Sm75).emit().unwrap();
    let prog = Program::parse(&ptx).unwrap();
    let dense_variant = Variant {
        dense: true,
        ..Variant::default()
    };
    let dense_prog =
        Program::parse(&build_variant(Target::Sm75, dense_variant).emit().unwrap()).unwrap();
    let compact_variant = Variant {
        dense: true,
        compact: true,
        ..Variant::default()
    };
    let compact_prog =
        Program::parse(&build_variant(Target::Sm75, compact_variant).emit().unwrap()).unwrap();
    let shared_acc_variant = Variant {
        dense: true,
        compact: true,
        prefetch: true,
        linear: true,
        shared_acc: true,
        ..Variant::default()
    };
    let shared_acc_prog = Program::parse(
        &build_variant(Target::Sm75, shared_acc_variant)
            .emit()
            .unwrap(),
    )
    .unwrap();
    let split_prog = Program::parse(
        &build_variant(
            Target::Sm75,
            Variant {
                split_point: true,
                ..Variant::DENSE_SMALL
            },
        )
        .emit()
        .unwrap(),
    )
    .unwrap();
    let target = noisy_planes(3000, 1, 3, 0.0, 10.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let cells = DenseCells::build(&map).expect("a small box");
    for (v, k) in map.keys().iter().enumerate() {
        assert_eq!(cells.get(*k), Some(v));
    }
    assert_eq!(cells.get([cells.origin[0] - 1, 0, 0]), None);
    let source: Vec<[f32; 3]> = noisy_planes(300, 2, 3, 0.0, 10.0);
    let poses = [
        Pose6::new(0.1, -0.05, 0.02, 0.01, -0.02, 0.05),
        Pose6::new(-0.2, 0.1, 0.0, -0.03, 0.01, -0.1),
    ];
    for search in NeighbourSearch::ALL {
        let launch = |dense| SimLaunch {
            map: &map,
            source: &source,
            search,
            dense,
            cov32: false,
        };
        let (hashed, dense) = (launch(None), launch(Some(&cells)));
        let hash = hashed.run(&prog, &poses, 2);
        let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&hash),
            bits(&dense.run(&dense_prog, &poses, 2)),
            "{search:?}: hash and dense records bit-identical"
        );
        assert_eq!(
            bits(&hash),
            bits(&dense.run(&compact_prog, &poses, 2)),
            "{search:?}: hash and compacted dense records bit-identical"
        );
        assert_eq!(
            bits(&hash),
            bits(&dense.run(&shared_acc_prog, &poses, 2)),
            "{search:?}: hash and shared-accumulator, prefetching, linear-probe records bit-identical"
        );
        // Two warps per point: the same pairs, their sums added in another order.
        let split = dense.run(&split_prog, &poses, 2);
        for k in 0..poses.len() {
            let (a, b) = (dense.decode(&split, k), dense.decode(&hash, k));
            assert_eq!(
                a.correspondences, b.correspondences,
                "{search:?} {k}: split count"
            );
            let e = differences(&a, &b);
            assert!(e.iter().all(|&x| x <= 1e-12), "{search:?} {k}: split {e:?}");
        }
        hashed.assert_matches_cpu(&hash, &poses, 1e-9, "hash");
    }
}
