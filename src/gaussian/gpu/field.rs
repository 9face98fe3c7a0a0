//! [`GpuGaussianField`]: the Gaussian field on a CUDA device, its buffers, and the enqueueing
//! of the forward and backward kernels on data already on the device (see the module docs of
//! [`super`]).

use super::fast::{self, ForwardKind};
use super::fast_backward::{BackwardKind, FastBackward};
use super::launch::{self, BackwardBuffers, BackwardPlan, ForwardPlan, Launch, Problem, RowSum};
use super::slot::Slot;
use super::GpuReal;
use crate::gaussian::layout::{Prepared, STRIDE};
use crate::gaussian::ops::FieldOptions;
use crate::gaussian::validate;
use crate::kernels::gaussian::{backward, forward};
use crate::runtime::Gpu;
use crate::Result;
use cudarc::driver::{CudaStream, CudaViewMut};
use std::sync::Arc;

/// The Gaussian field on a GPU. Owns its device buffers and host result buffers; see the module
/// docs. Create with [`GpuGaussianField::new`]; then use it through [`GaussianFieldOps`](crate::gaussian::GaussianFieldOps).
pub struct GpuGaussianField<T: GpuReal> {
    pub(super) gpu: Arc<Gpu>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) options: FieldOptions,
    pub(super) diag_eps: T,
    pub(super) prepared: Vec<Prepared<T>>,
    pub(super) staging: Vec<T>,
    pub(super) comp_staging: Vec<T>,
    pub(super) fast_staging: Vec<T>,
    /// The origin of the expanded forward's records (`fast::stage`).
    pub(super) origin: [T; 3],
    pub(super) forward_kind: ForwardKind,
    pub(super) backward_kind: BackwardKind,
    pub(super) n_pad: usize,
    pub(super) b: usize,
    pub(super) forward_valid: bool,
    pub(super) prep: Slot<T>,
    pub(super) comp: Slot<T>,
    pub(super) fast: Slot<T>,
    pub(super) points: Slot<T>,
    pub(super) dist_points: Slot<T>,
    pub(super) grad_values: Slot<T>,
    pub(super) values_dev: Slot<T>,
    pub(super) scratch: Slot<T>,
    pub(super) partial_gauss: Slot<T>,
    pub(super) grad_points_dev: Slot<T>,
    pub(super) grad_gaussians_dev: Slot<T>,
    pub(super) dist: Slot<T>,
    pub(super) values: Vec<T>,
    pub(super) grad_points: Vec<T>,
    pub(super) grad_gaussians: Vec<T>,
    /// Resident-block capacity of the forward and backward kernels (queried on first use).
    pub(super) slots: Option<(u32, u32)>,
    /// The expanded forward, loaded on first use.
    pub(super) fast_kernel: Option<fast::FastKernel>,
    /// The expanded backward, loaded on first use.
    pub(super) fast_backward: Option<FastBackward>,
    /// The points-in-lanes backward, loaded on first use.
    pub(super) lanes_backward: Option<super::lanes_backward::LanesBackward>,
    /// The tensor-core backward (`tc_backward`, opt-in), loaded on first use.
    pub(super) tc_backward: Option<super::lanes_backward::LanesBackward>,
    /// Whether the staged Gaussians allow the points-in-lanes backward
    /// (`lanes_backward::records_fit`, none compensated).
    pub(super) lanes_fit: bool,
}

