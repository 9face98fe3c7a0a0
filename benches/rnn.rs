//! Learned-correction kernels, GPU (CUDA events on device-resident data, or wall time where the
//! call synchronises) and CPU (the f64 references) in one run: dense encoder (batch 32), GRU
//! rollout (10 steps, batch 32, single and ensemble of 5), randomized SVD (1024 and 4096 square,
//! rank 32; the CPU reference only at 1024), the whole chain (eager, CUDA graph, 4 batches on 4
//! streams). Prints SUMMARY lines against the targets of the issue.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::rng::Rng;
use ptxflow::rnn::chain::chain_cpu;
use ptxflow::rnn::gpu::chain::GpuChain;
use ptxflow::rnn::gpu::dense::{GpuDense, WeightStorage};
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange, GruLaunch, GruStaging, HeldTune};
use ptxflow::rnn::gpu::rsvd::GpuRsvd;
use ptxflow::rnn::reference::{dense_relu, gru_ensemble_rollout, gru_rollout};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::timing_matrix;
use ptxflow::rnn::*;
use std::time::{Duration, Instant};

const SHAPE: RolloutShape = RolloutShape {
    steps: 10,
    batch: 32,
};

/// Device time per call over `n` back-to-back calls (what a steady loop sees).
fn per_call(s: &std::sync::Arc<ptxflow::runtime::CudaStream>, n: u64, mut f: impl FnMut()) -> f64 {
    f();
    common::event_timed(s, n, f).as_secs_f64() / n as f64
}

