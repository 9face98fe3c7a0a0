//! Kernels of the learned-correction chain (see `crate::rnn`): dense encoder, the persistent GRU
//! rollout, the randomized SVD's GEMMs, Gaussian sketch, CholeskyQR and small apply, and the
//! low-rank correction. One file per single-file kernel; a kernel with helpers has a folder
//! whose `mod.rs` holds what they share (`gru/`, `gemm/`, `orth/`). `mathf` holds the accurate
//! f32 transcendentals they share, `barrier` the grid barrier of the persistent kernels, `slab`
//! the row slabs of the rSVD's tall `rows x 48` matrices (`orth` and `apply`), `stamps`
//! the bench-only clock stamps (`orth` and `gru`).

pub mod apply;
pub mod barrier;
pub mod dense;
pub mod gaussian;
pub mod gemm;
pub mod gru;
pub mod lowrank;
pub mod mathf;
pub mod orth;
pub mod slab;
pub mod small;
pub mod stamps;
