//! [`GpuGru`]: GRU rollouts of one GRU or an ensemble on the GPU as one persistent cooperative
//! kernel (`rnn_gru_rollout`; layout and algorithm in its file). The host picks the block shape
//! (batch rows x hidden units per block) and how many steps of the input projection fit in
//! shared memory, so that every block of every member is resident at once.

use super::gru_shape::{choose_shape, smem_bytes, Shape};
use super::{allow_dynamic_smem, cfg, check_barriers, round_up, u32_of, zeros};
use crate::kernels::rnn::gru::stationary::STAMPS;
use crate::kernels::rnn::gru::THREADS;
use crate::kernels::KernelId;
use crate::rnn::reference::RolloutShape;
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::{Dropout, GruWeights};
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, CudaView};
use std::sync::Arc;

/// Launch choices of the rollout kernel (`None`: chosen by [`GpuGru::new`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GruLaunch {
    /// Unit slices per batch group (1 ..= H/2): a block owns about H/S hidden units (an even
    /// count; slices differ by at most 2 units).
    pub unit_slices: Option<u32>,
    /// Batch rows per block (a multiple of 4, at most 32).
    pub rows_per_block: Option<u32>,
    /// Weights in registers (`gru::stationary`): possible when H = 256, the padded input is 128,
    /// a block owns at most 21 units and its shared layout fits (see `precompute`). `None`: used
    /// whenever possible; `Some(true)` fails with `Capacity` where it is not.
    pub stationary: Option<bool>,
    /// On the weight-stationary path, gi of every step computed before step 0 (W_ih in
    /// registers meanwhile; x and gi of `max_steps` steps must fit in shared memory) rather than
    /// step by step from W_ih in shared memory. `None`: whenever it fits.
    pub precompute: Option<bool>,
}

#[derive(Clone, Copy, Debug)]
struct Dims {
    members: usize,
    input: usize,
    input_pad: usize,
    hidden: usize,
    max_steps: usize,
    max_batch_pad: usize,
    layer_norm: bool,
    ln_eps: f32,
    shape: Shape,
}

struct Weights {
    w_ih: DeviceBuffer<f32>,
    w_hh: DeviceBuffer<f32>,
    b_ih: DeviceBuffer<f32>,
    b_hh: DeviceBuffer<f32>,
    ln_gain: DeviceBuffer<f32>,
    ln_bias: DeviceBuffer<f32>,
}

struct State {
    /// Tagged exchange words (see the kernel notes); never cleared: tags tell launches apart.
    hx: DeviceBuffer<u64>,
    out: DeviceBuffer<f32>,
    /// `epoch, count, status, -` per member.
    bar: DeviceBuffer<u32>,
    /// Block 0's clock stamps of a stamped launch (benchmarks; see `gru::stationary::STAMPS`).
    stamps: DeviceBuffer<u64>,
}

/// One GRU or an ensemble (same sizes), with device buffers for up to `max_steps` x `max_batch`.
pub struct GpuGru {
    gpu: Arc<Gpu>,
    dims: Dims,
    weights: Weights,
    x: DeviceBuffer<f32>,
    h0: DeviceBuffer<f32>,
    state: State,
    stage: Vec<f32>,
}

fn pad_cols(src: &[f32], rows: usize, cols: usize, cols_pad: usize, dst: &mut Vec<f32>) {
    for r in 0..rows {
        dst.extend_from_slice(&src[r * cols..(r + 1) * cols]);
        dst.extend(std::iter::repeat_n(0.0f32, cols_pad - cols));
    }
}

