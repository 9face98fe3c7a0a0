//! The device side of [`GpuGru`](super::gru::GpuGru): its sizes, device buffers and the launch of
//! the rollout kernel the block shape picked (`rnn_gru_shared` or `rnn_gru_stationary`).

use super::gru_cluster::cluster_param;
use super::gru_shape::{smem_bytes, Path, Shape};
use super::{allow_dynamic_smem, cfg, check_barriers, round_up, u32_of};
use crate::kernels::rnn::gru::THREADS;
use crate::rnn::reference::RolloutShape;
use crate::rnn::Dropout;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, CudaView};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub members: usize,
    pub input: usize,
    pub input_pad: usize,
    pub hidden: usize,
    pub max_steps: usize,
    pub max_batch_pad: usize,
    pub layer_norm: bool,
    pub ln_eps: f32,
    pub shape: Shape,
    /// Held kernels only, measurements only: an ordinary launch instead of the cooperative one
    /// (`PTXFLOW_GRU_PLAIN_LAUNCH=1` when the GRU is built; co-residency is then not guaranteed,
    /// and a grid that is not co-resident fails with the barrier timeout's error).
    pub plain_launch: bool,
}

impl Dims {
    /// The padded batch of `shape`, or a `Capacity` error when it does not fit the buffers.
    pub fn batch_pad(&self, shape: RolloutShape) -> Result<usize> {
        let bp = round_up(shape.batch, 4);
        if shape.steps == 0
            || shape.batch == 0
            || shape.steps > self.max_steps
            || bp > self.max_batch_pad
        {
            return Err(Error::Capacity {
                what: "GRU rollout steps x padded batch".into(),
                needed: shape.steps * bp,
                capacity: self.max_steps * self.max_batch_pad,
            });
        }
        Ok(bp)
    }
}

pub(super) struct Weights {
    pub w_ih: DeviceBuffer<f32>,
    pub w_hh: DeviceBuffer<f32>,
    pub b_ih: DeviceBuffer<f32>,
    pub b_hh: DeviceBuffer<f32>,
    pub ln_gain: DeviceBuffer<f32>,
    pub ln_bias: DeviceBuffer<f32>,
}

pub(super) struct State {
    /// Tagged exchange words (see the kernel notes); never cleared: tags tell launches apart.
    pub hx: DeviceBuffer<u64>,
    pub out: DeviceBuffer<f32>,
    /// `epoch, count, status, -` per member.
    pub bar: DeviceBuffer<u32>,
    /// Block 0's clock stamps of a stamped launch (benchmarks; see `gru::stationary::STAMPS`).
    pub stamps: DeviceBuffer<u64>,
}

/// Whether a launch records block 0's clock stamps (weight-stationary kernel only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stamping {
    Off,
    On,
}

/// One rollout to enqueue: `x` is `steps x Bp x input_pad`, `h0` is `E x Bp x H`.
pub(super) struct Request<'a, 'v> {
    pub x: &'a CudaView<'v, f32>,
    pub h0: &'a CudaView<'v, f32>,
    pub shape: RolloutShape,
    pub dropout: Option<&'a Dropout>,
    pub stamping: Stamping,
}

/// The kernel's side of a GRU: sizes, weights and state on the device.
pub(super) struct Rollout {
    pub gpu: Arc<Gpu>,
    pub dims: Dims,
    pub weights: Weights,
    pub state: State,
}

impl Rollout {
    /// Enqueues the rollout `req` on `stream`; the states land in `state.out`.
    pub fn launch(&mut self, stream: &Arc<CudaStream>, req: &Request<'_, '_>) -> Result<()> {
        let (d, w, st) = (&self.dims, &self.weights, &mut self.state);
        let shape = req.shape;
        let bp = d.batch_pad(shape)?;
        let (x, h0) = (req.x, req.h0);
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
        if let Some(dr) = req.dropout {
            dr.validate()?;
        }
        let sh = d.shape;
        if req.stamping == Stamping::On && sh.path == Path::Shared {
            return Err(Error::input(
                "GRU clock stamps need the weight-stationary kernel (this GRU uses rnn_gru_shared)",
            ));
        }
        let id = sh.kernel();
        let kern = self.gpu.kernel(id)?;
        // Same rows per block at a smaller batch: the grid only shrinks, so it stays resident.
        let rows = sh.rows.min(bp as u32);
        let bytes = smem_bytes(sh.path, d.input_pad, d.hidden, sh.rows, sh.units, sh.chunk);
        allow_dynamic_smem(&self.gpu, kern.function(), bytes, id.name())?;
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
        let (drop, thr, scale, seed) = match req.dropout {
            Some(dr) if dr.p > 0.0 => (
                1u32,
                dr.threshold(),
                (1.0 / (1.0 - f64::from(dr.p))) as f32,
                dr.seed,
            ),
            _ => (0u32, 0u32, 1.0f32, 0u64),
        };
        let (seed_lo, seed_hi) = (seed as u32, (seed >> 32) as u32);
        let xms = 0u32;
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
            .arg(&seed_hi);
        lb.arg(&d.ln_eps).arg(&scale);
        // The cluster kernel's exchange, then (weights in registers) the stamps (the last).
        let no_stamps = 0u64;
        let exchange = match sh.path {
            Path::Cluster(ex, st, tu) => cluster_param(ex, st, tu),
            Path::Shared | Path::Stationary | Path::Stationary48 | Path::Held { .. } => 0,
        };
        if let Path::Cluster(..) = sh.path {
            lb.arg(&exchange);
        }
        if sh.path != Path::Shared {
            match req.stamping {
                Stamping::On => lb.arg(st.stamps.slice_mut()),
                Stamping::Off => lb.arg(&no_stamps),
            };
        }
        // SAFETY: (argument types and block shape are checked against the kernel's contract)
        // The stamps pointer is null or holds STAMPS + 4 x (blocks at the largest batch) u64.
        // Sizes: x >= steps*Bp*Ip and h0 >= E*Bp*H (checked above); weights, biases and layer-norm
        // arrays hold E members with the padded input; hx/out hold E*max_steps*maxBp*H >=
        // E*steps*Bp*H; bar holds 4 words per member (read count zero between launches: the last
        // block to count itself in resets it). The shared memory follows the kernel's smem_floats
        // for this shape and `chunk`; the grid fits the co-resident capacity (checked when the
        // shape was chosen, and a smaller batch only removes blocks) and the cooperative launch
        // refuses a grid that does not.
        match sh.path {
            // SAFETY: as above; the clusters (16 blocks of one member and batch group) are the
            // only blocks that communicate, and a cluster's blocks are always co-scheduled.
            Path::Cluster(.., tu) => unsafe { lb.launch_cluster(sh.slices, tu.spread_policy) }?,
            // SAFETY: as above.
            // SAFETY: as above; the spinning blocks give up after the barrier timeout when the
            // grid is not co-resident (`plain_launch`: measurements only).
            Path::Held { .. } if d.plain_launch => unsafe { lb.launch() }?,
            Path::Shared | Path::Stationary | Path::Stationary48 | Path::Held { .. } => {
                unsafe { lb.launch_cooperative() }?
            }
        }
        st.out.set_len(d.members * shape.steps * bp * d.hidden)?;
        Ok(())
    }

    /// Fails if a barrier of the last launch timed out (synchronises `stream`).
    pub fn check(&self, stream: &Arc<CudaStream>) -> Result<()> {
        check_barriers(
            stream,
            &self.state.bar,
            self.dims.members,
            self.dims.shape.kernel().name(),
        )
    }
}
