//! Element-wise correction and f32 -> f64 summation: the foundation's two kernels
//! (`kernels::core_ops`: `core_correct_add`, `core_reduce_sum`) behind one trait, with a CPU
//! reference ([`CpuOps`]) and the GPU implementation ([`GpuOps`]); each operation has the name
//! of its kernel. Later pipelines reuse both (the learned-correction chain, reductions in tests
//! and benches). Also reachable as `ptxflow::ops` (its former name).

mod gpu;

pub use gpu::GpuOps;

use crate::{Error, Result};
use rayon::prelude::*;

/// The same maths on CPU and GPU; tests run one body against both.
pub trait VectorOps {
    /// "cpu" or "gpu".
    fn device(&self) -> &'static str;

    /// `out[i] = prediction[i] + correction[i]`. All three slices must have the same length.
    fn correct_add(
        &mut self,
        prediction: &[f32],
        correction: &[f32],
        out: &mut [f32],
    ) -> Result<()>;

    /// Sum of `x` accumulated in f64.
    fn reduce_sum(&mut self, x: &[f32]) -> Result<f64>;

    /// The former name of [`VectorOps::reduce_sum`].
    #[deprecated(note = "renamed to `reduce_sum`, the name of its kernel")]
    fn sum(&mut self, x: &[f32]) -> Result<f64> {
        self.reduce_sum(x)
    }
}

/// What a length mismatch of [`VectorOps::correct_add`] reports.
const CORRECT_ADD: &str = "correct_add (prediction, correction, out)";

/// The lengths of `correct_add`'s prediction, correction and output (`what` names the call).
pub(crate) fn check_same_len(what: &str, [prediction, correction, out]: [usize; 3]) -> Result<()> {
    if prediction != correction || prediction != out {
        return Err(Error::Shape {
            what: what.into(),
            expected: format!("{prediction} elements each"),
            got: format!("{prediction}, {correction}, {out}"),
        });
    }
    Ok(())
}

/// The CPU reference: rayon over chunks; the sum adds f64 values per chunk, then the chunks.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuOps;

impl VectorOps for CpuOps {
    fn device(&self) -> &'static str {
        "cpu"
    }

    fn correct_add(
        &mut self,
        prediction: &[f32],
        correction: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        check_same_len(CORRECT_ADD, [prediction.len(), correction.len(), out.len()])?;
        out.par_chunks_mut(1 << 16).enumerate().for_each(|(c, o)| {
            let base = c << 16;
            for (k, v) in o.iter_mut().enumerate() {
                *v = prediction[base + k] + correction[base + k];
            }
        });
        Ok(())
    }

    fn reduce_sum(&mut self, x: &[f32]) -> Result<f64> {
        Ok(x.par_chunks(1 << 16)
            .map(|c| c.iter().map(|&v| f64::from(v)).sum::<f64>())
            .sum())
    }
}
