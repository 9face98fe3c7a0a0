//! ptxflow: CUDA PTX generated from typed Rust builder code, and GPU pipelines run through cudarc.
//!
//! Layers, imports pointing downward only:
//! - [`ptx`]: the typed PTX builder (std only);
//! - [`kernels`]: one file per kernel and the kernel table ([`kernels::KernelId`]);
//! - [`runtime`]: the cudarc layer (device, module cache, buffers, streams, pinned memory, events);
//! - domains ([`ndt`], [`lz4`], [`gaussian`], [`rnn`]), each a CPU reference and a GPU pipeline.

pub mod error;
pub mod gaussian;
pub mod ptx;
pub mod rng;

pub use error::{Error, Result};
