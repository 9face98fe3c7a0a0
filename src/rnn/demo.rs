//! The learned-correction chain and the randomized SVD on generated data, for `ptxflow demo`:
//! on the GPU when one is given (compared with the f64 CPU references), otherwise the CPU runs
//! the references and the GPU's rSVD algorithm ([`crate::rnn::rsvd::rsvd_model`]).

use super::chain::{chain_cpu, ChainDims, ChainModel};
use super::gpu::chain::GpuChain;
use super::gpu::rsvd::GpuRsvd;
use super::rsvd::{rsvd_model, RsvdOptions};
use super::testmat::{
    column_orthonormality, matrix_with_spectrum, reconstruction_error, row_orthonormality, Spectrum,
};
use super::RolloutShape;
use crate::rng::Rng;
use crate::runtime::Gpu;
use crate::Result;
use std::sync::Arc;
use std::time::Instant;

/// Chain size of the demo: the default (T = 10, B = 32; 64 -> 128 -> 256, rank 32).
pub const SHAPE: RolloutShape = RolloutShape {
    steps: 10,
    batch: 32,
};
/// rSVD size of the demo.
pub const RSVD_SIZE: usize = 512;

/// What the demo measured.
#[derive(Clone, Debug, PartialEq)]
pub struct RnnDemoReport {
    /// "gpu" or "cpu".
    pub device: &'static str,
    /// GRU steps of the chain.
    pub steps: usize,
    /// Sequences in the batch.
    pub batch: usize,
    /// Wall time of one chain call (after a warm-up), seconds.
    pub chain_seconds: f64,
    /// max |device - f64 reference| / max |reference| over the chain's output (None on the CPU,
    /// where the output is the reference itself).
    pub chain_rel_error: Option<f64>,
    /// Rows and columns of the decomposed square matrix.
    pub rsvd_size: usize,
    /// Rank k of the decomposition.
    pub rank: usize,
    /// Wall time of one decomposition (after a warm-up), seconds.
    pub rsvd_seconds: f64,
    /// `||A - U S V^T||_F` over the optimal rank-k error (known from the constructed spectrum).
    pub rsvd_error_ratio: f64,
    /// `max |U^T U - I|`.
    pub u_orthonormality: f64,
    /// `max |V^T V - I|`.
    pub v_orthonormality: f64,
}

/// Runs the demo (see the module notes).
pub fn run(gpu: Option<Arc<Gpu>>) -> Result<RnnDemoReport> {
    let dims = ChainDims::default();
    let model = ChainModel::random(7, dims)?;
    let mut rng = Rng::new(8);
    let feats = rng.vec_f32(SHAPE.steps * SHAPE.batch * dims.features, -1.0, 1.0);
    let h0 = rng.vec_f32(SHAPE.batch * dims.hidden, -0.5, 0.5);
    let t = Instant::now();
    let reference = chain_cpu(&model, &feats, &h0, SHAPE)?;
    let cpu_chain_s = t.elapsed().as_secs_f64();

    let n = RSVD_SIZE;
    let spectrum = Spectrum::Exponential { rate: 0.9 };
    let a = matrix_with_spectrum(&mut Rng::new(9), n, n, spectrum);
    let opts = RsvdOptions::default();
    let optimal = spectrum
        .values(n)
        .iter()
        .skip(opts.rank)
        .map(|s| s * s)
        .sum::<f64>()
        .sqrt();

    let (device, chain_seconds, chain_rel_error, rsvd_seconds, lr) = match gpu {
        Some(g) => {
            let mut chain = GpuChain::new(g.clone(), &model, SHAPE)?;
            chain.run(&feats, &h0)?;
            let t = Instant::now();
            let out = chain.run(&feats, &h0)?;
            let chain_s = t.elapsed().as_secs_f64();
            let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = out
                .iter()
                .zip(&reference)
                .fold(0.0f64, |m, (&g, &r)| m.max((f64::from(g) - r).abs()));
            let mut rsvd = GpuRsvd::new(g, n, n, opts)?;
            rsvd.decompose(&a)?;
            let t = Instant::now();
            let lr = rsvd.decompose(&a)?;
            (
                "gpu",
                chain_s,
                Some(err / scale.max(f64::MIN_POSITIVE)),
                t.elapsed().as_secs_f64(),
                lr,
            )
        }
        None => {
            let t = Instant::now();
            let lr = rsvd_model(
                &a,
                n,
                n,
                &opts,
                super::gpu::rsvd::MID_PASSES as usize,
                super::gpu::rsvd::FINAL_PASSES as usize,
            )?;
            ("cpu", cpu_chain_s, None, t.elapsed().as_secs_f64(), lr)
        }
    };
    Ok(RnnDemoReport {
        device,
        steps: SHAPE.steps,
        batch: SHAPE.batch,
        chain_seconds,
        chain_rel_error,
        rsvd_size: n,
        rank: opts.rank,
        rsvd_seconds,
        rsvd_error_ratio: reconstruction_error(&a, &lr)? / optimal,
        u_orthonormality: column_orthonormality(lr.u(), n, opts.rank),
        v_orthonormality: row_orthonormality(lr.vt(), opts.rank, n),
    })
}