impl<T: GpuReal> GpuGaussianField<T> {
    /// A field with no Gaussians yet on `gpu` (kernels load on first use).
    ///
    /// Errors: [`Error::Input`](crate::Error::Input) if `options.diag_eps` is negative or non-finite.
    pub fn new(gpu: Arc<Gpu>, options: FieldOptions) -> Result<Self> {
        validate::check_options(&options)?;
        let stream = gpu.stream().clone();
        Ok(GpuGaussianField {
            gpu,
            stream,
            options,
            diag_eps: T::from_f64(options.diag_eps),
            prepared: Vec::new(),
            staging: Vec::new(),
            comp_staging: Vec::new(),
            fast_staging: Vec::new(),
            origin: [T::ZERO; 3],
            forward_kind: ForwardKind::from_env(),
            backward_kind: BackwardKind::from_env(),
            n_pad: 0,
            b: 0,
            forward_valid: false,
            prep: Slot::new("gaussian prepared Gaussians"),
            comp: Slot::new("gaussian compensation constants"),
            fast: Slot::new("gaussian expanded forward records"),
            points: Slot::new("gaussian points"),
            dist_points: Slot::new("gaussian distance points"),
            grad_values: Slot::new("gaussian grad_values"),
            values_dev: Slot::new("gaussian values"),
            scratch: Slot::new("gaussian partial sums"),
            partial_gauss: Slot::new("gaussian per-Gaussian partial sums"),
            grad_points_dev: Slot::new("gaussian point gradients"),
            grad_gaussians_dev: Slot::new("gaussian Gaussian gradients"),
            dist: Slot::new("gaussian distance matrix"),
            values: Vec::new(),
            grad_points: Vec::new(),
            grad_gaussians: Vec::new(),
            slots: None,
            fast_kernel: None,
            fast_backward: None,
            lanes_backward: None,
            tc_backward: None,
            lanes_fit: false,
        })
    }

    /// The device this field runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Bytes currently allocated on the device (constant across steps of one size).
    pub fn device_bytes(&self) -> usize {
        [
            &self.prep,
            &self.comp,
            &self.fast,
            &self.points,
            &self.dist_points,
            &self.grad_values,
            &self.values_dev,
            &self.scratch,
        ]
        .iter()
        .chain(
            [
                &self.partial_gauss,
                &self.grad_points_dev,
                &self.grad_gaussians_dev,
                &self.dist,
            ]
            .iter(),
        )
        .map(|s| s.bytes())
        .sum()
    }

    /// How the forward and backward of the last forward's size are split (for reports).
    ///
    /// Errors: loading a kernel or querying its occupancy failed.
    pub fn plans(&mut self) -> Result<(ForwardPlan, BackwardPlan)> {
        let (n_pad, b) = (self.n_pad as u32, self.b as u32);
        let fwd = self.forward_plan()?;
        if let Some(k) = self.lanes_backward()? {
            return Ok((fwd, k.plan(n_pad, b)));
        }
        let (bs, q) = match self.fast_backward()? {
            Some(k) => (k.slots, k.q),
            None => (self.slots()?.1, T::GAUSSIANS_PER_THREAD),
        };
        Ok((fwd, launch::backward_plan(n_pad, b, bs, q)))
    }

    /// The f32 forward kernel this field runs (f64 always runs the subtract form). The default
    /// comes from `PTXFLOW_GAUSS_FORWARD` ([`ForwardKind::from_env`]).
    pub fn set_forward_kind(&mut self, kind: ForwardKind) {
        self.forward_kind = kind;
    }

    /// The f32 backward kernel this field runs (f64 always runs the unit kernel). The default
    /// comes from `PTXFLOW_GAUSS_BACKWARD` ([`BackwardKind::from_env`]).
    pub fn set_backward_kind(&mut self, kind: BackwardKind) {
        self.backward_kind = kind;
    }

    /// The expanded backward (loaded on first use), when this type has one, it is chosen and
    /// no Gaussian takes the compensated solve (the expanded kernel runs those per pair in a
    /// slow branch; the unit kernel is the faster one for such sets).
    fn fast_backward(&mut self) -> Result<Option<FastBackward>> {
        let chosen = self.backward_kind == BackwardKind::Expanded
            && !self.prepared.iter().any(|g| g.compensated);
        let Some(id) = T::BACKWARD_FAST.filter(|_| chosen) else {
            return Ok(None);
        };
        if self.fast_backward.is_none() {
            self.fast_backward = Some(FastBackward::load(&self.gpu, id)?);
        }
        Ok(self.fast_backward.clone())
    }

