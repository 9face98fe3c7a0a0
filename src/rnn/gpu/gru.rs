//! [`GpuGru`]: GRU rollouts of one GRU or an ensemble on the GPU as one persistent cooperative
//! kernel (`rnn_gru_stationary` where its sizes allow, else `rnn_gru_shared`; layout and
//! algorithm in `crate::kernels::rnn::gru`). The host picks the block shape
//! (batch rows x hidden units per block) and how many steps of the input projection fit in
//! shared memory, so that every block of every member is resident at once. Blocks of at most
//! 16 units with gi of every step first run `rnn_gru_stationary48` (lanes hold 48 gate rows;
//! `PTXFLOW_GRU_ROWS48=0`: `rnn_gru_stationary`). On sm_80 and later, where a grid of one
//! block per SM fits, `rnn_gru_held48` / `rnn_gru_held64o` run instead (W_ih held too, gi step
//! by step; `rnn_gru_held64o` is `rnn_gru_held64` with the partials of W_ih x inside the
//! gather's round trip, [`HeldTune::partials_in_gather`]; [`GruLaunch::held`],
//! `PTXFLOW_GRU_HELD=0` turns them off; `gru_held`); blocks of at
//! most 16 units and 128 cells (the T=10 B=32 rollout) run `rnn_gru_held48swxc` there (split
//! roles, weights staged through shared memory, x of steps 3 .. copied during the steps, the
//! cells' gi sums in the gather's round trip; [`GruLaunch::split`] / `PTXFLOW_GRU_SPLIT=0`,
//! [`GruLaunch::staged`] / `PTXFLOW_GRU_STAGED=0` turn the first two off, [`GruLaunch::tune`] /
//! `PTXFLOW_GRU_TUNE=none` the last two: `rnn_gru_held48sw`, and `rnn_gru_held64`). Opt-in: the sm_90 cluster kernels
//! ([`GruLaunch::exchange`], `PTXFLOW_GRU_EXCHANGE`; `gru_cluster`) and the default's gather
//! timed for the bench ([`HeldTune::probe`]).

use super::gru_cluster::{ClusterExchange, Staging};
pub use super::gru_cluster::{GruExchange, GruStaging};
use super::gru_launch::{Dims, Request, Rollout, Stamping, State, Weights};
use super::gru_shape::{choose_shape, Path};
use super::zeros;
use crate::kernels::rnn::gru::stationary::STAMPS;
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
    /// How the blocks of a batch group exchange their new states each step. `None`: as the
    /// `PTXFLOW_GRU_EXCHANGE` variable says (`global`, `cluster`, `cluster-barrier`; a cluster
    /// exchange only where it can run), else through global memory. `Some` of a cluster
    /// exchange fails with `Input` where it cannot run.
    pub exchange: Option<GruExchange>,
    /// Cluster exchanges only: how h0 and x reach shared memory. `None`: as
    /// `PTXFLOW_GRU_STAGING` says (`copies`, `async`, `streamed`), else streamed.
    pub staging: Option<GruStaging>,
    /// W_ih held in registers too, gi step by step, one block per SM (`rnn_gru_held48` /
    /// `rnn_gru_held64`; sm_80 and later, H = 256, padded input 128, at most 21 units a block,
    /// x of `max_steps` steps in shared memory). `None`: wherever it can run, unless
    /// `PTXFLOW_GRU_HELD=0`; `Some(true)` fails with `Input` where it cannot run.
    pub held: Option<bool>,
    /// On the held path, `rnn_gru_held48s` / `rnn_gru_held64s` (W_ih in four of the warps,
    /// which take the partials of `W_ih x` while the other four take the cells and the gather;
    /// bit-identical states; `rnn_gru_held48s` where a block owns at most 128 cells). `None`: as
    /// `PTXFLOW_GRU_SPLIT` says (`1` on, `0` off; default: on for the 48-row kernels, off for the
    /// 64-row ones); `Some(true)` fails with `Input` where it cannot run.
    pub split: Option<bool>,
    /// On the held path with blocks of at most 16 units, the weights staged through shared
    /// memory by coalesced copies (`rnn_gru_held48w`, or `rnn_gru_held48sw` with `split`;
    /// bit-identical states). `None`: as `PTXFLOW_GRU_STAGED` says (`1` on, `0` off; default on
    /// where the staged rows fit in shared memory); `Some(true)` fails with `Input` where it
    /// cannot run.
    pub staged: Option<bool>,
    /// Schedules of the split, staged 48-row kernel and of the 64-row one (bit-identical
    /// states). `None`: as `PTXFLOW_GRU_TUNE` says (letters of [`HeldTune`]'s switches: `xoc`
    /// `overlap`, `p` `probe`, `g` `partials_in_gather`; other values such as `none`: none of
    /// them, `rnn_gru_held48sw` and `rnn_gru_held64`), else `overlap` and `partials_in_gather`
    /// (`rnn_gru_held48swxc`, `rnn_gru_held64o`); ignored by the other kernels.
    pub tune: Option<HeldTune>,
}

