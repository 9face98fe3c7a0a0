//! The cluster kernels' launch choices (`rnn_gru_cluster`, `rnn_gru_cluster_streamed`): the
//! exchange and staging variants, their kernel parameter, and the block shape (rows per block
//! against the driver's resident cluster count).

use super::gru::GruLaunch;
use super::gru_shape::{smem_bytes, Path, Shape};
use super::{allow_dynamic_smem, cfg};
use crate::kernels::rnn::gru::stationary as gru_stationary;
use crate::kernels::rnn::gru::stationary::cluster::{Variant, CLUSTER};
use crate::kernels::rnn::gru::THREADS;
use crate::runtime::{allow_cluster, max_active_clusters, Gpu};
use crate::{Error, Result};

/// The per-step exchange of new states between the blocks of one batch group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GruExchange {
    /// Tagged words in global memory, polled (`rnn_gru_shared`, `rnn_gru_stationary`; any GPU,
    /// cooperative launch).
    Global,
    /// Distributed shared memory of a 16-block cluster: `st.async` completing bytes on the
    /// destination's mbarrier (`rnn_gru_cluster`: sm_90 or later, H = 256, input <= 128).
    ClusterAsync,
    /// Distributed shared memory with one cluster barrier per step (`rnn_gru_cluster`).
    ClusterBarrier,
}

/// How the cluster kernels stage h0 and the inputs x before computing gi of every step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GruStaging {
    /// x of every step by register copies (`rnn_gru_cluster`).
    Copies,
    /// x of every step by `cp.async`, in flight with the weights' loads (`rnn_gru_cluster`).
    CpAsync,
    /// x one step at a time through two buffers by `cp.async` (`rnn_gru_cluster_streamed`:
    /// less shared memory, so an ensemble's clusters fit at once).
    Streamed,
}

/// How the cluster kernels stage h0 and x.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Staging {
    /// `rnn_gru_cluster`, x of every step by register copies.
    Copies,
    /// `rnn_gru_cluster`, x of every step by `cp.async` (bit `STAGE_ASYNC`).
    Async,
    /// `rnn_gru_cluster_streamed`: x one step at a time by `cp.async`.
    Streamed,
}

impl Staging {
    pub fn variant(self) -> Variant {
        match self {
            Staging::Copies | Staging::Async => Variant::Full,
            Staging::Streamed => Variant::Streamed,
        }
    }
}

/// The cluster kernel's two exchanges (its `exchange` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClusterExchange {
    /// `st.async` completing bytes on the destination's mbarrier (0).
    Async,
    /// `st.shared::cluster` and a cluster barrier per step (1).
    Barrier,
}

/// Tuning switches of the cluster kernels, from the environment (benchmarks):
/// `PTXFLOW_GRU_SENDS=spread` (bit `SEND_SPREAD`: the sends of h' by every thread after a block
/// barrier, not by the cell warps' lane quads) and `PTXFLOW_GRU_CLUSTER_POLICY=spread` (the
/// launch's cluster scheduling policy preference: spread a cluster's blocks over SMs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tuning {
    pub spread_sends: bool,
    pub spread_policy: bool,
}

impl Tuning {
    fn from_env() -> Self {
        let is = |var: &str, v: &str| std::env::var(var).is_ok_and(|x| x == v);
        Tuning {
            spread_sends: is("PTXFLOW_GRU_SENDS", "spread"),
            spread_policy: is("PTXFLOW_GRU_CLUSTER_POLICY", "spread"),
        }
    }
}

/// The cluster kernel's `exchange` parameter.
pub(super) fn cluster_param(ex: ClusterExchange, st: Staging, tu: Tuning) -> u32 {
    let e = match ex {
        ClusterExchange::Async => 0,
        ClusterExchange::Barrier => gru_stationary::cluster::EXCHANGE_BARRIER,
    };
    let s = match st {
        Staging::Copies | Staging::Streamed => 0,
        Staging::Async => gru_stationary::cluster::STAGE_ASYNC,
    };
    let t = if tu.spread_sends {
        gru_stationary::cluster::SEND_SPREAD
    } else {
        0
    };
    e | s | t
}