    /// The expanded kernel (loaded on first use), when this type has one and it is chosen.
    fn fast_kernel(&mut self) -> Result<Option<fast::FastKernel>> {
        let Some(id) = T::FORWARD_FAST.filter(|_| self.forward_kind == ForwardKind::Expanded)
        else {
            return Ok(None);
        };
        if self.fast_kernel.is_none() {
            self.fast_kernel = Some(fast::FastKernel::load(&self.gpu, id)?);
        }
        Ok(self.fast_kernel.clone())
    }

    /// The forward split of the current size for the chosen kernel.
    fn forward_plan(&mut self) -> Result<ForwardPlan> {
        let (n_pad, b) = (self.n_pad as u32, self.b as u32);
        if let Some(k) = self.fast_kernel()? {
            return Ok(k.plan(n_pad, b));
        }
        let fs = self.slots()?.0;
        Ok(launch::forward_plan(
            n_pad,
            b,
            fs,
            T::FORWARD_POINTS_PER_BLOCK,
        ))
    }

    fn slots(&mut self) -> Result<(u32, u32)> {
        if let Some(s) = self.slots {
            return Ok(s);
        }
        let s = (
            launch::resident_slots(&self.gpu, T::FORWARD, forward::BLOCK)?,
            launch::resident_slots(&self.gpu, T::BACKWARD, backward::BLOCK)?,
        );
        self.slots = Some(s);
        Ok(s)
    }

    /// Fills every device output and scratch buffer with NaN (a test aid: an element a kernel
    /// fails to write then shows up as NaN instead of a stale value).
    pub fn poison_device_outputs(&mut self) -> Result<()> {
        let stream = self.stream.clone();
        for slot in [
            &mut self.values_dev,
            &mut self.scratch,
            &mut self.partial_gauss,
            &mut self.grad_points_dev,
            &mut self.grad_gaussians_dev,
            &mut self.dist,
        ] {
            if let Some(buf) = slot.buf.as_mut() {
                let len = buf.len();
                let nan = vec![T::from_f64(f64::NAN); buf.capacity()];
                buf.upload(&stream, &nan)?;
                buf.set_len(len)?;
            }
        }
        self.gpu.sync()
    }

    fn problem_points(&self) -> Result<u32> {
        launch::to_u32(3 * self.b, "gaussian point scalars per launch")
    }

    /// Enqueues the forward kernels for the points of the last [`GaussianFieldOps::forward`](crate::gaussian::GaussianFieldOps::forward),
    /// already on the device; no transfer, no synchronisation (for timing device work alone).
    ///
    /// Errors: no forward yet; a launch failure.
    pub fn forward_resident(&mut self) -> Result<()> {
        if self.b == 0 {
            return Ok(());
        }
        self.problem_points()?;
        let plan = self.forward_plan()?;
        let fast_kernel = self.fast_kernel()?;
        let b = self.b;
        let stream = self.stream.clone();
        let values = self.values_dev.ensure(&stream, b)?;
        let p = Problem {
            prep: self.prep.get()?.slice(),
            n: self.prepared.len() as u32,
            n_pad: self.n_pad as u32,
            points: self.points.get()?.slice(),
            b: b as u32,
        };
        let mut values = values.slice_mut().slice_mut(0..b);
        let at = |id| Launch {
            gpu: &self.gpu,
            stream: &stream,
            id,
        };
        let fast = fast_kernel
            .as_ref()
            .map(|k| self.fast.get().map(|f| (k, f.slice())));
        let fk = fast.transpose()?;
        let origin = self.origin;
        let run = |out: &mut CudaViewMut<'_, T>, sums: Option<&mut CudaViewMut<'_, T>>| match fk {
            Some((k, f)) => k.forward(&stream, &p, f, &origin, &plan, out, sums),
            _ => launch::forward(at(T::FORWARD), &p, &plan, out),
        };
        if plan.chunks == 1 {
            return run(&mut values, None);
        }
        let rows = plan.chunks as usize * b;
        let scratch = self.scratch.ensure(&stream, rows)?;
        let mut partial = scratch.slice_mut().slice_mut(0..rows);
        if fk.is_some_and(|(k, _)| k.fused) {
            return run(&mut partial, Some(&mut values));
        }
        run(&mut partial, None)?;
        let sum = RowSum {
            partial: scratch.slice(),
            rows: plan.chunks,
            stride: b as u32,
            len: b as u32,
            scale: T::ONE,
        };
        launch::reduce_rows(at(T::REDUCE_ROWS), sum, &mut values)
    }

