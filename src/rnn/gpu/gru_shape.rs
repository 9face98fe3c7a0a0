//! The GRU rollout's launch shape: batch rows and hidden units per block, weights in registers
//! or shared memory, and how gi is computed, chosen from the co-resident capacity the driver
//! reports (see [`choose_shape`]).

use super::gru::{GruExchange, GruLaunch, HeldTune};
use super::gru_cluster::{choose_cluster, exchange_from_env, ClusterExchange, Staging, Tuning};
use super::gru_held::choose_held;
use super::{allow_dynamic_smem, cooperative_capacity};
use crate::kernels::rnn::gru::shared::smem_floats;
use crate::kernels::rnn::gru::stationary as gru_stationary;
use crate::kernels::rnn::gru::THREADS;
use crate::kernels::KernelId;
use crate::runtime::Gpu;
use crate::{Error, Result};
use cudarc::driver::CudaFunction;

/// One block shape: `rows` batch rows x at most `units` hidden units (`slices` per group), gi for
/// `chunk` steps at once, weights in registers or in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub rows: u32,
    pub slices: u32,
    pub units: u32,
    pub chunk: u32,
    pub blocks: u32,
    pub path: Path,
}

/// Where a block keeps its weights: which of the two rollout kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// In shared memory (`rnn_gru_shared`).
    Shared,
    /// W_hh in registers (`rnn_gru_stationary`).
    Stationary,
    /// As `Stationary` with lanes holding 48 gate rows (`rnn_gru_stationary48`: blocks of at
    /// most 16 units, gi of every step first; the default there unless `PTXFLOW_GRU_ROWS48=0`).
    Stationary48,
    /// W_hh in registers, h' exchanged in distributed shared memory (`rnn_gru_cluster`, sm_90;
    /// the kernel's `exchange` parameter).
    Cluster(ClusterExchange, Staging, Tuning),
    /// W_ih and W_hh in registers, gi step by step, one block per SM (`gru_held`):
    /// `rnn_gru_held48` for 3J <= 48, `rnn_gru_held64` up to 64 (`rows64`); `split`:
    /// `rnn_gru_held48s` / `rnn_gru_held64s` (W_ih in the upper four warps only); `staged`
    /// (3J <= 48 only): `rnn_gru_held48w` / `rnn_gru_held48sw` (weights staged through shared
    /// memory by coalesced copies); `tune`: `rnn_gru_held48sw`'s schedules, and
    /// `rnn_gru_held64o` for `rnn_gru_held64`.
    Held {
        rows64: bool,
        split: bool,
        staged: bool,
        tune: HeldTune,
    },
}

impl Path {
    /// The kernel of this path.
    pub fn kernel(self) -> KernelId {
        match self {
            Path::Shared => KernelId::RnnGruShared,
            Path::Stationary => KernelId::RnnGruStationary,
            Path::Stationary48 => KernelId::RnnGruStationary48,
            Path::Cluster(_, Staging::Streamed, _) => KernelId::RnnGruClusterStreamed,
            Path::Cluster(..) => KernelId::RnnGruCluster,
            Path::Held {
                rows64: false,
                split,
                staged,
                tune,
            } => match (split, staged) {
                (false, false) => KernelId::RnnGruHeld48,
                (true, false) => KernelId::RnnGruHeld48s,
                (false, true) => KernelId::RnnGruHeld48w,
                (true, true) => tuned(tune),
            },
            Path::Held {
                rows64: true,
                split: true,
                ..
            } => KernelId::RnnGruHeld64s,
            Path::Held {
                rows64: true,
                split: false,
                tune,
                ..
            } => {
                if tune.partials_in_gather {
                    KernelId::RnnGruHeld64o
                } else {
                    KernelId::RnnGruHeld64
                }
            }
        }
    }
}

/// The split, staged 48-row kernel with the schedule `t`.
fn tuned(t: HeldTune) -> KernelId {
    match (t.overlap, t.probe) {
        (true, false) => KernelId::RnnGruHeld48swxc,
        (true, true) => KernelId::RnnGruHeld48swxcp,
        (false, _) => KernelId::RnnGruHeld48sw,
    }
}

impl Shape {
    /// The kernel that runs this shape.
    pub fn kernel(&self) -> KernelId {
        self.path.kernel()
    }
}

/// One of the rollout kernels, for sizing shapes against its own occupancy.
pub(super) struct Kernel {
    id: KernelId,
    f: CudaFunction,
}

impl Kernel {
    pub fn new(gpu: &Gpu, id: KernelId) -> Result<Self> {
        Ok(Kernel {
            id,
            f: gpu.function(id)?,
        })
    }

