//! Shared set-up of the interpreter (`ptxflow::sim`) NDT tests: the synthetic scene, the
//! ordinary `ndt_derivatives` launch (buffers and arguments) and the comparison with the CPU.

use super::rel_diff;
use ptxflow::kernels::ndt::derivatives::{
    BLOCK, PROBES_DIRECT27, PROBES_DIRECT7, SLOT_VALUES, VALUES,
};
use ptxflow::ndt::derivatives::{linearize_points, GaussConstants};
use ptxflow::ndt::gpu::mixed::pack_cov32;
use ptxflow::ndt::gpu::records::{
    decode_result, pack_request, pack_voxels, REQUEST_WORDS, VOXEL_VALUES,
};
use ptxflow::ndt::gpu::DenseCells;
use ptxflow::ndt::{Linearization, NeighbourSearch, Pose6, VoxelMap};
use ptxflow::rng::Rng;
use ptxflow::sim::{Arg, Grid, Memory, Program};

/// Points on up to three noisy planes (floor and two walls) of a 6 m box, the planes `lift_m`
/// off the box's faces, the box at (`offset_m`, `offset_m`, `offset_m`): every coordinate stays
/// positive, because the interpreter (today) ignores the integer rounding of a float-to-float
/// `cvt.rmi`, which makes its floor a truncation.
pub fn noisy_planes(
    n: usize,
    seed: u64,
    planes: usize,
    lift_m: f64,
    offset_m: f64,
) -> Vec<[f32; 3]> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let (u, v) = (rng.range(0.0, 6.0), rng.range(0.0, 3.0));
            let w = 0.03 * rng.normal();
            match i % planes {
                0 => [u, 2.0 * v, w + lift_m],
                1 => [u, w + lift_m, v],
                _ => [w + lift_m, 2.0 * v, v],
            }
            .map(|c| (c + offset_m) as f32)
        })
        .collect()
}

/// The Gauss constants of the interpreter tests (outlier ratio 0.55) for `map`.
pub fn gauss(map: &VoxelMap) -> GaussConstants {
    GaussConstants::new(map.resolution_m(), 0.55).unwrap()
}

/// One interpreted `ndt_derivatives` launch: the map, the source cloud, the search mode and,
/// for the dense builds, the cell table (with the f32 covariances of the mixed builds).
pub struct SimLaunch<'a> {
    pub map: &'a VoxelMap,
    pub source: &'a [[f32; 3]],
    pub search: NeighbourSearch,
    pub dense: Option<&'a DenseCells>,
    /// Appends the `cov32` buffer after the dense table (`Variant::mixed` builds).
    pub cov32: bool,
}

