//! What the GPU Gaussian tests share: options, fields that can be poisoned before each call,
//! random problems and problems rounded to a field's scalar type.

use super::Problem;
use ptxflow::gaussian::generate::{convert, random_gaussians, sample_points, GaussianSpec};
use ptxflow::gaussian::{
    FieldOptions, GaussianField, GaussianFieldOps, GpuGaussianField, GpuReal, Real,
};
use ptxflow::rng::Rng;
use ptxflow::runtime::Gpu;
use std::sync::Arc;

pub fn sanitizing() -> bool {
    std::env::var("PTXFLOW_SANITIZE").is_ok_and(|v| v == "1")
}

pub fn options(normalised: bool) -> FieldOptions {
    FieldOptions {
        normalised,
        ..FieldOptions::default()
    }
}

/// A field the checks can poison before each call (GPU) or not (CPU).
pub trait Testable: GaussianFieldOps {
    fn poison(&mut self) {}
}
impl<T: Real> Testable for GaussianField<T> {}
impl<T: GpuReal> Testable for GpuGaussianField<T> {
    fn poison(&mut self) {
        self.poison_device_outputs().expect("poison device buffers");
    }
}

pub fn gpu_field<T: GpuReal>(gpu: &Arc<Gpu>, normalised: bool) -> GpuGaussianField<T> {
    GpuGaussianField::new(gpu.clone(), options(normalised)).unwrap()
}

pub fn random_problem(n: usize, b: usize, seed: u64) -> Problem {
    let mut rng = Rng::new(seed);
    let gaussians = random_gaussians(&mut rng, n, &GaussianSpec::default());
    let points = sample_points(&mut rng, &gaussians, b, 1.5);
    Problem {
        name: "random",
        gaussians,
        points,
    }
}

/// `p` with every value rounded to `T` (and widened back).
pub fn rounded<T: Real>(p: &Problem) -> Problem {
    let r = |v: &[f64]| {
        convert::<T>(v)
            .iter()
            .map(|x| x.to_f64())
            .collect::<Vec<f64>>()
    };
    Problem {
        name: p.name,
        gaussians: r(&p.gaussians),
        points: r(&p.points),
    }
}
