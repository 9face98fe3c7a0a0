//! The learned-correction kernels on the GPU against the f64 CPU references: dense (f32 and
//! f16 storage), GRU step / rollout / ensemble (layer norm, dropout), randomized SVD (error
//! against the optimal rank-k error from a full CPU SVD, orthonormality), corrections, the
//! whole chain (eager, CUDA graph, concurrent streams), and no allocations in steady loops.
//! Outputs are poisoned before launches where the API allows. `PTXFLOW_SANITIZE=1` shrinks the
//! large cases for compute-sanitizer (the GRU tests then run one short case per kernel and mode). Every test skips without a GPU.

mod common;

use ptxflow::ops::GpuOps;
use ptxflow::rng::Rng;
use ptxflow::rnn::chain::chain_cpu;
use ptxflow::rnn::gpu::chain::{run_concurrently, GpuChain};
use ptxflow::rnn::gpu::dense::{GpuDense, WeightStorage};
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange, GruLaunch, GruStaging, HeldTune};
use ptxflow::rnn::gpu::lowrank::{correct_add, GpuLowRank};
use ptxflow::rnn::gpu::rsvd::{GpuRsvd, GEMM_BLOCKS_PER_SM, MAX_GEMM_BLOCKS_PER_SM};
use ptxflow::rnn::half::{f16_bits_to_f32, to_f16_vec};
use ptxflow::rnn::reference::{dense_relu, gru_ensemble_rollout, lowrank_correct};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::*;
use ptxflow::rnn::*;
use ptxflow::Error;
use std::io::Write;

fn sanitize() -> bool {
    std::env::var("PTXFLOW_SANITIZE").is_ok_and(|v| v == "1")
}

/// max |got - want| / max |want|.
fn rel_inf(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(got.iter().all(|v| v.is_finite()), "non-finite output");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (&g, w)| m.max((f64::from(g) - w).abs()))
        / scale
}

#[test]
fn gpu_dense_matches_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_dense_matches_f64_reference") else {
        return;
    };
    let mut rng = Rng::new(1);
    for (input, output, rows) in [(64, 128, 32), (64, 128, 320), (37, 50, 3)] {
        let layer = DenseLayer::random(&mut rng, input, output);
        let x = rng.vec_f32(rows * input, -1.0, 1.0);
        let want = dense_relu(&layer, &x, rows).unwrap();
        let mut d = GpuDense::new(gpu.clone(), &layer, WeightStorage::F32, rows).unwrap();
        let got = d.forward(&x, rows).unwrap();
        let e = rel_inf(&got, &want);
        eprintln!("dense f32 {input}->{output} x{rows}: rel error {e:.2e}");
        assert!(e < 1e-5, "dense f32 {e:e}");
        // f16 storage: exact against the reference with f16-rounded weights (accumulation f32).
        let w16: Vec<f32> = to_f16_vec(layer.w())
            .into_iter()
            .map(f16_bits_to_f32)
            .collect();
        let layer16 = DenseLayer::new(input, output, w16, layer.b().to_vec()).unwrap();
        let want16 = dense_relu(&layer16, &x, rows).unwrap();
        let mut d16 = GpuDense::new(gpu.clone(), &layer, WeightStorage::F16, rows).unwrap();
        let got16 = d16.forward(&x, rows).unwrap();
        let (e16, drift) = (rel_inf(&got16, &want16), rel_inf(&got16, &want));
        eprintln!(
            "dense f16 storage: rel error {e16:.2e} vs f16 weights, {drift:.2e} vs f32 weights"
        );
        assert!(e16 < 1e-5, "dense f16 {e16:e}");
        assert!(drift < 2e-3, "f16 weight rounding drift {drift:e}");
        assert!(matches!(d.forward(&x, rows + 1), Err(Error::Shape { .. })));
    }
}