    /// Allows `bytes` of dynamic shared memory.
    pub fn allow(&self, gpu: &Gpu, bytes: u32) -> Result<()> {
        allow_dynamic_smem(gpu, &self.f, bytes, self.id.name())
    }

    /// Co-resident blocks with `bytes` of dynamic shared memory (allowed first).
    pub fn resident(&self, gpu: &Gpu, bytes: u32) -> Result<u32> {
        self.allow(gpu, bytes)?;
        cooperative_capacity(gpu, &self.f, THREADS, bytes)
    }
}

/// Dynamic shared memory of the rollout kernel for one block shape (`chunk` as the kernel reads
/// it: gi steps at once on the shared-memory path; 0 or max steps on the stationary path).
pub(super) fn smem_bytes(
    path: Path,
    ip: usize,
    h: usize,
    rows: u32,
    units: u32,
    chunk: u32,
) -> u32 {
    let (ip, h) = (ip as u32, h as u32);
    4 * match path {
        Path::Stationary | Path::Stationary48 => {
            gru_stationary::smem_floats(rows, ip, h, units, chunk)
        }
        Path::Shared => smem_floats(rows, ip, h, units, chunk),
        Path::Cluster(_, st, _) => {
            gru_stationary::cluster::smem_floats(st.variant(), rows, ip, h, units, chunk)
        }
        Path::Held {
            rows64: false,
            staged: true,
            ..
        } => gru_stationary::held::smem_floats_staged(rows, ip, h, chunk, 3),
        Path::Held { .. } => gru_stationary::held::smem_floats(rows, ip, h, chunk),
    }
}

