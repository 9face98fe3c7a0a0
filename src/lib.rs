//! ptxflow: CUDA PTX generated from typed Rust builder code, and GPU pipelines run through cudarc.
//!
//! Layers, imports pointing downward only:
//! - [`ptx`]: the typed PTX builder (std only);
//! - [`kernels`]: one file per kernel and the kernel table ([`kernels::KernelId`]);
//! - [`embedded`]: the PTX build.rs emitted for every kernel;
//! - [`runtime`]: the cudarc layer (device, module cache, buffers, streams, pinned memory, events);
//! - [`core_ops`] and the domains ([`ndt`], [`lz4`], [`gaussian`], [`rnn`]), each a CPU reference and a
//!   GPU implementation behind one trait; [`points`] converts between the domains' point layouts
//!   without copying.
//!
//! Errors of every layer are one [`Error`]; GPU entry points return [`Error::NoDevice`] on a
//! machine without a usable GPU, and every domain has a CPU path with the same maths.

#![warn(missing_docs)]

/// The README's Rust snippets, compiled by `cargo test --doc` so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod core_ops;
pub mod embedded;
pub mod error;
pub mod gaussian;
pub mod kernels;
pub mod lz4;
pub mod ndt;
pub mod points;
pub mod ptx;
pub mod rng;
pub mod rnn;
pub mod runtime;
pub mod sim;
pub mod size;

/// The former name of [`core_ops`] (kept so code written against it still builds).
#[doc(hidden)]
pub use core_ops as ops;

pub use error::{Error, Result};
pub use runtime::{Choice, Device};
