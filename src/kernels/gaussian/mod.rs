//! Gaussian field kernels (maths in `crate::gaussian`): the distance matrix, the fused forward,
//! the fused backward and the deterministic finishing sums, each in f32 and f64 from one source.

pub mod backward;
pub mod common;
pub mod distances;
pub mod forward;
pub mod reduce;