/// `PTXFLOW_GRU_EXCHANGE`: `global`, `cluster` (st.async + mbarrier) or `cluster-barrier`; the
/// exchange [`GruLaunch::exchange`] `None` asks for (unset or other: none in particular).
pub(super) fn exchange_from_env() -> Option<GruExchange> {
    match std::env::var("PTXFLOW_GRU_EXCHANGE").ok()?.as_str() {
        "global" => Some(GruExchange::Global),
        "cluster" => Some(GruExchange::ClusterAsync),
        "cluster-barrier" => Some(GruExchange::ClusterBarrier),
        _ => None,
    }
}

/// `PTXFLOW_GRU_STAGING`: `copies`, `async` or `streamed`; the staging
/// [`GruLaunch::staging`] `None` asks for (unset or other: streamed).
fn staging_from_env() -> Option<GruStaging> {
    match std::env::var("PTXFLOW_GRU_STAGING").ok()?.as_str() {
        "copies" => Some(GruStaging::Copies),
        "async" => Some(GruStaging::CpAsync),
        "streamed" => Some(GruStaging::Streamed),
        _ => None,
    }
}

/// The shape of `rnn_gru_cluster` (16 unit slices of 16 units, one cluster per member and
/// batch group, gi of every step first), or `None` where it cannot run: a device below sm_90,
/// sizes other than H = 256 and padded input 128, launch choices it cannot honour, or no
/// resident cluster. Rows per block: the fewest waves of clusters (members x groups against
/// the driver's resident count), then the fewest rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn choose_cluster(
    gpu: &Gpu,
    members: usize,
    bp: usize,
    ip: usize,
    h: usize,
    max_steps: usize,
    launch: GruLaunch,
    ex: ClusterExchange,
) -> Result<Option<Shape>> {
    if gpu.facts().compute_capability.0 < 9
        || h != 256
        || ip != 128
        || launch.stationary == Some(false)
        || launch.precompute == Some(false)
        || launch.unit_slices.is_some_and(|s| s != CLUSTER)
    {
        return Ok(None);
    }
    let rows: Vec<u32> = match launch.rows_per_block {
        Some(r) if r == 0 || r % 4 != 0 || r > 32 => {
            return Err(Error::input(format!(
                "rows per block {r} must be a multiple of 4 and at most 32"
            )))
        }
        Some(r) => vec![r],
        None => (1..=8).map(|k| 4 * k).collect(),
    };
    let units = (h as u32) / CLUSTER;
    let staging = match launch.staging.or_else(staging_from_env) {
        Some(GruStaging::Copies) => Staging::Copies,
        Some(GruStaging::CpAsync) => Staging::Async,
        Some(GruStaging::Streamed) | None => Staging::Streamed,
    };
    let tuning = Tuning::from_env();
    let path = Path::Cluster(ex, staging, tuning);
    let id = path.kernel();
    let kern = gpu.kernel(id)?;
    allow_cluster(&kern)?;
    let optin = gpu.facts().max_shared_per_block_optin;
    let mut best: Option<(Shape, (usize, u32), u32)> = None;
    for r in rows {
        let r = r.min(bp as u32);
        let chunk = max_steps as u32;
        let bytes = smem_bytes(path, ip, h, r, units, chunk);
        if bytes > optin {
            continue;
        }
        allow_dynamic_smem(gpu, kern.function(), bytes, id.name())?;
        let clusters = members * bp.div_ceil(r as usize);
        let blocks = clusters as u32 * CLUSTER;
        let shape_cfg = cfg((blocks, 1, 1), THREADS, bytes);
        let cap = max_active_clusters(
            &kern,
            gpu.stream(),
            shape_cfg,
            CLUSTER,
            tuning.spread_policy,
        )?;
        if cap == 0 {
            continue;
        }
        let key = (clusters.div_ceil(cap as usize), r);
        if best.as_ref().is_none_or(|b| key < b.1) {
            let shape = Shape {
                rows: r,
                slices: CLUSTER,
                units,
                chunk,
                blocks,
                path,
            };
            best = Some((shape, key, bytes));
        }
    }
    let Some((shape, _, bytes)) = best else {
        return Ok(None);
    };
    allow_dynamic_smem(gpu, kern.function(), bytes, id.name())?;
    Ok(Some(shape))
}
