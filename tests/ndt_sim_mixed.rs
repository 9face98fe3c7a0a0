//! The mixed-precision build of `ndt_derivatives` (`Variant::mixed`: per-pair and per-point
//! maths in f32, transform, `x' − μ` and sums in f64) run by the PTX interpreter against the
//! CPU reference on a synthetic scene, every search mode, two requests per launch: the same
//! correspondences, and score, gradient and Hessian within 2e-6 of the CPU's scale (the f64
//! kernels are within 1e-9; `tests/ndt_sim.rs`).

mod ndt_support;

use ndt_support::rel_diff;
use ptxflow::kernels::ndt::derivatives::{
    build_variant, Variant, BLOCK, PROBES_DIRECT27, PROBES_DIRECT7, SLOT_VALUES, VALUES,
};
use ptxflow::ndt::derivatives::{linearize_points, GaussConstants};
use ptxflow::ndt::gpu::mixed::pack_cov32;
use ptxflow::ndt::gpu::records::{
    decode_result, pack_request, pack_voxels, REQUEST_WORDS, VOXEL_VALUES,
};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::{NeighbourSearch, Pose6, VoxelMap};
use ptxflow::ptx::Target;
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Grid, Memory, Program};

/// Points on three noisy planes (floor and two walls) in a 6 m box at (10, 10, 10) m: every
/// coordinate stays positive, because the interpreter (today) ignores the integer rounding of a
/// float-to-float `cvt.rmi`, which makes its floor a truncation.
fn scene(n: usize, seed: u64) -> Vec<[f32; 3]> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let (u, v) = (rng.range(0.0, 6.0), rng.range(0.0, 3.0));
            let w = 0.03 * rng.normal();
            match i % 3 {
                0 => [u, 2.0 * v, w],
                1 => [u, w, v],
                _ => [w, 2.0 * v, v],
            }
            .map(|c| (c + 10.0) as f32)
        })
        .collect()
}

/// Runs the kernel on `poses` (one request each, `blocks` blocks per request) and returns the
/// raw result records.
#[allow(clippy::too_many_arguments)] // the launch's inputs, as ndt_sim.rs's `run` plus one
fn run_mixed(
    prog: &Program,
    map: &VoxelMap,
    source: &[[f32; 3]],
    poses: &[Pose6],
    search: NeighbourSearch,
    dense: Option<&DenseCells>,
    blocks: u32,
    with_cov: bool,
) -> Vec<f64> {
    let gauss = GaussConstants::new(map.resolution_m(), 0.55).unwrap();
    let mut mem = Memory::new();
    let points = mem.upload("points", source.as_flattened());
    let mut vox = Vec::new();
    pack_voxels(map, &mut vox);
    assert_eq!(vox.len(), VOXEL_VALUES * map.len());
    let voxels = mem.upload("voxels", &vox);
    let slots = mem.upload("slots", map.hash().slots_flat());
    let n = poses.len();
    let mut req = vec![0u64; REQUEST_WORDS * n.max(2)];
    for (k, p) in poses.iter().enumerate() {
        req[REQUEST_WORDS * k..REQUEST_WORDS * (k + 1)].copy_from_slice(&pack_request(
            p,
            0,
            source.len() as u32,
        ));
    }
    let requests = mem.upload("requests", &req);
    let partials = mem.upload(
        "partials",
        &vec![f64::NAN; SLOT_VALUES * n * blocks as usize],
    );
    let counters = mem.upload("counters", &vec![0u32; n]);
    let results = mem.upload("results", &vec![f64::NAN; VALUES * n]);
    let r = map.resolution_m();
    let (start, count, radius) = match search {
        NeighbourSearch::Direct1 => (PROBES_DIRECT7, 1u32, 0u32),
        NeighbourSearch::Direct7 => (PROBES_DIRECT7, 7, 0),
        NeighbourSearch::Direct27 => (PROBES_DIRECT27, 27, 0),
        NeighbourSearch::Radius => (PROBES_DIRECT27, 27, 1),
    };
    let mut args = vec![
        points,
        voxels,
        slots,
        Arg::U32((map.hash().capacity() - 1) as u32),
        requests,
        partials,
        counters,
        results,
        Arg::F64(1.0 / r),
        Arg::F64(r * r),
        Arg::F64(-0.5 * gauss.d2),
        Arg::F64(-gauss.d2),
        Arg::U32(start),
        Arg::U32(count),
        Arg::U32(radius),
    ];
    args.extend(req[..9].iter().map(|w| Arg::F64(f64::from_bits(*w))));
    args.push(Arg::U32(req[9] as u32));
    args.push(Arg::U32((req[9] >> 32) as u32));
    if let Some(d) = dense {
        args.push(mem.upload("cells", &d.table));
        args.extend(d.origin.iter().map(|&o| Arg::S32(o)));
        args.extend(d.dims.iter().map(|&v| Arg::U32(v)));
        if with_cov {
            let mut cov = Vec::new();
            pack_cov32(map, &mut cov);
            args.push(mem.upload("cov32", &cov));
        }
    }
    let grid = Grid {
        blocks: (blocks, n as u32, 1),
        threads: (BLOCK, 1, 1),
        dyn_shared_bytes: 0,
    };
    prog.run(grid, &args, &mut mem).unwrap();
    assert!(
        mem.download::<u32>("counters")
            .unwrap()
            .iter()
            .all(|&c| c == 0),
        "counters reset by the last block"
    );
    mem.download::<f64>("results").unwrap()
}

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
    // The f64 cross-product contributions: CPU accuracy (the f64 kernels' 1e-9 bound).
    let cross = Variant {
        cross: true,
        ..Variant::DENSE
    };
    let prog = Program::parse(&build_variant(Target::Sm75, cross).emit().unwrap()).unwrap();
    check(&prog, "cross", 1e-9);
    for variant in variants {
        let prog = Program::parse(&build_variant(Target::Sm75, variant).emit().unwrap()).unwrap();
        check(&prog, &format!("{variant:?}"), 2e-6);
    }
}

fn check(prog: &Program, what: &str, tolerance: f64) {
    let target = scene(3000, 1);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let cells = DenseCells::build(&map).expect("a small box");
    let source: Vec<[f32; 3]> = scene(300, 2);
    let poses = [
        Pose6::new(0.1, -0.05, 0.02, 0.01, -0.02, 0.05),
        Pose6::new(-0.2, 0.1, 0.0, -0.03, 0.01, -0.1),
    ];
    let gauss = GaussConstants::new(1.0, 0.55).unwrap();
    for search in NeighbourSearch::ALL {
        let got = run_mixed(
            prog,
            &map,
            &source,
            &poses,
            search,
            Some(&cells),
            2,
            what != "cross",
        );
        for (k, pose) in poses.iter().enumerate() {
            let g = decode_result(&got[VALUES * k..VALUES * (k + 1)], gauss, source.len()).unwrap();
            let cpu = linearize_points(&map, &source, pose, search, gauss);
            assert_eq!(g.correspondences, cpu.correspondences, "{search:?} {k}");
            assert!(g.correspondences > 100, "{search:?}: the scene pairs");
            let e = [
                rel_diff(&[g.score], &[cpu.score]),
                rel_diff(g.gradient.as_slice(), cpu.gradient.as_slice()),
                rel_diff(g.hessian.as_slice(), cpu.hessian.as_slice()),
            ];
            eprintln!(
                "{what} {search:?} {k}: relative differences (score, gradient, Hessian) {e:?}"
            );
            assert!(
                e.iter().all(|&x| x <= tolerance),
                "{what} {search:?} {k}: {e:?}"
            );
        }
    }
}