/// The block shape. Candidates: rows in {4, 8, 16, 32} and as many slices as fill the SMs at
/// one or two blocks per SM (or the caller's choices). Weight-stationary candidates come first,
/// each in precompute mode (x and gi of `max_steps` steps in shared memory, `chunk` =
/// max_steps) when its grid stays co-resident so, else per step (W_ih and 2 steps of x and gi,
/// `chunk` = 0): the least per-step work of the busiest SM (blocks per SM x rows x 64 gate rows,
/// the lanes' fixed tile), then the most blocks (more warps per SM hide latency). Otherwise, among shared-memory candidates whose grid is
/// co-resident with at least one step of gi in shared memory: the least estimated per-step work
/// of the busiest SM (blocks per SM x (mat-vec fmas + 8 x exchange words read)), then the fewest
/// blocks, and as many gi steps as keep the grid resident.
pub(super) fn choose_shape(
    gpu: &Gpu,
    members: usize,
    bp: usize,
    ip: usize,
    h: usize,
    max_steps: usize,
    launch: GruLaunch,
) -> Result<Shape> {
    let wanted = match launch.exchange {
        Some(e) => Some(e),
        None => exchange_from_env(),
    };
    let cluster = match wanted {
        Some(GruExchange::ClusterAsync) => Some(ClusterExchange::Async),
        Some(GruExchange::ClusterBarrier) => Some(ClusterExchange::Barrier),
        Some(GruExchange::Global) | None => None,
    };
    if let Some(ex) = cluster {
        match choose_cluster(gpu, members, bp, ip, h, max_steps, launch, ex)? {
            Some(shape) => return Ok(shape),
            None if launch.exchange.is_some() => {
                return Err(Error::input(
                    "the cluster exchange needs sm_90 or later, hidden 256, an input of at most \
                     128, weights in registers, gi of every step first, 16 unit slices and a \
                     cluster that fits",
                ))
            }
            None => {}
        }
    }
    if let Some(shape) = choose_held(gpu, members, bp, ip, h, max_steps, launch)? {
        return Ok(shape);
    }
    let held = Kernel::new(gpu, KernelId::RnnGruStationary)?;
    let f = Kernel::new(gpu, KernelId::RnnGruShared)?;
    let (hu, e) = (h as u32, members as u64);
    let sms = u64::from(gpu.facts().sm_count.max(1));
    let optin = gpu.facts().max_shared_per_block_optin;
    if let Some(sl) = launch.unit_slices {
        if sl == 0 || sl > hu / 2 {
            return Err(Error::input(format!(
                "unit slices {sl} must be in 1..={}",
                hu / 2
            )));
        }
    }
    let rows: Vec<u32> = match launch.rows_per_block {
        Some(r) if r == 0 || r % 4 != 0 || r > 32 => {
            return Err(Error::input(format!(
                "rows per block {r} must be a multiple of 4 and at most 32"
            )))
        }
        Some(r) => vec![r],
        None => vec![4, 8, 16, 32],
    };
    let (mut best, mut best_key, mut best_cap, mut needed) =
        (None, (u64::MAX, u32::MAX), 0u32, usize::MAX);
    let (mut best_st, mut best_st_key) = (None, (u64::MAX, u32::MAX));
    for &r in &rows {
        let r = r.min(bp as u32);
        let groups = bp.div_ceil(r as usize) as u64;
        let slices: Vec<u32> = match launch.unit_slices {
            Some(sl) => vec![sl],
            None => (1..=2u64)
                .map(|k| (k * sms / (e * groups)).clamp(1, u64::from(hu / 2)) as u32)
                .collect(),
        };
        for sl in slices {
            let units = 2 * (hu / 2).div_ceil(sl);
            let blocks = e * groups * u64::from(sl);
            needed = needed.min(blocks as usize);
            let per_sm = blocks.div_ceil(sms);
            let (r64, h64) = (u64::from(r), h as u64);
            if launch.stationary != Some(false)
                && h == 256
                && ip == 128
                && 3 * units <= gru_stationary::ROWS
            {
                // chunk: max_steps (gi of every step first) or 0 (gi per step).
                let modes: Vec<u32> = match launch.precompute {
                    Some(true) => vec![max_steps as u32],
                    Some(false) => vec![0],
                    None => vec![max_steps as u32, 0],
                };
                for chunk in modes {
                    let bytes = smem_bytes(Path::Stationary, ip, h, r, units, chunk);
                    if bytes > optin {
                        continue;
                    }
                    let cap = held.resident(gpu, bytes)?;
                    best_cap = best_cap.max(cap);
                    // Ties go to more blocks: (cost, MAX - blocks); the first mode that fits wins.
                    let key = (
                        per_sm * r64 * u64::from(gru_stationary::ROWS + 8),
                        u32::MAX - blocks as u32,
                    );
                    if blocks <= u64::from(cap) {
                        if key < best_st_key {
                            best_st_key = key;
                            best_st = Some(Shape {
                                rows: r,
                                slices: sl,
                                units,
                                chunk,
                                blocks: blocks as u32,
                                path: Path::Stationary,
                            });
                        }
                        break;
                    }
                }
            }
            if launch.stationary == Some(true) {
                continue;
            }
            let bytes = smem_bytes(Path::Shared, ip, h, r, units, 1);
            if bytes > optin {
                continue;
            }
            let cap = f.resident(gpu, bytes)?;
            best_cap = best_cap.max(cap);
            if blocks > u64::from(cap) {
                continue;
            }
            let key = (
                per_sm * (r64 * 3 * u64::from(units) * h64 + 8 * r64 * h64),
                blocks as u32,
            );
            if key < best_key {
                best_key = key;
                best = Some(Shape {
                    rows: r,
                    slices: sl,
                    units,
                    chunk: 1,
                    blocks: blocks as u32,
                    path: Path::Shared,
                });
            }
        }
    }
    if let Some(mut shape) = best_st {
        let bytes = smem_bytes(
            Path::Stationary,
            ip,
            h,
            shape.rows,
            shape.units,
            shape.chunk,
        );
        held.allow(gpu, bytes)?;
        // Blocks of at most 16 units in precompute mode: the 48-row kernel (measured 7% faster
        // on the T=10 B=32 rollout; its registers and shared memory are at most
        // `rnn_gru_stationary`'s: the same residency). PTXFLOW_GRU_ROWS48=0 keeps the 64-row one.
        let rows48 = std::env::var("PTXFLOW_GRU_ROWS48").map_or(true, |v| v != "0");
        if rows48 && shape.chunk != 0 && 3 * shape.units <= 48 {
            Kernel::new(gpu, KernelId::RnnGruStationary48)?.allow(gpu, bytes)?;
            shape.path = Path::Stationary48;
        }
        return Ok(shape);
    }
    let mut shape = best.ok_or(Error::Capacity {
        what: "co-resident GRU blocks".into(),
        needed,
        capacity: best_cap as usize,
    })?;
    // More gi steps per projection while the grid stays resident.
    for c in 2..=max_steps as u32 {
        let bytes = smem_bytes(Path::Shared, ip, h, shape.rows, shape.units, c);
        if bytes > optin {
            break;
        }
        if f.resident(gpu, bytes)? < shape.blocks {
            break;
        }
        shape.chunk = c;
    }
    let bytes = smem_bytes(Path::Shared, ip, h, shape.rows, shape.units, shape.chunk);
    f.allow(gpu, bytes)?;
    Ok(shape)
}