fn gpu(c: &mut Criterion) {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
    let s = gpu.stream().clone();
    if std::env::var("PTXFLOW_RSVD_PROFILE").is_ok() {
        // Profiling run (ncu): five 4096 x 4096 decompositions and nothing else.
        let a = timing_matrix(3, 4096, 4096, 1e-3);
        let mut r = GpuRsvd::new(gpu.clone(), 4096, 4096, RsvdOptions::rank(32)).expect("rsvd");
        r.upload(&a).expect("upload");
        for _ in 0..5 {
            r.run_device().expect("rsvd");
        }
        gpu.sync().expect("sync");
        return;
    }
    if std::env::var("PTXFLOW_RSVD_SMALL_AB").is_ok() {
        // rSVD only: the small step on the host (both routes) and on the device alternating.
        rsvd_small_ab(&gpu);
        return;
    }
    if std::env::var("PTXFLOW_RSVD_TC_AB").is_ok() {
        // rSVD only: the default GEMMs and the 3xTF32 tensor-core ones alternating.
        rsvd_tc_ab(&gpu);
        return;
    }
    for id in [
        ptxflow::kernels::KernelId::RnnGruShared,
        ptxflow::kernels::KernelId::RnnGruStationary,
        ptxflow::kernels::KernelId::RnnGruStationary48,
        ptxflow::kernels::KernelId::RnnGruCluster,
        ptxflow::kernels::KernelId::RnnGruClusterStreamed,
        ptxflow::kernels::KernelId::RnnOrth,
        ptxflow::kernels::KernelId::RnnGemmNn,
        ptxflow::kernels::KernelId::RnnGemmNnR8,
        ptxflow::kernels::KernelId::RnnGemmTnR8,
    ] {
        if let Ok(r) = gpu.kernel_resources(id) {
            println!(
                "SUMMARY gpu/rnn resources {}: {} registers, {} B static shared, {} B local",
                id.name(),
                r.registers,
                r.static_shared_bytes,
                r.local_bytes
            );
        }
    }
    let mut rng = Rng::new(1);
    let mut g = c.benchmark_group("gpu/rnn");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));

    // Dense 32 x 64 -> 128.
    let layer = DenseLayer::random(&mut rng, 64, 128);
    let x = s
        .clone_htod(&rng.vec_f32(32 * 64, -1.0, 1.0))
        .expect("upload");
    let mut y = s.alloc_zeros::<f32>(32 * 128).expect("alloc");
    let mut dense = [
        ("dense", WeightStorage::F32),
        ("dense_f16", WeightStorage::F16),
    ]
    .map(|(n, st)| {
        (
            n,
            GpuDense::new(gpu.clone(), &layer, st, 32).expect("dense"),
        )
    });
    let mut dense_us = [0.0; 2];
    for (i, (name, d)) in dense.iter_mut().enumerate() {
        g.throughput(Throughput::Elements(32 * 128));
        g.bench_function(BenchmarkId::new(*name, "b32"), |b| {
            b.iter_custom(|it| {
                common::event_timed(&s, it, || {
                    d.forward_device(&s, &x.slice(..), 32, &mut y.slice_mut(..))
                        .expect("dense")
                })
            })
        });
        dense_us[i] = 1e6
            * per_call(&s, 200, || {
                d.forward_device(&s, &x.slice(..), 32, &mut y.slice_mut(..))
                    .expect("dense")
            });
    }

    // GRU rollouts, device-resident inputs.
    let single = GruWeights::random(&mut rng, 128, 256, false);
    let ens: Vec<GruWeights> = (0..5)
        .map(|_| GruWeights::random(&mut rng, 128, 256, false))
        .collect();
    let xs = s
        .clone_htod(&rng.vec_f32(10 * 32 * 128, -1.0, 1.0))
        .expect("upload");
    let h0 = s
        .clone_htod(&rng.vec_f32(5 * 32 * 256, -0.5, 0.5))
        .expect("upload");
    let mut gru_us = Vec::new();
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
    let tune = |gi_upper, lazy_x, probe| GruLaunch {
        tune: Some(HeldTune {
            gi_upper,
            lazy_x,
            probe,
            ..HeldTune::default()
        }),
        ..global
    };
    let cells = |probe| GruLaunch {
        tune: Some(HeldTune {
            lazy_x: true,
            probe,
            overlap: true,
            overlap_cells: true,
            ..HeldTune::default()
        }),
        ..global
    };
    let overlap = |lazy_x, probe| GruLaunch {
        tune: Some(HeldTune {
            lazy_x,
            probe,
            overlap: true,
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
        // `_tune_*`: the opt-in schedules of `rnn_gru_held48sw` (`HeldTune`): `u` the gi sums
        // by the upper warps, `x` x copied during the steps, `p` thread 0's gather timed.
        (
            "gru_rollout_tune_u",
            vec![single.clone()],
            tune(true, false, false),
        ),
        (
            "gru_rollout_tune_x",
            vec![single.clone()],
            tune(false, true, false),
        ),
        (
            "gru_rollout_tune_ux",
            vec![single.clone()],
            tune(true, true, false),
        ),
        (
            "gru_rollout_tune_xf",
            vec![single.clone()],
            GruLaunch {
                tune: Some(HeldTune {
                    lazy_x: true,
                    fused: true,
                    ..HeldTune::default()
                }),
                ..global
            },
        ),
        (
            "gru_rollout_tune_uxf",
            vec![single.clone()],
            GruLaunch {
                tune: Some(HeldTune {
                    gi_upper: true,
                    lazy_x: true,
                    fused: true,
                    ..HeldTune::default()
                }),
                ..global
            },
        ),
        (
            "gru_rollout_tune_o",
            vec![single.clone()],
            overlap(false, false),
        ),
        (
            "gru_rollout_tune_xo",
            vec![single.clone()],
            overlap(true, false),
        ),
        (
            "gru_rollout_tune_xop",
            vec![single.clone()],
            overlap(true, true),
        ),
        ("gru_rollout_tune_xc", vec![single.clone()], cells(false)),
        ("gru_rollout_tune_xcp", vec![single.clone()], cells(true)),
        (
            "gru_rollout_tune_p",
            vec![single.clone()],
            tune(false, false, true),
        ),
        (
            "gru_rollout_tune_uxp",
            vec![single.clone()],
            tune(true, true, true),
        ),
        // `_plain`: an ordinary launch instead of the cooperative one (the launch's share).
        ("gru_rollout_held_plain", vec![single.clone()], held(true)),
        ("gru_ensemble5_held", ens.clone(), held(true)),
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
            let us = |i: usize| st[i + 1].wrapping_sub(st[i]) as f64 / mhz;
            let steps: Vec<[f64; 3]> = (0..SHAPE.steps)
                .map(|t| [us(3 + 3 * t), us(4 + 3 * t), us(5 + 3 * t)])
                .collect();
            let tot = |k: usize| steps.iter().map(|p| p[k]).sum::<f64>();
            let list = |k: usize| {
                steps
                    .iter()
                    .map(|p| format!("{:.2}", p[k]))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            // The cluster kernels: mbarriers, then W_hh's loads, staging and gi in one phase.
            let prologue = if gg.kernel_name().starts_with("rnn_gru_held") {
                format!(
                    "W_ih + staging issue {:.2}, W_hh issue + staging landed {:.2}, partials of W_ih x_0 {:.2}",
                    us(0),
                    us(1),
                    us(2)
                )
            } else if gg.exchange() == GruExchange::Global {
                format!(
                    "staging + gi ({}) {:.2}, W_hh issue {:.2}, barrier {:.2}",
                    if gg.projection_steps() > 1 {
                        "every step"
                    } else {
                        "step 0"
                    },
                    us(0),
                    us(1),
                    us(2)
                )
            } else {
                format!(
                    "mbarrier init {:.2}, W_hh issue + staging + gi (every step) {:.2}, cluster barrier {:.2}",
                    us(0),
                    us(1),
                    us(2)
                )
            };
            println!(
                "SUMMARY gpu/rnn {name} phases of block 0 (us at {mhz:.0} MHz): {prologue}; steps: mat-vec {:.2} [{}], cell {:.2} [{}], next gi + exchange {:.2} [{}]; total {:.2}",
                tot(0), list(0), tot(1), list(1), tot(2), list(2),
                st[3 + 3 * SHAPE.steps].wrapping_sub(st[0]) as f64 / mhz
            );
            let split = [
                "rnn_gru_held48s",
                "rnn_gru_held64s",
                "rnn_gru_held48sw",
                "rnn_gru_held48swu",
                "rnn_gru_held48swx",
                "rnn_gru_held48swux",
                "rnn_gru_held48swp",
                "rnn_gru_held48swuxp",
                "rnn_gru_held48swxf",
                "rnn_gru_held48swuxf",
                "rnn_gru_held48swo",
                "rnn_gru_held48swxo",
                "rnn_gru_held48swxop",
                "rnn_gru_held48swxc",
                "rnn_gru_held48swxcp",
            ];
            if gg.kernel_name().ends_with('p') {
                gather_probe(name, &st, SHAPE.steps, mhz);
            }
            if split.contains(&gg.kernel_name()) {
                // Thread 128's stamps (`STAMPS - 16 + t`): the upper warps' partials of W_ih x
                // done, after the step's mat-vec barrier (stamp 4 + 3 t).
                let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize - 16;
                let upper: Vec<String> = (0..SHAPE.steps)
                    .map(|t| {
                        let d = st[base + t].wrapping_sub(st[4 + 3 * t]) as i64;
                        format!("{:.2}", d as f64 / mhz)
                    })
                    .collect();
                println!(
                    "SUMMARY gpu/rnn {name} upper warps' partials of W_ih x_(t+2) after the mat-vec barrier (us): [{}]",
                    upper.join(" ")
                );
            }
            if gg.exchange() != GruExchange::Global {
                println!(
                    "SUMMARY gpu/rnn {name} blocks: {}",
                    block_spans(&st, gg.blocks())
                );
            }
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

    // Randomized SVD (A on the device; one sync inside for the small SVD).
    let mut rsvd_ms = Vec::new();
    // PTXFLOW_RSVD_SIZES="4096" picks sizes (default both).
    let sizes: Vec<usize> = std::env::var("PTXFLOW_RSVD_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1024, 4096]);
    for n in sizes {
        let a = timing_matrix(3, n, n, 1e-3);
        let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
        r.upload(&a).expect("upload");
        g.throughput(Throughput::Bytes((6 * n * n * 4) as u64));
        g.bench_function(BenchmarkId::new("rsvd_rank32", n), |b| {
            b.iter_custom(|it| {
                let t = Instant::now();
                for _ in 0..it {
                    r.run_device().expect("rsvd");
                }
                gpu.sync().expect("sync");
                t.elapsed()
            })
        });
        // The previous default path (factor route, 4-row GEMMs) beside the default (factor
        // route, 8-row GEMMs).
        r.set_gram_route(false);
        r.set_gemm_rows(4).expect("rows");
        g.bench_function(BenchmarkId::new("rsvd_rank32_factor_route_r4", n), |b| {
            b.iter_custom(|it| {
                let t = Instant::now();
                for _ in 0..it {
                    r.run_device().expect("rsvd");
                }
                gpu.sync().expect("sync");
                t.elapsed()
            })
        });
        let med = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            1e6 * v[v.len() / 2]
        };
        // (route, GEMM rows per thread) pairs, alternating in rounds (medians of each one's runs).
        let configs = [
            (false, 4u32, false),
            (true, 4, false),
            (false, 8, false),
            (true, 8, false),
            (true, 8, true),
        ];
        let mut per_route: [(Vec<f64>, Vec<ptxflow::rnn::gpu::rsvd::HostTimes>); 5] =
            Default::default();
        for _round in 0..4 {
            for (i, &(gram_route, rows, skip)) in configs.iter().enumerate() {
                r.set_gram_route(gram_route);
                r.set_gemm_rows(rows).expect("rows");
                r.set_orth_skip(skip);
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                for _ in 0..10 {
                    let t = Instant::now();
                    r.run_device().expect("rsvd");
                    gpu.sync().expect("sync");
                    per_route[i].0.push(t.elapsed().as_secs_f64());
                    per_route[i].1.push(r.host_times());
                }
            }
        }
        for (i, (totals, host)) in per_route.iter().enumerate() {
            let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
                med(host.iter().map(f).collect())
            };
            let (min, max) = totals
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
            let (gram_route, rows, skip) = configs[i];
            println!(
                "SUMMARY gpu/rnn rSVD {n}x{n} {} route, {rows}-row GEMMs{} (alternating, 40 runs): median {:.1} us (min {:.1}, max {:.1}); host medians: wait for B^T's Gram {:.1} us, eigenproblem {:.1} us, {} {:.1} us, {} {:.1} us",
                if gram_route { "Gram" } else { "factor" },
                if skip { ", CholQR skip" } else { "" },
                med(totals.clone()),
                1e6 * min,
                1e6 * max,
                h(|x| x.gram_wait_s),
                h(|x| x.eigen_s),
                if gram_route { "V factor + check" } else { "then blocked" },
                h(|x| x.sync_wait_s),
                if gram_route { "fallback" } else { "small factors" },
                h(|x| x.factors_s),
            );
        }
        r.set_orth_skip(false);
        r.set_gram_route(false);
        r.set_gemm_rows(4).expect("rows");
        let mut host = Vec::new();
        let total = common::wall_median_secs(15, || {
            r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            host.push(r.host_times());
        });
        let host_us = [
            med(host.iter().map(|h| h.gram_wait_s).collect()),
            med(host.iter().map(|h| h.eigen_s).collect()),
            med(host.iter().map(|h| h.sync_wait_s).collect()),
            med(host.iter().map(|h| h.factors_s).collect()),
        ];
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        let orth = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
        let orth1 = per_call(&s, 50, || r.enqueue_orth(1).expect("orth"));
        // The skipping kernel on an already orthonormal basis: pass 2 is checked and skipped.
        r.set_orth_skip(true);
        let orth_skip = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
        r.set_orth_skip(false);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} CholQR 2 passes {:.1} us, with rnn_orth_skip on an orthonormal basis {:.1} us", 1e6 * orth, 1e6 * orth_skip);
        // Device time of the work before the host step, and of the pieces after it.
        r.set_gemm_rows(4).expect("rows");
        let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        r.set_gemm_rows(8).expect("rows");
        let chain8 = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        let nn8 = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn8 = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        r.set_gemm_rows(4).expect("rows");
        let gram_only = per_call(&s, 50, || r.enqueue_gram().expect("gram"));
        let apply = per_call(&s, 50, || r.enqueue_apply().expect("apply"));
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} device time: products and CholQR up to B^T's Gram {:.1} us with the 4-row GEMMs, {:.1} us with the 8-row GEMMs (A Omega {:.1} us, A^T Y {:.1} us) (event-timed, back-to-back), Gram-only launch {:.1} us, apply {:.1} us",
            1e6 * chain,
            1e6 * chain8,
            1e6 * nn8,
            1e6 * tn8,
            1e6 * gram_only,
            1e6 * apply
        );
        rsvd_ms.push((n, 1e3 * total, 1e6 * nn, 1e6 * tn, 1e6 * orth, 1e6 * orth1));
        // CholQR phases of block 0 (clock stamps, 2 passes), in us at the nominal clock.
        let stamps = r.orth_stamps(2).expect("stamps");
        let mhz = f64::from(gpu.facts().clock_khz) / 1e3;
        let names = ["A", "barrier", "B", "barrier", "C", "D"];
        let phases: Vec<String> = (1..stamps.len())
            .map(|i| {
                format!(
                    "p{} {} {:.1}",
                    (i - 1) / 6,
                    names[(i - 1) % 6],
                    (stamps[i].wrapping_sub(stamps[i - 1])) as f64 / mhz
                )
            })
            .collect();
        let [gram_wait_us, eigen_us, sync_us, factors_us] = host_us;
        println!("SUMMARY gpu/rnn rSVD {n}x{n} factor route, 4-row GEMMs, host (median): wait for B^T's Gram {gram_wait_us:.1} us, small eigenproblem {eigen_us:.1} us (overlaps the final CholQR), then blocked {sync_us:.1} us, small factors {factors_us:.1} us; CholQR 2-pass phases of block 0 (us at {mhz:.0} MHz): {}", phases.join(", "));
        // The split-K plan's other targets (blocks per SM), the default last, for both GEMM
        // thread shapes.
        for (rows, bps) in [4u32, 8].into_iter().flat_map(|rows| {
            (1..=ptxflow::rnn::gpu::rsvd::MAX_GEMM_BLOCKS_PER_SM)
                .chain([ptxflow::rnn::gpu::rsvd::GEMM_BLOCKS_PER_SM])
                .map(move |b| (rows, b))
        }) {
            r.set_gemm_rows(rows).expect("rows");
            r.set_gemm_blocks_per_sm(bps).expect("plan");
            let total = common::wall_median_secs(15, || {
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
            });
            let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
            let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
            println!("SUMMARY gpu/rnn rSVD {n}x{n} {rows}-row GEMMs, split-K target {bps} blocks/SM: {:.3} ms, A Omega {:.1} us, A^T Y {:.1} us", 1e3 * total, 1e6 * nn, 1e6 * tn);
        }
        // Back to the defaults.
        r.set_gram_route(false);
        r.set_gemm_rows(8).expect("rows");
    }

    // The chain: eager, graph, and 4 batches on 4 streams.
    let model = ChainModel::random(5, ChainDims::default()).expect("model");
    let feats = rng.vec_f32(10 * 32 * 64, -1.0, 1.0);
    let hh = rng.vec_f32(32 * 256, -0.5, 0.5);
    let mut chain = GpuChain::new(gpu.clone(), &model, SHAPE).expect("chain");
    chain.upload(&feats, &hh).expect("upload");
    let cs = chain.stream().clone();
    g.throughput(Throughput::Elements(32 * 256));
    g.bench_function(BenchmarkId::new("chain_eager", "t10_b32"), |b| {
        b.iter_custom(|it| common::event_timed(&cs, it, || chain.enqueue().expect("chain")))
    });
    let eager_us = 1e6 * per_call(&cs, 100, || chain.enqueue().expect("chain"));
    let graph = chain.capture_graph();
    let graph_us = match &graph {
        Ok(()) => {
            g.bench_function(BenchmarkId::new("chain_graph", "t10_b32"), |b| {
                b.iter_custom(|it| {
                    common::event_timed(&cs, it, || chain.enqueue_graph().expect("graph"))
                })
            });
            Some(1e6 * per_call(&cs, 100, || chain.enqueue_graph().expect("graph")))
        }
        Err(e) => {
            eprintln!("chain graph capture failed: {e}");
            None
        }
    };
    let mut chains: Vec<GpuChain> = (0..4)
        .map(|_| GpuChain::new(gpu.clone(), &model, SHAPE).expect("chain"))
        .collect();
    for c in chains.iter_mut() {
        c.upload(&feats, &hh).expect("upload");
    }
    let serial = common::wall_median_secs(20, || {
        for c in chains.iter_mut() {
            c.enqueue().expect("chain");
            c.stream().synchronize().expect("sync");
        }
    });
    let overlapped = common::wall_median_secs(20, || {
        for c in chains.iter_mut() {
            c.enqueue().expect("chain");
        }
        for c in chains.iter() {
            c.stream().synchronize().expect("sync");
        }
    });
    // The same with the weight-stationary GRU kernels (`PTXFLOW_GRU_HELD=0` while the chains
    // are built): the held kernels take one block per SM, so two chains' GRUs cannot overlap.
    std::env::set_var("PTXFLOW_GRU_HELD", "0");
    let mut old: Vec<GpuChain> = (0..4)
        .map(|_| GpuChain::new(gpu.clone(), &model, SHAPE).expect("chain"))
        .collect();
    std::env::remove_var("PTXFLOW_GRU_HELD");
    for c in old.iter_mut() {
        c.upload(&feats, &hh).expect("upload");
    }
    let old_cs = old[0].stream().clone();
    let old_eager_us = 1e6 * per_call(&old_cs, 100, || old[0].enqueue().expect("chain"));
    let old_serial = common::wall_median_secs(20, || {
        for c in old.iter_mut() {
            c.enqueue().expect("chain");
            c.stream().synchronize().expect("sync");
        }
    });
    let old_overlapped = common::wall_median_secs(20, || {
        for c in old.iter_mut() {
            c.enqueue().expect("chain");
        }
        for c in old.iter() {
            c.stream().synchronize().expect("sync");
        }
    });
    g.finish();

    let name = &gpu.facts().name;
    println!("SUMMARY gpu/rnn on {name} (device time per call, back-to-back): dense+ReLU 32x64->128 {:.1} us (f16 weights {:.1} us), target < 8 us", dense_us[0], dense_us[1]);
    for (n, us, blocks, rows, units, chunk, held) in &gru_us {
        let target = if n.starts_with("gru_rollout") {
            40.0
        } else {
            60.0
        };
        println!("SUMMARY gpu/rnn on {name}: {n} T=10 B=32 H=256: {us:.1} us ({blocks} blocks of {rows} rows x <= {units} units, gi {chunk} steps at once, weights in {}), target < {target} us", if *held { "registers" } else { "shared memory" });
    }
    for (n, total, nn, tn, orth, orth1) in &rsvd_ms {
        let gbs = |us: f64| (*n * *n * 4) as f64 / (us * 1e-6) / 1e9;
        println!(
            "SUMMARY gpu/rnn on {name}: rSVD {n}x{n} rank 32 (p 10, q 2), factor route + 4-row GEMMs: {total:.3} ms incl. small SVD on the CPU (target < 1 ms at 4096); \
             4-row GEMMs: A Omega {nn:.1} us ({:.0} GB/s of A), A^T Y {tn:.1} us ({:.0} GB/s), CholQR 2 passes {orth:.1} us, 1 pass {orth1:.1} us; copy yardstick ~2900 GB/s",
            gbs(*nn),
            gbs(*tn)
        );
    }
    println!(
        "SUMMARY gpu/rnn on {name}: chain encode->GRU->low-rank T=10 B=32: eager {eager_us:.1} us, graph {}; 4 chains serial {:.1} us vs 4 streams {:.1} us ({:.2}x)",
        graph_us.map(|u| format!("{u:.1} us")).unwrap_or_else(|| "n/a".into()),
        serial * 1e6,
        overlapped * 1e6,
        serial / overlapped
    );
    println!(
        "SUMMARY gpu/rnn on {name}: chain with the weight-stationary GRU (PTXFLOW_GRU_HELD=0): eager {old_eager_us:.1} us; 4 chains serial {:.1} us vs 4 streams {:.1} us ({:.2}x)",
        old_serial * 1e6,
        old_overlapped * 1e6,
        old_serial / old_overlapped
    );
}