#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    d: &Dims,
    w: &Weights,
    st: &mut State,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, f32>,
    h0: &CudaView<'_, f32>,
    shape: RolloutShape,
    dropout: Option<&Dropout>,
    stamped: bool,
) -> Result<()> {
    let bp = round_up(shape.batch, 4);
    if shape.steps == 0 || shape.batch == 0 || shape.steps > d.max_steps || bp > d.max_batch_pad {
        return Err(Error::Capacity {
            what: "GRU rollout steps x padded batch".into(),
            needed: shape.steps * bp,
            capacity: d.max_steps * d.max_batch_pad,
        });
    }
    if x.len() < shape.steps * bp * d.input_pad || h0.len() < d.members * bp * d.hidden {
        return Err(Error::Shape {
            what: "GRU rollout_device views".into(),
            expected: format!(
                "x >= {}, h0 >= {}",
                shape.steps * bp * d.input_pad,
                d.members * bp * d.hidden
            ),
            got: format!("{}, {}", x.len(), h0.len()),
        });
    }
    if let Some(dr) = dropout {
        dr.validate()?;
    }
    let kern = gpu.kernel(KernelId::RnnGruRollout)?;
    let sh = d.shape;
    // Same rows per block at a smaller batch: the grid only shrinks, so it stays resident.
    let rows = sh.rows.min(bp as u32);
    let bytes = smem_bytes(
        d.input_pad,
        d.hidden,
        sh.rows,
        sh.units,
        sh.chunk,
        sh.stationary,
    );
    allow_dynamic_smem(gpu, kern.function(), bytes, "rnn_gru_rollout")?;
    let blocks = u32_of(
        "GRU blocks",
        d.members * bp.div_ceil(rows as usize) * sh.slices as usize,
    )?;
    let (steps, batch, bpu) = (
        u32_of("steps", shape.steps)?,
        u32_of("batch", shape.batch)?,
        u32_of("batch", bp)?,
    );
    let (ip, h) = (d.input_pad as u32, d.hidden as u32);
    let _ = u32_of(
        "GRU state elements",
        d.members * shape.steps * bp * d.hidden,
    )?;
    let ln = u32::from(d.layer_norm);
    let (drop, thr, scale, seed) = match dropout {
        Some(dr) if dr.p > 0.0 => (
            1u32,
            dr.threshold(),
            (1.0 / (1.0 - f64::from(dr.p))) as f32,
            dr.seed,
        ),
        _ => (0u32, 0u32, 1.0f32, 0u64),
    };
    let (seed_lo, seed_hi) = (seed as u32, (seed >> 32) as u32);
    let (xms, stationary) = (0u32, u32::from(sh.stationary));
    let mut lb = kern.launch(stream, cfg((blocks, 1, 1), THREADS, bytes));
    lb.arg(x)
        .arg(h0)
        .arg(w.w_ih.slice())
        .arg(w.w_hh.slice())
        .arg(w.b_ih.slice())
        .arg(w.b_hh.slice());
    lb.arg(w.ln_gain.slice())
        .arg(w.ln_bias.slice())
        .arg(st.hx.slice_mut())
        .arg(st.out.slice_mut())
        .arg(st.bar.slice_mut());
    lb.arg(&xms)
        .arg(&steps)
        .arg(&batch)
        .arg(&bpu)
        .arg(&ip)
        .arg(&h)
        .arg(&sh.slices)
        .arg(&rows)
        .arg(&sh.chunk)
        .arg(&ln)
        .arg(&drop)
        .arg(&thr)
        .arg(&seed_lo)
        .arg(&seed_hi)
        .arg(&stationary);
    lb.arg(&d.ln_eps).arg(&scale);
    let no_stamps = 0u64;
    if stamped {
        lb.arg(st.stamps.slice_mut());
    } else {
        lb.arg(&no_stamps);
    }
    // SAFETY: (argument types and block shape are checked against the kernel's contract)
    // The stamps pointer is null or holds STAMPS u64.
    // Sizes: x >= steps*Bp*Ip and h0 >= E*Bp*H (checked above); weights, biases and layer-norm
    // arrays hold E members with the padded input; hx/out hold E*max_steps*maxBp*H >=
    // E*steps*Bp*H; bar holds 4 words per member (read count zero between launches: the last
    // block to count itself in resets it). The shared memory follows the kernel's smem_floats
    // for this shape and `chunk`; the
    // grid fits the co-resident capacity (checked when the shape was chosen, and a smaller batch
    // only removes blocks) and the cooperative launch refuses a grid that does not.
    unsafe { lb.launch_cooperative() }?;
    st.out.set_len(d.members * shape.steps * bp * d.hidden)?;
    Ok(())
}

