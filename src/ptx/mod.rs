//! ptxflow's typed PTX builder (std only).
//!
//! A kernel is written as Rust calls on a [`KernelBuilder`]: every value is a [`Reg<T>`] typed by
//! its PTX type, so an instruction that mixes types does not compile. The builder hands out
//! registers, labels and symbols, records which SM and PTX ISA each instruction needs, and emits
//! deterministic text (fixed declaration order, float immediates as hex bit patterns).
//!
//! ```
//! use ptxflow::ptx::*;
//! let mut b = KernelBuilder::new("scale");
//! let x = b.param::<U64>("x");
//! let n = b.param::<U32>("n");
//! let x = b.global_ptr(&x);
//! let n = b.ld_param(&n);
//! let i = b.global_tid_x();
//! let inside = b.setp(Cmp::Lt, i, n);
//! b.if_then(inside, |b| {
//!     let a = b.index_addr(x, i, 4);
//!     let v = b.ld::<F32>(Space::Global, a);
//!     let v = b.mul(v, 2.0f32);
//!     b.st(Space::Global, a, v);
//! });
//! let ptx = Module::single(Target::Sm75, b.finish()).emit().unwrap();
//! assert!(ptx.contains("mul.rn.f32"));
//! ```
//!
//! The short form of the same kernel uses typed pointers and structured helpers (see
//! [`GlobalPtr`], [`KernelBuilder::grid_stride_x`], [`KernelBuilder::block_sum`]); the kernel's
//! launch contract ([`Signature`]: parameter types, block bounds) is recorded as it is written
//! and checked by [`crate::runtime::Launch`]. Misuse (a comparison for floats on integers, a
//! register of another builder, a bad name) never panics: the builder records a [`BuildError`]
//! naming the kernel and the instruction, and [`Module::emit`] returns it.
//!
//! Mixing types is a compile error:
//! ```compile_fail
//! use ptxflow::ptx::*;
//! let mut b = KernelBuilder::new("bad");
//! let x = b.mov(1.0f32);
//! let y = b.mov(1u32);
//! let _ = b.add(x, y);
//! ```

mod arith;
mod atomic;
mod bits;
mod cluster;
mod control;
mod convert;
mod cp_async;
mod decls;
mod error;
mod finish;
mod kernel;
mod mem;
mod mma;
mod module;
mod reg;
mod signature;
mod structured;
mod sync;
mod target;
mod types;

pub use arith::Cmp;
pub use atomic::AtomOp;
pub use bits::Logic;
pub use control::LoopBranch;
pub use convert::Round;
pub use decls::{Attributes, SharedArray};
pub use error::BuildError;
pub use finish::Kernel;
pub use kernel::{KernelBuilder, Param};
pub use mem::Space;
pub use module::{snapshot, Module};
pub use reg::{Addr, Label, Operand, Reg};
pub use signature::{ParamSig, ParamType, ScalarType, Signature};
pub use structured::{GlobalElem, GlobalPtr, Reduce};
pub use sync::{Scope, Shfl, Special, FULL_MASK};
pub use target::{PtxVersion, Target, ALL_TARGETS};
pub use types::*;
