//! Kernels of the learned-correction chain (see `crate::rnn`): dense encoder, persistent GRU
//! rollout, the randomized SVD's GEMMs, Gaussian sketch, CholeskyQR and small apply, and the
//! low-rank correction. `mathf` holds the accurate f32 transcendentals they share, `barrier` the
//! grid barrier of the persistent kernels, `orth_elim` and `orth_total` the CholeskyQR's
//! factorisation and R_total steps, `gru_tile` and `gru_exchange` the GRU rollout's mat-vec and
//! its tagged-word state exchange, `gru_stationary` its weight-in-registers path and
//! `gru_project` that path's input projection.

pub mod apply;
pub mod barrier;
pub mod dense;
pub mod gaussian;
pub mod gemm;
pub mod gru_exchange;
pub mod gru_project;
pub mod gru_rollout;
pub mod gru_stationary;
pub mod gru_tile;
pub mod lowrank;
pub mod mathf;
pub mod orth;
pub mod orth_elim;
pub mod orth_total;