impl GpuGru {
    /// Uploads the members' weights (input padded to a multiple of 128 with zero columns) and
    /// allocates every buffer. Hidden must be a multiple of 128; all members must have the same
    /// sizes and all or none layer norm.
    pub fn new(
        gpu: Arc<Gpu>,
        members: &[GruWeights],
        max_steps: usize,
        max_batch: usize,
        launch: GruLaunch,
    ) -> Result<Self> {
        let first = members
            .first()
            .ok_or_else(|| Error::input("a GPU GRU needs at least one member"))?;
        let (input, hidden) = (first.input(), first.hidden());
        if hidden % 128 != 0 {
            return Err(Error::Shape {
                what: "GPU GRU hidden size".into(),
                expected: "a multiple of 128".into(),
                got: hidden.to_string(),
            });
        }
        if max_steps == 0 || max_batch == 0 {
            return Err(Error::input("GPU GRU needs max_steps and max_batch >= 1"));
        }
        let layer_norm = first.layer_norm().is_some();
        // Caller sizes: every buffer below is one of these products, checked before any upload.
        let too_big =
            || Error::input("GPU GRU: max_batch or the input width overflows when padded");
        let bp = max_batch.checked_next_multiple_of(4).ok_or_else(too_big)?;
        let input_pad = input.checked_next_multiple_of(128).ok_or_else(too_big)?;
        crate::size::product(
            "GPU GRU sequence (members x steps x padded batch x hidden)",
            &[members.len(), max_steps, bp, hidden],
        )?;
        crate::size::product(
            "GPU GRU input sequence (steps x padded batch x padded input)",
            &[max_steps, bp, input_pad],
        )?;
        let e = members.len();
        let (mut wih, mut whh, mut bih, mut bhh, mut gain, mut beta) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for (i, w) in members.iter().enumerate() {
            if w.input() != input || w.hidden() != hidden || w.layer_norm().is_some() != layer_norm
            {
                return Err(Error::Shape {
                    what: format!("ensemble member {i}"),
                    expected: format!("input {input}, hidden {hidden}, layer norm {layer_norm}"),
                    got: format!(
                        "input {}, hidden {}, layer norm {}",
                        w.input(),
                        w.hidden(),
                        w.layer_norm().is_some()
                    ),
                });
            }
            pad_cols(w.w_ih(), 3 * hidden, input, input_pad, &mut wih);
            whh.extend_from_slice(w.w_hh());
            // The kernel adds b_hh of the r and z gates through gi (its notes): fold them here.
            let (ih, hh) = (w.b_ih(), w.b_hh());
            bih.extend((0..3 * hidden).map(|i| if i < 2 * hidden { ih[i] + hh[i] } else { ih[i] }));
            bhh.extend_from_slice(w.b_hh());
            match w.layer_norm() {
                Some(ln) => {
                    gain.extend_from_slice(&ln.gain);
                    beta.extend_from_slice(&ln.bias);
                }
                None => {
                    gain.extend(std::iter::repeat_n(1.0f32, hidden));
                    beta.extend(std::iter::repeat_n(0.0f32, hidden));
                }
            }
        }
        let ln_eps = first.layer_norm().map(|l| l.eps).unwrap_or(1e-5);
        let s = gpu.stream().clone();
        let shape = choose_shape(&gpu, e, bp, input_pad, hidden, max_steps, launch)?;
        let seq = e * max_steps * bp * hidden;
        let dims = Dims {
            members: e,
            input,
            input_pad,
            hidden,
            max_steps,
            max_batch_pad: bp,
            layer_norm,
            ln_eps,
            shape,
        };
        let weights = Weights {
            w_ih: DeviceBuffer::from_host(&s, &wih, "GRU w_ih")?,
            w_hh: DeviceBuffer::from_host(&s, &whh, "GRU w_hh")?,
            b_ih: DeviceBuffer::from_host(&s, &bih, "GRU b_ih")?,
            b_hh: DeviceBuffer::from_host(&s, &bhh, "GRU b_hh")?,
            ln_gain: DeviceBuffer::from_host(&s, &gain, "layer-norm gain")?,
            ln_bias: DeviceBuffer::from_host(&s, &beta, "layer-norm bias")?,
        };
        let state = State {
            hx: zeros(&s, seq, "GRU exchange words")?,
            out: zeros(&s, seq, "GRU output states")?,
            bar: zeros(&s, 4 * e, "GRU barrier words")?,
            stamps: zeros(&s, STAMPS as usize, "GRU clock stamps")?,
        };
        let x = zeros(&s, max_steps * bp * input_pad, "GRU input sequence")?;
        let h0 = zeros(&s, e * bp * hidden, "GRU initial state")?;
        Ok(GpuGru {
            gpu,
            dims,
            weights,
            x,
            h0,
            state,
            stage: Vec::new(),
        })
    }

    /// Ensemble members the rollout runs (each with its own dropout mask).
    pub fn members(&self) -> usize {
        self.dims.members
    }
    /// Hidden units a block owns (the largest slice).
    pub fn units_per_block(&self) -> u32 {
        self.dims.shape.units
    }
    /// Unit slices per batch group.
    pub fn unit_slices(&self) -> u32 {
        self.dims.shape.slices
    }
    /// Batch rows each block owns (at the largest batch).
    pub fn rows_per_block(&self) -> u32 {
        self.dims.shape.rows
    }
    /// Whether the weights are held in registers (`gru::stationary`).
    pub fn stationary(&self) -> bool {
        self.dims.shape.stationary
    }
    /// Steps of the input projection computed at once (on the weight-stationary path: every
    /// step before step 0, or 1).
    pub fn projection_steps(&self) -> u32 {
        let sh = self.dims.shape;
        if sh.stationary && sh.chunk == 0 {
            1
        } else {
            sh.chunk
        }
    }
    /// Blocks of the persistent grid (at the largest batch).
    pub fn blocks(&self) -> usize {
        self.dims.shape.blocks as usize
    }
    /// Padded input width of the device sequence (`x` rows in [`GpuGru::rollout_device`]).
    pub fn input_pad(&self) -> usize {
        self.dims.input_pad
    }
    /// All member states of the last device rollout, `E x T x Bp x H` (Bp = batch rounded up to 4).
    pub fn out_device(&self) -> &DeviceBuffer<f32> {
        &self.state.out
    }