    /// Enqueues the backward kernels for the grad_values of the last
    /// [`GaussianFieldOps::backward`](crate::gaussian::GaussianFieldOps::backward), already on the device; no transfer, no synchronisation.
    ///
    /// Errors: no backward yet; a launch failure.
    pub fn backward_resident(&mut self) -> Result<()> {
        if self.b == 0 {
            return Ok(());
        }
        let pts3 = self.problem_points()?;
        let (n, n_pad, b) = (self.prepared.len(), self.n_pad, self.b);
        let lanes_bwd = self.lanes_backward()?;
        let fast_bwd = self.fast_backward()?;
        let plan = match (&lanes_bwd, &fast_bwd) {
            (Some(k), _) => k.plan(n_pad as u32, b as u32),
            (None, Some(k)) => launch::backward_plan(n_pad as u32, b as u32, k.slots, k.q),
            (None, None) => {
                let slots = self.slots()?.1;
                launch::backward_plan(n_pad as u32, b as u32, slots, T::GAUSSIANS_PER_THREAD)
            }
        };
        let stream = self.stream.clone();
        let partial_points = self
            .scratch
            .ensure(&stream, plan.gauss_blocks as usize * 3 * b)?;
        let partial_gauss = self
            .partial_gauss
            .ensure(&stream, plan.chunks as usize * n_pad * STRIDE)?;
        // Separate allocations: the finish kernel's 2-wide vector stores need its output aligned
        // to 2 scalars, which an offset of 3B scalars into a shared buffer is not for odd B.
        let mut grad_points = self
            .grad_points_dev
            .ensure(&stream, 3 * b)?
            .slice_mut()
            .slice_mut(0..3 * b);
        let mut grad_gaussians = self
            .grad_gaussians_dev
            .ensure(&stream, n * STRIDE)?
            .slice_mut()
            .slice_mut(0..n * STRIDE);
        let p = Problem {
            prep: self.prep.get()?.slice(),
            n: n as u32,
            n_pad: n_pad as u32,
            points: self.points.get()?.slice(),
            b: b as u32,
        };
        let at = |id| Launch {
            gpu: &self.gpu,
            stream: &stream,
            id,
        };
        let bufs = BackwardBuffers {
            grad_values: self.grad_values.get()?.slice(),
            comp: self.comp.get()?.slice(),
            partial_points: partial_points.slice_mut(),
            partial_gauss: partial_gauss.slice_mut(),
        };
        match (&lanes_bwd, &fast_bwd) {
            (Some(k), _) => k.backward(
                &stream,
                &p,
                self.fast.get()?.slice(),
                &self.origin,
                &plan,
                bufs,
            )?,
            (None, Some(k)) => k.backward(
                &stream,
                &p,
                self.fast.get()?.slice(),
                &self.origin,
                &plan,
                bufs,
            )?,
            (None, None) => launch::backward(at(T::BACKWARD), &p, &plan, bufs)?,
        }
        let sum = RowSum {
            partial: partial_points.slice(),
            rows: plan.gauss_blocks,
            stride: pts3,
            len: pts3,
            scale: -T::ONE,
        };
        launch::reduce_rows(at(T::REDUCE_ROWS), sum, &mut grad_points)?;
        let normalised = self.options.normalised;
        let rows = plan.chunks;
        let partial = partial_gauss.slice();
        launch::finish(
            at(T::FINISH),
            &p,
            partial,
            rows,
            normalised,
            &mut grad_gaussians,
        )
    }
}
