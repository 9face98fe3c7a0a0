//! Dense layers (f32 and f16 storage), low-rank corrections, the whole chain (eager, CUDA
//! graph, concurrent streams) and steady loops without allocations.

use crate::common;
use crate::{rel_inf, sanitize};
use ptxflow::ops::GpuOps;
use ptxflow::rng::Rng;
use ptxflow::rnn::chain::chain_cpu;
use ptxflow::rnn::gpu::chain::{run_concurrently, GpuChain};
use ptxflow::rnn::gpu::dense::{GpuDense, WeightStorage};
use ptxflow::rnn::gpu::lowrank::{correct_add, GpuLowRank};
use ptxflow::rnn::gpu::rsvd::GpuRsvd;
use ptxflow::rnn::half::{f16_bits_to_f32, to_f16_vec};
use ptxflow::rnn::reference::{dense_relu, lowrank_correct};
use ptxflow::rnn::rsvd::rsvd_cpu;
use ptxflow::rnn::testmat::*;
use ptxflow::rnn::*;
use ptxflow::Error;

pub fn gpu_dense_matches_f64_reference() {
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

pub fn gpu_corrections_match_f64_reference() {
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

pub fn gpu_chain_matches_f64_reference_eager_graph_and_streams() {
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

pub fn gpu_steady_loops_allocate_nothing() {
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
