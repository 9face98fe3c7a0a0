//! Foundation kernels that later pipelines reuse: element-wise correction and f32 -> f64 sum.

pub mod correct_add;
pub mod reduce_sum;
