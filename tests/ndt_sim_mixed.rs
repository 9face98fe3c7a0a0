//! The mixed-precision build of `ndt_derivatives` (`Variant::mixed`: per-pair and per-point
//! maths in f32, transform, `x' − μ` and sums in f64) run by the PTX interpreter against the
//! CPU reference on a synthetic scene, every search mode, two requests per launch: the same
//! correspondences, and score, gradient and Hessian within 2e-6 of the CPU's scale (the f64
//! kernels are within 1e-9; `tests/ndt_sim.rs`).

mod ndt_support;

use ndt_support::sim::{noisy_planes, SimLaunch};
use ptxflow::kernels::ndt::derivatives::{build_variant, Variant};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::{NeighbourSearch, Pose6, VoxelMap};
use ptxflow::ptx::Target;
use ptxflow::sim::Program;

#[test]
fn interpreted_mixed_kernel_is_within_2e_6_of_the_cpu() {
    let base = Variant {
        mixed: true,
        ..Variant::DENSE
    };
    let variants = [
        base,
        Variant {
            fast_probes: true,
            ..base
        },
        Variant {
            fast_probes: true,
            acc32: true,
            shared_acc: false,
            ..base
        },
        Variant {
            fast_probes: true,
            hilo: true,
            ..base
        },
        Variant {
            fast_probes: true,
            score64: true,
            ..base
        },
        Variant {
            fast_probes: true,
            score64: true,
            acc32: true,
            shared_acc: false,
            ..base
        },
    ];
    // The f64 cross-product contributions (the batch rounds' table kernel
    // `ndt_derivatives_dense_cross`): CPU accuracy (the f64 kernels' 1e-9 bound).
    let prog = Program::parse(
        &build_variant(Target::Sm75, Variant::DENSE_CROSS)
            .emit()
            .unwrap(),
    )
    .unwrap();
    check(&prog, "cross", 1e-9);
    for variant in variants {
        let prog = Program::parse(&build_variant(Target::Sm75, variant).emit().unwrap()).unwrap();
        check(&prog, &format!("{variant:?}"), 2e-6);
    }
}

fn check(prog: &Program, what: &str, tolerance: f64) {
    let target = noisy_planes(3000, 1, 3, 0.0, 10.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let cells = DenseCells::build(&map).expect("a small box");
    let source: Vec<[f32; 3]> = noisy_planes(300, 2, 3, 0.0, 10.0);
    let poses = [
        Pose6::new(0.1, -0.05, 0.02, 0.01, -0.02, 0.05),
        Pose6::new(-0.2, 0.1, 0.0, -0.03, 0.01, -0.1),
    ];
    for search in NeighbourSearch::ALL {
        let launch = SimLaunch {
            map: &map,
            source: &source,
            search,
            dense: Some(&cells),
            cov32: what != "cross",
        };
        let got = launch.run(prog, &poses, 2);
        launch.assert_matches_cpu(&got, &poses, tolerance, what);
    }
}