/// `PTXFLOW_RSVD_TC_AB=1`: 4096^2 rank 32 (factor route) with the session 9 default (8-row f32
/// FMA GEMMs), the 3xTF32 tensor-core GEMMs with A through registers (`tc`) and with A through
/// the `cp.async` ring (`tca`, the default on sm_80+) in alternating rounds of 10 (40 runs
/// each), then each one's device times (products, the chain up to B^T's Gram) and the
/// tensor-core kernels' split-K targets.
fn rsvd_tc_ab(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    use ptxflow::kernels::KernelId;
    let s = gpu.stream().clone();
    for id in [
        KernelId::RnnGemmNnR8,
        KernelId::RnnGemmTnR8,
        KernelId::RnnGemmNnTc,
        KernelId::RnnGemmTnTc,
        KernelId::RnnGemmNnTca,
        KernelId::RnnGemmTnTca,
    ] {
        if let Ok(r) = gpu.kernel_resources(id) {
            println!("SUMMARY gpu/rnn kernel {}: {r:?}", id.name());
        }
    }
    let n = 4096;
    let a = timing_matrix(3, n, n, 1e-3);
    let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
    r.upload(&a).expect("upload");
    // The GEMM comparison keeps the host factor route of sessions 9 and 10 (the device small
    // step: PTXFLOW_RSVD_SMALL_AB).
    r.set_gram_route(false);
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        1e6 * v[v.len() / 2]
    };
    // Configurations: 0 the session 9 default (8-row f32 GEMMs), 1 3xTF32 with A through
    // registers, 2 3xTF32 with A through the cp.async ring (the default on sm_80+).
    const NAMES: [&str; 3] = [
        "8-row f32 GEMMs",
        "3xTF32 tensor-core GEMMs",
        "3xTF32 GEMMs, cp.async ring",
    ];
    let set = |r: &mut GpuRsvd, i: usize| match i {
        0 => r.set_gemm_rows(8).expect("rows"),
        1 => r.set_gemm_tensor().expect("tensor cores"),
        _ => r.set_gemm_tensor_ring().expect("tensor cores"),
    };
    let mut totals: [Vec<f64>; 3] = Default::default();
    let mut host: [Vec<ptxflow::rnn::gpu::rsvd::HostTimes>; 3] = Default::default();
    let mut svals: [Vec<f64>; 3] = Default::default();
    for _round in 0..4 {
        for i in 0..3 {
            set(&mut r, i);
            svals[i] = r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            for _ in 0..10 {
                let t = Instant::now();
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                totals[i].push(t.elapsed().as_secs_f64());
                host[i].push(r.host_times());
            }
        }
    }
    for i in 0..3 {
        let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
            med(host[i].iter().map(f).collect())
        };
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} (factor route, alternating, 40 runs): median {:.1} us; host medians: wait for B^T's Gram {:.1} us, eigenproblem {:.1} us, then blocked {:.1} us, small factors {:.1} us",
            NAMES[i],
            med(totals[i].clone()),
            h(|x| x.gram_wait_s),
            h(|x| x.eigen_s),
            h(|x| x.sync_wait_s),
            h(|x| x.factors_s),
        );
    }
    for i in 1..3 {
        let rel = svals[0]
            .iter()
            .zip(&svals[i])
            .map(|(x, y)| ((x - y) / x).abs())
            .fold(0.0f64, f64::max);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} singular values, {} vs the 8-row f32 GEMMs: max relative difference {rel:.2e} (s_1 {:.6e}, s_32 {:.6e})", NAMES[i], svals[0][0], svals[0][31]);
    }
    for (i, name) in NAMES.iter().enumerate() {
        set(&mut r, i);
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} device time: A Omega {:.1} us ({:.0} GB/s of A), A^T Y {:.1} us ({:.0} GB/s), chain up to B^T's Gram {:.1} us",
            name,
            1e6 * nn,
            (n * n * 4) as f64 / nn / 1e9,
            1e6 * tn,
            (n * n * 4) as f64 / tn / 1e9,
            1e6 * chain
        );
    }
    for (ring, bps) in [false, true].into_iter().flat_map(|ring| {
        (1..=ptxflow::rnn::gpu::rsvd::MAX_GEMM_BLOCKS_PER_SM).map(move |b| (ring, b))
    }) {
        if ring {
            r.set_gemm_tensor_ring().expect("tensor cores");
        } else {
            r.set_gemm_tensor().expect("tensor cores");
        }
        r.set_gemm_blocks_per_sm(bps).expect("plan");
        let nn = per_call(&s, 50, || r.enqueue_product(false).expect("gemm"));
        let tn = per_call(&s, 50, || r.enqueue_product(true).expect("gemm"));
        println!("SUMMARY gpu/rnn rSVD {n}x{n} 3xTF32 GEMMs{}, split-K target {bps} blocks/SM: A Omega {:.1} us, A^T Y {:.1} us", if ring { " (cp.async ring)" } else { "" }, 1e6 * nn, 1e6 * tn);
    }
    r.set_gemm_tensor_ring().expect("tensor cores");
}

