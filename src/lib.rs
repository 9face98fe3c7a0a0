//! ptxflow: CUDA PTX generated from typed Rust builder code, and GPU pipelines run through cudarc.
//!
//! Layers, imports pointing downward only:
//! - [`ptx`]: the typed PTX builder (std only);
//! - [`kernels`]: one file per kernel and the kernel table ([`kernels::KernelId`]);
//! - [`embedded`]: the PTX build.rs emitted for every kernel;
//! - [`runtime`]: the cudarc layer (device, module cache, buffers, streams, pinned memory, events);
//! - [`ops`] and the domains ([`ndt`], [`lz4`], [`gaussian`]), each a CPU reference and a GPU implementation
//!   behind one trait.

pub mod embedded;
pub mod error;
pub mod gaussian;
pub mod kernels;
pub mod lz4;
pub mod ndt;
pub mod ops;
pub mod ptx;
pub mod rng;
pub mod rnn;
pub mod runtime;

pub use error::{Error, Result};
pub use runtime::{Choice, Device};
