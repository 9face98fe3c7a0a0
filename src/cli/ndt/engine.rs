//! The device side of `ptxflow ndt`: a GPU start-up that runs on its own thread while the main
//! thread reads files and builds the map (context, kernel module, pipeline buffers and one
//! priming launch), and the engine that aligns chunks of sources on the CPU or the GPU.

use super::timing::Timing;
use nalgebra::Isometry3;
use ptxflow::ndt::{
    align_batch, AlignJob, CpuLinearizer, GpuCapacity, GpuDerivativePipeline, NdtParams, NdtResult,
    NeighbourSearch, Pose6, SolverParams, VoxelMap,
};
use ptxflow::runtime::Gpu;
use ptxflow::Result;
use std::thread::JoinHandle;
use std::time::Instant;

/// A GPU pipeline ready to take a map, and what getting it ready cost (milliseconds).
pub struct Warm {
    pub pipeline: GpuDerivativePipeline,
    pub context_ms: f64,
    pub module_ms: f64,
    pub alloc_ms: f64,
    pub prime_ms: f64,
}

/// Starts the GPU on another thread: context, module, buffers for `capacity`, then one launch on
/// a tiny synthetic problem so the first real round pays no first-launch cost.
pub fn start_gpu(
    capacity: GpuCapacity,
    search: NeighbourSearch,
    outlier_ratio: f64,
) -> JoinHandle<Result<Warm>> {
    std::thread::spawn(move || {
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let gpu = Gpu::open_default()?;
        let context_ms = ms(t);
        let t = Instant::now();
        gpu.function(ptxflow::kernels::KernelId::NdtDerivatives)?;
        let module_ms = ms(t);
        let t = Instant::now();
        let mut pipeline = GpuDerivativePipeline::new(gpu, capacity, search, outlier_ratio)?;
        let alloc_ms = ms(t);
        let t = Instant::now();
        prime(&mut pipeline)?;
        Ok(Warm {
            pipeline,
            context_ms,
            module_ms,
            alloc_ms,
            prime_ms: ms(t),
        })
    })
}

/// One round on a one-voxel map, so that lazy module loading and the first launch's set-up
/// happen here rather than in the first real round; then a one-iteration alignment of one point,
/// so that the single-alignment path's one-time set-up (the device solver's, or with
/// `PTXFLOW_NDT_DEVICE_SOLVE=0` the evaluation server's: its stream, mapped buffers and kernel,
/// about 0.75 ms on an H100) also happens here, off the path of the first real alignment.
fn prime(p: &mut GpuDerivativePipeline) -> Result<()> {
    let mut pts = Vec::new();
    for k in 0..27u32 {
        let c = |v: u32| 0.2 + 0.3 * (v % 3) as f32 + 0.01 * k as f32 / 27.0;
        pts.push([c(k), c(k / 3), c(k / 9)]);
    }
    let map = VoxelMap::build(&pts, 1.0)?;
    p.upload_target(&map)?;
    p.upload_source(&[[0.5, 0.5, 0.5]])?;
    p.linearize_pose(0, &Pose6::zeros())?;
    let point: &[[f32; 3]] = &[[0.5, 0.5, 0.5]];
    p.upload_sources(&[point])?;
    let job = [AlignJob {
        source: 0,
        init: Isometry3::identity(),
    }];
    let once = SolverParams {
        max_iterations: 1,
        ..SolverParams::default()
    };
    align_batch(p, &job, &once)?;
    p.reset_counters();
    Ok(())
}

/// Where the alignments run.
pub enum Engine<'m> {
    Cpu {
        map: &'m VoxelMap,
    },
    Gpu {
        pipeline: Box<GpuDerivativePipeline>,
    },
}

impl Engine<'_> {
    /// Uploads the map (GPU) and counts it in `timing`.
    pub fn prepare(&mut self, map: &VoxelMap, timing: &mut Timing) -> Result<()> {
        if let Engine::Gpu { pipeline } = self {
            let t = Instant::now();
            pipeline.upload_target(map)?;
            timing.upload_ms += t.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    /// Aligns `clouds[i]` from every pose of `inits[i]`, all in lockstep (one GPU launch per
    /// round for all of them); results per cloud, in the order of `inits[i]`.
    pub fn align(
        &mut self,
        clouds: &[&[[f32; 3]]],
        inits: &[Vec<Isometry3<f64>>],
        params: &NdtParams,
        timing: &mut Timing,
    ) -> Result<Vec<Vec<NdtResult>>> {
        let jobs: Vec<AlignJob> = inits
            .iter()
            .enumerate()
            .flat_map(|(source, v)| {
                v.iter().map(move |init| AlignJob {
                    source,
                    init: *init,
                })
            })
            .collect();
        let results = match self {
            Engine::Cpu { map } => {
                let t = Instant::now();
                let mut lin =
                    CpuLinearizer::new(map, clouds.to_vec(), params.search, params.outlier_ratio)?;
                let r = align_batch(&mut lin, &jobs, &params.solver)?;
                timing.solve_ms += t.elapsed().as_secs_f64() * 1e3;
                r
            }
            Engine::Gpu { pipeline } => {
                let t = Instant::now();
                pipeline.upload_sources(clouds)?;
                timing.upload_ms += t.elapsed().as_secs_f64() * 1e3;
                let t = Instant::now();
                let r = align_batch(pipeline.as_mut(), &jobs, &params.solver)?;
                timing.solve_ms += t.elapsed().as_secs_f64() * 1e3;
                r
            }
        };
        let mut it = results.into_iter();
        Ok(inits
            .iter()
            .map(|v| it.by_ref().take(v.len()).collect())
            .collect())
    }
}
