//! Block shapes of the held-weights GRU kernels (`rnn_gru_held48` / `rnn_gru_held64`: W_ih and
//! W_hh in registers, gi step by step, one block per SM; `gru::stationary::held`), and their
//! variants: split roles (`rnn_gru_held48s` / `rnn_gru_held64s`), weights staged through shared
//! memory (`rnn_gru_held48w`), both (`rnn_gru_held48sw`), and its schedule (`HeldTune`:
//! `rnn_gru_held48swxc`, x copied during the steps and the cells' gi sums in the gather's round
//! trip, is the default for blocks of at most 16 units and 128 cells, e.g. the T=10 B=32
//! rollout), and of `rnn_gru_held64` (`rnn_gru_held64o`, the partials of W_ih x in the gather's
//! round trip: the default for the 64-row kernel, e.g. the ensemble of 5).

use super::gru::{GruExchange, GruLaunch, HeldTune};
use super::gru_shape::{smem_bytes, Kernel, Path, Shape};
use crate::runtime::Gpu;
use crate::{Error, Result};

/// Whether [`GruLaunch::held`] `None` asks for the held kernels: `PTXFLOW_GRU_HELD` = `1` (on)
/// or `0` (off); unset or other: [`DEFAULT`] (on).
fn held_from_env() -> bool {
    match std::env::var("PTXFLOW_GRU_HELD").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => DEFAULT,
    }
}

