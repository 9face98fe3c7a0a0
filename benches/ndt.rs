//! NDT benches, CPU (rayon over all cores) and GPU (`GpuDerivativePipeline`) in one run on the
//! same data (skipped when the data dir is missing; GPU parts skipped without a GPU):
//!
//! - `{cpu,gpu}/ndt/derivatives/{1k,10k,100k,1M}`: one score + gradient + Hessian evaluation
//!   (Direct7, 1 m map of the Velodyne target) at the solved pose, for the first n points of the
//!   raw Velodyne source repeated with 2 cm jitter; GPU time is wall time of one round trip
//!   (request write, launch, synchronize, result read);
//! - `{cpu,gpu}/ndt/align/velodyne` and `.../align/room`: a whole alignment against a prebuilt map
//!   (GPU: including the source upload) — the Velodyne pair from the identity, PCL's room scans
//!   (room_scan2 filtered to ~12k points) from the tutorial's initial guess;
//! - `gpu/ndt/batch/256`: 256 initial-pose hypotheses (±1 m, ±10°) for the Velodyne source,
//!   aligned in lockstep (one launch per round); the CPU takes seconds for those, so criterion
//!   times its first 32 (`cpu/ndt/batch/32`) and the summary times all 256 once;
//! - `{cpu,gpu}/ndt/sequence/velodyne_x{16,200}`: what `ptxflow ndt --source DIR` does with a warm
//!   pipeline, in alignments per second: the Velodyne source repeated (200 on the GPU, aligned in
//!   lockstep batches as the command line does; 16 on the CPU, one after another), each from the
//!   identity, against a prebuilt map; `gpu/ndt/sequence_serial/velodyne_x200` aligns them one at
//!   a time (the cost of `--chain`, which cannot batch), source upload included;
//! - `gpu/ndt/align_{launch,server,device}[_no_upload]/velodyne[_2]`: the Velodyne alignment
//!   with the evaluation server off and on (`GpuDerivativePipeline::set_server`) and on the
//!   device solver (`set_device_solve`), alternating, with and without the source upload;
//!   `PTXFLOW_NDT_SERVER_SUMMARY=1` prints only the first two's alternating wall medians as one
//!   SUMMARY line (also part of the full summary), `PTXFLOW_NDT_DEVICE_SUMMARY=1` all three's
//!   (`PTXFLOW_NDT_DEVICE_RUNS` runs each, default 60) with the device solver's own figures;
//! - `gpu/ndt/iteration/{mapped,copy}_1pt`: the per-iteration floor (1-point source) with zero-copy
//!   requests/results and with explicit copies;
//! - `cpu/ndt/align_clouds/velodyne` (map build + solve), `cpu/ndt/voxel_map/69k`,
//!   `cpu/ndt/read/room_scan1`.
//!
//! Then `SUMMARY` lines: points/s, milliseconds and GPU speedups from medians measured here.

mod common;
mod ndt_batch;
mod ndt_device;
mod ndt_phases;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ptxflow::ndt::derivatives::linearize_points;
use ptxflow::ndt::*;
use ptxflow::rng::Rng;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const SIZES: [(&str, usize); 4] = [
    ("1k", 1_000),
    ("10k", 10_000),
    ("100k", 100_000),
    ("1M", 1_000_000),
];
const HYPOTHESES: usize = 256;

fn data_dir() -> Option<PathBuf> {
    let dir = common::data_dir().join("pointclouds");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "ndt benches skipped: {} not found (set PTXFLOW_DATA_DIR)",
            dir.display()
        );
        None
    }
}

/// One alignment problem against a prebuilt map.
struct Problem {
    map: VoxelMap,
    source: Vec<[f32; 3]>,
    init: Isometry3<f64>,
}

struct Data {
    velodyne: Problem,
    room: Problem,
    target_raw: PointCloud,
    target_filtered: PointCloud,
    cloud_1m: Vec<[f32; 3]>,
    solved: Pose6,
    hypotheses: Vec<Isometry3<f64>>,
    room_file: PathBuf,
}

