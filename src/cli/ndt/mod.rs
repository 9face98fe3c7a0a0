//! `ptxflow ndt`: align source clouds to a target cloud with NDT and print `T_target_source`.
//!
//! One source gives the classic single-pair output; several sources (files or directories) are
//! aligned in turn against one map with the pipeline kept warm, unchained sources in lockstep
//! batches (one GPU launch per round for the whole batch), `--chain` seeding each from the
//! previous result (odometry). `--hypotheses N` aligns each source from N initial poses around
//! the initial guess and keeps the best. `--device auto` asks [`ptxflow::ndt::plan`] which device
//! finishes first; the output says which ran and why, and `--json` where the time went.

mod engine;
mod inputs;
mod output;
mod run;
mod timing;

use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use ptxflow::ndt::NeighbourSearch;
use ptxflow::{Device, Error, Result};
use std::path::PathBuf;

pub use run::run;

#[derive(clap::Args, Debug)]
pub struct NdtArgs {
    /// Target cloud (PCD in any encoding, or PLY): the map the sources are aligned to.
    #[arg(long)]
    target: PathBuf,
    /// Source cloud(s) (PCD or PLY) to align; a directory stands for its .pcd and .ply files in
    /// name order. Several sources are aligned in turn against one map.
    #[arg(long, num_args = 1.., required = true)]
    source: Vec<PathBuf>,
    /// NDT voxel side in metres.
    #[arg(long, default_value_t = 1.0)]
    resolution: f64,
    /// Voxel-grid leaf in metres applied to all clouds first; 0 keeps every point.
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
    /// cpu, gpu or auto (the device expected to finish first, start-up included).
    #[arg(long, default_value_t = Device::Auto)]
    device: Device,
    /// Print JSON: one object for a single pair; one line per source, then a summary line.
    #[arg(long)]
    json: bool,
    /// Seed each source's initial guess with the previous source's result (odometry).
    #[arg(long)]
    chain: bool,
    /// Align each source from this many initial poses around the initial guess (the guess
    /// itself first) in lockstep, and keep the best.
    #[arg(long, default_value_t = 1)]
    hypotheses: usize,
    /// Hypothesis spread "METRES,DEGREES": translation uniform in ±METRES per axis, roll,
    /// pitch and yaw uniform in ±DEGREES.
    #[arg(long, default_value = "1,10", value_parser = parse_spread)]
    spread: (f64, f64),
    /// Seed of the hypothesis generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most alignments run in one lockstep batch (unchained sequences and hypotheses).
    #[arg(long, default_value_t = 256, hide = true)]
    batch: usize,
}

fn parse_search(s: &str) -> std::result::Result<NeighbourSearch, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

fn parse_spread(s: &str) -> std::result::Result<(f64, f64), String> {
    let v: Vec<f64> = s
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse::<f64>()
                .map_err(|_| format!("`{w}` is not a number"))
        })
        .collect::<std::result::Result<_, _>>()?;
    match v[..] {
        [t, r] if t.is_finite() && r.is_finite() && t >= 0.0 && r >= 0.0 => Ok((t, r)),
        _ => Err(format!(
            "--spread needs \"METRES,DEGREES\" (two finite non-negative numbers), got \"{s}\""
        )),
    }
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
