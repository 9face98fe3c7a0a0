//! Which device finishes an NDT job first: the cost model behind [`Device::Auto`].
//!
//! Both devices build the voxel map on the CPU and read the same files, so the model compares
//! only what differs: the CPU evaluates every point against its neighbour voxels on all cores,
//! one evaluation after another; the GPU first needs a context and the kernel module (hundreds of
//! milliseconds, paid once per process), then costs a launch and a synchronization per round,
//! nearly independent of the point count at these sizes, and serves a whole lockstep batch in
//! one launch per round. A one-shot pair of scans is therefore done on the CPU before the GPU
//! would be ready; sequences, hypothesis searches and large clouds repay the start-up.
//!
//! The constants come from measurements (H100 with 16 host cores, CUDA 13 driver; see
//! [`CostModel::default`]); `PTXFLOW_GPU_STARTUP_MS` overrides the start-up estimate for other
//! machines.
//! The estimate never touches the driver, so choosing the CPU costs nothing.

use crate::ndt::params::NdtParams;
use crate::ndt::result::NdtResult;
use crate::runtime::{Choice, Device, Gpu};
use crate::Result;
use nalgebra::Isometry3;

/// What an NDT job will ask for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NdtWork {
    /// Alignments in total (sources × hypotheses).
    pub alignments: usize,
    /// Alignments that may run in lockstep (one GPU launch per round serves them all): 1 for a
    /// chained sequence, the hypotheses per source, or every source of an unchained sequence.
    pub lockstep: usize,
    /// Source points per alignment (after downsampling).
    pub source_points: usize,
    /// Voxels probed per point (1, 7 or 27).
    pub probes: usize,
}

/// The calibrated constants; [`CostModel::default`] holds the measured ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Objective evaluations an alignment takes (Newton steps plus line-search trials).
    pub evaluations: f64,
    /// CPU: fixed cost of one evaluation (fork-join, solver step), seconds.
    pub cpu_eval_s: f64,
    /// CPU: one point against one voxel on one core, seconds.
    pub cpu_probe_s: f64,
    /// CPU threads that share an evaluation.
    pub cpu_threads: usize,
    /// GPU: context creation and module load (from the JIT cache), seconds.
    pub gpu_startup_s: f64,
    /// GPU: one round's launch, synchronization and solver step, seconds.
    pub gpu_round_s: f64,
    /// GPU: one point against one voxel, seconds (the whole device).
    pub gpu_probe_s: f64,
    /// GPU: uploading one source point (and its share of the map), seconds.
    pub gpu_point_upload_s: f64,
}

impl Default for CostModel {
    /// Measured on an H100 80GB HBM3 host (16 cores, driver 580.159, 2026-11-25) with the pairs
    /// in `../shared/data/pointclouds` and 200 Velodyne scans: CPU evaluation 0.1 ms fixed +
    /// 90 ns per point-voxel probe per core; GPU 30 µs per round, 0.025 ns per probe, 2 ns per
    /// uploaded point; start-up 350 ms of wall time (context 220 ms, buffers and priming 10 ms,
    /// and ~110 ms more at process exit, when the driver tears the context down), 160 ms more
    /// when the kernel's JIT output is not cached yet.
    fn default() -> Self {
        let startup_ms = std::env::var("PTXFLOW_GPU_STARTUP_MS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or_else(|| {
                // With the on-disk cache off, the driver's compute cache is assumed to hold the
                // kernel's JIT output (true after the first run on a machine).
                let jit = crate::runtime::jit_cache_dir().is_none()
                    || crate::runtime::jit_cache_has("ndt_derivatives");
                if jit {
                    350.0
                } else {
                    510.0
                }
            });
        CostModel {
            evaluations: 12.0,
            cpu_eval_s: 100e-6,
            cpu_probe_s: 90e-9,
            cpu_threads: rayon::current_num_threads().max(1),
            gpu_startup_s: startup_ms * 1e-3,
            gpu_round_s: 30e-6,
            gpu_probe_s: 0.025e-9,
            gpu_point_upload_s: 2e-9,
        }
    }
}

/// The two estimates, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Whole job on the CPU.
    pub cpu_s: f64,
    /// Whole job on the GPU, start-up included.
    pub gpu_s: f64,
}

impl CostModel {
    /// Estimated seconds of `work` on each device (map build and file reading excluded: both
    /// devices pay them alike).
    pub fn estimate(&self, w: &NdtWork) -> Estimate {
        let n = w.alignments.max(1) as f64;
        let probes = (w.source_points.max(1) * w.probes.max(1)) as f64;
        // rayon splits even a few hundred points over every core (measured: 361 points take
        // the fixed cost plus 1/16 of their probes on 16 cores).
        let threads = self.cpu_threads as f64;
        let cpu_eval = self.cpu_eval_s + probes * self.cpu_probe_s / threads;
        let cpu_s = n * self.evaluations * cpu_eval;
        let lockstep = w.lockstep.clamp(1, w.alignments.max(1)) as f64;
        let rounds = (n / lockstep).ceil() * self.evaluations;
        let gpu_s = self.gpu_startup_s
            + rounds * self.gpu_round_s
            + n * self.evaluations * probes * self.gpu_probe_s
            + n * w.source_points as f64 * self.gpu_point_upload_s;
        Estimate { cpu_s, gpu_s }
    }

