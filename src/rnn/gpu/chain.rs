//! [`GpuChain`]: encode -> rollout -> correct on one stream of its own, with reusable device
//! buffers, an optional CUDA graph of the three launches for repeated calls, and
//! [`run_concurrently`] for independent batches on separate streams.
//!
//! Device layout: features `T x Bp x F`, encoded inputs `T x Bp x I` (the encoder writes the
//! GRU's input directly; I must be a multiple of 128), states `T x Bp x H`, result `Bp x H`
//! (Bp = batch rounded up to 4; padding rows are zero features and are dropped on download).

use super::dense::{GpuDense, WeightStorage};
use super::gru::{GpuGru, GruLaunch};
use super::lowrank::GpuLowRank;
use super::zeros;
use crate::rnn::weights::{check_finite, check_len};
use crate::rnn::{ChainModel, RolloutShape};
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use std::sync::Arc;

/// The chain on the GPU for a fixed shape (T steps, B batch rows).
pub struct GpuChain {
    stream: Arc<CudaStream>,
    shape: RolloutShape,
    bp: usize,
    features: usize,
    input: usize,
    hidden: usize,
    dense: GpuDense,
    gru: GpuGru,
    corr: GpuLowRank,
    feats: DeviceBuffer<f32>,
    x: DeviceBuffer<f32>,
    h0: DeviceBuffer<f32>,
    out: DeviceBuffer<f32>,
    graph: Option<CudaGraph>,
    stage: Vec<f32>,
}

impl GpuChain {
    /// Uploads the model; all work runs on a new stream of `gpu`'s context.
    pub fn new(gpu: Arc<Gpu>, model: &ChainModel, shape: RolloutShape) -> Result<Self> {
        if shape.steps == 0 || shape.batch == 0 {
            return Err(Error::input("a chain needs steps and batch >= 1"));
        }
        let (f, i, h) = (model.features(), model.gru.input(), model.hidden());
        if i % 128 != 0 {
            return Err(Error::Shape {
                what: "GPU chain encoded width".into(),
                expected: "a multiple of 128".into(),
                got: i.to_string(),
            });
        }
        let bp = shape
            .batch
            .checked_next_multiple_of(4)
            .ok_or_else(|| Error::input(format!("chain batch {} overflows", shape.batch)))?;
        let stream = gpu
            .ctx()
            .new_stream()
            .map_err(Error::driver("cuStreamCreate"))?;
        let dense = GpuDense::new(gpu.clone(), &model.encoder, WeightStorage::F32, 1)?;
        let gru = GpuGru::new(
            gpu.clone(),
            std::slice::from_ref(&model.gru),
            shape.steps,
            bp,
            GruLaunch::default(),
        )?;
        let corr = GpuLowRank::new(gpu.clone(), &model.correction, 1)?;
        // Weights were uploaded and barrier words zeroed on gpu.stream(); the chain runs on its own
        // stream (event tracking is off), so order it after that work explicitly.
        stream
            .join(gpu.stream())
            .map_err(Error::driver("cuStreamWaitEvent (chain setup)"))?;
        let s = &stream;
        Ok(GpuChain {
            feats: zeros(s, shape.steps * bp * f, "chain features")?,
            x: zeros(s, shape.steps * bp * i, "chain encoded inputs")?,
            h0: zeros(s, bp * h, "chain initial state")?,
            out: zeros(s, bp * h, "chain output")?,
            stream,
            shape,
            bp,
            features: f,
            input: i,
            hidden: h,
            dense,
            gru,
            corr,
            graph: None,
            stage: Vec::new(),
        })
    }

