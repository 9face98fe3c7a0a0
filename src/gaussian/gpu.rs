//! [`GpuGaussianField`]: the Gaussian field on a CUDA device, behind the same
//! [`GaussianFieldOps`] trait as the CPU reference, for f32 and f64.
//!
//! Each call validates exactly like the CPU field (the shared [`layout`] and [`validate`] code),
//! then uploads, enqueues the kernels of `crate::kernels::gaussian` on the device's work stream
//! and downloads the results (which synchronises). `set_gaussians` uploads the prepared device
//! layout (12 scalars per Gaussian, padded with zero Gaussians to a multiple of 256; see
//! `kernels::gaussian::common`) and the f32 backward's compensation constants (8 per Gaussian:
//! two-term diagonal and the flag of `layout::Prepared::compensated`). Forward: fused kernel per (point block, Gaussian chunk), then an
//! ordered sum of the chunk rows. Backward: fused kernel per (Gaussian block, point chunk), then
//! ordered sums into dLoss/dx and the packed per-Gaussian gradient. Device and host buffers grow
//! to the largest problem seen and are reused, so a training loop does not allocate per step.
//! Results are bit-identical from run to run on a given device (no atomics).

use super::gpu_launch::{self as launch, BackwardPlan, ForwardPlan, Problem};
use super::layout::{self, Prepared, STRIDE};
use super::ops::{FieldOptions, GaussianFieldOps, Gradients};
use super::real::Real;
use super::validate;
use crate::kernels::gaussian::{backward, common, forward};
use crate::kernels::KernelId;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{CudaStream, DeviceRepr, ValidAsZeroBits};
use std::sync::Arc;

/// A float type with GPU kernels for the Gaussian field.
pub trait GpuReal: Real + DeviceRepr + ValidAsZeroBits + crate::runtime::ArgElem {
    /// Distance-matrix kernel.
    const DISTANCES: KernelId;
    /// Fused forward kernel.
    const FORWARD: KernelId;
    /// Fused backward kernel.
    const BACKWARD: KernelId;
    /// Ordered row sums.
    const REDUCE_ROWS: KernelId;
    /// Per-Gaussian gradient finish.
    const FINISH: KernelId;
    /// On-device preparation of packed Gaussians (see `gpu_raw`).
    const PREPARE: KernelId;
    /// Gaussians per thread in the backward kernel.
    const GAUSSIANS_PER_THREAD: u32;
    /// 2^o, the kernel exponential's offset folded into w c and c (see `common`).
    fn exp_scale() -> f64;
}

impl GpuReal for f32 {
    const DISTANCES: KernelId = KernelId::GaussianDistancesF32;
    const FORWARD: KernelId = KernelId::GaussianForwardF32;
    const BACKWARD: KernelId = KernelId::GaussianBackwardF32;
    const REDUCE_ROWS: KernelId = KernelId::GaussianReduceRowsF32;
    const FINISH: KernelId = KernelId::GaussianFinishF32;
    const PREPARE: KernelId = KernelId::GaussianPrepareF32;
    const GAUSSIANS_PER_THREAD: u32 = backward::GAUSSIANS_PER_THREAD_F32;
    fn exp_scale() -> f64 {
        common::f32_exp_scale()
    }
}

impl GpuReal for f64 {
    const DISTANCES: KernelId = KernelId::GaussianDistancesF64;
    const FORWARD: KernelId = KernelId::GaussianForwardF64;
    const BACKWARD: KernelId = KernelId::GaussianBackwardF64;
    const REDUCE_ROWS: KernelId = KernelId::GaussianReduceRowsF64;
    const FINISH: KernelId = KernelId::GaussianFinishF64;
    const PREPARE: KernelId = KernelId::GaussianPrepareF64;
    const GAUSSIANS_PER_THREAD: u32 = backward::GAUSSIANS_PER_THREAD_F64;
    fn exp_scale() -> f64 {
        1.0
    }
}

/// A device buffer slot that grows (reallocates) only when a larger size is needed.
struct Slot<T: DeviceRepr> {
    buf: Option<DeviceBuffer<T>>,
    what: &'static str,
}

impl<T: DeviceRepr + ValidAsZeroBits> Slot<T> {
    fn new(what: &'static str) -> Self {
        Slot { buf: None, what }
    }
    fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<&mut DeviceBuffer<T>> {
        if self.buf.as_ref().is_none_or(|b| b.capacity() < len) {
            self.buf = Some(DeviceBuffer::zeros(stream, len, self.what)?);
        }
        let buf = self.buf.as_mut().expect("allocated just above");
        buf.set_len(len)?;
        Ok(buf)
    }
    fn get(&self) -> Result<&DeviceBuffer<T>> {
        self.buf
            .as_ref()
            .ok_or_else(|| Error::input(format!("{} is not on the device yet", self.what)))
    }
    fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.allocated_bytes())
    }
}

