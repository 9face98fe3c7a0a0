//! GRU step, rollout and ensemble on every kernel the host picks or is asked for (layer norm,
//! dropout, the sm_90 cluster exchanges) against the f64 reference.

use crate::common;
use crate::gru_sanitize::gru_sanitizer_cases;
use crate::{rel_inf, sanitize};
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange, GruLaunch, GruStaging};
use ptxflow::rnn::reference::gru_ensemble_rollout;
use ptxflow::rnn::*;
use std::io::Write;

#[allow(clippy::too_many_arguments)] // one test case's parameters, named at each call
pub fn gru_case(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    input: usize,
    hidden: usize,
    shape: RolloutShape,
    members: usize,
    ln: bool,
    dropout: Option<Dropout>,
    launch: GruLaunch,
) -> f64 {
    let mut rng = Rng::new(
        1000 + (input * 7 + hidden + shape.steps * 13 + shape.batch + members * 31) as u64
            + u64::from(ln),
    );
    let ws: Vec<GruWeights> = (0..members)
        .map(|_| GruWeights::random(&mut rng, input, hidden, ln))
        .collect();
    let x = rng.vec_f32(shape.steps * shape.batch * input, -1.0, 1.0);
    let h0 = rng.vec_f32(members * shape.batch * hidden, -0.5, 0.5);
    let want = gru_ensemble_rollout(&ws, &x, &h0, shape, dropout.as_ref()).unwrap();
    let mut g = GpuGru::new(gpu.clone(), &ws, shape.steps, shape.batch, launch).unwrap();
    let got = g.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
    let again = g.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
    assert!(
        got.iter()
            .zip(&again)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "rollout not reproducible"
    );
    let e = rel_inf(&got, &want);
    eprintln!(
        "GRU I={input} H={hidden} T={} B={} E={members} ln={ln} dropout={:?}: {} blocks of {} rows x {} units ({} slices), gi {} steps at once, weights in registers {}, exchange {:?} (staging {:?}), {}, rel error {e:.2e}",
        shape.steps, shape.batch, dropout.map(|d| d.p), g.blocks(), g.rows_per_block(), g.units_per_block(), g.unit_slices(), g.projection_steps(), g.stationary(), g.exchange(), g.staging(), g.kernel_name()
    );
    e
}

pub fn gpu_gru_step_and_rollout_match_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_gru_step_and_rollout_match_f64_reference") else {
        return;
    };
    let auto = GruLaunch::default();
    if sanitize() {
        gru_sanitizer_cases(&gpu);
        return;
    }
    for (i, h, t, b, ln) in [
        (128, 256, 1, 32, false),
        (128, 256, 10, 32, false),
        (128, 256, 10, 32, true),
        (64, 128, 3, 5, false),
        (200, 384, 4, 9, true),
    ] {
        let e = gru_case(
            &gpu,
            i,
            h,
            RolloutShape { steps: t, batch: b },
            1,
            ln,
            None,
            auto,
        );
        assert!(e < 1e-5, "GRU I={i} H={h} T={t} B={b} ln={ln}: {e:e}");
    }
    let e = gru_case(
        &gpu,
        128,
        256,
        RolloutShape {
            steps: 10,
            batch: 32,
        },
        1,
        true,
        Some(Dropout { p: 0.2, seed: 42 }),
        auto,
    );
    assert!(e < 1e-5, "GRU with dropout: {e:e}");
    // Explicit block shapes: uneven slices (13 of 256 units: 18 or 20 each; 24 of 256: 10 or 12;
    // 26 of 384: 14 or 16), a partial last batch group (B = 9 -> Bp = 12), one group, several.
    for (i, h, t, b, ln, rows, slices) in [
        (128, 256, 10, 32, false, 8, 32),
        (128, 256, 10, 32, false, 16, 13),
        (128, 256, 10, 32, true, 32, 32),
        (128, 256, 10, 32, false, 4, 24),
        (200, 384, 4, 9, true, 8, 32),
        (200, 384, 4, 9, false, 16, 26),
        (200, 384, 4, 9, true, 4, 24),
    ] {
        let launch = GruLaunch {
            unit_slices: Some(slices),
            rows_per_block: Some(rows),
            ..GruLaunch::default()
        };
        let e = gru_case(
            &gpu,
            i,
            h,
            RolloutShape { steps: t, batch: b },
            1,
            ln,
            None,
            launch,
        );
        assert!(
            e < 1e-5,
            "GRU {rows} rows x {slices} unit slices, I={i} H={h} T={t} B={b}: {e:e}"
        );
    }
    // Both paths on shapes either could take: weights in shared memory, and in registers with a
    // partial batch group (B = 9 of 16 rows) and layer norm.
    let shared = GruLaunch {
        stationary: Some(false),
        ..GruLaunch::default()
    };
    let e = gru_case(
        &gpu,
        128,
        256,
        RolloutShape {
            steps: 10,
            batch: 32,
        },
        1,
        true,
        Some(Dropout { p: 0.2, seed: 5 }),
        shared,
    );
    assert!(e < 1e-5, "GRU, weights in shared memory: {e:e}");
    // The weight-stationary path's two modes: gi of every step first, and gi step by step.
    for precompute in [true, false] {
        let held = GruLaunch {
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
        let e = gru_case(
            &gpu,
            100,
            256,
            RolloutShape { steps: 6, batch: 9 },
            1,
            true,
            None,
            held,
        );
        assert!(
            e < 1e-5,
            "GRU, weights in registers, B=9, gi first {precompute}: {e:e}"
        );
    }
    let e = gru_case(
        &gpu,
        128,
        256,
        RolloutShape {
            steps: 40,
            batch: 32,
        },
        1,
        true,
        Some(Dropout { p: 0.2, seed: 9 }),
        auto,
    );
    assert!(e < 1e-5, "GRU 40 steps: {e:e}");
}