fn load(dir: &std::path::Path) -> Data {
    let read = |name: &str| read_cloud(dir.join(name)).expect("checked-in data");
    let target_raw = read("251370668.pcd");
    let source_raw = read("251371071.pcd");
    let target_filtered = voxel_grid_filter(&target_raw, 0.1).expect("leaf");
    let source = voxel_grid_filter(&source_raw, 0.1).expect("leaf");
    let params = NdtParams::default();
    let map = VoxelMap::build(&target_filtered.points, params.resolution_m).expect("map");
    let solved = align_clouds(
        &target_filtered.points,
        &source.points,
        &Isometry3::identity(),
        &params,
    )
    .expect("align")
    .pose;
    let mut rng = Rng::new(5);
    let cloud_1m = (0..1_000_000)
        .map(|i| source_raw.points[i % source_raw.len()].map(|c| c + (0.02 * rng.normal()) as f32))
        .collect();
    let room_target = read("room_scan1.pcd");
    let room_source = voxel_grid_filter(&read("room_scan2.pcd"), 0.14).expect("leaf");
    // PCL's NDT tutorial guess (its yaw 0.6931 rad is not ln 2).
    #[allow(clippy::approx_constant)]
    let room_init = Isometry3::from_parts(
        Translation3::new(1.79387, 0.720047, 0.0),
        UnitQuaternion::from_euler_angles(0.0, 0.0, 0.6931),
    );
    Data {
        velodyne: Problem {
            map,
            source: source.points,
            init: Isometry3::identity(),
        },
        room: Problem {
            map: VoxelMap::build(&room_target.points, 1.0).expect("map"),
            source: room_source.points,
            init: room_init,
        },
        target_raw,
        target_filtered,
        cloud_1m,
        solved,
        hypotheses: hypotheses(&Isometry3::identity(), HYPOTHESES, 1.0, 10.0, 2024)
            .expect("ranges"),
        room_file: dir.join("room_scan1.pcd"),
    }
}

fn cpu_align(p: &Problem) -> NdtResult {
    let params = NdtParams::default();
    let mut lin = CpuLinearizer::new(&p.map, vec![&p.source], params.search, params.outlier_ratio)
        .expect("linearizer");
    align(&mut lin, 0, &p.init, &params.solver).expect("align")
}

fn cpu_batch(d: &Data, count: usize) -> BatchReport {
    let params = NdtParams::default();
    let p = &d.velodyne;
    let mut lin = CpuLinearizer::new(&p.map, vec![&p.source], params.search, params.outlier_ratio)
        .expect("linearizer");
    align_hypotheses(&mut lin, 0, &d.hypotheses[..count], &params.solver).expect("batch")
}

fn gpu_pipeline(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    p: &Problem,
    points: usize,
    requests: usize,
) -> GpuDerivativePipeline {
    let cap = GpuCapacity {
        points,
        voxels: p.map.len(),
        requests,
    };
    let mut pipe = GpuDerivativePipeline::new(gpu.clone(), cap, NeighbourSearch::Direct7, 0.55)
        .expect("pipeline");
    pipe.upload_target(&p.map).expect("target");
    pipe
}

fn gpu_align(pipe: &mut GpuDerivativePipeline, p: &Problem) -> NdtResult {
    pipe.upload_source(&p.source).expect("source");
    align(pipe, 0, &p.init, &NdtParams::default().solver).expect("align")
}

fn gpu_batch(pipe: &mut GpuDerivativePipeline, d: &Data) -> BatchReport {
    pipe.upload_source(&d.velodyne.source).expect("source");
    align_hypotheses(pipe, 0, &d.hypotheses, &NdtParams::default().solver).expect("batch")
}

/// Sources in the GPU sequence rows (the "Velodyne pair repeated 200 times").
const SEQUENCE: usize = 200;
/// Sources in the CPU sequence row (each takes milliseconds; the rate is per alignment).
const SEQUENCE_CPU: usize = 16;

/// `n` sources one after another on the CPU, each from the identity: alignments done.
fn cpu_sequence(d: &Data, n: usize) -> usize {
    (0..n)
        .map(|_| cpu_align(&d.velodyne))
        .filter(|r| r.stop.converged())
        .count()
}

/// `n` copies of the Velodyne source aligned in one lockstep batch (the command line's unchained
/// sequence mode): upload of all sources included.
fn gpu_sequence(pipe: &mut GpuDerivativePipeline, d: &Data, n: usize) -> usize {
    let clouds: Vec<&[[f32; 3]]> = vec![&d.velodyne.source; n];
    pipe.upload_sources(&clouds).expect("sources");
    let jobs: Vec<AlignJob> = (0..n)
        .map(|source| AlignJob {
            source,
            init: d.velodyne.init,
        })
        .collect();
    let r = align_batch(pipe, &jobs, &NdtParams::default().solver).expect("batch");
    r.iter().filter(|r| r.stop.converged()).count()
}

