//! `rnn_gemm_nn` / `rnn_gemm_tn`: `C = op(A) B` in f32 for the randomized SVD's tall-skinny
//! products (`A Omega`, `A Q`: op = identity; `A^T Q`: op = transpose), tiled in shared memory
//! with register blocking and split along the inner dimension.
//!
//! Shapes (row-major f32): C is `M x N`, B is `K x N`, op(A) is `M x K`; A is stored `M x lda`
//! (nn) or `K x lda` (tn). The host guarantees `M % BM == 0`, `N % BN == 0`, `K % BK == 0`,
//! `lda % 4 == 0` and 16-byte aligned bases (it pads A and the sketches with zeros), so the
//! kernel has no edge cases.
//!
//! Launch: grid `(M / BM, N / BN, S)` (S also passed as `splits`), `T` threads ([`Shape`]:
//! [`SHAPE4`] for `rnn_gemm_nn`/`rnn_gemm_tn`, T = 256 and R = 4 rows per thread; [`SHAPE8`] for
//! `rnn_gemm_nn_r8`/`rnn_gemm_tn_r8`, T = 128 and R = 8). Block (x, y, z) owns the `BM x BN`
//! tile (x, y) of C and the inner range `[z kps, (z + 1) kps)` (kps a multiple of BK). Per
//! `BK`-slice it stages op(A) and B (`Bs[k][n]`) in one of two shared buffers while the other one
//! is multiplied (one `bar.sync` per slice); the next slice is loaded into registers before the
//! current one is multiplied. Thread t owns R rows and the columns `6 (t % 8) .. +6` of the tile
//! and accumulates k ascending within the range (6 R fmas per k):
//! - tn copies rows of A straight into `As[k][m]` (row stride [`AS_STRIDE`]); thread t owns rows
//!   `R (t / 8) .. +R`: per k R / 4 16-byte loads of A and three 8-byte loads of B;
//! - nn copies rows of A straight into `As[m][k]` (row stride [`ASN_STRIDE`]; a warp loads 4
//!   rows x 128 contiguous bytes); thread t owns rows `t / 8 + (T / 8) i` (i < R): per 4 k R
//!   16-byte loads of A (the 4 rows a warp reads at once fall in distinct banks) and twelve
//!   8-byte loads of B. No transposing scalar stores.
//!
//! The 8-row shape halves the shared-memory traffic per FMA (A's loads are shared by twice the
//! FMAs, B's by twice the rows); both shapes add the same products in the same order, so equal
//! splits give bit-identical C.
//!
//! With S = 1 the block writes its tile of C. With S > 1 it writes its partial tile to
//! `partial[z]` (`S x M x N`), fences, and counts itself in `counters[x * gridDim.y + y]`; the
//! last block of the tile to arrive sums the S partials in order z = 0..S (deterministic; R = 4:
//! two partials' loads in flight per trip, R = 8: one), writes C and resets the counter to 0 for
//! the next launch.

pub mod kernel;
pub mod slice;
pub mod tc;
mod tc_frame;
mod tc_parts;
pub mod tca;

use crate::ptx::*;

/// Rows of C per block.
pub const BM: u32 = 128;
/// Columns of C per block.
pub const BN: u32 = 48;
/// Inner slice per shared-memory stage.
pub const BK: u32 = 32;
/// Threads per block.
pub const THREADS: u32 = 256;
/// Row stride of the staged tn A tile `As[k][m]` (floats): 16-byte aligned rows.
pub const AS_STRIDE: u32 = BM + 4;
/// Row stride of the staged nn A tile `As[m][k]` (floats): 16-byte rows, and 4 consecutive rows
/// start 4 banks apart.
pub const ASN_STRIDE: u32 = BK + 4;
/// Which product a kernel computes: `C = A B` (nn) or `C = A^T B` (tn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpA {
    /// `C = A B`.
    Plain,
    /// `C = A^T B`.
    Transposed,
}

/// Thread shape of a build: `threads` threads, each owning `rows` rows x 6 columns of the
/// `BM x BN` tile (`threads / 8 * rows == BM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Threads per block.
    pub threads: u32,
    /// Rows of C per thread (4 or 8).
    pub rows: u32,
}

/// `rnn_gemm_nn` / `rnn_gemm_tn`: 256 threads of 4 x 6.
pub const SHAPE4: Shape = Shape {
    threads: THREADS,
    rows: 4,
};
/// `rnn_gemm_nn_r8` / `rnn_gemm_tn_r8`: 128 threads of 8 x 6 (half the shared-memory reads per
/// FMA: ncu put the 4 x 6 kernels' L1/shared pipe at 79% against 58% for the FMA pipe).
pub const SHAPE8: Shape = Shape {
    threads: 128,
    rows: 8,
};

impl Shape {
    /// Warps per block.
    pub const fn warps(self) -> u32 {
        self.threads / 32
    }
    /// Row groups per block (threads / 8).
    pub const fn row_groups(self) -> u32 {
        self.threads / 8
    }
    /// Accumulators per thread.
    pub const fn accs(self) -> usize {
        (self.rows * 6) as usize
    }
}

/// Floats of one staged A tile (nn or tn).
pub(super) const fn a_tile_len(op: OpA) -> u32 {
    match op {
        OpA::Transposed => BK * AS_STRIDE,
        OpA::Plain => BM * ASN_STRIDE,
    }
}

/// The block's operands and place (registers of the kernel).
pub(super) struct Ctx {
    pub a: Reg<U64>,
    pub bm: Reg<U64>,
    pub lda: Reg<U32>,
    pub n: Reg<U32>,
    pub m0: Reg<U32>,
    pub n0: Reg<U32>,
    pub tid: Reg<U32>,
    pub op: OpA,
    pub shape: Shape,
    /// nn: element offset in A of the thread's first load at k0 = 0 (row m0 + t / 8, column
    /// 4 (t % 8)); load j is `threads / 8` j rows further.
    pub nn_ld: Reg<U32>,
    /// nn: `As` index of the thread's first store (row t / 8, column 4 (t % 8)).
    pub nn_st: Reg<U32>,
}

/// A thread's A and B float4 registers of one slice.
pub(super) type Fragments = (Vec<[Reg<F32>; 4]>, Vec<[Reg<F32>; 4]>);