/// `PTXFLOW_RSVD_SMALL_AB=1`: 4096^2 rank 32 with the default GEMMs and the small step on the
/// host (factor route, Gram route) and on the device (`rnn_small_eig`) in alternating rounds of
/// 10 (40 runs each); then the device's report, S against the host factor route's, and device
/// times of the pieces after B^T's Gram.
fn rsvd_small_ab(gpu: &std::sync::Arc<ptxflow::runtime::Gpu>) {
    use ptxflow::kernels::KernelId;
    let s = gpu.stream().clone();
    for id in [
        KernelId::RnnSmallEig,
        KernelId::RnnOrth,
        KernelId::RnnApplySmall,
    ] {
        if let Ok(r) = gpu.kernel_resources(id) {
            println!("SUMMARY gpu/rnn kernel {}: {r:?}", id.name());
        }
    }
    let n = 4096;
    let a = timing_matrix(3, n, n, 1e-3);
    let mut r = GpuRsvd::new(gpu.clone(), n, n, RsvdOptions::rank(32)).expect("rsvd");
    r.upload(&a).expect("upload");
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        1e6 * v[v.len() / 2]
    };
    const NAMES: [&str; 3] = [
        "small step on the host, factor route",
        "small step on the host, Gram route",
        "small step on the device",
    ];
    // set_gram_route chooses a host route (and turns the device step off): it goes first.
    let set = |r: &mut GpuRsvd, i: usize| {
        r.set_gram_route(i == 1);
        r.set_small_on_device(i == 2);
    };
    let mut totals: [Vec<f64>; 3] = Default::default();
    let mut host: [Vec<ptxflow::rnn::gpu::rsvd::HostTimes>; 3] = Default::default();
    let mut svals: [Vec<f64>; 3] = Default::default();
    for _round in 0..4 {
        for i in 0..3 {
            set(&mut r, i);
            svals[i] = r.run_device().expect("rsvd");
            gpu.sync().expect("sync");
            for _ in 0..10 {
                let t = Instant::now();
                r.run_device().expect("rsvd");
                gpu.sync().expect("sync");
                totals[i].push(t.elapsed().as_secs_f64());
                host[i].push(r.host_times());
            }
        }
    }
    for i in 0..3 {
        let h = |f: fn(&ptxflow::rnn::gpu::rsvd::HostTimes) -> f64| {
            med(host[i].iter().map(f).collect())
        };
        let (lo, hi) = totals[i]
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
        println!(
            "SUMMARY gpu/rnn rSVD {n}x{n} {} (alternating, 40 runs): median {:.1} us (min {:.1}, max {:.1}); host medians: {:.1} / {:.1} / {:.1} / {:.1} us",
            NAMES[i],
            med(totals[i].clone()),
            1e6 * lo,
            1e6 * hi,
            h(|x| x.gram_wait_s),
            h(|x| x.eigen_s),
            h(|x| x.sync_wait_s),
            h(|x| x.factors_s),
        );
    }
    set(&mut r, 2);
    r.run_device().expect("rsvd");
    let rep = r.small_report().expect("report");
    for i in 1..3 {
        let rel = svals[0]
            .iter()
            .zip(&svals[i])
            .map(|(x, y)| ((x - y) / x).abs())
            .fold(0.0f64, f64::max);
        println!("SUMMARY gpu/rnn rSVD {n}x{n} singular values, {} vs the host factor route: max relative difference {rel:.2e} (s_1 {:.6e}, s_32 {:.6e})", NAMES[i], svals[0][0], svals[0][31]);
    }
    let small = per_call(&s, 50, || r.enqueue_small_eig().expect("small"));
    // Rounds per sweep: l rounded up to even, minus one.
    let l = RsvdOptions::rank(32).width(n, n) as u32;
    let per_sweep = l + (l & 1) - 1;
    let apply = per_call(&s, 50, || r.enqueue_apply().expect("apply"));
    let gram = per_call(&s, 50, || r.enqueue_gram().expect("gram"));
    let chain = per_call(&s, 20, || r.enqueue_until_gram().expect("chain"));
    println!(
        "SUMMARY gpu/rnn rSVD {n}x{n} device small step: status {}, {} sweeps, {} rounds with rotations, check {:.2e}; device time rnn_small_eig {:.1} us ({:.2} us per round of the sweeps), apply {:.1} us, Gram-only launch {:.1} us, chain up to B^T's Gram {:.1} us",
        rep.status,
        rep.sweeps,
        rep.rounds,
        rep.defect,
        1e6 * small,
        1e6 * small / f64::from((rep.sweeps * per_sweep).max(1)),
        1e6 * apply,
        1e6 * gram,
        1e6 * chain
    );
    // CholQR: one and two passes of the range basis, and block 0's phases (clock stamps).
    let orth1 = per_call(&s, 50, || r.enqueue_orth(1).expect("orth"));
    let orth2 = per_call(&s, 50, || r.enqueue_orth(2).expect("orth"));
    let stamps = r.orth_stamps(2).expect("stamps");
    let mhz = f64::from(gpu.facts().clock_khz) / 1e3;
    let names = ["A", "barrier", "B", "barrier", "C", "D"];
    let phases: Vec<String> = (1..stamps.len())
        .map(|i| {
            let us = (stamps[i].wrapping_sub(stamps[i - 1])) as f64 / mhz;
            format!("p{} {} {us:.1}", (i - 1) / 6, names[(i - 1) % 6])
        })
        .collect();
    println!(
        "SUMMARY gpu/rnn rSVD {n}x{n} CholQR 1 pass {:.1} us, 2 passes {:.1} us; phases of block 0 (us at {mhz:.0} MHz): {}",
        1e6 * orth1,
        1e6 * orth2,
        phases.join(", ")
    );
    set(&mut r, 0);
}