/// `Some(true)` / `Some(false)` when the variable `name` is `1` / `0`, else `None`.
fn switch_from_env(name: &str) -> Option<bool> {
    match std::env::var(name).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// [`GruLaunch::tune`] from `PTXFLOW_GRU_TUNE`: unset or empty: [`TUNE_DEFAULT`]; letters `x`,
/// `o` and `c` (session 11's names: x copied during the steps, gi sums in the gather's round
/// trip, by the threads with a cell) turn on [`HeldTune::overlap`] (`rnn_gru_held48swxc`), `p`
/// with them [`HeldTune::probe`] (`rnn_gru_held48swxcp`), `g` [`HeldTune::partials_in_gather`]
/// (`rnn_gru_held64o`; `xocg` is the default); other values (e.g. `none`): none of them
/// (`rnn_gru_held48sw`, `rnn_gru_held64`).
fn tune_from_env() -> HeldTune {
    let v = std::env::var("PTXFLOW_GRU_TUNE").unwrap_or_default();
    if v.is_empty() {
        return TUNE_DEFAULT;
    }
    let known = v.chars().all(|c| "xocpg".contains(c));
    let overlap = known && "xoc".chars().all(|c| v.contains(c));
    HeldTune {
        overlap,
        probe: overlap && v.contains('p'),
        partials_in_gather: known && v.contains('g'),
    }
}

/// The schedule of `rnn_gru_held48sw` where neither [`GruLaunch::tune`] nor `PTXFLOW_GRU_TUNE`
/// says: x of steps 3 .. copied during the steps, and the threads with a cell take their gi sums
/// inside the gather's first L2 round trip (`rnn_gru_held48swxc`). H100, T=10 B=32, one process:
/// criterion 17.54 us against 17.86 for x copied during the steps alone and 18.09 for
/// `rnn_gru_held48sw`, alternating medians 18.23 against 18.30-18.57 and 18.52 (in-kernel
/// stamps: 14.88 against 15.34 and 15.52 us; exchange 0.52 against 0.57 us a step, prologue
/// 0.22 us shorter). And the partials of W_ih x inside the 64-row kernel's gather
/// (`rnn_gru_held64o`): H100, ensemble of 5, one process: criterion 48.80 us against 49.56 for
/// `rnn_gru_held64`, alternating medians 48.76 against 49.15 (mat-vec 1.69 against 1.75 us a
/// step; the exchange phase still waits for the slowest block's states).
const TUNE_DEFAULT: HeldTune = HeldTune {
    overlap: true,
    probe: false,
    partials_in_gather: true,
};

/// Whether the split roles run where neither [`GruLaunch::split`] nor `PTXFLOW_GRU_SPLIT` says:
/// on for the 48-row kernels (`rnn_gru_held48s`; H100, alternating in one process, T=10 B=32:
/// 19.67 against 20.27 us, with the staged weights 18.96), off for the 64-row ones
/// (`rnn_gru_held64s`: ensemble of 5 52.1 against 49.5 us; its upper warps' partials and gi sums,
/// 2.2 us a step, outlast the cells and the gather).
const SPLIT_DEFAULT: [bool; 2] = [true, false];

/// Whether the 48-row held kernels stage their weights through shared memory where the layout
/// fits and neither [`GruLaunch::staged`] nor `PTXFLOW_GRU_STAGED` says (H100, alternating in
/// one process, T=10 B=32: 19.56 against 20.27 us; prologue 2.0 against 2.9 us to the barrier).
const STAGED_DEFAULT: bool = true;

/// Whether the held kernels run where they can when neither the launch nor the environment
/// says (H100, alternating in one process: rollout T=10 B=32 20.0 against 23.5 us for the
/// weight-stationary kernel, ensemble of 5 49.1 against 56.8 us).
const DEFAULT: bool = true;

/// The held-weights shape, when wanted and possible: H = 256, padded input 128, sm_80 or later,
/// no cluster exchange, no projection mode asked for, and a grid of one block per SM with x of
/// `max_steps` steps in shared memory. Candidates: rows in {4, 8, 16, 32} (or the caller's) and
/// as many slices as fill the SMs (or the caller's), at most 21 units a block; the least mat-vec
/// work per block (rows x held gate rows, 48 or 64), then the most blocks. `Ok(None)`: not
/// wanted, or not possible and not asked for explicitly (then `Input`).
pub(super) fn choose_held(
    gpu: &Gpu,
    members: usize,
    bp: usize,
    ip: usize,
    h: usize,
    max_steps: usize,
    launch: GruLaunch,
) -> Result<Option<Shape>> {
    if !launch.held.unwrap_or_else(held_from_env) {
        return Ok(None);
    }
    let unavailable = || -> Result<Option<Shape>> {
        if launch.held == Some(true) || launch.split == Some(true) || launch.staged == Some(true) {
            Err(Error::input(
                "the held-weights GRU kernels need sm_80 or later, hidden 256, an input of at \
                 most 128, the global exchange, no projection mode, at most 21 units a block \
                 (at most 128 cells for rnn_gru_held48s, 16 units for the staged weights) and \
                 one block per SM with x of \
                 every step in shared memory",
            ))
        } else {
            Ok(None)
        }
    };
    let cluster = matches!(
        launch.exchange,
        Some(GruExchange::ClusterAsync | GruExchange::ClusterBarrier)
    );
    if gpu.facts().compute_capability.0 < 8
        || h != 256
        || ip != 128
        || cluster
        || launch.stationary == Some(false)
        || launch.precompute.is_some()
    {
        return unavailable();
    }
    let (sms, e) = (gpu.facts().sm_count.max(1) as usize, members);
    let optin = gpu.facts().max_shared_per_block_optin;
    let rows: Vec<u32> = match launch.rows_per_block {
        Some(r) if r == 0 || r % 4 != 0 || r > 32 => return unavailable(),
        Some(r) => vec![r],
        None => vec![4, 8, 16, 32],
    };
    let mut best: Option<(u64, u32, Shape)> = None;
    for &r in &rows {
        let r = r.min(bp as u32);
        let groups = bp.div_ceil(r as usize);
        let sl = match launch.unit_slices {
            Some(sl) if sl == 0 || sl > 128 => return unavailable(),
            Some(sl) => sl,
            None => (sms / (e * groups)).clamp(1, 128) as u32,
        };
        let units = 2 * 128u32.div_ceil(sl);
        let rows64 = match 3 * units {
            0..=48 => false,
            49..=64 => true,
            _ => continue,
        };
        // The split roles leave the cells and the gather to 128 threads (`rnn_gru_held48s` also
        // the gi sums: there, at most 128 cells).
        let split_asked = launch
            .split
            .or_else(|| switch_from_env("PTXFLOW_GRU_SPLIT"));
        let split_wanted = split_asked.unwrap_or(SPLIT_DEFAULT[usize::from(rows64)]);
        let split = (rows64 || r * units <= 128) && split_wanted;
        if launch.split == Some(true) && !split {
            continue;
        }
        let staged_asked = launch
            .staged
            .or_else(|| switch_from_env("PTXFLOW_GRU_STAGED"));
        let mut staged = !rows64 && staged_asked.unwrap_or(STAGED_DEFAULT);
        if launch.staged == Some(true) && !staged {
            continue;
        }
        let Ok(blocks) = u32::try_from(e * groups * sl as usize) else {
            continue;
        };
        let chunk = max_steps as u32;
        // The tuned schedules exist for the split, staged 48-row kernel and the 64-row one.
        let tune = launch.tune.unwrap_or_else(tune_from_env);
        let path_of = |staged| Path::Held {
            rows64,
            split,
            staged,
            tune: if split && staged && !rows64 {
                tune
            } else if rows64 && !split {
                HeldTune {
                    partials_in_gather: tune.partials_in_gather,
                    ..HeldTune::default()
                }
            } else {
                HeldTune::default()
            },
        };
        let mut bytes = smem_bytes(path_of(staged), ip, h, r, units, chunk);
        // Staged by default only: without the staging where its rows do not fit.
        if bytes > optin && staged && launch.staged != Some(true) {
            staged = false;
            bytes = smem_bytes(path_of(false), ip, h, r, units, chunk);
        }
        let path = path_of(staged);
        if bytes > optin {
            continue;
        }
        let k = Kernel::new(gpu, path.kernel())?;
        if blocks > k.resident(gpu, bytes)? {
            continue;
        }
        let held_rows = if rows64 { 64 } else { 48 };
        let key = (u64::from(r) * held_rows, u32::MAX - blocks);
        if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
            let shape = Shape {
                rows: r,
                slices: sl,
                units,
                chunk,
                blocks,
                path,
            };
            best = Some((key.0, key.1, shape));
        }
    }
    let Some((_, _, shape)) = best else {
        return unavailable();
    };
    let bytes = smem_bytes(shape.path, ip, h, shape.rows, shape.units, shape.chunk);
    Kernel::new(gpu, shape.path.kernel())?.allow(gpu, bytes)?;
    Ok(Some(shape))
}
