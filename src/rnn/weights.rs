//! Weights of the learned-correction models as plain row-major f32 arrays, validated on
//! construction (shapes and finiteness), with PyTorch-style random initialisation for demos,
//! tests and benches.

use crate::rng::Rng;
use crate::{Error, Result};

pub(crate) fn check_len(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(Error::Shape {
            what: what.into(),
            expected: format!("{expected} values"),
            got: got.to_string(),
        });
    }
    Ok(())
}

pub(crate) fn check_finite(what: &str, v: &[f32]) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::input(format!(
            "{what}[{i}] is {} (weights and inputs must be finite)",
            v[i]
        ))),
        None => Ok(()),
    }
}

fn uniform(rng: &mut Rng, n: usize, bound: f32) -> Vec<f32> {
    rng.vec_f32(n, -bound, bound)
}

/// A dense layer `y = relu(x W + b)`: `w` is `input x output` row-major (x on the left), `b` has
/// `output` values.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseLayer {
    input: usize,
    output: usize,
    w: Vec<f32>,
    b: Vec<f32>,
}

impl DenseLayer {
    /// Validates shapes (`w`: input*output, `b`: output; both dims non-zero) and finiteness.
    pub fn new(input: usize, output: usize, w: Vec<f32>, b: Vec<f32>) -> Result<Self> {
        if input == 0 || output == 0 {
            return Err(Error::input(format!(
                "dense layer dims must be non-zero (input {input}, output {output})"
            )));
        }
        check_len(
            "dense weight (input x output)",
            w.len(),
            crate::size::product("dense layer (input x output)", &[input, output])?,
        )?;
        check_len("dense bias", b.len(), output)?;
        check_finite("dense weight", &w)?;
        check_finite("dense bias", &b)?;
        Ok(DenseLayer {
            input,
            output,
            w,
            b,
        })
    }

    /// PyTorch's `nn.Linear` initialisation: U(-1/sqrt(input), 1/sqrt(input)) for both.
    pub fn random(rng: &mut Rng, input: usize, output: usize) -> Self {
        let bound = 1.0 / (input.max(1) as f32).sqrt();
        let w = uniform(rng, input * output, bound);
        let b = uniform(rng, output, bound);
        DenseLayer::new(input, output, w, b).expect("generated weights have the right shapes")
    }

    /// Input features.
    pub fn input(&self) -> usize {
        self.input
    }
    /// Output features.
    pub fn output(&self) -> usize {
        self.output
    }
    /// `input x output`, row-major.
    pub fn w(&self) -> &[f32] {
        &self.w
    }
    /// `output` biases.
    pub fn b(&self) -> &[f32] {
        &self.b
    }
}

/// Layer normalisation of the hidden state: `gain * (h - mean) / sqrt(var + eps) + bias` over
/// the hidden units of each batch row (biased variance, as PyTorch's `nn.LayerNorm`).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// Per hidden unit scale (`H` values).
    pub gain: Vec<f32>,
    /// Per hidden unit offset (`H` values).
    pub bias: Vec<f32>,
    /// Added to the variance; PyTorch's default is 1e-5.
    pub eps: f32,
}

/// One GRU's weights in PyTorch's layout (`nn.GRU` layer 0): `w_ih` is `3H x I`, `w_hh` is
/// `3H x H`, `b_ih` and `b_hh` have `3H` values; the three row blocks are the reset (r), update
/// (z) and candidate (n) gates in that order. Optional layer normalisation of the hidden state.
#[derive(Clone, Debug, PartialEq)]
pub struct GruWeights {
    input: usize,
    hidden: usize,
    w_ih: Vec<f32>,
    w_hh: Vec<f32>,
    b_ih: Vec<f32>,
    b_hh: Vec<f32>,
    layer_norm: Option<LayerNorm>,
}