/// Thread 0's gather in the probe kernels (`rnn_gru_held48swp` / `rnn_gru_held48swuxp`,
/// `gru::stationary::PROBES`): per step, its start after thread 0's cell, its first poll round
/// checked, the rest to its end, the end to the step's barrier (us), and the rounds polled.
fn gather_probe(name: &str, st: &[u64], steps: usize, mhz: f64) {
    let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize;
    let us = |a: u64, b: u64| b.wrapping_sub(a) as i64 as f64 / mhz;
    let mut rows: [Vec<String>; 5] = Default::default();
    for t in 0..steps.min(16).saturating_sub(1) {
        let p = &st[base + 4 * t..base + 4 * t + 4];
        let (cell, barrier) = (st[5 + 3 * t], st[6 + 3 * t]);
        rows[0].push(format!("{:.2}", us(cell, p[0])));
        rows[1].push(format!("{:.2}", us(p[0], p[1])));
        rows[2].push(format!("{:.2}", us(p[1], p[2])));
        rows[3].push(format!("{:.2}", us(p[2], barrier)));
        rows[4].push(p[3].to_string());
    }
    let [a, b, c, d, r] = rows.map(|v| v.join(" "));
    println!(
        "SUMMARY gpu/rnn {name} thread 0's gather (us): start after its cell [{a}], first poll round checked [{b}], then to its end [{c}], end to the barrier [{d}]; poll rounds [{r}]"
    );
}

