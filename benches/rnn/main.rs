//! Learned-correction kernels, GPU (CUDA events on device-resident data, or wall time where the
//! call synchronises) and CPU (the f64 references) in one run: dense encoder (batch 32), GRU
//! rollout (10 steps, batch 32, single and ensemble of 5), randomized SVD (1024 and 4096 square,
//! rank 32; the CPU reference only at 1024), the whole chain (eager, CUDA graph, 4 batches on 4
//! streams). Prints SUMMARY lines against the targets of the issue.
//!
//! One bench binary; the rows live in the modules (`dense_chain`, `gru` with `gru_phases` and
//! `gru_sweep`, `rsvd`, the rSVD-only A/B modes in `rsvd_ab`), in the order they always ran.

#[path = "../common/mod.rs"]
mod common;
mod dense_chain;
mod gru;
mod gru_phases;
mod gru_sweep;
mod rsvd;
mod rsvd_ab;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptxflow::rng::Rng;
use ptxflow::rnn::chain::chain_cpu;
use ptxflow::rnn::gpu::rsvd::GpuRsvd;
use ptxflow::rnn::reference::{dense_relu, gru_ensemble_rollout, gru_rollout};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::timing_matrix;
use ptxflow::rnn::*;
use std::time::Duration;

const SHAPE: RolloutShape = RolloutShape {
    steps: 10,
    batch: 32,
};

/// Device time per call over `n` back-to-back calls (what a steady loop sees).
fn per_call(s: &std::sync::Arc<ptxflow::runtime::CudaStream>, n: u64, mut f: impl FnMut()) -> f64 {
    f();
    common::event_timed(s, n, f).as_secs_f64() / n as f64
}

/// The `gpu/rnn` benchmark group.
pub type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

fn gpu(c: &mut Criterion) {
    let Some(gpu) = common::gpu_or_skip() else {
        return;
    };
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
        rsvd_ab::rsvd_small_ab(&gpu);
        return;
    }
    if std::env::var("PTXFLOW_RSVD_TC_AB").is_ok() {
        // rSVD only: the default GEMMs and the 3xTF32 tensor-core ones alternating.
        rsvd_ab::rsvd_tc_ab(&gpu);
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

    let dense_us = dense_chain::dense_rows(&mut g, &gpu, &mut rng);
    let gru_us = gru::rows(&mut g, &gpu, &mut rng);
    let rsvd_ms = rsvd::rows(&mut g, &gpu);
    let chain = dense_chain::chain_rows(&mut g, &gpu, &mut rng);
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
    rsvd::print(&rsvd_ms, name);
    chain.print(name);
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