/// The Gaussian field on a GPU. Owns its device buffers and host result buffers; see the module
/// docs. Create with [`GpuGaussianField::new`]; then use it through [`GaussianFieldOps`].
pub struct GpuGaussianField<T: GpuReal> {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    options: FieldOptions,
    diag_eps: T,
    prepared: Vec<Prepared<T>>,
    staging: Vec<T>,
    comp_staging: Vec<T>,
    n_pad: usize,
    b: usize,
    forward_valid: bool,
    prep: Slot<T>,
    comp: Slot<T>,
    points: Slot<T>,
    dist_points: Slot<T>,
    grad_values: Slot<T>,
    values_dev: Slot<T>,
    scratch: Slot<T>,
    partial_gauss: Slot<T>,
    grad_points_dev: Slot<T>,
    grad_gaussians_dev: Slot<T>,
    dist: Slot<T>,
    values: Vec<T>,
    grad_points: Vec<T>,
    grad_gaussians: Vec<T>,
    /// Resident-block capacity of the forward and backward kernels (queried on first use).
    slots: Option<(u32, u32)>,
}

impl<T: GpuReal> GpuGaussianField<T> {
    /// A field with no Gaussians yet on `gpu` (kernels load on first use).
    ///
    /// Errors: [`Error::Input`] if `options.diag_eps` is negative or non-finite.
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
            n_pad: 0,
            b: 0,
            forward_valid: false,
            prep: Slot::new("gaussian prepared Gaussians"),
            comp: Slot::new("gaussian compensation constants"),
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
        let (fs, bs) = self.slots()?;
        let (n_pad, b) = (self.n_pad as u32, self.b as u32);
        Ok((
            launch::forward_plan(n_pad, b, fs),
            launch::backward_plan(n_pad, b, bs, T::GAUSSIANS_PER_THREAD),
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

    /// Enqueues the forward kernels for the points of the last [`GaussianFieldOps::forward`],
    /// already on the device; no transfer, no synchronisation (for timing device work alone).
    ///
    /// Errors: no forward yet; a launch failure.
    pub fn forward_resident(&mut self) -> Result<()> {
        if self.b == 0 {
            return Ok(());
        }
        self.problem_points()?;
        let plan = launch::forward_plan(self.n_pad as u32, self.b as u32, self.slots()?.0);
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
        if plan.chunks == 1 {
            return launch::forward(&self.gpu, &stream, T::FORWARD, &p, &plan, &mut values);
        }
        let rows = plan.chunks as usize * b;
        let scratch = self.scratch.ensure(&stream, rows)?;
        launch::forward(
            &self.gpu,
            &stream,
            T::FORWARD,
            &p,
            &plan,
            &mut scratch.slice_mut().slice_mut(0..rows),
        )?;
        launch::reduce_rows(
            &self.gpu,
            &stream,
            T::REDUCE_ROWS,
            scratch.slice(),
            plan.chunks,
            b as u32,
            b as u32,
            T::ONE,
            &mut values,
        )
    }

    /// Enqueues the backward kernels for the grad_values of the last
    /// [`GaussianFieldOps::backward`], already on the device; no transfer, no synchronisation.
    ///
    /// Errors: no backward yet; a launch failure.
    pub fn backward_resident(&mut self) -> Result<()> {
        if self.b == 0 {
            return Ok(());
        }
        let pts3 = self.problem_points()?;
        let (n, n_pad, b) = (self.prepared.len(), self.n_pad, self.b);
        let plan = launch::backward_plan(
            n_pad as u32,
            b as u32,
            self.slots()?.1,
            T::GAUSSIANS_PER_THREAD,
        );
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
        let gv = self.grad_values.get()?.slice();
        let comp = self.comp.get()?.slice();
        launch::backward(
            &self.gpu,
            &stream,
            T::BACKWARD,
            &p,
            gv,
            &plan,
            partial_points.slice_mut(),
            partial_gauss.slice_mut(),
            comp,
        )?;
        launch::reduce_rows(
            &self.gpu,
            &stream,
            T::REDUCE_ROWS,
            partial_points.slice(),
            plan.gauss_blocks,
            pts3,
            pts3,
            -T::ONE,
            &mut grad_points,
        )?;
        launch::finish(
            &self.gpu,
            &stream,
            T::FINISH,
            &p,
            partial_gauss.slice(),
            plan.chunks,
            self.options.normalised,
            &mut grad_gaussians,
        )
    }

    fn upload_prepared(&mut self) -> Result<()> {
        let pad = common::GAUSSIAN_PAD as usize;
        launch::to_u32(
            self.prepared.len().div_ceil(pad) * pad * common::PREP_STRIDE as usize,
            "gaussian prepared scalars",
        )?;
        self.stage();
        let stream = self.stream.clone();
        self.prep
            .ensure(&stream, self.staging.len())?
            .upload(&stream, &self.staging)?;
        self.comp
            .ensure(&stream, self.comp_staging.len())?
            .upload(&stream, &self.comp_staging)
    }

    /// Packs the prepared constants into the device layout (zero Gaussians as padding).
    fn stage(&mut self) {
        let pad = common::GAUSSIAN_PAD as usize;
        let n = self.prepared.len();
        self.n_pad = n.div_ceil(pad).max(1) * pad;
        let scale = T::exp_scale();
        let stride = common::PREP_STRIDE as usize;
        self.staging.clear();
        self.staging.resize(self.n_pad * stride, T::ZERO);
        for (g, out) in self
            .prepared
            .iter()
            .zip(self.staging.chunks_exact_mut(stride))
        {
            out.copy_from_slice(&[
                g.mu[0],
                g.mu[1],
                g.mu[2],
                -g.l10,
                -g.l20,
                -g.l21,
                g.inv_diag[0],
                g.inv_diag[1],
                g.inv_diag[2],
                T::from_f64(g.weight_norm.to_f64() * scale),
                T::from_f64(g.norm.to_f64() * scale),
                g.weight,
            ]);
        }
        let comp_stride = common::COMP_STRIDE as usize;
        self.comp_staging.clear();
        self.comp_staging.resize(self.n_pad * comp_stride, T::ZERO);
        for (g, out) in self
            .prepared
            .iter()
            .zip(self.comp_staging.chunks_exact_mut(comp_stride))
        {
            let flag = if g.compensated { T::ONE } else { T::ZERO };
            let (a, lo) = (g.diag, g.diag_lo);
            out.copy_from_slice(&[-a[0], -a[1], -a[2], flag, -lo[0], -lo[1], -lo[2], T::ZERO]);
        }
    }
}

impl<T: GpuReal> GaussianFieldOps for GpuGaussianField<T> {
    type Scalar = T;

    fn device(&self) -> &'static str {
        "gpu"
    }

    fn options(&self) -> FieldOptions {
        self.options
    }

    fn set_gaussians(&mut self, packed: &[T]) -> Result<()> {
        self.forward_valid = false;
        if let Err(e) = layout::prepare(
            packed,
            self.options.normalised,
            self.diag_eps,
            &mut self.prepared,
        ) {
            self.prepared.clear();
            return Err(e);
        }
        let uploaded = self.upload_prepared();
        if uploaded.is_err() {
            self.prepared.clear();
        }
        uploaded
    }

    fn num_gaussians(&self) -> usize {
        self.prepared.len()
    }

    fn distances_into(&mut self, points: &[T], out: &mut [T]) -> Result<()> {
        validate::require_gaussians(self.prepared.len())?;
        let b = layout::check_points(points)?;
        let n = self.prepared.len();
        validate::check_distance_out(b, n, out.len())?;
        if b == 0 {
            return Ok(());
        }
        launch::to_u32(points.len(), "gaussian point scalars per launch")?;
        let stream = self.stream.clone();
        let pts = self.dist_points.ensure(&stream, points.len())?;
        pts.upload(&stream, points)?;
        let dist = self.dist.ensure(&stream, b * n)?;
        let p = Problem {
            prep: self.prep.get()?.slice(),
            n: n as u32,
            n_pad: self.n_pad as u32,
            points: pts.slice(),
            b: b as u32,
        };
        launch::distances(&self.gpu, &stream, T::DISTANCES, &p, dist.slice_mut())?;
        dist.download_into(&stream, out)
    }

    fn forward(&mut self, points: &[T]) -> Result<&[T]> {
        validate::require_gaussians(self.prepared.len())?;
        self.forward_valid = false;
        let b = layout::check_points(points)?;
        launch::to_u32(points.len(), "gaussian point scalars per launch")?;
        let stream = self.stream.clone();
        self.points
            .ensure(&stream, points.len())?
            .upload(&stream, points)?;
        self.b = b;
        self.values.clear();
        self.values.resize(b, T::ZERO);
        if b > 0 {
            self.forward_resident()?;
            self.values_dev
                .get()?
                .download_into(&stream, &mut self.values)?;
        }
        validate::check_values(&self.values)?;
        self.forward_valid = true;
        Ok(&self.values)
    }

    fn backward(&mut self, grad_values: &[T]) -> Result<Gradients<'_, T>> {
        let b = self.values.len();
        validate::check_grad_values(self.forward_valid, b, grad_values)?;
        let n = self.prepared.len();
        self.grad_points.clear();
        self.grad_points.resize(3 * b, T::ZERO);
        self.grad_gaussians.clear();
        self.grad_gaussians.resize(n * STRIDE, T::ZERO);
        if b > 0 {
            let stream = self.stream.clone();
            self.grad_values
                .ensure(&stream, b)?
                .upload(&stream, grad_values)?;
            self.backward_resident()?;
            self.grad_points_dev
                .get()?
                .download_into(&stream, &mut self.grad_points)?;
            self.grad_gaussians_dev
                .get()?
                .download_into(&stream, &mut self.grad_gaussians)?;
        }
        validate::check_gradients(&self.grad_points, &self.grad_gaussians)?;
        Ok(Gradients {
            points: &self.grad_points,
            gaussians: &self.grad_gaussians,
        })
    }
}