#[allow(clippy::too_many_arguments)] // one test case's parameters, named at each call
fn gru_case(
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

/// The held-weights kernels (`rnn_gru_held48` / `rnn_gru_held64`, `GruLaunch::held`) on the
/// block shape `rows` x `slices`, against the f64 reference and bit for bit against the
/// weight-stationary kernel of the same lane rows in precompute mode (the same partial sums in
/// the same order); returns the relative error.
#[allow(clippy::too_many_arguments)] // one test case's parameters, named at each call
fn gru_held_case(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    input: usize,
    shape: RolloutShape,
    members: usize,
    ln: bool,
    dropout: Option<Dropout>,
    rows: u32,
    slices: u32,
) -> f64 {
    let mut rng = Rng::new(2000 + (input + shape.steps * 13 + shape.batch + members * 31) as u64);
    let ws: Vec<GruWeights> = (0..members)
        .map(|_| GruWeights::random(&mut rng, input, 256, ln))
        .collect();
    let x = rng.vec_f32(shape.steps * shape.batch * input, -1.0, 1.0);
    let h0 = rng.vec_f32(members * shape.batch * 256, -0.5, 0.5);
    let want = gru_ensemble_rollout(&ws, &x, &h0, shape, dropout.as_ref()).unwrap();
    let launch = |held| GruLaunch {
        unit_slices: Some(slices),
        rows_per_block: Some(rows),
        stationary: Some(true),
        precompute: if held { None } else { Some(true) },
        exchange: Some(GruExchange::Global),
        staging: None,
        held: Some(held),
        split: Some(false),
        staged: Some(false),
        tune: None,
    };
    let mut g = GpuGru::new(gpu.clone(), &ws, shape.steps, shape.batch, launch(true)).unwrap();
    let mut twin = GpuGru::new(gpu.clone(), &ws, shape.steps, shape.batch, launch(false)).unwrap();
    assert!(
        g.kernel_name().starts_with("rnn_gru_held"),
        "{}",
        g.kernel_name()
    );
    let got = g.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
    let again = g.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
    let other = twin.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same(&got, &again),
        "{}: rollout not reproducible",
        g.kernel_name()
    );
    assert!(
        same(&got, &other),
        "{} differs from {}",
        g.kernel_name(),
        twin.kernel_name()
    );
    // The split roles (the upper warps hold W_ih): `rnn_gru_held64s` for blocks of more than
    // 16 units, `rnn_gru_held48s` for 16 units and at most 128 cells; the weights staged
    // through shared memory (16 units): `rnn_gru_held48w`, and `rnn_gru_held48sw` with the split
    // roles; all bit for bit.
    let units = 2 * 128u32.div_ceil(slices);
    let small = units <= 16 && rows * units <= 128;
    // The opt-in schedules of `rnn_gru_held48sw` (`HeldTune`): `u` the gi sums by the upper
    // warps, `x` x copied during the steps, bit for bit too.
    let tune = |gi_upper, lazy_x, probe| {
        Some(HeldTune {
            gi_upper,
            lazy_x,
            probe,
            ..HeldTune::default()
        })
    };
    let overlap = |lazy_x, probe| {
        Some(HeldTune {
            lazy_x,
            probe,
            overlap: true,
            ..HeldTune::default()
        })
    };
    let fused = Some(HeldTune {
        lazy_x: true,
        fused: true,
        ..HeldTune::default()
    });
    let fused_u = Some(HeldTune {
        gi_upper: true,
        lazy_x: true,
        fused: true,
        ..HeldTune::default()
    });
    let s = small;
    let no_tune_var = std::env::var_os("PTXFLOW_GRU_TUNE").is_none();
    let cells = |probe| {
        Some(HeldTune {
            lazy_x: true,
            probe,
            overlap: true,
            overlap_cells: true,
            ..HeldTune::default()
        })
    };
    let variants = [
        (units > 16, Some(true), None, None, "rnn_gru_held64s"),
        (small, Some(true), Some(false), None, "rnn_gru_held48s"),
        (
            units <= 16,
            Some(false),
            Some(true),
            None,
            "rnn_gru_held48w",
        ),
        (
            s,
            Some(true),
            Some(true),
            Some(HeldTune::default()),
            "rnn_gru_held48sw",
        ),
        // The default schedule (unless PTXFLOW_GRU_TUNE says otherwise).
        (
            s && no_tune_var,
            Some(true),
            Some(true),
            None,
            "rnn_gru_held48swxc",
        ),
        (
            small,
            Some(true),
            Some(true),
            tune(true, false, false),
            "rnn_gru_held48swu",
        ),
        (
            small,
            Some(true),
            Some(true),
            tune(false, true, false),
            "rnn_gru_held48swx",
        ),
        (
            small,
            Some(true),
            Some(true),
            tune(true, true, false),
            "rnn_gru_held48swux",
        ),
        (
            small,
            Some(true),
            Some(true),
            tune(false, false, true),
            "rnn_gru_held48swp",
        ),
        (
            small,
            Some(true),
            Some(true),
            tune(true, true, true),
            "rnn_gru_held48swuxp",
        ),
        (small, Some(true), Some(true), fused, "rnn_gru_held48swxf"),
        (
            small,
            Some(true),
            Some(true),
            fused_u,
            "rnn_gru_held48swuxf",
        ),
        (
            s,
            Some(true),
            Some(true),
            overlap(false, false),
            "rnn_gru_held48swo",
        ),
        (
            s,
            Some(true),
            Some(true),
            overlap(true, false),
            "rnn_gru_held48swxo",
        ),
        (
            s,
            Some(true),
            Some(true),
            overlap(true, true),
            "rnn_gru_held48swxop",
        ),
        (
            s,
            Some(true),
            Some(true),
            cells(false),
            "rnn_gru_held48swxc",
        ),
        (
            s,
            Some(true),
            Some(true),
            cells(true),
            "rnn_gru_held48swxcp",
        ),
    ];
    for (_, split, staged, tune, name) in variants.into_iter().filter(|v| v.0) {
        let l = GruLaunch {
            split,
            staged,
            tune,
            ..launch(true)
        };
        let mut s = GpuGru::new(gpu.clone(), &ws, shape.steps, shape.batch, l).unwrap();
        assert_eq!(s.kernel_name(), name);
        let got_s = s.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
        let again_s = s.rollout(&x, &h0, shape, dropout.as_ref()).unwrap();
        assert!(same(&got_s, &again_s), "{name}: not reproducible");
        assert!(
            same(&got_s, &got),
            "{name} differs from {}",
            g.kernel_name()
        );
        eprintln!(
            "GRU held I={input} T={} B={} E={members}: {name} bit-identical to {}",
            shape.steps,
            shape.batch,
            g.kernel_name()
        );
    }
    let e = rel_inf(&got, &want);
    eprintln!(
        "GRU held I={input} T={} B={} E={members} ln={ln} dropout={:?}: {} blocks of {} rows x {} units, {} (bit-identical to {}), rel error {e:.2e}",
        shape.steps, shape.batch, dropout.map(|d| d.p), g.blocks(), g.rows_per_block(), g.units_per_block(), g.kernel_name(), twin.kernel_name()
    );
    e
}

