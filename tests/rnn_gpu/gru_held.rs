//! The held-weights GRU kernels (W_ih and W_hh in registers, one block per SM) against the f64
//! reference and bit for bit against their precompute-mode twins and each other.

use crate::common;
use crate::gru::gru_case;
use crate::{rel_inf, sanitize};
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange, GruLaunch, HeldTune};
use ptxflow::rnn::reference::gru_ensemble_rollout;
use ptxflow::rnn::*;
use std::io::Write;

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
    // Session 11's schedule of `rnn_gru_held48sw` (`HeldTune::overlap`: the default unless
    // PTXFLOW_GRU_TUNE says otherwise) and its twin with thread 0's gather timed (`probe`), and
    // `rnn_gru_held64o`, bit for bit too.
    let s = small;
    let no_tune_var = std::env::var_os("PTXFLOW_GRU_TUNE").is_none();
    let tune = |probe| {
        Some(HeldTune {
            overlap: true,
            probe,
            ..HeldTune::default()
        })
    };
    // `rnn_gru_held64` with the partials of W_ih x in the gather's round trip (the default
    // unless PTXFLOW_GRU_TUNE says otherwise; `HeldTune::default()`: `rnn_gru_held64`).
    let in_gather = Some(HeldTune {
        partials_in_gather: true,
        ..HeldTune::default()
    });
    let variants = [
        (units > 16, Some(true), None, None, "rnn_gru_held64s"),
        (
            units > 16,
            Some(false),
            Some(false),
            in_gather,
            "rnn_gru_held64o",
        ),
        (
            units > 16,
            Some(false),
            Some(false),
            Some(HeldTune::default()),
            "rnn_gru_held64",
        ),
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
        (
            s && no_tune_var,
            Some(true),
            Some(true),
            None,
            "rnn_gru_held48swxc",
        ),
        (s, Some(true), Some(true), tune(false), "rnn_gru_held48swxc"),
        (s, Some(true), Some(true), tune(true), "rnn_gru_held48swxcp"),
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

pub fn gpu_gru_held_kernels_match_f64_reference_and_their_twins() {
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
        // T = 5: `rnn_gru_held48swxc` copies x of steps 3 and 4 during the steps.
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
