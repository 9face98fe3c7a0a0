//! CPU reference of the Gaussian field ([`GaussianField`]), generic over f32/f64, parallel over
//! points with rayon, and deterministic: results do not depend on the number of threads.
//!
//! - Forward: points are split into blocks; each block loops over the Gaussians in index order and
//!   accumulates into its points, so every f_i is the sum over j = 0..N in order (never B x N).
//! - Backward: points are split into at most [`MAX_PARTIALS`] blocks, the split depending only on
//!   the number of points. Each block writes its points' gradients (disjoint) and its own partial
//!   per-Gaussian gradients; the partials are then summed block by block in a fixed order. No
//!   atomics, no races, same bits on every run.

use rayon::prelude::*;

use super::layout::{self, Prepared, POINT_STRIDE, STRIDE};
use super::ops::{FieldOptions, GaussianFieldOps, Gradients};
use super::pair;
use super::real::Real;
use super::validate;
use crate::Result;

/// Points per forward work item (the result does not depend on it).
const FORWARD_BLOCK_POINTS: usize = 64;
/// Fewest points per backward block, so that tiny problems are not split into tiny tasks.
const BACKWARD_MIN_BLOCK_POINTS: usize = 64;
/// Most backward blocks, each holding N x 10 partial sums: bounds that memory at 32 x 10 x N scalars.
pub const MAX_PARTIALS: usize = 32;
/// Gaussians per reduction work item.
const REDUCE_BLOCK_GAUSSIANS: usize = 256;

/// The CPU Gaussian field. Owns every buffer it needs; they grow to the largest problem seen and
/// are then reused, so a training loop does not allocate per step.
#[derive(Clone, Debug)]
pub struct GaussianField<T: Real> {
    options: FieldOptions,
    diag_eps: T,
    prepared: Vec<Prepared<T>>,
    points: Vec<T>,
    forward_valid: bool,
    values: Vec<T>,
    grad_points: Vec<T>,
    grad_gaussians: Vec<T>,
    partials: Vec<T>,
}

impl<T: Real> GaussianField<T> {
    /// A field with no Gaussians yet.
    ///
    /// Errors: [`crate::Error::Input`] if `options.diag_eps` is negative or non-finite.
    pub fn new(options: FieldOptions) -> Result<Self> {
        validate::check_options(&options)?;
        Ok(GaussianField {
            options,
            diag_eps: T::from_f64(options.diag_eps),
            prepared: Vec::new(),
            points: Vec::new(),
            forward_valid: false,
            values: Vec::new(),
            grad_points: Vec::new(),
            grad_gaussians: Vec::new(),
            partials: Vec::new(),
        })
    }

    /// A field with `packed` Gaussians already set (see [`GaussianFieldOps::set_gaussians`]).
    ///
    /// Errors: those of [`GaussianField::new`] and of `set_gaussians`.
    pub fn with_gaussians(options: FieldOptions, packed: &[T]) -> Result<Self> {
        let mut field = Self::new(options)?;
        field.set_gaussians(packed)?;
        Ok(field)
    }

    fn require_gaussians(&self) -> Result<()> {
        validate::require_gaussians(self.prepared.len())
    }
}

impl<T: Real> GaussianFieldOps for GaussianField<T> {
    type Scalar = T;

