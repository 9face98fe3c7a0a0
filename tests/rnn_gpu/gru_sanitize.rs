//! The GRU tests' small cases under compute-sanitizer (`PTXFLOW_SANITIZE=1`).

use crate::gru::{cluster_capable, gru_case};
use ptxflow::rnn::gpu::gru::{GruExchange, GruLaunch, GruStaging};
use ptxflow::rnn::*;

/// Under compute-sanitizer (slow: racecheck instruments every shared access) one small case per
/// kernel and mode: `rnn_gru_stationary` with gi of every step first and step by step (a partial
/// batch group, layer norm), `rnn_gru_shared` (uneven slices, a partial group, dropout), and an
/// ensemble of 2 on each kernel.
pub fn gru_sanitizer_cases(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    let held = |precompute| GruLaunch {
        unit_slices: Some(13),
        rows_per_block: Some(16),
        stationary: Some(true),
        precompute: Some(precompute),
        exchange: None,
        staging: None,
        held: None,
        split: None,
        staged: None,
        tune: None,
    };
    let shared = GruLaunch {
        unit_slices: Some(26),
        rows_per_block: Some(8),
        stationary: Some(false),
        precompute: None,
        exchange: None,
        staging: None,
        held: None,
        split: None,
        staged: None,
        tune: None,
    };
    let any_held = GruLaunch {
        stationary: Some(true),
        ..GruLaunch::default()
    };
    let drop = Some(Dropout { p: 0.2, seed: 11 });
    let short = RolloutShape { steps: 3, batch: 9 };
    // PTXFLOW_SANITIZE_CLUSTER_ONLY=n: only the first n cluster-kernel cases (racecheck is slow).
    let cluster_only: Option<usize> = std::env::var("PTXFLOW_SANITIZE_CLUSTER_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    // 16 slices of 16 units: `rnn_gru_stationary48` (`rnn_gru_stationary` with
    // PTXFLOW_GRU_ROWS48=0).
    let held16 = GruLaunch {
        unit_slices: Some(16),
        rows_per_block: Some(4),
        stationary: Some(true),
        precompute: Some(true),
        exchange: None,
        staging: None,
        held: None,
        split: None,
        staged: None,
        tune: None,
    };
    let old_cases = [
        (
            "registers, 16 units, gi first",
            100,
            256,
            1,
            true,
            drop,
            held16,
        ),
        ("registers, gi first", 100, 256, 1, true, None, held(true)),
        (
            "registers, gi per step",
            100,
            256,
            1,
            true,
            None,
            held(false),
        ),
        ("shared memory", 200, 384, 1, true, drop, shared),
        ("ensemble, registers", 128, 256, 2, false, drop, any_held),
        ("ensemble, shared memory", 128, 256, 2, false, None, shared),
    ];
    let old_cases = if cluster_only.is_some() {
        &old_cases[..0]
    } else {
        &old_cases[..]
    };
    for &(what, i, h, members, ln, dropout, launch) in old_cases {
        let e = gru_case(gpu, i, h, short, members, ln, dropout, launch);
        assert!(e < 1e-5, "GRU under the sanitizer, {what}: {e:e}");
    }
    // PTXFLOW_SANITIZE_NO_CLUSTER=1: none of the cluster kernels' cases.
    let no_cluster = std::env::var("PTXFLOW_SANITIZE_NO_CLUSTER").is_ok_and(|v| v == "1");
    if cluster_capable(gpu) && !no_cluster {
        for (ex, staging, members, ln, dropout) in [
            (
                GruExchange::ClusterAsync,
                GruStaging::Streamed,
                1,
                true,
                None,
            ),
            (
                GruExchange::ClusterAsync,
                GruStaging::Streamed,
                2,
                false,
                drop,
            ),
            (
                GruExchange::ClusterAsync,
                GruStaging::CpAsync,
                1,
                false,
                None,
            ),
            (
                GruExchange::ClusterBarrier,
                GruStaging::Copies,
                2,
                true,
                drop,
            ),
        ]
        .into_iter()
        .take(cluster_only.unwrap_or(usize::MAX))
        {
            let launch = GruLaunch {
                exchange: Some(ex),
                staging: Some(staging),
                ..GruLaunch::default()
            };
            let e = gru_case(gpu, 100, 256, short, members, ln, dropout, launch);
            assert!(
                e < 1e-5,
                "GRU under the sanitizer, {ex:?} {staging:?} x {members}: {e:e}"
            );
        }
    }
}
