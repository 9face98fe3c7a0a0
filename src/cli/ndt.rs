//! `ptxflow ndt`: align a source cloud to a target cloud with NDT and print `T_target_source`.

use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ptxflow::ndt::{
    align_clouds, align_clouds_gpu, read_cloud, voxel_grid_filter, NdtParams, NdtResult,
    NeighbourSearch, PointCloud,
};
use ptxflow::runtime::Gpu;
use ptxflow::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the alignment runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// The CPU reference (rayon over all cores).
    Cpu,
    /// The GPU derivative pipeline (an error without a usable GPU).
    Gpu,
    /// The GPU when there is one, else the CPU (with a note on stderr).
    Auto,
}

#[derive(clap::Args, Debug)]
pub struct NdtArgs {
    /// Target cloud (PCD in any encoding, or PLY): the map the source is aligned to.
    #[arg(long)]
    target: PathBuf,
    /// Source cloud (PCD or PLY) to align.
    #[arg(long)]
    source: PathBuf,
    /// NDT voxel side in metres.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// Voxel-grid leaf in metres applied to both clouds first; 0 keeps every point.
    #[arg(long, default_value_t = 0.1)]
    leaf: f64,
    /// Neighbour search: direct1, direct7, direct27 or radius.
    #[arg(long, default_value = "direct7", value_parser = parse_search)]
    search: NeighbourSearch,
    /// Initial T_target_source as "x y z roll pitch yaw" (metres, radians; R = Rz(yaw) Ry(pitch) Rx(roll)).
    #[arg(long, allow_hyphen_values = true)]
    init: Option<String>,
    /// Most Newton iterations.
    #[arg(long, default_value_t = 35)]
    max_iters: usize,
    /// cpu, gpu or auto.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    device: Device,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_search(s: &str) -> std::result::Result<NeighbourSearch, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// Parses "x y z roll pitch yaw" into an isometry.
fn parse_init(s: &str) -> Result<Isometry3<f64>> {
    let v: Vec<f64> = s
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse::<f64>()
                .map_err(|_| Error::input(format!("--init: `{w}` is not a number")))
        })
        .collect::<Result<_>>()?;
    if v.len() != 6 || !v.iter().all(|x| x.is_finite()) {
        return Err(Error::input(format!(
            "--init needs six finite numbers \"x y z roll pitch yaw\", got \"{s}\""
        )));
    }
    Ok(Isometry3::from_parts(
        Translation3::new(v[0], v[1], v[2]),
        UnitQuaternion::from_euler_angles(v[3], v[4], v[5]),
    ))
}

fn load(path: &Path, leaf_m: f64) -> Result<(PointCloud, usize)> {
    let cloud = read_cloud(path)?;
    let raw = cloud.len();
    let cloud = if leaf_m > 0.0 {
        voxel_grid_filter(&cloud, leaf_m)?
    } else {
        cloud
    };
    Ok((cloud, raw))
}

/// The GPU to run on, or `None` for the CPU, as `--device` asks.
fn pick_gpu(device: Device) -> Result<Option<std::sync::Arc<Gpu>>> {
    match device {
        Device::Cpu => Ok(None),
        Device::Gpu => Gpu::open_default().map(Some),
        Device::Auto => match Gpu::open_default() {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.is_no_device() => {
                eprintln!("ptxflow ndt: {e}; aligning on the CPU");
                Ok(None)
            }
            Err(e) => Err(e),
        },
    }
}

pub fn run(a: NdtArgs) -> Result<()> {
    if !(a.leaf >= 0.0 && a.leaf.is_finite()) {
        return Err(Error::input(format!(
            "--leaf must be 0 or a positive length in metres, got {}",
            a.leaf
        )));
    }
    let init = match &a.init {
        Some(s) => parse_init(s)?,
        None => Isometry3::identity(),
    };
    let mut params = NdtParams {
        resolution_m: a.resolution,
        search: a.search,
        ..Default::default()
    };
    params.solver.max_iterations = a.max_iters;
    let t_load = Instant::now();
    let (target, target_raw) = load(&a.target, a.leaf)?;
    let (source, source_raw) = load(&a.source, a.leaf)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let gpu = pick_gpu(a.device)?;
    let device = if gpu.is_some() { "gpu" } else { "cpu" };
    let t_align = Instant::now();
    let r = match gpu {
        Some(g) => align_clouds_gpu(g, &target.points, &source.points, &init, &params)?,
        None => align_clouds(&target.points, &source.points, &init, &params)?,
    };
    let align_s = t_align.elapsed().as_secs_f64();
    let facts = Facts {
        target_raw,
        source_raw,
        target: target.len(),
        load_s,
        align_s,
        search: a.search,
        device,
    };
    if a.json {
        println!("{}", json(&r, &facts));
    } else {
        print_text(&r, &facts);
    }
    Ok(())
}

struct Facts {
    target_raw: usize,
    source_raw: usize,
    target: usize,
    load_s: f64,
    align_s: f64,
    search: NeighbourSearch,
    device: &'static str,
}

fn print_text(r: &NdtResult, f: &Facts) {
    println!("T_target_source:");
    for row in r.matrix_row_major() {
        println!(
            "  {:>12.8} {:>12.8} {:>12.8} {:>12.8}",
            row[0], row[1], row[2], row[3]
        );
    }
    println!(
        "iterations: {} ({} evaluations)",
        r.iterations, r.evaluations
    );
    println!(
        "stop: {}{}",
        r.stop,
        if r.stop.converged() {
            ""
        } else {
            " (NOT converged)"
        }
    );
    println!(
        "score: {:.3} ({:.5} per point), {} of {} source points matched a voxel",
        r.score, r.likelihood_per_point, r.correspondences, r.source_points
    );
    println!(
        "points: target {} -> {}, source {} -> {} (voxel grid), search {}",
        f.target_raw,
        f.target,
        f.source_raw,
        r.source_points,
        f.search.name()
    );
    println!(
        "time: align {:.3} s (map build included), load {:.3} s, device {}",
        f.align_s, f.load_s, f.device
    );
}

/// A number as JSON (non-finite values become null).
fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn json(r: &NdtResult, f: &Facts) -> String {
    let rows: Vec<String> = r
        .matrix_row_major()
        .iter()
        .map(|row| {
            format!(
                "[{}]",
                row.iter().map(|v| num(*v)).collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    format!(
        "{{\"t_target_source\":[{}],\"iterations\":{},\"evaluations\":{},\"stop\":\"{}\",\"converged\":{},\
         \"score\":{},\"likelihood_per_point\":{},\"correspondences\":{},\"source_points\":{},\
         \"target_points\":{},\"source_points_raw\":{},\"target_points_raw\":{},\"search\":\"{}\",\
         \"align_seconds\":{},\"load_seconds\":{},\"device\":\"{}\"}}",
        rows.join(","),
        r.iterations,
        r.evaluations,
        r.stop,
        r.stop.converged(),
        num(r.score),
        num(r.likelihood_per_point),
        r.correspondences,
        r.source_points,
        f.target,
        f.source_raw,
        f.target_raw,
        f.search.name(),
        num(f.align_s),
        num(f.load_s),
        f.device
    )
}