/// Schedules of `rnn_gru_held48sw` (session 11; `overlap` is the default: see
/// [`GruLaunch::tune`]; session 11's other schedules measured slower and were removed) and of
/// `rnn_gru_held64` (`partials_in_gather`, the default since session 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldTune {
    /// x of steps 3 .. copied during the steps by the upper warps (not in the prologue), and
    /// the threads with a cell issue the gather's first poll loads right after their cell and
    /// take their gi sums of step t + 1 while the loads are out (`rnn_gru_held48swxc`; `xoc` in
    /// `PTXFLOW_GRU_TUNE`). Off: `rnn_gru_held48sw`.
    pub overlap: bool,
    /// With `overlap`: thread 0's gather timed in stamped launches (`rnn_gru_held48swxcp`,
    /// `gru::stationary::PROBES`; `xocp` in `PTXFLOW_GRU_TUNE`); ignored without `overlap`.
    pub probe: bool,
    /// The 64-row held kernel without split roles (the ensemble of 5's shape): the partials of
    /// `W_ih x_{t+2}` between the gather's first poll loads and their check, so that the loads'
    /// L2 round trip hides them (`rnn_gru_held64o`; `g` in `PTXFLOW_GRU_TUNE`, e.g. `xocg`).
    /// Off: `rnn_gru_held64`. Ignored by the other kernels.
    pub partials_in_gather: bool,
}

/// One GRU or an ensemble (same sizes), with device buffers for up to `max_steps` x `max_batch`.
pub struct GpuGru {
    dev: Rollout,
    x: DeviceBuffer<f32>,
    h0: DeviceBuffer<f32>,
    stage: Vec<f32>,
}

fn pad_cols(src: &[f32], rows: usize, cols: usize, cols_pad: usize, dst: &mut Vec<f32>) {
    for r in 0..rows {
        dst.extend_from_slice(&src[r * cols..(r + 1) * cols]);
        dst.extend(std::iter::repeat_n(0.0f32, cols_pad - cols));
    }
}

/// The GRU kernels' weight arrays for an ensemble, members one after another: `w_ih` with its
/// input columns zero-padded to `input_pad`, `w_hh`, `b_ih` with `b_hh`'s r and z gates folded in
/// (the kernels add them through gi), `b_hh`, and the layer-norm gain and bias (1 and 0 without
/// layer norm).
#[derive(Clone, Debug, Default)]
pub struct PackedGru {
    /// `E x 3H x input_pad`.
    pub w_ih: Vec<f32>,
    /// `E x 3H x H`.
    pub w_hh: Vec<f32>,
    /// `E x 3H`, r and z rows with `b_hh` added.
    pub b_ih: Vec<f32>,
    /// `E x 3H`.
    pub b_hh: Vec<f32>,
    /// `E x H`.
    pub ln_gain: Vec<f32>,
    /// `E x H`.
    pub ln_bias: Vec<f32>,
}