/// `n` alignments one at a time on a warm pipeline (the cost of `--chain`).
fn gpu_sequence_serial(pipe: &mut GpuDerivativePipeline, d: &Data, n: usize) -> usize {
    (0..n)
        .map(|_| gpu_align(pipe, &d.velodyne))
        .filter(|r| r.stop.converged())
        .count()
}

fn cpu_benches(c: &mut Criterion, d: &Data) {
    let params = NdtParams::default();
    let gauss = GaussConstants::new(params.resolution_m, params.outlier_ratio).expect("constants");
    let mut g = c.benchmark_group("cpu/ndt");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for (name, n) in SIZES {
        let pts = &d.cloud_1m[..n];
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("derivatives/{name}"), |b| {
            b.iter(|| linearize_points(&d.velodyne.map, pts, &d.solved, params.search, gauss))
        });
    }
    for (name, p) in [("velodyne", &d.velodyne), ("room", &d.room)] {
        g.throughput(Throughput::Elements(p.source.len() as u64));
        g.bench_function(format!("align/{name}"), |b| b.iter(|| cpu_align(p)));
    }
    g.throughput(Throughput::Elements(32));
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("batch/32", |b| b.iter(|| cpu_batch(d, 32)));
    g.throughput(Throughput::Elements(SEQUENCE_CPU as u64));
    g.bench_function(format!("sequence/velodyne_x{SEQUENCE_CPU}"), |b| {
        b.iter(|| cpu_sequence(d, SEQUENCE_CPU))
    });
    g.sampling_mode(SamplingMode::Auto);
    g.throughput(Throughput::Elements(d.velodyne.source.len() as u64));
    g.bench_function("align_clouds/velodyne", |b| {
        b.iter(|| {
            align_clouds(
                &d.target_filtered.points,
                &d.velodyne.source,
                &Isometry3::identity(),
                &params,
            )
            .expect("align")
        })
    });
    g.throughput(Throughput::Elements(d.target_raw.len() as u64));
    g.bench_function("voxel_map/69k", |b| {
        b.iter(|| VoxelMap::build(&d.target_raw.points, 1.0).expect("map"))
    });
    g.throughput(Throughput::Bytes(
        std::fs::metadata(&d.room_file)
            .map(|m| m.len())
            .unwrap_or(0),
    ));
    g.bench_function("read/room_scan1", |b| {
        b.iter(|| read_cloud(&d.room_file).expect("read"))
    });
    g.finish();
}

fn gpu_benches(c: &mut Criterion, d: &Data, gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    let mut g = c.benchmark_group("gpu/ndt");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let mut pipe = gpu_pipeline(gpu, &d.velodyne, 1_000_000, HYPOTHESES);
    for (name, n) in SIZES {
        pipe.upload_source(&d.cloud_1m[..n]).expect("source");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("derivatives/{name}"), |b| {
            b.iter(|| pipe.linearize_pose(0, &d.solved).expect("linearize"))
        });
    }
    for (name, p) in [("velodyne", &d.velodyne), ("room", &d.room)] {
        let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
        g.throughput(Throughput::Elements(p.source.len() as u64));
        g.bench_function(format!("align/{name}"), |b| {
            b.iter(|| gpu_align(&mut pipe, p))
        });
    }
    // The evaluation server off and on, alternating (whatever PTXFLOW_NDT_SERVER says), with
    // and without the source upload that `align/velodyne` includes.
    let p = &d.velodyne;
    let mut pipes = [(false, false), (true, false), (true, true)].map(|(on, device)| {
        let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
        pipe.set_server(on).expect("server switch");
        pipe.set_device_solve(device).expect("device solver switch");
        pipe.upload_source(&p.source).expect("source");
        pipe
    });
    g.throughput(Throughput::Elements(p.source.len() as u64));
    for round in ["", "_2"] {
        for (pipe, kind) in pipes.iter_mut().zip(["launch", "server", "device"]) {
            g.bench_function(format!("align_{kind}/velodyne{round}"), |b| {
                b.iter(|| gpu_align(pipe, p))
            });
            g.bench_function(format!("align_{kind}_no_upload/velodyne{round}"), |b| {
                b.iter(|| align(pipe, 0, &p.init, &NdtParams::default().solver).expect("align"))
            });
        }
    }
    g.throughput(Throughput::Elements(HYPOTHESES as u64));
    g.bench_function(format!("batch/{HYPOTHESES}"), |b| {
        b.iter(|| gpu_batch(&mut pipe, d))
    });
    let mut seq = gpu_pipeline(
        gpu,
        &d.velodyne,
        SEQUENCE * d.velodyne.source.len(),
        SEQUENCE,
    );
    g.throughput(Throughput::Elements(SEQUENCE as u64));
    g.bench_function(format!("sequence/velodyne_x{SEQUENCE}"), |b| {
        b.iter(|| gpu_sequence(&mut seq, d, SEQUENCE))
    });
    g.bench_function(format!("sequence_serial/velodyne_x{SEQUENCE}"), |b| {
        b.iter(|| gpu_sequence_serial(&mut seq, d, SEQUENCE))
    });
    pipe.upload_source(&d.velodyne.source[..1]).expect("source");
    for transfer in [Transfer::Mapped, Transfer::Copy] {
        pipe.set_transfer(transfer).expect("transfer");
        g.throughput(Throughput::Elements(1));
        let name = format!(
            "iteration/{}_1pt",
            if transfer == Transfer::Mapped {
                "mapped"
            } else {
                "copy"
            }
        );
        g.bench_function(name, |b| {
            b.iter(|| pipe.linearize_pose(0, &d.solved).expect("linearize"))
        });
    }
    g.finish();
}