#[test]
fn gpu_gru_held_kernels_match_f64_reference_and_their_twins() {
    let Some(gpu) = common::gpu_or_skip("gpu_gru_held_kernels_match_f64_reference_and_their_twins")
    else {
        return;
    };
    if gpu.facts().compute_capability.0 < 8 {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED gpu_gru_held_kernels_match_f64_reference_and_their_twins: sm_80 or later needed"
        );
        return;
    }
    let drop = Some(Dropout { p: 0.2, seed: 13 });
    let (long, short) = (
        RolloutShape {
            steps: 10,
            batch: 32,
        },
        RolloutShape { steps: 3, batch: 9 },
    );
    // (input, shape, members, layer norm, dropout, rows, slices): 16 slices of 16 units take
    // `rnn_gru_held48`, 13 slices (18 or 20 units) `rnn_gru_held64`; B = 9 pads to 12 rows.
    let cases = if sanitize() {
        // T = 5: `rnn_gru_held48swx` copies x of steps 3 and 4 during the steps.
        vec![
            (100, short, 1, true, drop, 4, 16),
            (128, short, 2, false, drop, 8, 13),
            (
                128,
                RolloutShape { steps: 5, batch: 8 },
                1,
                false,
                None,
                4,
                16,
            ),
        ]
    } else {
        vec![
            (128, long, 1, false, None, 4, 16),
            (128, long, 1, true, drop, 4, 16),
            (
                100,
                RolloutShape { steps: 6, batch: 9 },
                1,
                true,
                None,
                4,
                16,
            ),
            (128, long, 5, false, None, 16, 13),
            (128, long, 5, true, drop, 16, 13),
            (128, short, 2, false, drop, 8, 13),
            (
                128,
                RolloutShape {
                    steps: 40,
                    batch: 32,
                },
                1,
                false,
                drop,
                4,
                16,
            ),
        ]
    };
    for (i, shape, members, ln, dropout, rows, slices) in cases {
        let e = gru_held_case(&gpu, i, shape, members, ln, dropout, rows, slices);
        assert!(
            e < 1e-5,
            "held GRU I={i} {shape:?} E={members} ln={ln}, {rows} rows x {slices} slices: {e:e}"
        );
    }
    if sanitize() {
        return;
    }
    // Chosen shapes (`held: Some(true)`): the rollout and the ensemble of 5 of the benchmarks,
    // both on the split roles (`rnn_gru_held48s`, `rnn_gru_held64s`), the rollout with the
    // weights staged (`rnn_gru_held48w`, `rnn_gru_held48sw`).
    for (members, split, staged) in [
        (1, None, None),
        (5, None, None),
        (1, Some(true), None),
        (5, Some(true), None),
        (1, Some(false), Some(true)),
        (1, Some(true), Some(true)),
    ] {
        let launch = GruLaunch {
            held: Some(true),
            split,
            staged,
            ..GruLaunch::default()
        };
        let e = gru_case(&gpu, 128, 256, long, members, false, None, launch);
        assert!(
            e < 1e-5,
            "held GRU, chosen shape, E={members}, split {split:?}, staged {staged:?}: {e:e}"
        );
    }
}