/// Whether the device runs the cluster kernel (sm_90 or later).
pub fn cluster_capable(gpu: &ptxflow::runtime::Gpu) -> bool {
    gpu.facts().compute_capability.0 >= 9
}

pub fn gpu_gru_cluster_exchanges_match_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_gru_cluster_exchanges_match_f64_reference") else {
        return;
    };
    if sanitize() {
        return; // covered by gru_sanitizer_cases
    }
    if !cluster_capable(&gpu) {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED gpu_gru_cluster_exchanges_match_f64_reference: the device is below sm_90"
        );
        return;
    }
    let drop = |seed| Some(Dropout { p: 0.2, seed });
    // (input, steps, batch, members, ln, dropout, rows per block)
    let all = [
        (128, 10, 32, 1, false, None, None),
        (128, 1, 32, 1, false, None, None),
        (128, 10, 32, 1, true, drop(3), None),
        (100, 6, 9, 1, true, None, None),
        (128, 10, 32, 1, false, None, Some(8)),
        (128, 10, 32, 1, true, None, Some(12)),
        (128, 10, 32, 1, false, None, Some(32)),
        (128, 40, 32, 1, false, None, None),
        (128, 10, 32, 5, false, None, None),
        (128, 10, 32, 5, true, drop(7), None),
    ];
    let few = [all[0], all[3], all[9]];
    for (ex, staging, cases) in [
        (GruExchange::ClusterAsync, GruStaging::Streamed, &all[..]),
        (GruExchange::ClusterBarrier, GruStaging::Streamed, &all[..]),
        (GruExchange::ClusterAsync, GruStaging::Copies, &few[..]),
        (GruExchange::ClusterAsync, GruStaging::CpAsync, &few[..]),
        (GruExchange::ClusterBarrier, GruStaging::Copies, &few[..]),
    ] {
        for &(i, t, b, m, ln, dropout, rows) in cases {
            let launch = GruLaunch {
                rows_per_block: rows,
                exchange: Some(ex),
                staging: Some(staging),
                ..GruLaunch::default()
            };
            let shape = RolloutShape { steps: t, batch: b };
            let e = gru_case(&gpu, i, 256, shape, m, ln, dropout, launch);
            assert!(
                e < 1e-5,
                "{ex:?} {staging:?}: I={i} T={t} B={b} E={m} ln={ln} rows {rows:?}: {e:e}"
            );
        }
    }
}

pub fn gpu_gru_ensemble_matches_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_gru_ensemble_matches_f64_reference") else {
        return;
    };
    if sanitize() {
        return; // covered by gru_sanitizer_cases
    }
    let shape = RolloutShape {
        steps: 10,
        batch: 32,
    };
    for ln in [false, true] {
        let e = gru_case(&gpu, 128, 256, shape, 5, ln, None, GruLaunch::default());
        assert!(e < 1e-5, "ensemble ln={ln}: {e:e}");
    }
    let e = gru_case(
        &gpu,
        128,
        256,
        shape,
        5,
        false,
        Some(Dropout { p: 0.1, seed: 7 }),
        GruLaunch::default(),
    );
    assert!(e < 1e-5, "ensemble with dropout: {e:e}");
    let shared = GruLaunch {
        stationary: Some(false),
        ..GruLaunch::default()
    };
    let e = gru_case(&gpu, 128, 256, shape, 5, false, None, shared);
    assert!(e < 1e-5, "ensemble, weights in shared memory: {e:e}");
    let per_step = GruLaunch {
        precompute: Some(false),
        ..GruLaunch::default()
    };
    let e = gru_case(
        &gpu,
        128,
        256,
        shape,
        5,
        true,
        Some(Dropout { p: 0.1, seed: 3 }),
        per_step,
    );
    assert!(e < 1e-5, "ensemble, gi step by step: {e:e}");
}