    /// The chain's stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Copies `features` (`T x B x F`) and `h0` (`B x H`) into the device buffers (padded).
    pub fn upload(&mut self, features: &[f32], h0: &[f32]) -> Result<()> {
        let (t, b, bp) = (self.shape.steps, self.shape.batch, self.bp);
        check_len(
            "chain features (T x B x F)",
            features.len(),
            t * b * self.features,
        )?;
        check_len("chain h0 (B x H)", h0.len(), b * self.hidden)?;
        check_finite("chain features", features)?;
        check_finite("chain h0", h0)?;
        let mut stage = std::mem::take(&mut self.stage);
        stage.clear();
        for step in 0..t {
            stage.extend_from_slice(
                &features[step * b * self.features..(step + 1) * b * self.features],
            );
            stage.extend(std::iter::repeat_n(0.0f32, (bp - b) * self.features));
        }
        self.feats.upload(&self.stream, &stage)?;
        stage.clear();
        stage.extend_from_slice(h0);
        stage.extend(std::iter::repeat_n(0.0f32, (bp - b) * self.hidden));
        self.h0.upload(&self.stream, &stage)?;
        self.stage = stage;
        Ok(())
    }

    /// Enqueues encode -> rollout -> correct on the chain's stream (no synchronisation).
    pub fn enqueue(&mut self) -> Result<()> {
        let (t, bp) = (self.shape.steps, self.bp);
        let fv = self.feats.slice().slice(..);
        let mut xv = self.x.slice_mut().slice_mut(..);
        self.dense
            .forward_device(&self.stream, &fv, t * bp, &mut xv)?;
        let xv = self.x.slice().slice(..);
        let hv = self.h0.slice().slice(..);
        self.gru.rollout_device(
            &self.stream,
            &xv,
            &hv,
            RolloutShape {
                steps: t,
                batch: bp,
            },
            None,
        )?;
        let pred = self
            .gru
            .out_device()
            .slice()
            .slice((t - 1) * bp * self.hidden..t * bp * self.hidden);
        let xl = self
            .x
            .slice()
            .slice((t - 1) * bp * self.input..t * bp * self.input);
        let mut ov = self.out.slice_mut().slice_mut(..);
        self.corr
            .correct_device(&self.stream, &pred, &xl, bp, &mut ov)
    }

    /// Captures [`GpuChain::enqueue`] into a CUDA graph (after one eager run, so every module is
    /// loaded); later [`GpuChain::enqueue_graph`] calls replay it on the same buffers.
    pub fn capture_graph(&mut self) -> Result<()> {
        self.enqueue()?;
        self.stream
            .synchronize()
            .map_err(Error::driver("synchronizing before graph capture"))?;
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(Error::driver("cuStreamBeginCapture"))?;
        let enqueued = self.enqueue();
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(Error::driver("cuStreamEndCapture / cuGraphInstantiate"));
        enqueued?;
        self.graph = Some(graph?.ok_or_else(|| Error::input("graph capture recorded nothing"))?);
        Ok(())
    }

    /// Replays the captured graph (falls back to eager launches when there is none).
    pub fn enqueue_graph(&mut self) -> Result<()> {
        match &self.graph {
            Some(g) => g.launch().map_err(Error::driver("cuGraphLaunch")),
            None => self.enqueue(),
        }
    }

    /// Waits for the stream, checks the rollout's barriers and returns the result (`B x H`).
    pub fn download(&mut self) -> Result<Vec<f32>> {
        self.gru.check(&self.stream)?;
        self.out.set_len(self.bp * self.hidden)?;
        let mut out = vec![0.0f32; self.shape.batch * self.hidden];
        self.out.download_into(&self.stream, &mut out)?;
        Ok(out)
    }

    /// Upload, enqueue (graph if captured), download.
    pub fn run(&mut self, features: &[f32], h0: &[f32]) -> Result<Vec<f32>> {
        self.upload(features, h0)?;
        self.enqueue_graph()?;
        self.download()
    }
}

/// Runs independent batches through their own chains, each on its own stream, so the launches
/// of different batches overlap; returns each chain's result.
pub fn run_concurrently(
    chains: &mut [GpuChain],
    inputs: &[(Vec<f32>, Vec<f32>)],
) -> Result<Vec<Vec<f32>>> {
    if chains.len() != inputs.len() {
        return Err(Error::Shape {
            what: "concurrent chains and inputs".into(),
            expected: chains.len().to_string(),
            got: inputs.len().to_string(),
        });
    }
    for (c, (f, h)) in chains.iter_mut().zip(inputs) {
        c.upload(f, h)?;
    }
    for c in chains.iter_mut() {
        c.enqueue_graph()?;
    }
    chains.iter_mut().map(|c| c.download()).collect()
}
