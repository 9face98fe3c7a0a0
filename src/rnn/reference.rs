//! CPU references in f64 for the dense encoder, the GRU (step, rollout, ensemble, with optional
//! layer normalisation and dropout) and the low-rank correction. Inputs are f32 (what the GPU
//! sees), widened exactly; all arithmetic is f64 with libm's exp/tanh.
//!
//! GRU step (PyTorch's `nn.GRU` convention), for each batch row and hidden unit j:
//! ```text
//! r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
//! z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//! n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//! h' = (1 - z) * n + z * h
//! ```
//! then, when enabled, `h' <- LayerNorm(h')` and `h' <- dropout(h')`; `h'` is both the step's
//! output and the next step's state.

use super::weights::{check_finite, check_len, DenseLayer, Dropout, GruWeights};
use super::LowRank;
use crate::{Error, Result};

/// `y = relu(x W + b)` for `batch` rows of `x` (`batch x input`); returns `batch x output`.
pub fn dense_relu(layer: &DenseLayer, x: &[f32], batch: usize) -> Result<Vec<f64>> {
    let (ni, no) = (layer.input(), layer.output());
    let need = crate::size::product("dense input (batch x input)", &[batch, ni])?;
    check_len("dense input (batch x input)", x.len(), need)?;
    check_finite("dense input", x)?;
    let mut y = vec![0.0f64; crate::size::product("dense output (batch x output)", &[batch, no])?];
    for b in 0..batch {
        let row = &mut y[b * no..(b + 1) * no];
        for (o, v) in row.iter_mut().enumerate() {
            *v = f64::from(layer.b()[o]);
        }
        for i in 0..ni {
            let xi = f64::from(x[b * ni + i]);
            let w = &layer.w()[i * no..(i + 1) * no];
            for (v, &wv) in row.iter_mut().zip(w) {
                *v += xi * f64::from(wv);
            }
        }
        for v in row.iter_mut() {
            *v = v.max(0.0);
        }
    }
    Ok(y)
}

/// The rollout's sizes and starting state.
#[derive(Clone, Copy, Debug)]
pub struct RolloutShape {
    /// Time steps T (>= 1).
    pub steps: usize,
    /// Batch rows B (>= 1).
    pub batch: usize,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `out[r] = b[r] + sum_k m[r][k] v[k]` for the rows `rows` of a row-major matrix with `cols`.
fn matvec_rows(
    m: &[f32],
    bias: &[f32],
    v: &[f64],
    cols: usize,
    rows: std::ops::Range<usize>,
    out: &mut [f64],
) {
    for (o, r) in out.iter_mut().zip(rows) {
        let row = &m[r * cols..(r + 1) * cols];
        *o = f64::from(bias[r])
            + row
                .iter()
                .zip(v)
                .map(|(&a, &b)| f64::from(a) * b)
                .sum::<f64>();
    }
}

/// One GRU cell update for one batch row: `h` (H) becomes h'; `x` has I values.
pub fn gru_cell(w: &GruWeights, x: &[f64], h: &mut [f64]) {
    let (ni, nh) = (w.input(), w.hidden());
    let mut gi = vec![0.0; 3 * nh];
    let mut gh = vec![0.0; 3 * nh];
    matvec_rows(w.w_ih(), w.b_ih(), x, ni, 0..3 * nh, &mut gi);
    matvec_rows(w.w_hh(), w.b_hh(), h, nh, 0..3 * nh, &mut gh);
    for j in 0..nh {
        let r = sigmoid(gi[j] + gh[j]);
        let z = sigmoid(gi[nh + j] + gh[nh + j]);
        let n = (gi[2 * nh + j] + r * gh[2 * nh + j]).tanh();
        h[j] = (1.0 - z) * n + z * h[j];
    }
}

/// Layer-normalises one hidden row in place (if the weights have layer norm).
pub fn layer_norm_row(w: &GruWeights, h: &mut [f64]) {
    let Some(ln) = w.layer_norm() else { return };
    let n = h.len() as f64;
    let mean = h.iter().sum::<f64>() / n;
    let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + f64::from(ln.eps)).sqrt();
    for (k, v) in h.iter_mut().enumerate() {
        *v = (*v - mean) * rstd * f64::from(ln.gain[k]) + f64::from(ln.bias[k]);
    }
}

pub(crate) fn check_rollout(
    w: &GruWeights,
    x: &[f32],
    h0: &[f32],
    shape: RolloutShape,
    dropout: Option<&Dropout>,
) -> Result<()> {
    if shape.steps == 0 || shape.batch == 0 {
        return Err(Error::input(format!(
            "rollout needs steps and batch >= 1 (got {} and {})",
            shape.steps, shape.batch
        )));
    }
    check_len(
        "rollout input x (T x B x I)",
        x.len(),
        crate::size::product(
            "rollout input x (T x B x I)",
            &[shape.steps, shape.batch, w.input()],
        )?,
    )?;
    check_len(
        "rollout initial state h0 (B x H)",
        h0.len(),
        crate::size::product(
            "rollout initial state h0 (B x H)",
            &[shape.batch, w.hidden()],
        )?,
    )?;
    check_finite("rollout input x", x)?;
    check_finite("rollout initial state h0", h0)?;
    if let Some(d) = dropout {
        d.validate()?;
    }
    Ok(())
}