#[test]
fn gpu_gru_step_and_rollout_match_f64_reference() {
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

/// Under compute-sanitizer (slow: racecheck instruments every shared access) one small case per
/// kernel and mode: `rnn_gru_stationary` with gi of every step first and step by step (a partial
/// batch group, layer norm), `rnn_gru_shared` (uneven slices, a partial group, dropout), and an
/// ensemble of 2 on each kernel.
fn gru_sanitizer_cases(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
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

/// Whether the device runs the cluster kernel (sm_90 or later).
fn cluster_capable(gpu: &ptxflow::runtime::Gpu) -> bool {
    gpu.facts().compute_capability.0 >= 9
}

#[test]
fn gpu_gru_cluster_exchanges_match_f64_reference() {
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

#[test]
fn gpu_gru_ensemble_matches_f64_reference() {
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

fn rsvd_case(
    gpu: &std::sync::Arc<ptxflow::runtime::Gpu>,
    m: usize,
    n: usize,
    spec: Spectrum,
    seed: u64,
) {
    let k = 32;
    let a = matrix_with_spectrum(&mut Rng::new(seed), m, n, spec);
    let opt = optimal_error(&a, m, n, k).unwrap();
    let reference =
        reconstruction_error(&a, &rsvd_cpu(&a, m, n, &RsvdOptions::rank(k)).unwrap()).unwrap();
    let mut r = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    // Both routes of the small step: B^T factored first, and V straight from B^T's Gram.
    for gram_route in [false, true] {
        r.set_gram_route(gram_route);
        r.set_gemm_rows(4).unwrap();
        let lr = r.decompose(&a).unwrap();
        rsvd_check(&a, m, n, k, spec, &lr, opt, reference, gram_route);
        // The 8 x 6 GEMM kernels sum in the same order: the same bits with the same split, and
        // the optimal error with their own default split.
        r.set_gemm_rows(8).unwrap();
        let lr8 = r.decompose(&a).unwrap();
        rsvd_check(&a, m, n, k, spec, &lr8, opt, reference, gram_route);
        r.set_gemm_blocks_per_sm(GEMM_BLOCKS_PER_SM).unwrap();
        let lr8 = r.decompose(&a).unwrap();
        same_factors(&lr, &lr8, &format!("{spec:?}, 8-row GEMMs"));
        // The CholQR kernel that skips an already orthonormal final pass.
        r.set_gemm_rows(8).unwrap();
        r.set_orth_skip(true);
        let lrs = r.decompose(&a).unwrap();
        r.set_orth_skip(false);
        rsvd_check(&a, m, n, k, spec, &lrs, opt, reference, gram_route);
        // The 3xTF32 tensor-core GEMMs (sm_80 and later), deterministic run to run.
        if tensor_cores(gpu) {
            r.set_gemm_tensor().unwrap();
            let lrt = r.decompose(&a).unwrap();
            rsvd_check(&a, m, n, k, spec, &lrt, opt, reference, gram_route);
            let again = r.decompose(&a).unwrap();
            same_factors(&lrt, &again, &format!("{spec:?}, tensor-core GEMMs twice"));
            // A through the cp.async ring: the same products in the same order.
            r.set_gemm_tensor_ring().unwrap();
            let ring = r.decompose(&a).unwrap();
            same_factors(
                &lrt,
                &ring,
                &format!("{spec:?}, tensor-core GEMMs, cp.async ring"),
            );
            r.set_gemm_rows(8).unwrap();
        }
    }
    assert!(r.set_gemm_rows(5).is_err());
    // The small step on the device (rnn_small_eig) with the default GEMMs: the optimal error
    // (the host's factor route takes over when its status is not OK), and the kernel against
    // its CPU mirror bit for bit on the same Gram.
    let mut d = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    d.set_small_on_device(true);
    let lrd = d.decompose(&a).unwrap();
    let rep = d.small_report().unwrap();
    eprintln!("rSVD {m}x{n} {spec:?} device small step: {rep:?}");
    rsvd_check(&a, m, n, k, spec, &lrd, opt, reference, true);
    let (g, dev) = d.small_step_device().unwrap();
    let l = RsvdOptions::rank(k).width(m, n);
    let cpu = ptxflow::rnn::jacobi::small_step(&g, l, k);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        dev.status == cpu.status
            && dev.sweeps == cpu.sweeps
            && dev.rounds == cpu.rounds
            && dev.defect.to_bits() == cpu.defect.to_bits()
            && bits(&dev.s) == bits(&cpu.s)
            && bits(&dev.zk) == bits(&cpu.zk)
            && bits(&dev.xk) == bits(&cpu.xk),
        "{spec:?}: rnn_small_eig differs from its CPU mirror: {:?} vs {:?}",
        (dev.status, dev.sweeps, dev.defect, &dev.s),
        (cpu.status, cpu.sweeps, cpu.defect, &cpu.s)
    );
}

fn tensor_cores(gpu: &ptxflow::runtime::Gpu) -> bool {
    gpu.facts().compute_capability.0 >= 8
}

fn same_factors(a: &ptxflow::rnn::LowRank, b: &ptxflow::rnn::LowRank, what: &str) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(a.s()) == bits(b.s()) && bits(a.u()) == bits(b.u()) && bits(a.vt()) == bits(b.vt()),
        "{what}: factors differ"
    );
}

#[allow(clippy::too_many_arguments)] // one case's inputs and its two yardsticks
fn rsvd_check(
    a: &[f32],
    m: usize,
    n: usize,
    k: usize,
    spec: Spectrum,
    lr: &ptxflow::rnn::LowRank,
    opt: f64,
    reference: f64,
    gram_route: bool,
) {
    let a = a.to_vec();
    let e = reconstruction_error(&a, lr).unwrap();
    // The factors are f32: their rounding alone costs about eps32 sqrt(k) ||A||_F.
    let floor = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * frobenius(&a);
    let (ou, ov) = (
        column_orthonormality(lr.u(), m, k),
        row_orthonormality(lr.vt(), k, n),
    );
    eprintln!("rSVD {m}x{n} {spec:?} (Gram route {gram_route}): gpu {:.5} x optimal ({e:.3e} vs {opt:.3e}; f64 reference {:.5} x); |U^T U - I| {ou:.1e}, |V^T V - I| {ov:.1e}", e / opt, reference / opt);
    assert!(
        e <= 1.01 * opt + floor,
        "{spec:?}: error {e} vs optimal {opt} (+{floor})"
    );
    assert!(ou < 1e-5 && ov < 1e-5, "{spec:?}: orthonormality {ou} {ov}");
    let s_ok = lr.s().windows(2).all(|w| w[0] >= w[1]) && lr.s().iter().all(|&s| s >= 0.0);
    assert!(
        s_ok,
        "singular values must be non-negative and descending: {:?}",
        lr.s()
    );
}

#[test]
fn gpu_rsvd_reaches_the_optimal_error() {
    let Some(gpu) = common::gpu_or_skip("gpu_rsvd_reaches_the_optimal_error") else {
        return;
    };
    if sanitize() {
        rsvd_case(&gpu, 256, 200, Spectrum::Exponential { rate: 0.85 }, 1);
        rsvd_case(&gpu, 300, 130, Spectrum::LowRank { rank: 10 }, 2);
        return;
    }
    rsvd_case(&gpu, 1024, 1024, Spectrum::Exponential { rate: 0.85 }, 1);
    rsvd_case(&gpu, 1024, 1024, Spectrum::Harmonic, 2);
    rsvd_case(&gpu, 1024, 1024, Spectrum::Flat, 3);
    rsvd_case(&gpu, 1000, 700, Spectrum::Exponential { rate: 0.9 }, 4);
    rsvd_case(&gpu, 700, 1000, Spectrum::LowRank { rank: 10 }, 5);
}

/// Every split-K plan the bench compares, on a 4096 x 1024 matrix (32 row tiles, so the plans
/// differ) of rank 256 with sigma_i = 0.9^i: its optimal rank-32 error is known exactly, so no
/// full SVD is needed.
#[test]
fn gpu_rsvd_split_plans_reach_the_optimal_error() {
    let Some(gpu) = common::gpu_or_skip("gpu_rsvd_split_plans_reach_the_optimal_error") else {
        return;
    };
    let (m, n, r, k) = if sanitize() {
        (512, 256, 64, 32)
    } else {
        (4096, 1024, 256, 32)
    };
    let mut rng = Rng::new(11);
    let sigma = Spectrum::Exponential { rate: 0.9 }.values(r);
    let u = nalgebra::DMatrix::from_fn(m, r, |_, _| rng.normal())
        .qr()
        .q();
    let v = nalgebra::DMatrix::from_fn(n, r, |_, _| rng.normal())
        .qr()
        .q();
    let a64 = u
        * nalgebra::DMatrix::from_diagonal(&nalgebra::DVector::from_vec(sigma.clone()))
        * v.transpose();
    let a: Vec<f32> = (0..m * n).map(|i| a64[(i / n, i % n)] as f32).collect();
    let opt = sigma[k..].iter().map(|s| s * s).sum::<f64>().sqrt();
    let floor = 4.0 * f64::from(f32::EPSILON) * (k as f64).sqrt() * frobenius(&a);
    let mut rs = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(k)).unwrap();
    assert!(
        rs.set_gemm_blocks_per_sm(0).is_err()
            && rs
                .set_gemm_blocks_per_sm(MAX_GEMM_BLOCKS_PER_SM + 1)
                .is_err()
    );
    for (bps, gram_route) in (1..=MAX_GEMM_BLOCKS_PER_SM).flat_map(|b| [(b, false), (b, true)]) {
        rs.set_gram_route(gram_route);
        rs.set_gemm_rows(8).unwrap();
        rs.set_gemm_blocks_per_sm(bps).unwrap();
        let lr8 = rs.decompose(&a).unwrap();
        rs.set_gemm_rows(4).unwrap();
        rs.set_gemm_blocks_per_sm(bps).unwrap();
        let lr = rs.decompose(&a).unwrap();
        same_factors(&lr, &lr8, &format!("plan {bps}, 8-row GEMMs"));
        if tensor_cores(&gpu) {
            rs.set_gemm_tensor().unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
            let lrt = rs.decompose(&a).unwrap();
            rs.set_gemm_tensor_ring().unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
            let ring = rs.decompose(&a).unwrap();
            same_factors(&lrt, &ring, &format!("plan {bps}, cp.async ring"));
            let et = reconstruction_error(&a, &lrt).unwrap();
            let (tu, tv) = (
                column_orthonormality(lrt.u(), m, k),
                row_orthonormality(lrt.vt(), k, n),
            );
            eprintln!("rSVD {m}x{n} plan {bps}, Gram route {gram_route}, tensor-core GEMMs: {:.5} x optimal; |U^T U - I| {tu:.1e}, |V^T V - I| {tv:.1e}", et / opt);
            assert!(
                et <= 1.01 * opt + floor && tu < 1e-5 && tv < 1e-5,
                "plan {bps}, tensor-core GEMMs: error {et} vs optimal {opt}, orthonormality {tu} {tv}"
            );
            rs.set_gemm_rows(4).unwrap();
            rs.set_gemm_blocks_per_sm(bps).unwrap();
        }
        rs.set_orth_skip(true);
        let lrs = rs.decompose(&a).unwrap();
        rs.set_orth_skip(false);
        let es = reconstruction_error(&a, &lrs).unwrap();
        let (us, vs) = (
            column_orthonormality(lrs.u(), m, k),
            row_orthonormality(lrs.vt(), k, n),
        );
        eprintln!("rSVD {m}x{n} plan {bps}, Gram route {gram_route}, CholQR skip: {:.5} x optimal; |U^T U - I| {us:.1e}, |V^T V - I| {vs:.1e}", es / opt);
        assert!(
            es <= 1.01 * opt + floor && us < 1e-5 && vs < 1e-5,
            "plan {bps}, CholQR skip: error {es} vs optimal {opt}, orthonormality {us} {vs}"
        );
        let e = reconstruction_error(&a, &lr).unwrap();
        let (ou, ov) = (
            column_orthonormality(lr.u(), m, k),
            row_orthonormality(lr.vt(), k, n),
        );
        eprintln!("rSVD {m}x{n} plan {bps} blocks/SM, Gram route {gram_route}: {:.5} x optimal; |U^T U - I| {ou:.1e}, |V^T V - I| {ov:.1e}", e / opt);
        assert!(
            e <= 1.01 * opt + floor,
            "plan {bps}: error {e} vs optimal {opt} (+{floor})"
        );
        assert!(
            ou < 1e-5 && ov < 1e-5,
            "plan {bps}: orthonormality {ou} {ov}"
        );
    }
}