    /// Resolves `device` for `work`: `Cpu` and `Gpu` as asked; `Auto` to the device with the
    /// lower estimate. Whether a GPU exists is not checked here (the caller falls back to the
    /// CPU when opening it fails).
    pub fn choose(&self, device: Device, work: &NdtWork) -> Choice {
        if device != Device::Auto {
            return Choice::asked(device);
        }
        let e = self.estimate(work);
        let ms = |s: f64| s * 1e3;
        let (device, verdict) = if e.gpu_s < e.cpu_s {
            (Device::Gpu, "the GPU is expected to finish first")
        } else {
            (Device::Cpu, "the CPU is expected to finish first")
        };
        Choice {
            device,
            reason: format!(
                "auto: {verdict} ({} alignment{} of {} points: CPU ~{:.1} ms, GPU ~{:.1} ms \
                 including {:.0} ms start-up)",
                work.alignments,
                if work.alignments == 1 { "" } else { "s" },
                work.source_points,
                ms(e.cpu_s),
                ms(e.gpu_s),
                ms(self.gpu_startup_s)
            ),
        }
    }
}

/// Aligns `source` to `target` from `init` on `device` and says which device ran and why:
/// [`crate::ndt::align_clouds`] or [`crate::ndt::align_clouds_gpu`], `Auto` resolved by
/// [`CostModel::default`] (falling back to the CPU when no GPU can be opened).
///
/// Errors: as the alignment that ran; [`crate::Error::NoDevice`] for [`Device::Gpu`] without a
/// usable GPU.
pub fn align_clouds_on(
    device: Device,
    target: &[[f32; 3]],
    source: &[[f32; 3]],
    init: &Isometry3<f64>,
    params: &NdtParams,
) -> Result<(NdtResult, Choice)> {
    let work = NdtWork {
        alignments: 1,
        lockstep: 1,
        source_points: source.len(),
        probes: params.search.offsets().len(),
    };
    let mut choice = CostModel::default().choose(device, &work);
    if choice.is_gpu() {
        match Gpu::open_default() {
            Ok(gpu) => {
                let r = crate::ndt::align_clouds_gpu(gpu, target, source, init, params)?;
                return Ok((r, choice));
            }
            Err(e) if device == Device::Auto && e.is_no_device() => {
                choice = Choice {
                    device: Device::Cpu,
                    reason: format!("auto: no usable GPU ({e})"),
                };
            }
            Err(e) => return Err(e),
        }
    }
    let r = crate::ndt::align_clouds(target, source, init, params)?;
    Ok((r, choice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel {
            cpu_threads: 16,
            gpu_startup_s: 0.35,
            ..CostModel::default()
        }
    }

    #[test]
    fn one_small_pair_stays_on_the_cpu_and_sequences_go_to_the_gpu() {
        let m = model();
        let pair = NdtWork {
            alignments: 1,
            lockstep: 1,
            source_points: 16_000,
            probes: 7,
        };
        let c = m.choose(Device::Auto, &pair);
        assert_eq!(c.device, Device::Cpu, "{}", c.reason);
        assert!(c.reason.contains("CPU ~"), "{}", c.reason);
        let seq = NdtWork {
            alignments: 200,
            lockstep: 200,
            ..pair
        };
        assert_eq!(m.choose(Device::Auto, &seq).device, Device::Gpu);
        let chained = NdtWork { lockstep: 1, ..seq };
        assert_eq!(m.choose(Device::Auto, &chained).device, Device::Gpu);
        // 200 copies of bun4 (361 points), measured on the H100 host: CPU 242 ms, GPU 328 ms.
        let tiny = NdtWork {
            alignments: 200,
            lockstep: 200,
            source_points: 361,
            probes: 7,
        };
        assert_eq!(m.choose(Device::Auto, &tiny).device, Device::Cpu);
    }

    #[test]
    fn align_on_the_cpu_says_so() {
        // A 4×4×4 lattice per 1 m voxel over 3×3×3 voxels, aligned to itself.
        let mut pts = Vec::new();
        for i in 0..12 {
            for j in 0..12 {
                for k in 0..12 {
                    let f =
                        |v: i32| v as f32 * 0.25 + 0.1 + 0.01 * ((i * 7 + j * 3 + k) % 5) as f32;
                    pts.push([f(i), f(j), f(k)]);
                }
            }
        }
        let (r, c) = align_clouds_on(
            Device::Cpu,
            &pts,
            &pts,
            &Isometry3::identity(),
            &NdtParams::default(),
        )
        .unwrap();
        assert_eq!(c, Choice::asked(Device::Cpu));
        assert!(r.t_target_source.translation.vector.norm() < 1e-3);
    }

    #[test]
    fn named_devices_are_kept() {
        let w = NdtWork {
            alignments: 1,
            lockstep: 1,
            source_points: 10,
            probes: 1,
        };
        assert_eq!(model().choose(Device::Gpu, &w).device, Device::Gpu);
        assert_eq!(model().choose(Device::Cpu, &w).device, Device::Cpu);
    }
}