    fn device(&self) -> &'static str {
        "cpu"
    }

    fn options(&self) -> FieldOptions {
        self.options
    }

    fn set_gaussians(&mut self, packed: &[T]) -> Result<()> {
        self.forward_valid = false;
        let result = layout::prepare(
            packed,
            self.options.normalised,
            self.diag_eps,
            &mut self.prepared,
        );
        if result.is_err() {
            self.prepared.clear();
        }
        result
    }

    fn num_gaussians(&self) -> usize {
        self.prepared.len()
    }

    fn distances_into(&mut self, points: &[T], out: &mut [T]) -> Result<()> {
        self.require_gaussians()?;
        let b = layout::check_points(points)?;
        let n = self.prepared.len();
        validate::check_distance_out(b, n, out.len())?;
        let prepared = &self.prepared;
        out.par_chunks_mut(n)
            .zip(points.par_chunks_exact(POINT_STRIDE))
            .for_each(|(row, p)| {
                let x = [p[0], p[1], p[2]];
                for (d_out, g) in row.iter_mut().zip(prepared) {
                    *d_out = pair::solve(g, x).1;
                }
            });
        Ok(())
    }

    fn forward(&mut self, points: &[T]) -> Result<&[T]> {
        self.require_gaussians()?;
        self.forward_valid = false;
        let b = layout::check_points(points)?;
        self.points.clear();
        self.points.extend_from_slice(points);
        self.values.clear();
        self.values.resize(b, T::ZERO);
        let prepared = &self.prepared;
        self.values
            .par_chunks_mut(FORWARD_BLOCK_POINTS)
            .zip(points.par_chunks(FORWARD_BLOCK_POINTS * POINT_STRIDE))
            .for_each(|(vals, pts)| {
                for g in prepared {
                    for (f, p) in vals.iter_mut().zip(pts.chunks_exact(POINT_STRIDE)) {
                        let d = pair::solve(g, [p[0], p[1], p[2]]).1;
                        *f += g.weight_norm * pair::kernel(d);
                    }
                }
            });
        validate::check_values(&self.values)?;
        self.forward_valid = true;
        Ok(&self.values)
    }

    fn backward(&mut self, grad_values: &[T]) -> Result<Gradients<'_, T>> {
        let b = self.values.len();
        validate::check_grad_values(self.forward_valid, b, grad_values)?;
        let n = self.prepared.len();
        let block_points = backward_block_points(b);
        let blocks = b.div_ceil(block_points);

        self.grad_points.clear();
        self.grad_points.resize(b * POINT_STRIDE, T::ZERO);
        self.partials.clear();
        self.partials.resize(blocks * n * STRIDE, T::ZERO);
        let prepared = &self.prepared;
        let normalised = self.options.normalised;
        self.partials
            .par_chunks_mut(n * STRIDE)
            .zip(self.grad_points.par_chunks_mut(block_points * POINT_STRIDE))
            .zip(self.points.par_chunks(block_points * POINT_STRIDE))
            .zip(grad_values.par_chunks(block_points))
            .for_each(|(((partial, gpts), pts), gvals)| {
                backward_block(prepared, normalised, pts, gvals, gpts, partial)
            });

        self.grad_gaussians.clear();
        self.grad_gaussians.resize(n * STRIDE, T::ZERO);
        let partials = &self.partials;
        self.grad_gaussians
            .par_chunks_mut(REDUCE_BLOCK_GAUSSIANS * STRIDE)
            .enumerate()
            .for_each(|(blk, out)| {
                let start = blk * REDUCE_BLOCK_GAUSSIANS * STRIDE;
                for block in 0..blocks {
                    let src = &partials[block * n * STRIDE + start..][..out.len()];
                    for (o, s) in out.iter_mut().zip(src) {
                        *o += *s;
                    }
                }
            });

        validate::check_gradients(&self.grad_points, &self.grad_gaussians)?;
        Ok(Gradients {
            points: &self.grad_points,
            gaussians: &self.grad_gaussians,
        })
    }
}

/// Points per backward block for `b` points: depends on `b` only, so the reduction order (and thus
/// every bit of the result) is the same on any number of threads.
fn backward_block_points(b: usize) -> usize {
    let blocks = b.div_ceil(BACKWARD_MIN_BLOCK_POINTS).clamp(1, MAX_PARTIALS);
    b.div_ceil(blocks).max(1)
}

/// One backward block: all Gaussians against this block's points. Gaussian-outer, so a Gaussian's
/// ten partial sums stay in registers and the block's points stay in L1.
fn backward_block<T: Real>(
    prepared: &[Prepared<T>],
    normalised: bool,
    points: &[T],
    grad_values: &[T],
    grad_points: &mut [T],
    partial: &mut [T],
) {
    for (g, out) in prepared.iter().zip(partial.chunks_exact_mut(STRIDE)) {
        let mut acc = [T::ZERO; STRIDE];
        for ((p, &gv), gp) in points
            .chunks_exact(POINT_STRIDE)
            .zip(grad_values)
            .zip(grad_points.chunks_exact_mut(POINT_STRIDE))
        {
            let gx = pair::accumulate_backward(g, [p[0], p[1], p[2]], gv, &mut acc);
            gp[0] += gx[0];
            gp[1] += gx[1];
            gp[2] += gx[2];
        }
        if normalised {
            pair::add_normalisation_grad(g, &mut acc);
        }
        out.copy_from_slice(&acc);
    }
}