impl GruWeights {
    /// Validates shapes and finiteness (`eps` must be positive).
    pub fn new(
        input: usize,
        hidden: usize,
        w_ih: Vec<f32>,
        w_hh: Vec<f32>,
        b_ih: Vec<f32>,
        b_hh: Vec<f32>,
        layer_norm: Option<LayerNorm>,
    ) -> Result<Self> {
        if input == 0 || hidden == 0 {
            return Err(Error::input(format!(
                "GRU dims must be non-zero (input {input}, hidden {hidden})"
            )));
        }
        let product = crate::size::product;
        check_len(
            "GRU w_ih (3H x I)",
            w_ih.len(),
            product("GRU w_ih (3H x I)", &[3, hidden, input])?,
        )?;
        check_len(
            "GRU w_hh (3H x H)",
            w_hh.len(),
            product("GRU w_hh (3H x H)", &[3, hidden, hidden])?,
        )?;
        check_len("GRU b_ih", b_ih.len(), 3 * hidden)?;
        check_len("GRU b_hh", b_hh.len(), 3 * hidden)?;
        for (what, v) in [
            ("GRU w_ih", &w_ih),
            ("GRU w_hh", &w_hh),
            ("GRU b_ih", &b_ih),
            ("GRU b_hh", &b_hh),
        ] {
            check_finite(what, v)?;
        }
        if let Some(ln) = &layer_norm {
            check_len("layer-norm gain", ln.gain.len(), hidden)?;
            check_len("layer-norm bias", ln.bias.len(), hidden)?;
            check_finite("layer-norm gain", &ln.gain)?;
            check_finite("layer-norm bias", &ln.bias)?;
            if !(ln.eps > 0.0 && ln.eps.is_finite()) {
                return Err(Error::input(format!(
                    "layer-norm eps must be positive and finite, got {}",
                    ln.eps
                )));
            }
        }
        Ok(GruWeights {
            input,
            hidden,
            w_ih,
            w_hh,
            b_ih,
            b_hh,
            layer_norm,
        })
    }

    /// PyTorch's `nn.GRU` initialisation: every weight and bias U(-1/sqrt(H), 1/sqrt(H)). With
    /// `layer_norm`, gains near 1 and biases near 0 (perturbed so the test sees them).
    pub fn random(rng: &mut Rng, input: usize, hidden: usize, layer_norm: bool) -> Self {
        let k = 1.0 / (hidden.max(1) as f32).sqrt();
        let w_ih = uniform(rng, 3 * hidden * input, k);
        let w_hh = uniform(rng, 3 * hidden * hidden, k);
        let b_ih = uniform(rng, 3 * hidden, k);
        let b_hh = uniform(rng, 3 * hidden, k);
        let ln = layer_norm.then(|| LayerNorm {
            gain: rng.vec_f32(hidden, 0.8, 1.2),
            bias: rng.vec_f32(hidden, -0.1, 0.1),
            eps: 1e-5,
        });
        GruWeights::new(input, hidden, w_ih, w_hh, b_ih, b_hh, ln)
            .expect("generated weights have the right shapes")
    }

    /// Input features I.
    pub fn input(&self) -> usize {
        self.input
    }
    /// Hidden units H.
    pub fn hidden(&self) -> usize {
        self.hidden
    }
    /// Input weights, `3H x I` row-major (gates r, z, n).
    pub fn w_ih(&self) -> &[f32] {
        &self.w_ih
    }
    /// Recurrent weights, `3H x H` row-major (gates r, z, n).
    pub fn w_hh(&self) -> &[f32] {
        &self.w_hh
    }
    /// Input biases, `3H`.
    pub fn b_ih(&self) -> &[f32] {
        &self.b_ih
    }
    /// Recurrent biases, `3H`.
    pub fn b_hh(&self) -> &[f32] {
        &self.b_hh
    }
    /// The hidden state's layer normalisation, if any.
    pub fn layer_norm(&self) -> Option<&LayerNorm> {
        self.layer_norm.as_ref()
    }
}

/// Dropout of the hidden state during a rollout (training-style or Monte-Carlo inference; leave
/// it `None` for plain inference). Each element is kept with probability `1 - p` and scaled by
/// `1 / (1 - p)`; the mask is a pure function of `seed` and the element's (member, step, batch
/// row, unit), so CPU and GPU draw the same mask and a rerun reproduces it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// Drop probability in [0, 1).
    pub p: f32,
    /// Seed of the mask: the same seed draws the same mask on CPU and GPU.
    pub seed: u64,
}

impl Dropout {
    /// Elements whose hash is below this threshold are dropped.
    pub fn threshold(&self) -> u32 {
        (f64::from(self.p) * 4_294_967_296.0)
            .round()
            .min(f64::from(u32::MAX)) as u32
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.p >= 0.0 && self.p < 1.0) {
            return Err(Error::input(format!(
                "dropout probability must be in [0, 1), got {}",
                self.p
            )));
        }
        Ok(())
    }

    /// The mask counter of element (member, step, row, unit) for a rollout of `steps` x `batch`
    /// x `hidden` (wrapping: a hash input, not an index).
    pub fn counter(
        member: usize,
        step: usize,
        row: usize,
        unit: usize,
        steps: usize,
        batch: usize,
        hidden: usize,
    ) -> u32 {
        (((member * steps + step) * batch + row) * hidden + unit) as u32
    }

    /// True when the element with mask counter `counter` is kept.
    pub fn keep(&self, counter: u32) -> bool {
        crate::rnn::mathf::hash32(counter, self.seed) >= self.threshold()
    }
}
