//! NDT kernels: the fused derivative kernel ([`derivatives`]) and the building blocks it is made
//! of — an f64 `exp` ([`fp64`]), the rotation and its angular derivatives evaluated with the CPU
//! reference's exact operation order ([`rotation`]), and a deterministic warp/block reduction of
//! many values at once ([`reduce`]).

pub mod derivatives;
pub mod fp64;
mod point;
pub mod reduce;
pub mod rotation;