#[test]
fn gpu_corrections_match_f64_reference() {
    let Some(gpu) = common::gpu_or_skip("gpu_corrections_match_f64_reference") else {
        return;
    };
    let mut rng = Rng::new(3);
    let c = matrix_with_spectrum(&mut rng, 256, 128, Spectrum::Exponential { rate: 0.9 });
    let lr = rsvd_cpu(&c, 256, 128, &RsvdOptions::rank(32)).unwrap();
    let batch = 32;
    let pred = rng.vec_f32(batch * 256, -1.0, 1.0);
    let x = rng.vec_f32(batch * 128, -1.0, 1.0);
    let want = lowrank_correct(&lr, &pred, &x, batch).unwrap();
    let mut g = GpuLowRank::new(gpu.clone(), &lr, batch).unwrap();
    let got = g.correct(&pred, &x, batch).unwrap();
    let e = rel_inf(&got, &want);
    eprintln!("low-rank correction 256x128 rank 32, batch {batch}: rel error {e:.2e}");
    assert!(e < 1e-5, "low-rank correction {e:e}");
    let corr = rng.vec_f32(batch * 256, -0.1, 0.1);
    let mut ops = GpuOps::new(gpu.clone()).unwrap();
    let sum = correct_add(&mut ops, &pred, &corr).unwrap();
    assert!(sum
        .iter()
        .zip(pred.iter().zip(&corr))
        .all(|(s, (p, c))| s.to_bits() == (p + c).to_bits()));
    assert!(matches!(
        g.correct(&pred, &x, batch + 1),
        Err(Error::Shape { .. })
    ));
}

