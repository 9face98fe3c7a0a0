//! `rnn_gru_cluster` and `rnn_gru_cluster_streamed` (sm_90): the weight-stationary rollout (W_hh
//! in registers, gi of every step computed first; see `stationary`'s notes) with the per-step
//! exchange of h' in distributed shared memory instead of tagged words in global memory. The
//! S = 16 unit slices of one (member, batch group) are one thread-block cluster (launched with a
//! cluster dimension of 16, a non-portable size); blocks of different clusters never
//! communicate, so neither a cooperative launch nor the epoch accounting is needed
//! (`gru::Accounting::None`). H = 256, Ip = 128, J = 16 (3J = 48 gate rows: the held weights
//! use lane row groups q < 3, `matvec::hold_rows`).
//!
//! h lives in two shared buffers: step t reads h_t from buffer `t % 2` and writes h_{t+1} to
//! buffer `(t + 1) % 2`, its own units with a plain shared store and every other block's copy
//! through distributed shared memory. The cell threads of a row's 4 consecutive units (a lane
//! quad) gather the 4 values with shuffles; quad lane i sends them (16 bytes) to the blocks of
//! rank `i + 4k` (k < 4) other than its own. Two exchanges (bit [`EXCHANGE_BARRIER`] of the
//! `exchange` parameter):
//! - clear, mbarrier: `st.async` that completes 16 bytes on the destination's mbarrier of that
//!   buffer (`M_b`, b = buffer). A block arms `M_b` with the bytes it will receive (rows x (H - J)
//!   x 4) one exchange ahead, and every thread waits for the phase by parity (h_n is use
//!   `(n - 1) / 2` of `M_{n % 2}`) before the block barrier that ends the step. No cluster-wide
//!   barrier per step: a block waits only for its own bytes. Reuse is safe without one: a
//!   producer writes buffer b for h_{n+2} only after it has all of h_{n+1}, which includes this
//!   block's units of h_{n+1}, computed after this block's mat-vec read h_n from buffer b and
//!   after this block's wait on h_n's phase completed (so the arm for h_{n+2} precedes them).
//! - set, cluster barrier: `st.shared::cluster`, then `barrier.cluster.arrive` (release) and
//!   `wait` (acquire) of every thread, which also serves as the block barrier.
//!
//! The exchange of the last step is skipped unless layer norm or dropout need whole rows (each
//! block then normalises the same rows identically in its own copy). With the mbarrier
//! exchange, a last cluster barrier keeps every block alive until the cluster's writes landed.
//!
//! Prologue: thread 0 initialises both mbarriers (count 1), fences the inits to the cluster and
//! arms the first two exchanges; W_hh's loads are issued first (held for the whole rollout),
//! then W_ih's (held for the prologue), then gi of every step (`prologue`); a cluster barrier
//! (every block's mbarriers initialised before any remote write) ends it. Two layouts
//! ([`Variant`], one kernel each):
//! - `Full` (`rnn_gru_cluster`): `stationary`'s shared layout in precompute mode (x of every
//!   step staged, phases of two steps), then h buffer 1 and the mbarriers. Bit [`STAGE_ASYNC`]
//!   stages h0 and x with `cp.async` (else register copies).
//! - `Streamed` (`rnn_gru_cluster_streamed`): x streamed one step at a time through two
//!   buffers with `cp.async` (step s + 1's copy in flight during step s's projection), phases
//!   of one step, h buffer 1 over the x buffers (x is dead after the prologue, and no remote
//!   block writes h before the prologue's cluster barrier): [`smem_floats`] is small enough for
//!   two blocks of 12 or 16 rows per SM, so an ensemble of 5 at batch 32 is one wave of
//!   clusters.

pub mod exchange;
pub mod kernel;
pub mod prologue;

use super::{layout, scratch_floats, smem_floats as stationary_floats};
use crate::kernels::rnn::gru::Ctx;
use crate::ptx::*;

/// Blocks per cluster: the unit slices of one (member, batch group).
pub const CLUSTER: u32 = 16;

/// Lane row groups of the held weights: 3J = 48 = 3 x 16 gate rows (J = 256 / 16).
const QS: u32 = 3;

