//! The learned-correction chain as a model and its f64 CPU reference: features (`T x B x F`)
//! -> dense encoder `relu(x W + b)` (`T x B x I`) -> GRU rollout from `h0` (`B x H`) -> the last
//! hidden state corrected by the low-rank operator applied to the last encoded input:
//! `h_T + U_k S_k V_k^T x_T` (`B x H`). The operator is `H x I`, rank k.

use super::reference::{dense_relu, lowrank_correct_f64, rollout_f64};
use super::rsvd::{rsvd_cpu, RsvdOptions};
use super::testmat::{matrix_with_spectrum, Spectrum};
use super::weights::{check_finite, check_len};
use super::{DenseLayer, GruWeights, LowRank, RolloutShape};
use crate::rng::Rng;
use crate::{Error, Result};

/// Sizes of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainDims {
    /// Feature width F (64 by default).
    pub features: usize,
    /// Encoded width I = GRU input (128).
    pub input: usize,
    /// GRU hidden size H (256).
    pub hidden: usize,
    /// Rank k of the correction operator (32).
    pub rank: usize,
}

impl Default for ChainDims {
    fn default() -> Self {
        ChainDims {
            features: 64,
            input: 128,
            hidden: 256,
            rank: 32,
        }
    }
}

/// The chain's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainModel {
    /// Dense + ReLU encoder from the raw input to the GRU's input.
    pub encoder: DenseLayer,
    /// The recurrent cell.
    pub gru: GruWeights,
    /// `H x I`, rank k.
    pub correction: LowRank,
}

impl ChainModel {
    /// Checks that the parts fit together.
    ///
    /// Errors: [`Error::Shape`] unless encoder output = GRU input and the correction is
    /// `H x I` (GRU hidden x GRU input).
    pub fn new(encoder: DenseLayer, gru: GruWeights, correction: LowRank) -> Result<Self> {
        if encoder.output() != gru.input()
            || correction.m() != gru.hidden()
            || correction.n() != gru.input()
        {
            return Err(Error::Shape {
                what: "chain parts".into(),
                expected: format!(
                    "encoder output = GRU input = {}, correction {} x {}",
                    gru.input(),
                    gru.hidden(),
                    gru.input()
                ),
                got: format!(
                    "encoder output {}, correction {} x {}",
                    encoder.output(),
                    correction.m(),
                    correction.n()
                ),
            });
        }
        Ok(ChainModel {
            encoder,
            gru,
            correction,
        })
    }

    /// Random weights; the correction operator is the rank-k truncated SVD (f64 reference) of a
    /// random `H x I` matrix with a decaying spectrum scaled to 0.1.
    ///
    /// Errors: [`Error::Input`] for a zero dimension or a rank outside `1..=min(H, I)` (a zero
    /// dimension is checked here, before the weight generators).
    pub fn random(seed: u64, dims: ChainDims) -> Result<Self> {
        if dims.features == 0 || dims.input == 0 || dims.hidden == 0 {
            return Err(Error::input(format!(
                "chain dimensions must be non-zero, got {dims:?}"
            )));
        }
        let mut rng = Rng::new(seed);
        let encoder = DenseLayer::random(&mut rng, dims.features, dims.input);
        let gru = GruWeights::random(&mut rng, dims.input, dims.hidden, false);
        let mut c = matrix_with_spectrum(
            &mut rng,
            dims.hidden,
            dims.input,
            Spectrum::Exponential { rate: 0.9 },
        );
        c.iter_mut().for_each(|v| *v *= 0.1);
        let correction = rsvd_cpu(
            &c,
            dims.hidden,
            dims.input,
            &RsvdOptions {
                rank: dims.rank,
                ..Default::default()
            },
        )?;
        ChainModel::new(encoder, gru, correction)
    }

    /// Feature width F.
    pub fn features(&self) -> usize {
        self.encoder.input()
    }
    /// Hidden size H.
    pub fn hidden(&self) -> usize {
        self.gru.hidden()
    }
}

/// The f64 reference of the chain: `features` is `T x B x F` (step-major), `h0` is `B x H`;
/// returns `B x H`.
///
/// Errors: [`Error::Input`] for zero steps or batch, or a non-finite input; [`Error::Shape`] when
/// `features` or `h0` has the wrong length.
pub fn chain_cpu(
    model: &ChainModel,
    features: &[f32],
    h0: &[f32],
    shape: RolloutShape,
) -> Result<Vec<f64>> {
    let (t, b) = (shape.steps, shape.batch);
    if t == 0 || b == 0 {
        return Err(Error::input(format!(
            "chain needs steps and batch >= 1 (got {t} and {b})"
        )));
    }
    check_len("chain h0 (B x H)", h0.len(), b * model.hidden())?;
    check_finite("chain h0", h0)?;
    let x = dense_relu(&model.encoder, features, t * b)?;
    let h0: Vec<f64> = h0.iter().map(|&v| f64::from(v)).collect();
    let hs = rollout_f64(&model.gru, &x, &h0, shape, None, 0);
    let (nh, ni) = (model.gru.hidden(), model.gru.input());
    let pred = &hs[(t - 1) * b * nh..t * b * nh];
    let xl = &x[(t - 1) * b * ni..t * b * ni];
    Ok(lowrank_correct_f64(&model.correction, pred, xl, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_rejects_zero_dimensions_and_rank() {
        for dims in [
            ChainDims {
                hidden: 0,
                ..Default::default()
            },
            ChainDims {
                features: 0,
                ..Default::default()
            },
            ChainDims {
                rank: 0,
                ..Default::default()
            },
        ] {
            assert!(matches!(
                ChainModel::random(1, dims),
                Err(Error::Input { .. })
            ));
        }
    }
}
