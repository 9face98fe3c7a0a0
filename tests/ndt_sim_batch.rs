//! The batch kernel's build options that change no arithmetic (`Variant::late_loads`: per-request
//! vectors read where used; `Variant::acc_pairs`: shared accumulators in pairs with `v2`
//! accesses; `Variant::probes7`: Direct7 probes at fixed offsets; `Variant::wide_records`: padded
//! voxel records read with `v2` loads; `Variant::pair2`: two pairs per step; and the prefetching
//! pair loop), run by the PTX interpreter: every combination's records must equal session 10's
//! batch kernel (the cross-product build alone) bit for bit, for every search mode (Direct7 only
//! for the Direct7 build), two requests per launch. The table's `ndt_derivatives_dense_cross` is
//! session 10's build and `ndt_derivatives_dense_cross7` one of the combinations.

mod ndt_support;

use ndt_support::sim::{noisy_planes, SimLaunch};
use ptxflow::kernels::ndt::derivatives::{build_variant, Variant};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::{NeighbourSearch, Pose6, VoxelMap};
use ptxflow::ptx::Target;
use ptxflow::sim::Program;

#[test]
fn batch_kernel_builds_keep_the_session_10_cross_kernel_bits() {
    let prog =
        |v: Variant| Program::parse(&build_variant(Target::Sm75, v).emit().unwrap()).unwrap();
    // Session 10's batch kernel: the cross-product build alone.
    let s10 = Variant {
        cross: true,
        ..Variant::DENSE
    };
    let base = prog(s10);
    // The table's batch kernels: session 10's, and (session 11) one of the combinations below.
    assert_eq!(Variant::DENSE_CROSS, s10);
    assert_eq!(
        Variant::DENSE_CROSS7,
        Variant {
            late_loads: true,
            acc_pairs: true,
            probes7: true,
            ..s10
        }
    );
    // (wide records, paired accumulators, prefetch, late loads, Direct7 fixed offsets)
    let options = [
        (true, false, false, false, false),
        (false, true, false, false, false),
        (true, true, false, false, false),
        (true, true, true, false, false),
        (false, false, false, true, false),
        (true, true, false, true, false),
        (false, false, false, false, true),
        (false, false, false, true, true),
        (true, true, false, true, true),
        (false, false, true, true, false),
        (false, false, true, true, true),
        (false, true, false, true, false),
        (false, true, false, true, true),
    ];
    // Then the two-pairs-per-step loop (`Variant::pair2`) with late loads, with and without
    // the Direct7 build and the wide accesses.
    let pair2_options = [
        (false, false, false, true, false),
        (false, false, false, true, true),
        (true, true, false, true, true),
    ];
    let target = noisy_planes(3000, 1, 3, 0.0, 10.0);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let cells = DenseCells::build(&map).expect("a small box");
    let source: Vec<[f32; 3]> = noisy_planes(300, 2, 3, 0.0, 10.0);
    let poses = [
        Pose6::new(0.1, -0.05, 0.02, 0.01, -0.02, 0.05),
        Pose6::new(-0.2, 0.1, 0.0, -0.03, 0.01, -0.1),
    ];
    let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for search in NeighbourSearch::ALL {
        let launch = SimLaunch {
            map: &map,
            source: &source,
            search,
            dense: Some(&cells),
            cov32: false,
        };
        let want = launch.run(&base, &poses, 2);
        launch.assert_matches_cpu(&want, &poses, 1e-9, "cross");
        let all = options
            .iter()
            .map(|&o| (o, false))
            .chain(pair2_options.iter().map(|&o| (o, true)));
        for ((wide_records, acc_pairs, prefetch, late_loads, probes7), pair2) in all {
            let variant = Variant {
                pair2,
                wide_records,
                acc_pairs,
                prefetch,
                late_loads,
                probes7,
                ..s10
            };
            // PTXFLOW_DUMP_PTX=dir: the builds' PTX for `ptxas -v` (registers, spills).
            if let Ok(dir) = std::env::var("PTXFLOW_DUMP_PTX") {
                let name = format!(
                    "cross_w{}_p{}_f{}_l{}_d{}_t{}.ptx",
                    wide_records as u8,
                    acc_pairs as u8,
                    prefetch as u8,
                    late_loads as u8,
                    probes7 as u8,
                    pair2 as u8
                );
                let ptx = build_variant(Target::Sm75, variant).emit().unwrap();
                std::fs::write(std::path::Path::new(&dir).join(name), ptx).unwrap();
            }
            if probes7 && search != NeighbourSearch::Direct7 {
                continue; // a Direct7-only build
            }
            let p = prog(variant);
            let got = if wide_records {
                launch.run_wide(&p, &poses, 2)
            } else {
                launch.run(&p, &poses, 2)
            };
            assert_eq!(
                bits(&got),
                bits(&want),
                "{search:?}: wide {wide_records}, pairs {acc_pairs}, prefetch {prefetch}, late {late_loads}, probes7 {probes7}, pair2 {pair2}"
            );
        }
    }
}
