//! `rnn_orth`: CholeskyQR of a tall f32 matrix in place, `passes` times, as one persistent
//! cooperative kernel (the maths and its CPU mirror: `crate::rnn::cholqr`).
//!
//! Data: `y` is `rows x W` f32 row-major (W = [`WIDTH`] = 48; columns `l..W` are zero padding;
//! `rows % SLAB == 0`). Scratch: `partial` (`blocks x W x W` f64), `gram` (`W x W` f64). Output:
//! `y` holds Q; `rt` (`2 x W x W` f64) holds `R_total = R_p ... R_1` after pass p in slot
//! `p % 2` (block 0 writes it; the final one in slot `(passes - 1) % 2`). `bar` holds the grid
//! barrier's `arrive`, `exit` and `status` words.
//!
//! Launch: cooperative, `blocks` <= co-resident capacity, [`THREADS`] threads. Block b owns the
//! row slabs b, b + blocks, ... of [`SLAB`] rows. Per pass:
//! - A: thread (ti, tj) = (t / 16, t % 16) accumulates the 3 x 3 block `G[3ti.., 3tj..]` over the
//!   block's slabs (staged in shared memory; f32 -> f64, fma) and writes it to `partial[b]`;
//! - grid barrier; B: `gram[e] = sum_p partial[p][e]`, 32 entries per block at a time: eight
//!   threads per entry sum p = q, q + 8, ... (four independent loads per trip) and thread q = 0
//!   adds the eight in order (deterministic); grid barrier;
//! - C (every block, redundantly and identically): loads G's lower triangle into registers,
//!   adds the shift on the first pass (every thread sums the trace itself, j ascending), then
//!   eliminates it in l register-resident steps of one barrier each ([`elim`]; the padding's
//!   steps would change nothing), leaving
//!   `U = D L^T` and `E = L^{-1}` in shared memory; finally the per-column scales
//!   `1 / sqrt(d_c)` and R's diagonal; block 0 writes R on the first pass;
//! - D: each slab (restaged unless the block has only one) is overwritten by `Q = Y R^{-1}`:
//!   `q_c = (sum_a y_a E_ca) s_c` (f64 fma over a ascending, then rounded to f32): thread t
//!   computes row t / 8, columns t % 8 + 8q;
//! - block 0, passes after the first: `R_total <- R R_total` in shared memory ([`total::total_r`]).
//!
//! `rnn_orth_skip` (the same parameters) adds an a-posteriori check to passes after the first:
//! after B every block counts the entries of the leading `l x l` block of G that differ from the
//! identity's by more than [`SKIP_TOL`] (NaN counts); with none, the pass skips C and D (Q is
//! orthonormal to f32 rounding already) and block 0 carries `R_total` into the pass's slot.
//! It only fires when the first pass met a well-conditioned basis: the first pass's shift leaves
//! `|Q^T Q - I|` near `shift / sigma_min(Y)^2`, about 1e-2 on the bench's 4096^2 and 1024^2
//! timing matrices (CPU model), so their second pass is never skipped; a flat spectrum skips it.
//!
//! With `gram_only` != 0 the kernel stops after B of the first pass: `gram` holds `G = Y^T Y`
//! (unshifted) and `y` is unchanged (the randomized SVD's eigen route starts from it).
//!
//! `stamps` (0 or [`STAMPS`] u64): when non-zero, thread 0 of block 0 writes `%clock64` at the phase
//! boundaries of the first two passes (bench instrumentation; see [`STAMPS`]).
//!
//! Shared memory: the slab (32 x 52 f32), U and E (48 x 49 f64 each: padded rows, so that D's
//! reads are free of bank conflicts), reduction scratch (2 KiB), three 48-entry f64 vectors.

//!
//! This file holds the ABI constants its helpers share: [`kernel`] builds it from phases A to D,
//! [`elim`] is C's elimination, [`total`] the `R_total` update, [`skip`] `rnn_orth_skip`'s check.

pub mod elim;
pub mod kernel;
pub mod skip;
pub mod total;

pub use super::slab::{SLAB, WIDTH};
use crate::kernels::rnn::stamps::write_clock;
use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;
/// `rnn_orth_skip`'s a-posteriori check: a pass after the first is skipped (Q and `R_total`
/// kept) when every entry of the leading `l x l` block of its Gram is within this of the
/// identity's (2^-23, f32's epsilon: the pass would move Q by about half of it, below the f32
/// rounding of Q itself).
pub const SKIP_TOL: f64 = f32::EPSILON as f64;
/// The shifted-CholQR constant: shift = SHIFT_C * (rows l + l (l + 1)) * trace(G), SHIFT_C =
/// 11 * 2^-53.
pub const SHIFT_C: f64 = 11.0 * f64::EPSILON * 0.5;

pub(super) const WW: u32 = WIDTH * WIDTH;
/// Clock stamps written when `stamps` is non-zero: `[0]` start (after setup), then per pass p < 2
/// at `1 + 6 p + i`: i = 0 end of A, 1 after the first grid barrier, 2 end of B, 3 after the
/// second grid barrier, 4 end of C (factor and scales), 5 end of D (and R_total).
pub const STAMPS: u32 = 13;

/// Thread 0 of block 0 writes `%clock64` to `stamps[idx]` when stamping is on (`on`).
pub(super) fn stamp(b: &mut KernelBuilder, on: Reg<Pred>, stamps: Reg<U64>, idx: Reg<U32>) {
    write_clock(b, on, idx, STAMPS, &|_| stamps);
}
/// Row stride (f64) of the shared U and E arrays: 49 puts the 8 rows D reads at once in 8
/// different bank pairs.
pub const LD: u32 = WIDTH + 1;
/// Row stride (f32) of the staged slab: 16-byte rows, and the 4 rows a warp reads in D fall in
/// different banks.
pub(super) const YS: u32 = WIDTH + 4;