/// The per-block `%globaltimer` stamps of a cluster kernel (`STAMPS + 4 c`: start, end, SM):
/// when the blocks started and ended relative to the first start, and how many SMs ran more
/// than one block.
fn block_spans(st: &[u64], blocks: usize) -> String {
    let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize;
    let b: Vec<(u64, u64, u64)> = (0..blocks)
        .map(|c| (st[base + 4 * c], st[base + 4 * c + 1], st[base + 4 * c + 2]))
        .collect();
    let t0 = b.iter().map(|x| x.0).min().unwrap_or(0);
    let us = |t: u64| t.wrapping_sub(t0) as f64 / 1e3;
    let last_start = b.iter().map(|x| x.0).max().unwrap_or(0);
    let first_end = b.iter().map(|x| x.1).min().unwrap_or(0);
    let last = b.iter().max_by_key(|x| x.1).copied().unwrap_or((0, 0, 0));
    let mut per_sm = std::collections::BTreeMap::new();
    for x in &b {
        *per_sm.entry(x.2).or_insert(0u32) += 1;
    }
    let doubled = per_sm.values().filter(|&&n| n > 1).count();
    format!(
        "last start +{:.2} us, first end +{:.2} us, last end +{:.2} us (SM {} with {} blocks); {} SMs, {doubled} of them with 2+ blocks",
        us(last_start),
        us(first_end),
        us(last.1),
        last.2,
        per_sm.get(&last.2).copied().unwrap_or(0),
        per_sm.len()
    )
}