/// Medians measured here, printed as SUMMARY lines (CPU: all cores of this machine).
fn summary(d: &Data, gpu: Option<&std::sync::Arc<ptxflow::runtime::Gpu>>) {
    let params = NdtParams::default();
    let gauss = GaussConstants::new(params.resolution_m, params.outlier_ratio).expect("constants");
    let threads = rayon::current_num_threads();
    let device = gpu.map_or("no GPU".to_string(), |g| g.facts().name.clone());
    let mut pipe = gpu.map(|g| gpu_pipeline(g, &d.velodyne, 1_000_000, HYPOTHESES));
    for (name, n) in SIZES {
        let pts = &d.cloud_1m[..n];
        let cpu = common::wall_median_secs(10, || {
            std::hint::black_box(linearize_points(
                &d.velodyne.map,
                pts,
                &d.solved,
                params.search,
                gauss,
            ));
        });
        let gpu_s = pipe.as_mut().map(|p| {
            p.upload_source(pts).expect("source");
            common::wall_median_secs(50, || {
                std::hint::black_box(p.linearize_pose(0, &d.solved).expect("linearize"));
            })
        });
        let line = match gpu_s {
            Some(t) => format!(
                "GPU {:.1} us = {:.2e} points/s; CPU ({threads} threads) {:.1} us = {:.2e} points/s; GPU speedup {:.1}x",
                t * 1e6,
                n as f64 / t,
                cpu * 1e6,
                n as f64 / cpu,
                cpu / t
            ),
            None => format!("CPU ({threads} threads) {:.1} us = {:.2e} points/s", cpu * 1e6, n as f64 / cpu),
        };
        println!("SUMMARY ndt derivatives {name} ({device}): {line}");
    }
    for (name, p) in [("velodyne", &d.velodyne), ("room", &d.room)] {
        let cpu = common::wall_median_secs(10, || {
            std::hint::black_box(cpu_align(p));
        });
        let r = cpu_align(p);
        let gpu_s = gpu.map(|g| {
            let mut pipe = gpu_pipeline(g, p, p.source.len(), 1);
            common::wall_median_secs(30, || {
                std::hint::black_box(gpu_align(&mut pipe, p));
            })
        });
        let tail = gpu_s.map_or(String::new(), |t| {
            format!(
                "; GPU incl. source upload {:.3} ms, speedup {:.1}x",
                t * 1e3,
                cpu / t
            )
        });
        println!(
            "SUMMARY ndt align {name} ({} points, {} evaluations, {}): CPU ({threads} threads) {:.3} ms{tail}",
            p.source.len(),
            r.evaluations,
            r.stop,
            cpu * 1e3
        );
    }
    if let Some(g) = gpu {
        server_summary(d, g);
    }
    let t = Instant::now();
    std::hint::black_box(cpu_batch(d, HYPOTHESES));
    let cpu = t.elapsed().as_secs_f64();
    let gpu_s = pipe.as_mut().map(|p| {
        common::wall_median_secs(10, || {
            std::hint::black_box(gpu_batch(p, d));
        })
    });
    let tail = gpu_s.map_or(String::new(), |t| {
        format!("; GPU {:.2} ms, speedup {:.1}x", t * 1e3, cpu / t)
    });
    println!("SUMMARY ndt batch {HYPOTHESES} hypotheses (velodyne): CPU ({threads} threads, one run) {:.1} ms{tail}", cpu * 1e3);
    if let Some(p) = pipe.as_mut() {
        p.upload_source(&d.velodyne.source[..1]).expect("source");
        for transfer in [Transfer::Mapped, Transfer::Copy] {
            p.set_transfer(transfer).expect("transfer");
            let t = common::wall_median_secs(200, || {
                std::hint::black_box(p.linearize_pose(0, &d.solved).expect("linearize"));
            });
            println!("SUMMARY ndt iteration floor ({transfer:?}, 1-point source): {:.1} us per linearize (launch + sync + host work)", t * 1e6);
        }
    }
}

