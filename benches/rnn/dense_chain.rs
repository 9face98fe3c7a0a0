//! Dense encoder rows (batch 32, f32 and f16 weights) and the chain rows (encode -> GRU ->
//! low-rank: eager, CUDA graph, 4 batches on 4 streams, and with the weight-stationary GRU).

use crate::{common, per_call, Group, SHAPE};
use criterion::{BenchmarkId, Throughput};
use ptxflow::rng::Rng;
use ptxflow::rnn::gpu::chain::GpuChain;
use ptxflow::rnn::gpu::dense::{GpuDense, WeightStorage};
use ptxflow::rnn::*;
use ptxflow::runtime::Gpu;
use std::sync::Arc;

/// The dense rows (`gpu/rnn/dense*`); device us per call with f32 and f16 weights.
pub fn dense_rows(g: &mut Group<'_>, gpu: &Arc<Gpu>, rng: &mut Rng) -> [f64; 2] {
    let s = gpu.stream().clone();
    // Dense 32 x 64 -> 128.
    let layer = DenseLayer::random(rng, 64, 128);
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
    dense_us
}

/// The chain's timings for the summary (us; wall seconds for the four chains).
pub struct ChainTimes {
    eager_us: f64,
    graph_us: Option<f64>,
    serial: f64,
    overlapped: f64,
    old_eager_us: f64,
    old_serial: f64,
    old_overlapped: f64,
}

/// The chain rows (`gpu/rnn/chain_*`).
pub fn chain_rows(g: &mut Group<'_>, gpu: &Arc<Gpu>, rng: &mut Rng) -> ChainTimes {
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
    ChainTimes {
        eager_us,
        graph_us,
        serial,
        overlapped,
        old_eager_us,
        old_serial,
        old_overlapped,
    }
}

impl ChainTimes {
    /// The chain's SUMMARY lines on the device `name`.
    pub fn print(&self, name: &str) {
        let ChainTimes {
            eager_us,
            graph_us,
            serial,
            overlapped,
            old_eager_us,
            old_serial,
            old_overlapped,
        } = *self;
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
}