#[test]
fn gpu_chain_matches_f64_reference_eager_graph_and_streams() {
    let Some(gpu) = common::gpu_or_skip("gpu_chain_matches_f64_reference_eager_graph_and_streams")
    else {
        return;
    };
    let model = ChainModel::random(5, ChainDims::default()).unwrap();
    let shape = RolloutShape {
        steps: 10,
        batch: 32,
    };
    let mut rng = Rng::new(6);
    let inputs: Vec<(Vec<f32>, Vec<f32>)> = (0..3)
        .map(|_| {
            (
                rng.vec_f32(10 * 32 * 64, -1.0, 1.0),
                rng.vec_f32(32 * 256, -0.5, 0.5),
            )
        })
        .collect();
    let mut chain = GpuChain::new(gpu.clone(), &model, shape).unwrap();
    let eager = chain.run(&inputs[0].0, &inputs[0].1).unwrap();
    let want = chain_cpu(&model, &inputs[0].0, &inputs[0].1, shape).unwrap();
    let e = rel_inf(&eager, &want);
    eprintln!("chain T=10 B=32: rel error {e:.2e}");
    assert!(e < 1e-5, "chain {e:e}");
    match chain.capture_graph() {
        Ok(()) => {
            let replay = chain.run(&inputs[0].0, &inputs[0].1).unwrap();
            assert!(
                replay
                    .iter()
                    .zip(&eager)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "graph replay differs from eager run"
            );
            eprintln!("chain CUDA graph: replay identical to the eager run");
        }
        Err(err) => eprintln!("chain CUDA graph capture unavailable here: {err}"),
    }
    let mut chains: Vec<GpuChain> = (0..3)
        .map(|_| GpuChain::new(gpu.clone(), &model, shape).unwrap())
        .collect();
    let outs = run_concurrently(&mut chains, &inputs).unwrap();
    for (o, (f, h)) in outs.iter().zip(&inputs) {
        let w = chain_cpu(&model, f, h, shape).unwrap();
        assert!(rel_inf(o, &w) < 1e-5, "concurrent chain {}", rel_inf(o, &w));
    }
}