thread_local! {
    /// [`SimLaunch::run_wide`] is under way: `voxels` gets the padded records.
    static WIDE_RECORDS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl SimLaunch<'_> {
    /// [`SimLaunch::run`] with the padded voxel records as the `voxels` argument (the
    /// `Variant::wide_records` builds).
    #[allow(dead_code)] // not every test binary that shares this module runs the wide builds
    pub fn run_wide(&self, prog: &Program, poses: &[Pose6], blocks: u32) -> Vec<f64> {
        WIDE_RECORDS.with(|w| w.set(true));
        let out = self.run(prog, poses, blocks);
        WIDE_RECORDS.with(|w| w.set(false));
        out
    }

    /// Uploads the buffers and returns the kernel's arguments: `requests` in memory, request 0
    /// = `param_request` in the parameters, `partial_slots` slots of NaN partials, `counters`
    /// zeroed counters and the caller's `results`.
    pub fn args(
        &self,
        mem: &mut Memory,
        requests: &[u64],
        param_request: &[u64],
        partial_slots: usize,
        counters: usize,
        results: Arg,
    ) -> Vec<Arg> {
        let gauss = gauss(self.map);
        let points = mem.upload("points", self.source.as_flattened());
        let mut vox = Vec::new();
        pack_voxels(self.map, &mut vox);
        assert_eq!(vox.len(), VOXEL_VALUES * self.map.len());
        if WIDE_RECORDS.with(|w| w.get()) {
            ptxflow::ndt::gpu::wide::pack_wide_voxels(self.map, &mut vox);
        }
        let voxels = mem.upload("voxels", &vox);
        let slots = mem.upload("slots", self.map.hash().slots_flat());
        let requests = mem.upload("requests", requests);
        let partials = mem.upload("partials", &vec![f64::NAN; SLOT_VALUES * partial_slots]);
        let counters = mem.upload("counters", &vec![0u32; counters]);
        let r = self.map.resolution_m();
        let (start, count, radius) = match self.search {
            NeighbourSearch::Direct1 => (PROBES_DIRECT7, 1u32, 0u32),
            NeighbourSearch::Direct7 => (PROBES_DIRECT7, 7, 0),
            NeighbourSearch::Direct27 => (PROBES_DIRECT27, 27, 0),
            NeighbourSearch::Radius => (PROBES_DIRECT27, 27, 1),
        };
        let mut args = vec![
            points,
            voxels,
            slots,
            Arg::U32((self.map.hash().capacity() - 1) as u32),
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
        args.extend(
            param_request[..9]
                .iter()
                .map(|w| Arg::F64(f64::from_bits(*w))),
        );
        args.push(Arg::U32(param_request[9] as u32));
        args.push(Arg::U32((param_request[9] >> 32) as u32));
        if let Some(d) = self.dense {
            args.push(mem.upload("cells", &d.table));
            args.extend(d.origin.iter().map(|&o| Arg::S32(o)));
            args.extend(d.dims.iter().map(|&v| Arg::U32(v)));
            if self.cov32 {
                let mut cov = Vec::new();
                pack_cov32(self.map, &mut cov);
                args.push(mem.upload("cov32", &cov));
            }
        }
        args
    }

    /// Runs `prog` on `poses` (one request each, `blocks` blocks per request) and returns the
    /// raw result records.
    pub fn run(&self, prog: &Program, poses: &[Pose6], blocks: u32) -> Vec<f64> {
        let mut mem = Memory::new();
        let n = poses.len();
        let mut req = vec![0u64; REQUEST_WORDS * n.max(2)];
        for (k, p) in poses.iter().enumerate() {
            req[REQUEST_WORDS * k..REQUEST_WORDS * (k + 1)].copy_from_slice(&pack_request(
                p,
                0,
                self.source.len() as u32,
            ));
        }
        let results = mem.upload("results", &vec![f64::NAN; VALUES * n]);
        let param = req[..REQUEST_WORDS].to_vec();
        let args = self.args(&mut mem, &req, &param, n * blocks as usize, n, results);
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

    /// Request `k`'s record of `records`, decoded.
    pub fn decode(&self, records: &[f64], k: usize) -> Linearization {
        decode_result(
            &records[VALUES * k..VALUES * (k + 1)],
            gauss(self.map),
            self.source.len(),
        )
        .unwrap()
    }

    /// Asserts that every request's record of `records` (for `poses`) has the CPU's
    /// correspondences (more than 100) and score, gradient and Hessian within `tolerance`
    /// (norm-wise relative) of the CPU's.
    pub fn assert_matches_cpu(&self, records: &[f64], poses: &[Pose6], tolerance: f64, what: &str) {
        let search = self.search;
        for (k, pose) in poses.iter().enumerate() {
            let got = self.decode(records, k);
            let cpu = linearize_points(self.map, self.source, pose, search, gauss(self.map));
            assert_eq!(
                got.correspondences, cpu.correspondences,
                "{what} {search:?} {k}"
            );
            assert!(got.correspondences > 100, "{search:?}: the scene pairs");
            let e = differences(&got, &cpu);
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

/// Norm-wise relative differences of score, gradient and Hessian of `a` against `b`.
pub fn differences(a: &Linearization, b: &Linearization) -> [f64; 3] {
    [
        rel_diff(&[a.score], &[b.score]),
        rel_diff(a.gradient.as_slice(), b.gradient.as_slice()),
        rel_diff(a.hessian.as_slice(), b.hessian.as_slice()),
    ]
}
