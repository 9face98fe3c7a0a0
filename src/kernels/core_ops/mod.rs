//! Foundation kernels that later pipelines reuse: element-wise correction (`correct_add`) and
//! f32 -> f64 sum (`reduce_sum`); `crate::core_ops` runs them behind `VectorOps` under the same
//! names, with its CPU twin `CpuOps`.

pub mod correct_add;
pub mod reduce_sum;