/// Rolls one GRU (ensemble member index `member`, which only seeds the dropout mask) over `x`
/// (`T x B x I`) from `h0` (`B x H`); returns every step's hidden state, `T x B x H`.
pub fn gru_rollout(
    w: &GruWeights,
    x: &[f32],
    h0: &[f32],
    shape: RolloutShape,
    dropout: Option<&Dropout>,
    member: usize,
) -> Result<Vec<f64>> {
    check_rollout(w, x, h0, shape, dropout)?;
    let x: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let h0: Vec<f64> = h0.iter().map(|&v| f64::from(v)).collect();
    Ok(rollout_f64(w, &x, &h0, shape, dropout, member))
}

/// The rollout on f64 inputs (shapes already checked).
pub(crate) fn rollout_f64(
    w: &GruWeights,
    x: &[f64],
    h0: &[f64],
    shape: RolloutShape,
    dropout: Option<&Dropout>,
    member: usize,
) -> Vec<f64> {
    let (ni, nh, nb, nt) = (w.input(), w.hidden(), shape.batch, shape.steps);
    let mut h = h0.to_vec();
    let mut out = vec![0.0f64; nt * nb * nh];
    for t in 0..nt {
        for b in 0..nb {
            let xr = &x[(t * nb + b) * ni..(t * nb + b + 1) * ni];
            let hb = &mut h[b * nh..(b + 1) * nh];
            gru_cell(w, xr, hb);
            layer_norm_row(w, hb);
            if let Some(d) = dropout {
                let scale = 1.0 / (1.0 - f64::from(d.p));
                for (k, v) in hb.iter_mut().enumerate() {
                    let keep = d.keep(Dropout::counter(member, t, b, k, nt, nb, nh));
                    *v = if keep { *v * scale } else { 0.0 };
                }
            }
            out[(t * nb + b) * nh..(t * nb + b + 1) * nh].copy_from_slice(hb);
        }
    }
    out
}

/// An ensemble rolled out on the same input `x` (`T x B x I`), member e from `h0[e]` (`B x H`
/// each); returns member-major `E x T x B x H`.
pub fn gru_ensemble_rollout(
    members: &[GruWeights],
    x: &[f32],
    h0: &[f32],
    shape: RolloutShape,
    dropout: Option<&Dropout>,
) -> Result<Vec<f64>> {
    let first = members
        .first()
        .ok_or_else(|| Error::input("an ensemble needs at least one member"))?;
    let per = shape.batch * first.hidden();
    check_len("ensemble h0 (E x B x H)", h0.len(), members.len() * per)?;
    let mut out = Vec::with_capacity(members.len() * shape.steps * per);
    for (e, w) in members.iter().enumerate() {
        if w.input() != first.input() || w.hidden() != first.hidden() {
            return Err(Error::Shape {
                what: format!("ensemble member {e}"),
                expected: format!("input {} hidden {}", first.input(), first.hidden()),
                got: format!("input {} hidden {}", w.input(), w.hidden()),
            });
        }
        out.extend(gru_rollout(
            w,
            x,
            &h0[e * per..(e + 1) * per],
            shape,
            dropout,
            e,
        )?);
    }
    Ok(out)
}

/// `out = pred + U diag(S) V^T x` for `batch` rows (`pred`: batch x m, `x`: batch x n), never
/// forming the m x n product: `t = S * (V^T x)` (k values), then `pred + U t`.
pub fn lowrank_correct(lr: &LowRank, pred: &[f32], x: &[f32], batch: usize) -> Result<Vec<f64>> {
    let (what_pred, what_x) = (
        "low-rank correction predictions (batch x m)",
        "low-rank correction input (batch x n)",
    );
    let need = crate::size::product(what_pred, &[batch, lr.m()])?;
    check_len(what_pred, pred.len(), need)?;
    check_len(
        what_x,
        x.len(),
        crate::size::product(what_x, &[batch, lr.n()])?,
    )?;
    check_finite("low-rank correction predictions", pred)?;
    check_finite("low-rank correction input", x)?;
    let pred: Vec<f64> = pred.iter().map(|&v| f64::from(v)).collect();
    let x: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    Ok(lowrank_correct_f64(lr, &pred, &x, batch))
}

/// The correction on f64 inputs (shapes already checked).
pub(crate) fn lowrank_correct_f64(lr: &LowRank, pred: &[f64], x: &[f64], batch: usize) -> Vec<f64> {
    let (m, n, k) = (lr.m(), lr.n(), lr.k());
    let mut out = vec![0.0f64; batch * m];
    let mut t = vec![0.0f64; k];
    for b in 0..batch {
        let xb = &x[b * n..(b + 1) * n];
        for (j, tj) in t.iter_mut().enumerate() {
            let row = &lr.vt()[j * n..(j + 1) * n];
            *tj = f64::from(lr.s()[j])
                * row
                    .iter()
                    .zip(xb)
                    .map(|(&v, &xv)| f64::from(v) * xv)
                    .sum::<f64>();
        }
        for i in 0..m {
            let u = &lr.u()[i * k..(i + 1) * k];
            out[b * m + i] = pred[b * m + i]
                + u.iter()
                    .zip(&t)
                    .map(|(&uv, &tv)| f64::from(uv) * tv)
                    .sum::<f64>();
        }
    }
    out
}