fn cpu(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let mut g = c.benchmark_group("cpu/rnn");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    let layer = DenseLayer::random(&mut rng, 64, 128);
    let x = rng.vec_f32(32 * 64, -1.0, 1.0);
    g.throughput(Throughput::Elements(32 * 128));
    g.bench_function(BenchmarkId::new("dense", "b32"), |b| {
        b.iter(|| dense_relu(&layer, &x, 32).expect("dense"))
    });
    let w = GruWeights::random(&mut rng, 128, 256, false);
    let ens: Vec<GruWeights> = (0..5)
        .map(|_| GruWeights::random(&mut rng, 128, 256, false))
        .collect();
    let xs = rng.vec_f32(10 * 32 * 128, -1.0, 1.0);
    let h0 = rng.vec_f32(5 * 32 * 256, -0.5, 0.5);
    g.throughput(Throughput::Elements(10 * 32 * 256));
    g.bench_function(BenchmarkId::new("gru_rollout", "t10_b32"), |b| {
        b.iter(|| gru_rollout(&w, &xs, &h0[..32 * 256], SHAPE, None, 0).expect("gru"))
    });
    g.throughput(Throughput::Elements(5 * 10 * 32 * 256));
    g.bench_function(BenchmarkId::new("gru_ensemble5", "t10_b32"), |b| {
        b.iter(|| gru_ensemble_rollout(&ens, &xs, &h0, SHAPE, None).expect("gru"))
    });
    let a = timing_matrix(3, 1024, 1024, 1e-3);
    g.throughput(Throughput::Bytes((6 * 1024 * 1024 * 4) as u64));
    g.bench_function(BenchmarkId::new("rsvd_rank32", 1024), |b| {
        b.iter(|| rsvd_cpu(&a, 1024, 1024, &RsvdOptions::rank(32)).expect("rsvd"))
    });
    // The rSVD's small eigenproblem (l = 42 in a 48-wide Gram of a graded B^T).
    let (w, l) = (48usize, 42usize);
    let bt: Vec<f32> = (0..4096 * w)
        .map(|i| {
            if i % w < l {
                (rng.normal() * 0.8f64.powi((i % w) as i32)) as f32
            } else {
                0.0
            }
        })
        .collect();
    let gram = ptxflow::rnn::cholqr::gram(&bt, 4096, w);
    g.throughput(Throughput::Elements(l as u64));
    g.bench_function(BenchmarkId::new("rsvd_small_eigen", "own_l42"), |b| {
        b.iter(|| ptxflow::rnn::rsvd::small_eigen(&gram, w, l, 32).expect("eigen"))
    });
    g.bench_function(BenchmarkId::new("rsvd_small_eigen", "nalgebra_l42"), |b| {
        b.iter(|| ptxflow::rnn::rsvd::small_eigen_nalgebra(&gram, w, l, 32).expect("eigen"))
    });
    let model = ChainModel::random(5, ChainDims::default()).expect("model");
    let feats = rng.vec_f32(10 * 32 * 64, -1.0, 1.0);
    g.throughput(Throughput::Elements(32 * 256));
    g.bench_function(BenchmarkId::new("chain", "t10_b32"), |b| {
        b.iter(|| chain_cpu(&model, &feats, &h0[..32 * 256], SHAPE).expect("chain"))
    });
    g.finish();
}

criterion_group!(benches, gpu, cpu);
criterion_main!(benches);