    /// Enqueues a rollout on `stream`: `x` is `steps x Bp x input_pad` (shared by the members),
    /// `h0` is `E x Bp x H` with Bp = batch rounded up to 4; results in [`GpuGru::out_device`].
    pub fn rollout_device(
        &mut self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        h0: &CudaView<'_, f32>,
        shape: RolloutShape,
        dropout: Option<&Dropout>,
    ) -> Result<()> {
        launch(
            &self.gpu,
            &self.dims,
            &self.weights,
            &mut self.state,
            stream,
            x,
            h0,
            shape,
            dropout,
            false,
        )
    }

    /// [`GpuGru::rollout_device`] with block 0's clock stamps (weight-stationary path only; see
    /// `gru::stationary::STAMPS` for their meaning): synchronises `stream` and returns the stamps.
    pub fn rollout_device_stamped(
        &mut self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        h0: &CudaView<'_, f32>,
        shape: RolloutShape,
    ) -> Result<Vec<u64>> {
        launch(
            &self.gpu,
            &self.dims,
            &self.weights,
            &mut self.state,
            stream,
            x,
            h0,
            shape,
            None,
            true,
        )?;
        self.check(stream)?;
        self.state.stamps.set_len(STAMPS as usize)?;
        let mut out = vec![0u64; STAMPS as usize];
        self.state.stamps.download_into(stream, &mut out)?;
        Ok(out)
    }

    /// Fails if a barrier of the last launch timed out (synchronises `stream`).
    pub fn check(&self, stream: &Arc<CudaStream>) -> Result<()> {
        check_barriers(
            stream,
            &self.state.bar,
            self.dims.members,
            "rnn_gru_rollout",
        )
    }

    /// Rolls out from host data: `x` is `T x B x I` (shared by all members), `h0` is `E x B x H`.
    /// Returns `E x T x B x H`.
    pub fn rollout(
        &mut self,
        x: &[f32],
        h0: &[f32],
        shape: RolloutShape,
        dropout: Option<&Dropout>,
    ) -> Result<Vec<f32>> {
        let d = self.dims;
        let (e, h, i, b, t) = (d.members, d.hidden, d.input, shape.batch, shape.steps);
        if t == 0 || b == 0 {
            return Err(Error::input(format!(
                "rollout needs steps and batch >= 1 (got {t} and {b})"
            )));
        }
        check_len("rollout input x (T x B x I)", x.len(), t * b * i)?;
        check_len("rollout initial state h0 (E x B x H)", h0.len(), e * b * h)?;
        check_finite("rollout input x", x)?;
        check_finite("rollout initial state h0", h0)?;
        let bp = round_up(b, 4);
        if t > d.max_steps || bp > d.max_batch_pad {
            return Err(Error::Capacity {
                what: "GRU rollout steps x padded batch".into(),
                needed: t * bp,
                capacity: d.max_steps * d.max_batch_pad,
            });
        }
        let s = self.gpu.stream().clone();
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        for step in 0..t {
            pad_cols(
                &x[step * b * i..(step + 1) * b * i],
                b,
                i,
                d.input_pad,
                &mut stage,
            );
            stage.extend(std::iter::repeat_n(0.0f32, (bp - b) * d.input_pad));
        }
        self.x.upload(&s, &stage)?;
        stage.clear();
        for m in 0..e {
            stage.extend_from_slice(&h0[m * b * h..(m + 1) * b * h]);
            stage.extend(std::iter::repeat_n(0.0f32, (bp - b) * h));
        }
        self.h0.upload(&s, &stage)?;
        let xv = self.x.slice().slice(0..t * bp * d.input_pad);
        let hv = self.h0.slice().slice(0..e * bp * h);
        launch(
            &self.gpu,
            &d,
            &self.weights,
            &mut self.state,
            &s,
            &xv,
            &hv,
            shape,
            dropout,
            false,
        )?;
        self.check(&s)?;
        stage.resize(e * t * bp * h, 0.0);
        self.state.out.download_into(&s, &mut stage)?;
        let mut out = Vec::with_capacity(e * t * b * h);
        for m in 0..e {
            for step in 0..t {
                let base = (m * t + step) * bp * h;
                out.extend_from_slice(&stage[base..base + b * h]);
            }
        }
        self.stage = stage;
        Ok(out)
    }
}