/// Bit of the `exchange` parameter: the cluster-barrier exchange (else st.async + mbarrier).
pub const EXCHANGE_BARRIER: u32 = 1;
/// Bit of the `exchange` parameter (`Full` layout): stage h0 and x with `cp.async` (every copy
/// in flight at once, while W_ih's loads are) and prefetch the biases to L1 (else h0 and x by
/// register copies).
pub const STAGE_ASYNC: u32 = 2;

/// Bit of the `exchange` parameter: h' is sent by every thread after a block barrier (a 16-byte
/// chunk of the block's new units to one other block each), not by the cell warps' lane quads.
pub const SEND_SPREAD: u32 = 4;

/// The shared layout (and how x is staged) of a cluster kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `stationary`'s layout, x of every step staged (`rnn_gru_cluster`).
    Full,
    /// x streamed through two one-step buffers, h buffer 1 over them
    /// (`rnn_gru_cluster_streamed`).
    Streamed,
}

/// Shared floats of `variant` for `bg` rows, `j` units and `c` >= 1 steps of gi.
pub fn smem_floats(variant: Variant, bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    let end = match variant {
        Variant::Full => stationary_floats(bg, ip, h, j, c.max(1)) + bg * h,
        Variant::Streamed => {
            bg * h + c.max(1) * bg * 3 * j + (2 * bg * ip).max(bg * h) + { scratch_floats(bg) }
        }
    };
    end.next_multiple_of(4) + 4
}

/// Builds `rnn_gru_cluster` (sm_90: clusters).
pub fn build(target: Target) -> Module {
    kernel::build(target, "rnn_gru_cluster", Variant::Full)
}

/// Builds `rnn_gru_cluster_streamed` (sm_90: clusters).
pub fn build_streamed(target: Target) -> Module {
    kernel::build(target, "rnn_gru_cluster_streamed", Variant::Streamed)
}

/// Offsets (floats) of a cluster kernel's shared regions.
pub(super) struct ClusterLayout {
    /// gi of every step (`steps x rows x 3J`).
    pub gi: Reg<U32>,
    /// x buffers (of `xbuf` floats each; `Full`: every step, `Streamed`: two).
    pub x: Reg<U32>,
    pub xbuf: Reg<U32>,
    /// The mat-vec scratch.
    pub scratch: Reg<U32>,
    /// h buffer 1 (buffer 0 is at 0).
    pub h1: Reg<U32>,
    /// The two mbarriers (8 bytes each, 16-byte aligned).
    pub mbar: Reg<U32>,
}

/// The layout of `variant` (computed where it is used: the step loop has no registers to keep
/// it), matching [`smem_floats`].
pub(super) fn cluster_layout(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    variant: Variant,
) -> ClusterLayout {
    let p = c.p;
    let hb = b.mul(p.group_rows, p.h);
    let (gi, x, xbuf, scratch, h1, end) = match variant {
        Variant::Full => {
            let lay = layout(b, c);
            let rows2 = b.shl(p.group_rows, 1u32);
            let sc = b.mul(rows2, scratch_floats(1));
            let h1 = b.add(lay.scratch, sc);
            let end = b.add(h1, hb);
            (lay.gi, lay.x, lay.xbuf, lay.scratch, h1, end)
        }
        Variant::Streamed => {
            let gi = hb;
            let rc = b.mul(p.group_rows, p.chunk);
            let x = b.mad(rc, c.r3, gi);
            let xbuf = b.mul(p.group_rows, p.ip);
            let xb2 = b.shl(xbuf, 1u32);
            let xr = b.max(xb2, hb);
            let scratch = b.add(x, xr);
            let sc = b.mul(p.group_rows, scratch_floats(1));
            let end = b.add(scratch, sc);
            (gi, x, xbuf, scratch, x, end)
        }
    };
    let end = b.add(end, 3u32);
    let mbar = b.and(end, !3u32);
    ClusterLayout {
        gi,
        x,
        xbuf,
        scratch,
        h1,
        mbar,
    }
}

/// Whether bit `bit` of the `exchange` parameter is set.
pub(super) fn mode_bit(b: &mut KernelBuilder, mode: &Param<U32>, bit: u32) -> Reg<Pred> {
    let m = b.ld_param(mode);
    let m = b.and(m, bit);
    b.setp(Cmp::Ne, m, 0u32)
}
