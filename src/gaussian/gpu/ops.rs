//! [`GaussianFieldOps`] for [`GpuGaussianField`]: validation (shared with the CPU field), upload,
//! kernels, download; and the staging of prepared Gaussians into the device layout.

use super::fast;
use super::field::GpuGaussianField;
use super::lanes_backward;
use super::launch::{self, Launch, Problem};
use super::GpuReal;
use crate::gaussian::layout::{self, STRIDE};
use crate::gaussian::ops::{FieldOptions, GaussianFieldOps, Gradients};
use crate::gaussian::validate;
use crate::kernels::gaussian::common;
use crate::Result;

impl<T: GpuReal> GpuGaussianField<T> {
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
            .upload(&stream, &self.comp_staging)?;
        if T::FORWARD_FAST.is_some() {
            self.origin = fast::stage(
                &self.prepared,
                self.n_pad,
                T::exp_scale(),
                &mut self.fast_staging,
            );
            self.fast
                .ensure(&stream, self.fast_staging.len())?
                .upload(&stream, &self.fast_staging)?;
            self.lanes_fit = lanes_backward::records_fit(&self.fast_staging)
                && !self.prepared.iter().any(|g| g.compensated);
        }
        Ok(())
    }

    /// Packs the prepared constants into the device layout (zero Gaussians as padding).
    fn stage(&mut self) {
        let pad = common::GAUSSIAN_PAD as usize;
        self.n_pad = self.prepared.len().div_ceil(pad).max(1) * pad;
        stage_prepared(
            &self.prepared,
            self.n_pad,
            &mut self.staging,
            &mut self.comp_staging,
        );
    }
}

/// The device layout of prepared Gaussians, `n_pad` of them (zero Gaussians as padding): `prep`
/// gets [`common::PREP_STRIDE`] scalars per Gaussian (mean, negated off-diagonal Cholesky
/// entries, reciprocal diagonal, weight x norm and norm scaled for `ex2`, weight), `comp`
/// [`common::COMP_STRIDE`] (negated guarded diagonal, the compensated flag, negated low parts,
/// 0). What `GpuGaussianField` uploads, and what the `gaussian_prepare_*` kernels must write.
pub fn stage_prepared<T: GpuReal>(
    prepared: &[layout::Prepared<T>],
    n_pad: usize,
    prep: &mut Vec<T>,
    comp: &mut Vec<T>,
) {
    let scale = T::exp_scale();
    let (stride, comp_stride) = (common::PREP_STRIDE as usize, common::COMP_STRIDE as usize);
    prep.clear();
    prep.resize(n_pad * stride, T::ZERO);
    comp.clear();
    comp.resize(n_pad * comp_stride, T::ZERO);
    for ((g, out), c) in prepared
        .iter()
        .zip(prep.chunks_exact_mut(stride))
        .zip(comp.chunks_exact_mut(comp_stride))
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
        let flag = if g.compensated { T::ONE } else { T::ZERO };
        let (a, lo) = (g.diag, g.diag_lo);
        c.copy_from_slice(&[-a[0], -a[1], -a[2], flag, -lo[0], -lo[1], -lo[2], T::ZERO]);
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
        let at = Launch {
            gpu: &self.gpu,
            stream: &stream,
            id: T::DISTANCES,
        };
        launch::distances(at, &p, dist.slice_mut())?;
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
