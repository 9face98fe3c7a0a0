//! `ndt_derivatives` run by the PTX interpreter (`ptxflow::sim`, no GPU needed) against the CPU
//! reference: a synthetic scene (noisy planes), two requests in one launch (request 0 in the
//! parameters, request 1 from memory), every search mode, the hash probe and the dense cell
//! table (the dense [`Variant`]). The two lookups must give bit-identical records (same voxels,
//! same order).

mod ndt_support;

use ndt_support::rel_diff;
use ptxflow::kernels::ndt::derivatives::{
    build_variant, Variant, BLOCK, PROBES_DIRECT27, PROBES_DIRECT7, SLOT_VALUES, VALUES,
};
use ptxflow::kernels::KernelId;
use ptxflow::ndt::derivatives::{linearize_points, GaussConstants};
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
fn run(
    prog: &Program,
    map: &VoxelMap,
    source: &[[f32; 3]],
    poses: &[Pose6],
    search: NeighbourSearch,
    dense: Option<&DenseCells>,
    blocks: u32,
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
    let target = scene(3000, 1);
    let map = VoxelMap::build(&target, 1.0).unwrap();
    let cells = DenseCells::build(&map).expect("a small box");
    for (v, k) in map.keys().iter().enumerate() {
        assert_eq!(cells.get(*k), Some(v));
    }
    assert_eq!(cells.get([cells.origin[0] - 1, 0, 0]), None);
    let source: Vec<[f32; 3]> = scene(300, 2);
    let poses = [
        Pose6::new(0.1, -0.05, 0.02, 0.01, -0.02, 0.05),
        Pose6::new(-0.2, 0.1, 0.0, -0.03, 0.01, -0.1),
    ];
    let gauss = GaussConstants::new(1.0, 0.55).unwrap();
    for search in NeighbourSearch::ALL {
        let hash = run(&prog, &map, &source, &poses, search, None, 2);
        let dense = run(&dense_prog, &map, &source, &poses, search, Some(&cells), 2);
        assert_eq!(
            hash.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            dense.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{search:?}: hash and dense records bit-identical"
        );
        let compact = run(
            &compact_prog,
            &map,
            &source,
            &poses,
            search,
            Some(&cells),
            2,
        );
        assert_eq!(
            hash.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            compact.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{search:?}: hash and compacted dense records bit-identical"
        );
        let shared_acc = run(
            &shared_acc_prog,
            &map,
            &source,
            &poses,
            search,
            Some(&cells),
            2,
        );
        assert_eq!(
            hash.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            shared_acc.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{search:?}: hash and shared-accumulator, prefetching, linear-probe records bit-identical"
        );
        // Two warps per point: the same pairs, their sums added in another order.
        let split = run(&split_prog, &map, &source, &poses, search, Some(&cells), 2);
        for k in 0..poses.len() {
            let r =
                |v: &[f64]| decode_result(&v[VALUES * k..VALUES * (k + 1)], gauss, source.len());
            let (a, b) = (r(&split).unwrap(), r(&hash).unwrap());
            assert_eq!(
                a.correspondences, b.correspondences,
                "{search:?} {k}: split count"
            );
            let e = [
                rel_diff(&[a.score], &[b.score]),
                rel_diff(a.gradient.as_slice(), b.gradient.as_slice()),
                rel_diff(a.hessian.as_slice(), b.hessian.as_slice()),
            ];
            assert!(e.iter().all(|&x| x <= 1e-12), "{search:?} {k}: split {e:?}");
        }
        for (k, pose) in poses.iter().enumerate() {
            let got =
                decode_result(&hash[VALUES * k..VALUES * (k + 1)], gauss, source.len()).unwrap();
            let cpu = linearize_points(&map, &source, pose, search, gauss);
            assert_eq!(got.correspondences, cpu.correspondences, "{search:?} {k}");
            assert!(got.correspondences > 100, "{search:?}: the scene pairs");
            let e = [
                rel_diff(&[got.score], &[cpu.score]),
                rel_diff(got.gradient.as_slice(), cpu.gradient.as_slice()),
                rel_diff(got.hessian.as_slice(), cpu.hessian.as_slice()),
            ];
            assert!(e.iter().all(|&x| x <= 1e-9), "{search:?} {k}: {e:?}");
        }
    }
}