/// The Velodyne alignment with the evaluation server off and on, alternating run by run in one
/// process (wall medians), with and without the source upload, and per evaluation.
fn server_summary(d: &Data, gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    let p = &d.velodyne;
    let solver = NdtParams::default().solver;
    let mut pipes = [false, true].map(|on| {
        let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
        pipe.set_server(on).expect("server switch");
        pipe.upload_source(&p.source).expect("source");
        pipe
    });
    let evaluations = align(&mut pipes[1], 0, &p.init, &solver)
        .expect("align")
        .evaluations;
    const RUNS: usize = 60;
    let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for _ in 0..RUNS {
        for (k, pipe) in pipes.iter_mut().enumerate() {
            let t = Instant::now();
            std::hint::black_box(gpu_align(pipe, p));
            times[k][0].push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            std::hint::black_box(align(pipe, 0, &p.init, &solver).expect("align"));
            times[k][1].push(t.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut off, mut on] = times;
    let (off_up, off_no) = (median(&mut off[0]), median(&mut off[1]));
    let (on_up, on_no) = (median(&mut on[0]), median(&mut on[1]));
    println!(
        "SUMMARY ndt server velodyne ({evaluations} evaluations, {RUNS} alternating runs, {}): \
         incl. source upload: launch per round {:.1} us, server {:.1} us; without upload: \
         launch per round {:.1} us ({:.2} us per evaluation), server {:.1} us ({:.2} us per \
         evaluation); target 120 us",
        gpu.facts().name,
        off_up * 1e6,
        on_up * 1e6,
        off_no * 1e6,
        off_no * 1e6 / evaluations as f64,
        on_no * 1e6,
        on_no * 1e6 / evaluations as f64,
    );
    // One evaluation at the solved pose and at a pose that moves every point out of the map
    // (the same grid with no pair to compute: launch or mailbox, reduction and transfer only).
    let far = Pose6::new(1.0e4, 1.0e4, 1.0e4, 0.0, 0.0, 0.0);
    for (k, pipe) in pipes.iter_mut().enumerate() {
        pipe.start_alignment(1).expect("server");
        let mut per = |pose: &Pose6| {
            common::wall_median_secs(300, || {
                std::hint::black_box(
                    pipe.linearize(&[LinearizeRequest {
                        source: 0,
                        pose: *pose,
                    }])
                    .expect("linearize"),
                );
            })
        };
        let (solved, empty) = (per(&d.solved), per(&far));
        if k == 1 {
            server_stamps(pipe, &d.solved);
        }
        pipe.finish_alignment().expect("stop");
        println!(
            "SUMMARY ndt server velodyne one evaluation ({}): solved pose {:.2} us, no pairs (pose 10 km away) {:.2} us",
            if k == 0 { "launch per round" } else { "server" },
            solved * 1e6,
            empty * 1e6
        );
    }
}

/// The Velodyne alignment (no upload) launching per round, on the evaluation server and on the
/// device solver, alternating run by run in one process: wall medians, and the device solver's
/// own figures (kernel start to result, solver steps, eigen-path steps).
fn device_summary(d: &Data, gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    let p = &d.velodyne;
    let solver = NdtParams::default().solver;
    // Launch per round, server, device solver (block 0 reduces), device solver (the block that
    // counts itself last reduces, the server's rule).
    let kinds = [
        (false, false, false),
        (true, false, false),
        (true, true, false),
        (true, true, true),
    ];
    let mut pipes = kinds.map(|(on, device, last)| {
        let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
        pipe.set_server(on).expect("server switch");
        pipe.set_device_solve(device).expect("device solver switch");
        pipe.set_device_solve_last_block(last);
        pipe.upload_source(&p.source).expect("source");
        pipe
    });
    let results: Vec<NdtResult> = pipes
        .iter_mut()
        .map(|pipe| align(pipe, 0, &p.init, &solver).expect("align"))
        .collect();
    let runs: usize = std::env::var("PTXFLOW_NDT_DEVICE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut times = [(); 4].map(|_| Vec::new());
    let mut total = [Vec::new(), Vec::new()];
    let mut solve = [Vec::new(), Vec::new()];
    let mut fallbacks = 0;
    for _ in 0..runs {
        for (k, pipe) in pipes.iter_mut().enumerate() {
            let t = Instant::now();
            std::hint::black_box(align(pipe, 0, &p.init, &solver).expect("align"));
            times[k].push(t.elapsed().as_secs_f64() * 1e6);
            if k >= 2 {
                fallbacks += usize::from(pipe.device_solve_fallback().is_some());
                let st = pipe.device_solve_stats().expect("stats");
                total[k - 2].push(st.total_ns as f64 * 1e-3);
                solve[k - 2].push(st.solve_ns as f64 * 1e-3);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let st = pipes[2].device_solve_stats().expect("stats");
    let dev = &results[2];
    let (dt, dr) = pose_error(&dev.t_target_source, &results[1].t_target_source);
    println!(
        "SUMMARY ndt device solve velodyne ({} evaluations, {} eigen-path steps, {runs} \
         alternating runs, {}): without upload: launch per round {:.1} us, server {:.1} us, \
         device solve {:.1} us (kernel start to result {:.1} us, solver steps {:.1} us), \
         device solve with the last block reducing {:.1} us ({:.1} us, {:.1} us); {fallbacks} \
         fallbacks; device vs server: {:?} / {:?}, iterations {} / {}, pose {:.1e} m {:.1e} \
         deg, equal {}, last-block variant equal {}; target 120 us",
        dev.evaluations,
        st.assists,
        gpu.facts().name,
        median(&mut times[0]),
        median(&mut times[1]),
        median(&mut times[2]),
        median(&mut total[0]),
        median(&mut solve[0]),
        median(&mut times[3]),
        median(&mut total[1]),
        median(&mut solve[1]),
        dev.stop,
        results[1].stop,
        dev.iterations,
        results[1].iterations,
        dt,
        dr,
        *dev == results[1],
        results[3] == *dev,
    );
    let s = st.stamps;
    let ns = |a: usize, b: usize| s[b].wrapping_sub(s[a]) as i64 as f64 * 1e-3;
    println!(
        "SUMMARY ndt device solve last evaluation stamps (us): block 0 saw -> terms {:.2}, \
         terms -> points {:.2}, points -> reduction starts {:.2}",
        ns(0, 1),
        ns(1, 2),
        ns(2, 3),
    );
}

/// Medians of the server kernel's phase stamps over 200 evaluations at `pose`, against the
/// host's wall time of each.
fn server_stamps(pipe: &mut GpuDerivativePipeline, pose: &Pose6) {
    let mut d: Vec<[f64; 8]> = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        pipe.linearize(&[LinearizeRequest {
            source: 0,
            pose: *pose,
        }])
        .expect("linearize");
        let wall = t.elapsed().as_secs_f64() * 1e9;
        let s = pipe.server_stamps().expect("stamps");
        let ns = |a: usize, b: usize| s[b].wrapping_sub(s[a]) as i64 as f64;
        d.push([
            ns(0, 1),
            ns(1, 2),
            ns(2, 3),
            ns(3, 4),
            wall - ns(0, 4),
            ns(5, 0),
            ns(0, 6),
            ns(0, 7),
        ]);
    }
    let med = |k: usize| {
        let mut v: Vec<f64> = d.iter().map(|r| r[k]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] / 1e3
    };
    println!(
        "SUMMARY ndt server phases (device %globaltimer, medians of 200, us): block 0 sees the request -> terms {:.2}, \
         block 0 points {:.2}, -> last block's reduction {:.2}, final reduction + result writes + fence {:.2}; \
         host wall minus (seen -> fenced) = mailbox poll + seq store + host {:.2}; block 0's last poll round trip {:.2}; \
         relay: block 0 seen -> last block seen {:.2}; block 0 seen -> its fence done {:.2}",
        med(0),
        med(1),
        med(2),
        med(3),
        med(4),
        med(5),
        med(6),
        med(7)
    );
}

/// The sequence rows as one SUMMARY line: alignments per second, GPU and CPU, one run.
fn sequence_summary(d: &Data, gpu: Option<&std::sync::Arc<ptxflow::runtime::Gpu>>) {
    let threads = rayon::current_num_threads();
    let cpu = common::wall_median_secs(3, || {
        assert_eq!(cpu_sequence(d, SEQUENCE_CPU), SEQUENCE_CPU)
    });
    let cpu_rate = SEQUENCE_CPU as f64 / cpu;
    let line = match gpu {
        Some(g) => {
            let mut pipe =
                gpu_pipeline(g, &d.velodyne, SEQUENCE * d.velodyne.source.len(), SEQUENCE);
            let lock = common::wall_median_secs(10, || {
                assert_eq!(gpu_sequence(&mut pipe, d, SEQUENCE), SEQUENCE)
            });
            let serial = common::wall_median_secs(5, || {
                assert_eq!(gpu_sequence_serial(&mut pipe, d, SEQUENCE), SEQUENCE)
            });
            format!(
                "GPU lockstep {:.0} alignments/s ({:.2} ms for {SEQUENCE}), GPU one at a time {:.0} alignments/s; \
                 CPU ({threads} threads, {SEQUENCE_CPU} sources) {:.0} alignments/s; GPU speedup {:.1}x lockstep, {:.1}x one at a time ({})",
                SEQUENCE as f64 / lock,
                lock * 1e3,
                SEQUENCE as f64 / serial,
                cpu_rate,
                SEQUENCE as f64 / lock / cpu_rate,
                SEQUENCE as f64 / serial / cpu_rate,
                g.facts().name
            )
        }
        None => format!(
            "CPU ({threads} threads, {SEQUENCE_CPU} sources) {cpu_rate:.0} alignments/s (no GPU)"
        ),
    };
    println!("SUMMARY ndt sequence velodyne (warm pipeline, map prebuilt): {line}");
}

/// `PTXFLOW_NDT_PHASES`: the phase split of one alignment and of the batch (see `ndt_phases`).
fn phases(d: &Data, gpu: &std::sync::Arc<ptxflow::runtime::Gpu>, mode: &str) {
    let solver = NdtParams::default().solver;
    let lookup = VoxelLookup::from_env();
    // `batch`: the batch once (for ncu); `batch3`: the batch three times, no alignment.
    if !mode.starts_with("batch") {
        let p = &d.velodyne;
        let mut pipe = gpu_pipeline(gpu, p, p.source.len(), 1);
        for run in 0..3 {
            pipe.upload_source(&p.source).expect("source");
            let what = format!(
                "align velodyne ({lookup:?}, dense table {}, run {run})",
                pipe.uses_dense_cells()
            );
            let r = ndt_phases::report(&what, &mut pipe, |t| {
                align(t, 0, &p.init, &solver).expect("align")
            });
            println!(
                "PHASES align result: {} evaluations, {} iterations, {}, pose {:?}",
                r.evaluations,
                r.iterations,
                r.stop,
                r.pose.as_slice()
            );
        }
    }
    let mut pipe = gpu_pipeline(gpu, &d.velodyne, d.velodyne.source.len(), HYPOTHESES);
    pipe.upload_source(&d.velodyne.source).expect("source");
    if mode == "batchdev" {
        return batch_device_phases(&mut pipe, d);
    }
    for run in 0..if mode == "batch" { 1 } else { 3 } {
        let what = format!("batch {HYPOTHESES} ({lookup:?}, run {run})");
        if pipe.split_enabled() {
            let r = ndt_phases::split::report_split(&what, &mut pipe, |t| {
                align_hypotheses(t, 0, &d.hypotheses, &solver).expect("batch")
            });
            let evaluations: usize = r.results.iter().map(|r| r.evaluations).sum();
            let converged = r.results.iter().filter(|r| r.stop.converged()).count();
            println!("PHASES batch result: {evaluations} evaluations, {converged} converged");
        } else {
            ndt_phases::report(&what, &mut pipe, |t| {
                align_hypotheses(t, 0, &d.hypotheses, &solver).expect("batch")
            });
        }
    }
}

/// `PTXFLOW_NDT_PHASES=batchdev`: the batch device solve (`PTXFLOW_NDT_BATCH_DEVICE`) with
/// every round's kernels timed by CUDA events, three times after a warm-up, then twice untimed.
fn batch_device_phases(pipe: &mut GpuDerivativePipeline, d: &Data) {
    let solver = NdtParams::default().solver;
    pipe.set_batch_device_solve(true).expect("mapped memory");
    for run in 0..6 {
        pipe.set_batch_device_timing((1..4).contains(&run));
        let t = Instant::now();
        let r = align_hypotheses(pipe, 0, &d.hypotheses, &solver).expect("batch");
        let wall = t.elapsed().as_secs_f64() * 1e6;
        let evaluations: usize = r.results.iter().map(|r| r.evaluations).sum();
        let converged = r.results.iter().filter(|r| r.stop.converged()).count();
        let s = pipe.batch_device_stats().cloned().unwrap_or_default();
        let timing = s.timing.as_ref().map_or("untimed".to_string(), |t| {
            format!(
                "device span {:.1} us, evaluation kernels {:.1} us, solver kernels {:.1} us, between a chain's rounds {:.1} us",
                t.span_us, t.eval_us, t.solve_us, t.between_us
            )
        });
        println!(
            "PHASES batchdev run {run}: wall {wall:.1} us; rounds {:?}; {timing}; {evaluations} evaluations, {} eigen-path steps, {} handed back, {converged} converged; fallback {:?}",
            s.rounds,
            s.eigen_steps,
            s.handed_back,
            pipe.batch_device_fallback()
        );
        if let (3, Some(t)) = (run, &s.timing) {
            let rounds: Vec<String> = t
                .rounds
                .iter()
                .map(|(g, n, e, s)| format!("{g}:{n}:{e:.0}/{s:.0}"))
                .collect();
            println!(
                "PHASES batchdev rounds (group:rows:evaluation us/solver us): {}",
                rounds.join(" ")
            );
        }
    }
}

fn benches(c: &mut Criterion) {
    let Some(dir) = data_dir() else { return };
    let d = load(&dir);
    if let Ok(mode) = std::env::var("PTXFLOW_NDT_PHASES") {
        match common::gpu_or_skip() {
            Some(g) => phases(&d, &g, &mode),
            None => eprintln!("PTXFLOW_NDT_PHASES: no GPU"),
        }
        return;
    }
    if std::env::var_os("PTXFLOW_NDT_DEVICE_SUMMARY").is_some() {
        match common::gpu_or_skip() {
            Some(g) => device_summary(&d, &g),
            None => eprintln!("PTXFLOW_NDT_DEVICE_SUMMARY: no GPU"),
        }
        return;
    }
    if let Ok(spec) = std::env::var("PTXFLOW_NDT_DEVICE_AB") {
        match common::gpu_or_skip() {
            Some(g) => ndt_device::device_ab(&d, &g, &spec),
            None => eprintln!("PTXFLOW_NDT_DEVICE_AB: no GPU"),
        }
        return;
    }
    if std::env::var_os("PTXFLOW_NDT_BATCH_AB").is_some() {
        match common::gpu_or_skip() {
            Some(g) => ndt_batch::batch_ab(c, &d, &g),
            None => eprintln!("PTXFLOW_NDT_BATCH_AB: no GPU"),
        }
        return;
    }
    if std::env::var_os("PTXFLOW_NDT_SERVER_SUMMARY").is_some() {
        match common::gpu_or_skip() {
            Some(g) => server_summary(&d, &g),
            None => eprintln!("PTXFLOW_NDT_SERVER_SUMMARY: no GPU"),
        }
        return;
    }
    cpu_benches(c, &d);
    let gpu = common::gpu_or_skip();
    if let Some(g) = &gpu {
        gpu_benches(c, &d, g);
    }
    sequence_summary(&d, gpu.as_ref());
    if std::env::var_os("PTXFLOW_NDT_SEQUENCE_ONLY").is_none() {
        summary(&d, gpu.as_ref());
    }
}

criterion_group!(ndt, benches);
criterion_main!(ndt);