#[test]
fn gpu_steady_loops_allocate_nothing() {
    let Some(gpu) = common::gpu_or_skip("gpu_steady_loops_allocate_nothing") else {
        return;
    };
    let model = ChainModel::random(9, ChainDims::default()).unwrap();
    let shape = RolloutShape {
        steps: 10,
        batch: 32,
    };
    let mut rng = Rng::new(10);
    let f = rng.vec_f32(10 * 32 * 64, -1.0, 1.0);
    let h0 = rng.vec_f32(32 * 256, -0.5, 0.5);
    let mut chain = GpuChain::new(gpu.clone(), &model, shape).unwrap();
    let (m, n, reps) = if sanitize() {
        (256, 160, 2)
    } else {
        (512, 384, 5)
    };
    let a = matrix_with_spectrum(&mut rng, m, n, Spectrum::Harmonic);
    let mut rsvd = GpuRsvd::new(gpu.clone(), m, n, RsvdOptions::rank(32)).unwrap();
    chain.run(&f, &h0).unwrap();
    rsvd.decompose(&a).unwrap();
    gpu.sync().unwrap();
    let before = gpu.ctx().mem_get_info().unwrap().0;
    for _ in 0..reps {
        chain.run(&f, &h0).unwrap();
        rsvd.decompose(&a).unwrap();
    }
    gpu.sync().unwrap();
    let after = gpu.ctx().mem_get_info().unwrap().0;
    assert_eq!(
        before, after,
        "device free memory changed across steady calls"
    );
}
