//! GRU rollout rows (T=10 B=32 H=256, single and ensemble of 5) on every kernel and launch
//! choice the issue tracks, their phases (`gru_phases`), then the kept rows alternating in rounds.

use crate::{common, gru_phases, gru_sweep, per_call, Group, SHAPE};
use criterion::{BenchmarkId, Throughput};
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange, GruLaunch, GruStaging, HeldTune};
use ptxflow::rnn::*;
use ptxflow::runtime::Gpu;
use std::sync::Arc;
use std::time::Instant;

/// One row for the summary: name, device us per call, blocks, rows and units per block, gi
/// steps at once, weights in registers.
pub type GruRow = (&'static str, f64, usize, u32, u32, u32, bool);

/// The GRU rows (criterion `gpu/rnn/gru_*`), in the group `g`.
pub fn rows(g: &mut Group<'_>, gpu: &Arc<Gpu>, rng: &mut Rng) -> Vec<GruRow> {
    let s = gpu.stream().clone();
    // GRU rollouts, device-resident inputs.
    let single = GruWeights::random(rng, 128, 256, false);
    let ens: Vec<GruWeights> = (0..5)
        .map(|_| GruWeights::random(rng, 128, 256, false))
        .collect();
    let xs = s
        .clone_htod(&rng.vec_f32(10 * 32 * 128, -1.0, 1.0))
        .expect("upload");
    let h0 = s
        .clone_htod(&rng.vec_f32(5 * 32 * 256, -0.5, 0.5))
        .expect("upload");
    if std::env::var("PTXFLOW_GRU_SWEEP").is_ok_and(|v| v == "1") {
        gru_sweep::steps_sweep(gpu, std::slice::from_ref(&single), &xs, &h0);
        gru_sweep::steps_sweep(gpu, &ens, &xs, &h0);
    }
    let mut gru_us: Vec<GruRow> = Vec::new();
    // Explicit shapes of the weight-stationary or shared-memory kernels (not the held ones).
    let launch = |rows, slices, held| GruLaunch {
        unit_slices: Some(slices),
        rows_per_block: Some(rows),
        stationary: Some(held),
        precompute: None,
        exchange: Some(GruExchange::Global),
        staging: None,
        held: Some(false),
        split: None,
        staged: None,
        tune: None,
    };
    // The rows the issue tracks, exchange pinned (the default may change with the variable).
    let global = GruLaunch {
        exchange: Some(GruExchange::Global),
        ..GruLaunch::default()
    };
    let cluster = |ex, staging| GruLaunch {
        exchange: Some(ex),
        staging: Some(staging),
        ..GruLaunch::default()
    };
    let sm90 = gpu.facts().compute_capability.0 >= 9;
    let per_step = GruLaunch {
        precompute: Some(false),
        ..GruLaunch::default()
    };
    let shared = GruLaunch {
        stationary: Some(false),
        ..GruLaunch::default()
    };
    // `_held`: `rnn_gru_held48` / `rnn_gru_held64` (W_ih held too, gi step by step; no split
    // roles, no staging); `_stationary`: the weight-stationary kernels where the held ones are
    // the default; `_split`: `rnn_gru_held48s` / `rnn_gru_held64s` (W_ih in four warps only).
    let held = |on| GruLaunch {
        held: Some(on),
        split: Some(false),
        staged: Some(false),
        ..global
    };
    // Session 11's schedule of `rnn_gru_held48sw` pinned (`HeldTune::overlap`, the default),
    // with thread 0's gather timed (`probe`) or not.
    let cells = |probe| GruLaunch {
        tune: Some(HeldTune {
            overlap: true,
            probe,
            ..HeldTune::default()
        }),
        ..global
    };
    let mut configs = vec![
        ("gru_rollout", vec![single.clone()], global),
        ("gru_ensemble5", ens.clone(), global),
        // `_s10`: session 10's default (`rnn_gru_held48sw`, no schedule of `HeldTune`).
        (
            "gru_rollout_s10",
            vec![single.clone()],
            GruLaunch {
                tune: Some(HeldTune::default()),
                ..global
            },
        ),
        ("gru_rollout_held", vec![single.clone()], held(true)),
        (
            "gru_rollout_split",
            vec![single.clone()],
            GruLaunch {
                split: Some(true),
                ..held(true)
            },
        ),
        (
            "gru_ensemble5_split",
            ens.clone(),
            GruLaunch {
                split: Some(true),
                ..held(true)
            },
        ),
        // `_staged`: the weights staged through shared memory (`rnn_gru_held48w`, with the split
        // roles `rnn_gru_held48sw`).
        (
            "gru_rollout_staged",
            vec![single.clone()],
            GruLaunch {
                staged: Some(true),
                ..held(true)
            },
        ),
        (
            "gru_rollout_split_staged",
            vec![single.clone()],
            GruLaunch {
                split: Some(true),
                staged: Some(true),
                ..held(true)
            },
        ),
        // `_tune_xc`: session 11's schedule (`rnn_gru_held48swxc`) whatever PTXFLOW_GRU_TUNE
        // says; `_tune_xcp`: with thread 0's gather timed (`rnn_gru_held48swxcp`).
        ("gru_rollout_tune_xc", vec![single.clone()], cells(false)),
        ("gru_rollout_tune_xcp", vec![single.clone()], cells(true)),
        // `_tune_g`: `rnn_gru_held64o` (the partials of W_ih x in the gather's round trip; the
        // default since session 12) whatever PTXFLOW_GRU_TUNE says.
        (
            "gru_ensemble5_tune_g",
            ens.clone(),
            GruLaunch {
                tune: Some(HeldTune {
                    partials_in_gather: true,
                    ..HeldTune::default()
                }),
                ..global
            },
        ),
        // `_plain`: an ordinary launch instead of the cooperative one (the launch's share).
        ("gru_rollout_held_plain", vec![single.clone()], held(true)),
        // `gru_ensemble5_held`: session 9's `rnn_gru_held64` (no schedule of `HeldTune`).
        (
            "gru_ensemble5_held",
            ens.clone(),
            GruLaunch {
                tune: Some(HeldTune::default()),
                ..held(true)
            },
        ),
        ("gru_rollout_stationary", vec![single.clone()], held(false)),
        ("gru_ensemble5_stationary", ens.clone(), held(false)),
        ("gru_rollout_shared", vec![single.clone()], shared),
        ("gru_ensemble5_shared", ens.clone(), shared),
        (
            "gru_ensemble5_r16_s13_held",
            ens.clone(),
            launch(16, 13, true),
        ),
        ("gru_ensemble5_per_step", ens.clone(), per_step),
        (
            "gru_ensemble5_r8_s13_shared",
            ens.clone(),
            launch(8, 13, false),
        ),
    ];
    // `_rows64`: `rnn_gru_stationary` where `rnn_gru_stationary48` is the weight-stationary
    // default (PTXFLOW_GRU_ROWS48=0 while the GRU is built).
    configs.push(("gru_rollout_rows64", vec![single.clone()], held(false)));
    if sm90 {
        use GruExchange::{ClusterAsync as Mbar, ClusterBarrier as Bar};
        use GruStaging::{Copies, CpAsync, Streamed};
        let one = vec![single.clone()];
        // `_spread_sends` / `_spread_policy`: the cluster kernels' tuning switches (environment
        // variables read when the GRU is built).
        for (name, members, ex, staging) in [
            ("gru_rollout_cluster", &one, Mbar, Streamed),
            ("gru_rollout_cluster_spread_sends", &one, Mbar, Streamed),
            ("gru_rollout_cluster_spread_policy", &one, Mbar, Streamed),
            ("gru_rollout_cluster_full_cp_async", &one, Mbar, CpAsync),
            ("gru_rollout_cluster_full", &one, Mbar, Copies),
            ("gru_rollout_cluster_barrier", &one, Bar, Streamed),
            ("gru_ensemble5_cluster", &ens, Mbar, Streamed),
            ("gru_ensemble5_cluster_spread_sends", &ens, Mbar, Streamed),
            ("gru_ensemble5_cluster_spread_policy", &ens, Mbar, Streamed),
            ("gru_ensemble5_cluster_full_cp_async", &ens, Mbar, CpAsync),
            ("gru_ensemble5_cluster_barrier", &ens, Bar, Streamed),
        ] {
            configs.push((name, members.clone(), cluster(ex, staging)));
        }
        // Fewer, larger clusters: 8 and 16 rows per block (4 and 2 clusters of the rollout).
        for (name, rows) in [
            ("gru_rollout_cluster_r8", 8),
            ("gru_rollout_cluster_r16", 16),
        ] {
            let l = GruLaunch {
                rows_per_block: Some(rows),
                ..cluster(Mbar, Streamed)
            };
            configs.push((name, one.clone(), l));
        }
    }
    // Kept for the alternating medians after the criterion rows.
    let mut kept: Vec<(&str, GpuGru)> = Vec::new();
    for (name, members, launch) in configs {
        for (suffix, var, value) in [
            ("_spread_sends", "PTXFLOW_GRU_SENDS", "spread"),
            ("_spread_policy", "PTXFLOW_GRU_CLUSTER_POLICY", "spread"),
            ("_rows64", "PTXFLOW_GRU_ROWS48", "0"),
            ("_plain", "PTXFLOW_GRU_PLAIN_LAUNCH", "1"),
        ] {
            if name.ends_with(suffix) {
                std::env::set_var(var, value);
            } else {
                std::env::remove_var(var);
            }
        }
        let mut gg = GpuGru::new(gpu.clone(), &members, 10, 32, launch).expect("gru");
        // A launch the driver refuses skips its row instead of the rest.
        if let Err(e) = gg
            .rollout_device(&s, &xs.slice(..), &h0.slice(..), SHAPE, None)
            .and_then(|()| gg.check(&s))
        {
            println!("SUMMARY gpu/rnn {name}: skipped, the rollout failed: {e}");
            continue;
        }
        g.throughput(Throughput::Elements((members.len() * 10 * 32 * 256) as u64));
        g.bench_function(BenchmarkId::new(name, "t10_b32"), |b| {
            b.iter_custom(|it| {
                common::event_timed(&s, it, || {
                    gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), SHAPE, None)
                        .expect("rollout")
                })
            })
        });
        let t = per_call(&s, 100, || {
            gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), SHAPE, None)
                .expect("rollout")
        });
        gg.check(&s).expect("barriers");
        if gg.stationary() && !name.contains("_s13_") {
            // Phases of block 0 (clock stamps, `gru::stationary::STAMPS`), us at the nominal clock.
            let st = gg
                .rollout_device_stamped(&s, &xs.slice(..), &h0.slice(..), SHAPE)
                .expect("stamps");
            let mhz = f64::from(gpu.facts().clock_khz) / 1e3;
            gru_phases::print(name, &gg, &st, mhz);
        }
        gru_us.push((
            name,
            1e6 * t,
            gg.blocks(),
            gg.rows_per_block(),
            gg.units_per_block(),
            gg.projection_steps(),
            gg.stationary(),
        ));
        if name == "gru_rollout"
            || name == "gru_ensemble5"
            || name.ends_with("_held")
            || name.ends_with("_split")
            || name.ends_with("_plain")
            || name.ends_with("_staged")
            || name.ends_with("_stationary")
            || name.contains("_cluster")
            || name.ends_with("_rows64")
            || name.contains("_tune_")
            || name.ends_with("_s10")
        {
            kept.push((name, gg));
        }
    }
    // The two rows and their cluster variants, alternating in rounds (device time per
    // call over 100 back-to-back calls), medians of 7 rounds.
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); kept.len()];
    for _ in 0..7 {
        for ((_, gg), r) in kept.iter_mut().zip(rounds.iter_mut()) {
            r.push(
                1e6 * per_call(&s, 100, || {
                    gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), SHAPE, None)
                        .expect("rollout")
                }),
            );
            gg.check(&s).expect("barriers");
        }
    }
    // Host time to enqueue 100 calls (no sync inside): what a launch costs the CPU.
    let host_us: Vec<f64> = kept
        .iter_mut()
        .map(|(_, gg)| {
            let t = Instant::now();
            for _ in 0..100 {
                gg.rollout_device(&s, &xs.slice(..), &h0.slice(..), SHAPE, None)
                    .expect("rollout");
            }
            let e = t.elapsed().as_secs_f64() * 1e4;
            s.synchronize().expect("sync");
            e
        })
        .collect();
    for (((name, gg), mut r), host) in kept.iter().zip(rounds).zip(host_us) {
        r.sort_by(f64::total_cmp);
        println!(
        "SUMMARY gpu/rnn alternating {name}: median {:.2} us (min {:.2}, max {:.2}; 7 rounds of 100 calls; host enqueue {host:.2} us/call; {}: {} blocks of {} rows, exchange {:?}, staging {:?})",
        r[r.len() / 2],
        r[0],
        r[r.len() - 1],
        gg.kernel_name(),
        gg.blocks(),
        gg.rows_per_block(),
        gg.exchange(),
        gg.staging()
    );
    }
    gru_us
}