/// Packs `members` (same sizes, checked by the caller) for the GRU kernels.
pub fn pack_members(members: &[GruWeights], input_pad: usize) -> PackedGru {
    let mut p = PackedGru::default();
    for w in members {
        let (input, hidden) = (w.input(), w.hidden());
        pad_cols(w.w_ih(), 3 * hidden, input, input_pad, &mut p.w_ih);
        p.w_hh.extend_from_slice(w.w_hh());
        let (ih, hh) = (w.b_ih(), w.b_hh());
        p.b_ih
            .extend((0..3 * hidden).map(|i| if i < 2 * hidden { ih[i] + hh[i] } else { ih[i] }));
        p.b_hh.extend_from_slice(hh);
        match w.layer_norm() {
            Some(ln) => {
                p.ln_gain.extend_from_slice(&ln.gain);
                p.ln_bias.extend_from_slice(&ln.bias);
            }
            None => {
                p.ln_gain.extend(std::iter::repeat_n(1.0f32, hidden));
                p.ln_bias.extend(std::iter::repeat_n(0.0f32, hidden));
            }
        }
    }
    p
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
        }
        let packed = pack_members(members, input_pad);
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
            plain_launch: std::env::var("PTXFLOW_GRU_PLAIN_LAUNCH").is_ok_and(|v| v == "1"),
        };
        let weights = Weights {
            w_ih: DeviceBuffer::from_host(&s, &packed.w_ih, "GRU w_ih")?,
            w_hh: DeviceBuffer::from_host(&s, &packed.w_hh, "GRU w_hh")?,
            b_ih: DeviceBuffer::from_host(&s, &packed.b_ih, "GRU b_ih")?,
            b_hh: DeviceBuffer::from_host(&s, &packed.b_hh, "GRU b_hh")?,
            ln_gain: DeviceBuffer::from_host(&s, &packed.ln_gain, "layer-norm gain")?,
            ln_bias: DeviceBuffer::from_host(&s, &packed.ln_bias, "layer-norm bias")?,
        };
        let state = State {
            hx: zeros(&s, seq, "GRU exchange words")?,
            out: zeros(&s, seq, "GRU output states")?,
            bar: zeros(&s, 4 * e, "GRU barrier words")?,
            stamps: zeros(
                &s,
                STAMPS as usize + 4 * shape.blocks as usize,
                "GRU clock stamps",
            )?,
        };
        let x = zeros(&s, max_steps * bp * input_pad, "GRU input sequence")?;
        let h0 = zeros(&s, e * bp * hidden, "GRU initial state")?;
        Ok(GpuGru {
            dev: Rollout {
                gpu,
                dims,
                weights,
                state,
            },
            x,
            h0,
            stage: Vec::new(),
        })
    }

    /// Ensemble members the rollout runs (each with its own dropout mask).
    pub fn members(&self) -> usize {
        self.dev.dims.members
    }
    /// Hidden units a block owns (the largest slice).
    pub fn units_per_block(&self) -> u32 {
        self.dev.dims.shape.units
    }
    /// Unit slices per batch group.
    pub fn unit_slices(&self) -> u32 {
        self.dev.dims.shape.slices
    }
    /// Batch rows each block owns (at the largest batch).
    pub fn rows_per_block(&self) -> u32 {
        self.dev.dims.shape.rows
    }
    /// Whether the weights are held in registers (`gru::stationary`).
    pub fn stationary(&self) -> bool {
        matches!(
            self.dev.dims.shape.path,
            Path::Stationary | Path::Stationary48 | Path::Cluster(..) | Path::Held { .. }
        )
    }
    /// How the cluster kernels stage h0 and x (`None` on the other kernels).
    pub fn staging(&self) -> Option<GruStaging> {
        match self.dev.dims.shape.path {
            Path::Cluster(_, Staging::Copies, _) => Some(GruStaging::Copies),
            Path::Cluster(_, Staging::Async, _) => Some(GruStaging::CpAsync),
            Path::Cluster(_, Staging::Streamed, _) => Some(GruStaging::Streamed),
            Path::Shared | Path::Stationary | Path::Stationary48 | Path::Held { .. } => None,
        }
    }
    /// The rollout kernel's entry name.
    pub fn kernel_name(&self) -> &'static str {
        self.dev.dims.shape.kernel().name()
    }
    /// How the blocks exchange new states each step.
    pub fn exchange(&self) -> GruExchange {
        match self.dev.dims.shape.path {
            Path::Cluster(ClusterExchange::Async, ..) => GruExchange::ClusterAsync,
            Path::Cluster(ClusterExchange::Barrier, ..) => GruExchange::ClusterBarrier,
            Path::Shared | Path::Stationary | Path::Stationary48 | Path::Held { .. } => {
                GruExchange::Global
            }
        }
    }
    /// Steps of the input projection computed at once (on the weight-stationary path: every
    /// step before step 0, or 1).
    pub fn projection_steps(&self) -> u32 {
        let sh = self.dev.dims.shape;
        if (sh.path == Path::Stationary && sh.chunk == 0) || matches!(sh.path, Path::Held { .. }) {
            1
        } else {
            sh.chunk
        }
    }
    /// Blocks of the persistent grid (at the largest batch).
    pub fn blocks(&self) -> usize {
        self.dev.dims.shape.blocks as usize
    }
    /// Padded input width of the device sequence (`x` rows in [`GpuGru::rollout_device`]).
    pub fn input_pad(&self) -> usize {
        self.dev.dims.input_pad
    }
    /// All member states of the last device rollout, `E x T x Bp x H` (Bp = batch rounded up to 4).
    pub fn out_device(&self) -> &DeviceBuffer<f32> {
        &self.dev.state.out
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
        let req = Request {
            x,
            h0,
            shape,
            dropout,
            stamping: Stamping::Off,
        };
        self.dev.launch(stream, &req)
    }

    /// [`GpuGru::rollout_device`] with block 0's clock stamps (weights in registers only; see
    /// `gru::stationary::STAMPS` for their meaning): synchronises `stream` and returns the stamps,
    /// then (cluster kernels; zeros otherwise) per block c at `STAMPS + 4 c`: `%globaltimer` at
    /// its start and end (ns) and its SM; the probe kernels (`HeldTune::probe`) write thread 0's
    /// gather there instead (`gru::stationary::PROBES`).
    pub fn rollout_device_stamped(
        &mut self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, f32>,
        h0: &CudaView<'_, f32>,
        shape: RolloutShape,
    ) -> Result<Vec<u64>> {
        let req = Request {
            x,
            h0,
            shape,
            dropout: None,
            stamping: Stamping::On,
        };
        self.dev.launch(stream, &req)?;
        self.check(stream)?;
        let n = STAMPS as usize + 4 * self.dev.dims.shape.blocks as usize;
        self.dev.state.stamps.set_len(n)?;
        let mut out = vec![0u64; n];
        self.dev.state.stamps.download_into(stream, &mut out)?;
        Ok(out)
    }

    /// Fails if a barrier of the last launch timed out (synchronises `stream`).
    pub fn check(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.dev.check(stream)
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
        let d = self.dev.dims;
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
        let bp = d.batch_pad(shape)?;
        let s = self.dev.gpu.stream().clone();
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
        let req = Request {
            x: &xv,
            h0: &hv,
            shape,
            dropout,
            stamping: Stamping::Off,
        };
        self.dev.launch(&s, &req)?;
        self.check(&s)?;
        stage.resize(e * t * bp * h, 0.0);
        self.dev.state.out.download_into(&s, &mut stage)?;
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
