//! Gaussian field kernels (maths in `crate::gaussian`): the distance matrix, the fused forward
//! (and its f32 form with the expanded solve, `forward_fast`),
//! the fused backward, the deterministic finishing sums and
//! the on-device preparation of packed Gaussians (for callers whose Gaussians stay on the device), each in f32 and f64 from one source.

pub mod backward;
pub mod common;
pub mod distances;
pub mod exp;
pub mod exp_f64;
pub mod exp_table;
pub mod forward;
pub mod forward_fast;
mod forward_finish;
mod forward_options;
mod forward_pairs;
pub mod prepare;
pub mod reduce;
pub mod scaled;
pub mod unit;
