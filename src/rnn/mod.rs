//! Learned-correction kernels: a dense encoder, GRU rollouts (single and ensembles, one
//! persistent kernel), a randomized truncated SVD, and corrections (element-wise and low-rank),
//! each with an f64 CPU reference.
//!
//! The chain this domain serves: features (`T x B x 64`) are encoded by `relu(x W + b)` to the
//! GRU's input (`T x B x 128`); a GRU (hidden 256) rolls out T steps; its last hidden state is
//! corrected by a low-rank operator `U_k S_k V_k^T` (compressed offline by the randomized SVD)
//! applied to the last encoded input: `h_T + U_k S_k V_k^T x_T`.
//!
//! GRU equations (PyTorch's `nn.GRU`, gates in the order r, z, n):
//! ```text
//! r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
//! z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//! n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//! h' = (1 - z) * n + z * h
//! ```
//! optionally followed by layer normalisation of h' and by dropout (seeded; off for inference).
//!
//! Layout: every matrix is row-major f32; batches are row-major `rows x features`; sequences are
//! step-major `T x B x features`; ensembles are member-major.

pub mod chain;
pub mod cholqr;
pub mod demo;
pub mod gpu;
pub mod half;
pub mod jacobi;
pub mod lowrank;
pub mod mathf;
pub mod reference;
pub mod rsvd;
pub mod rsvd_small;
pub mod symeig;
pub mod testmat;
pub mod weights;

pub use chain::{ChainDims, ChainModel};
pub use lowrank::LowRank;
pub use reference::RolloutShape;
pub use rsvd::RsvdOptions;
pub use weights::{DenseLayer, Dropout, GruWeights, LayerNorm};
