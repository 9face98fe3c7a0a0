//! The GRU rollout's weight-stationary path (`stationary != 0`; the host picks it when H = 256,
//! Ip = 128, a block owns at most 64 gate rows (3J <= 64) and its shared layout fits). W_hh
//! lives in registers, so shared memory only feeds the mat-vec's broadcast operand and no lane
//! reduction is needed.
//!
//! Mat-vec `out[b][r] = sum_k src[b][k] w[r][k]` (K = 16 KS): lane l of warp w holds rows
//! `g + 16 q` (g = l % 16, q < 4; rows past 3J repeat the last row and are never read) over the
//! k slice `slot KS .. + KS`, `slot = 2 w + l / 16` (16 slots cover K). Per 4 batch rows it loads
//! `src[b][slot KS + 4m ..]` (one 16-byte shared load, the same address for the 16 lanes of a
//! half-warp: a broadcast) and does 64 fmas per float4, k ascending per output. The upper
//! half-warp takes the 4 rows in the order 2 3 0 1, so one `shfl.xor 16` per kept value adds the
//! two half-warps' K slices (8 shuffles, 8 stores, no select): the lower half keeps rows 0 1, the
//! upper rows 2 3, and the sums go to `scratch[w][b][row]` (row stride [`ROW_STRIDE`] = 72 so the
//! two halves, 2 rows apart, write different banks). A reader sums the 8 warp slots in order
//! (deterministic). Per SM and step this is 2 fmas per shared register loaded (4 with the
//! half-warp broadcast pairing), against 24 fmas per 10 loaded plus a 27-shuffle reduction in
//! `tile::matvec`.
//!
//! Two modes for `gi = W_ih x + b_ih` ([`project`]), chosen by the host through `chunk`:
//! - precompute (`chunk` = max steps, when x and gi of every step fit in shared memory): before
//!   step 0, with W_ih held in 32 registers (the same lane layout, KS = 8) and x of every step
//!   staged, `partials` and the 8-slot sums give gi of every step (FMA-bound, no shared W_ih
//!   traffic); the steps then only read it. Measured on an H100, the per-step projection was
//!   the largest part of a step after the exchange.
//! - per step (`chunk` = 0): W_ih in shared memory (row stride [`WIH_STRIDE`]); step 0's gi in
//!   the prologue, gi of step t + 1 during step t, split between the warps without cells (they
//!   start during the cells) and the cell warps (`project_split`); x of step t + 2 is prefetched
//!   to L1 at the top of step t and copied to shared memory after the gather. gi and x are
//!   double-buffered by step parity: a buffer is rewritten only after the barrier that follows
//!   its last read.
//!
//! Flow: the prologue stages h0 and, per mode, x and gi (above), then issues the loads of W_hh
//! (KS = 16, 64 registers held for the whole rollout). Step t: partials of `W_hh h`; bar.sync;
//! the cell (`gru::cell`) sums the 8 slots of its 3 gate rows and writes h' to `hx` and
//! over its own h element in shared memory; (per-step mode: gi of step t + 1); the gather (it
//! skips the block's own units, and a cell only reads its own element of h); bar.sync; transform
//! as in the shared-memory path. Clock stamps for benchmarks: [`STAMPS`].
//! Shared layout (floats): h `Bg x H` | gi `nb Bg x 3J` | W_ih `3J x WIH_STRIDE` (per-step mode
//! only) | x `nb Bg x Ip` | scratch [`scratch_floats`]`(Bg)`, nb = 2 or max(chunk, 2) (buffer s
//! of gi and x starts `s x rows` rows in).
//!
//! This file holds what the path's helpers share (constants, shared layout, a lane's place,
//! stamps): [`matvec`] holds the register mat-vec, [`project`] the input projection and
//! [`kernel`] the kernel: prologue and step loop.

pub mod cluster;
mod count;
pub mod held;
mod held_gi;
mod held_step;
pub mod kernel;
pub mod matvec;
pub mod project;
pub mod rows48;
pub mod staged;
pub mod wide;

use super::{Ctx, P};
use crate::kernels::rnn::stamps::{stamping, write_clock};
use crate::ptx::*;

/// Clock stamps of the weight-stationary path when `stamps` is non-zero (thread 0 of block 0,
/// `%clock64`): `[0]` start, `[1]` staged and gi computed (of every step, or of step 0), `[2]` W_hh
/// loads issued, `[3]` after the barrier, then per step t < 16 at `4 + 3 t + i`: i = 0 mat-vec,
/// 1 cell (thread 0's, no barrier), 2 gi of step t + 1 (per-step mode), exchange (and
/// transform).
pub const STAMPS: u32 = 4 + 3 * 16;

/// Block 0's clock stamps: the `stamps` parameter (0 or [`STAMPS`] u64, bench instrumentation)
/// and whether this thread writes them (stamps on, thread 0 of block 0).
pub(super) struct Stamps {
    param: Param<U64>,
    tid: Reg<U32>,
}

impl Stamps {
    /// Declares the `stamps` parameter (the kernel's last).
    pub fn declare(b: &mut KernelBuilder, c: &Ctx<'_>) -> Self {
        let param = b.param::<U64>("stamps");
        Stamps { param, tid: c.tid }
    }

    /// Writes `%clock64` to `stamps[idx]` when stamping (idx < [`STAMPS`]; others are dropped).
    /// The base is reloaded each time: the step loop has no register to keep it in.
    pub fn write(&self, b: &mut KernelBuilder, idx: Reg<U32>) {
        self.write_for(b, idx, self.tid);
    }

    /// [`Self::write`] by the thread whose `tid` is 0 (e.g. `tid - 128`: thread 128).
    pub fn write_for(&self, b: &mut KernelBuilder, idx: Reg<U32>, tid: Reg<U32>) {
        let base = b.ld_param(&self.param);
        let on = stamping(b, base, tid, |b| b.special(Special::CtaidX));
        write_clock(b, on, idx, STAMPS, &|b| {
            let base = b.ld_param(&self.param);
            b.to_global(base)
        });
    }

    /// [`Self::write`] to the constant index `i`.
    pub fn at(&self, b: &mut KernelBuilder, i: u32) {
        let idx = b.mov(i);
        self.write(b, idx);
    }
}

/// Extra stamps of `held`'s `rnn_gru_held48swxcp` (bench instrumentation) after the [`STAMPS`]:
/// per step t < 16 at `STAMPS + 4 t + i`, thread 0's gather: i = 0 `%clock64` at its start, 1
/// when its first poll round was checked, 2 at its end, 3 the poll rounds (a count). The stamp
/// array holds `STAMPS + 4 x blocks` u64 and this kernel runs at least 16 blocks (16 unit
/// slices).
pub const PROBES: u32 = 4 * 16;

impl Stamps {
    /// Writes `v` to `stamps[idx]` when stamping (thread 0 of block 0; idx < [`STAMPS`] +
    /// [`PROBES`], others are dropped).
    pub fn write_value(&self, b: &mut KernelBuilder, idx: Reg<U32>, v: Reg<U64>) {
        let base = b.ld_param(&self.param);
        let on = stamping(b, base, self.tid, |b| b.special(Special::CtaidX));
        let ok = b.setp(Cmp::Lt, idx, STAMPS + PROBES);
        let on = b.and(on, ok);
        b.if_then(on, |b| {
            let base = b.ld_param(&self.param);
            let base = b.to_global(base);
            let a = b.index_addr(base, idx, 8);
            b.st(Space::Global, a, v);
        });
    }

    /// Cluster kernels: thread 0 of every block writes `%globaltimer` to
    /// `stamps[STAMPS + 4 block + slot]` when stamping (slot 0 start, 1 end), and at the start
    /// also `%smid` to slot 2 (the host sizes the array: [`STAMPS`] + 4 blocks).
    pub fn write_block(&self, b: &mut KernelBuilder, slot: u32) {
        let base = b.ld_param(&self.param);
        let nz = b.setp(Cmp::Ne, base, 0u64);
        let t0 = b.setp(Cmp::Eq, self.tid, 0u32);
        let on = b.and(nz, t0);
        b.if_then(on, |b| {
            let now = b.globaltimer();
            let base = b.ld_param(&self.param);
            let base = b.to_global(base);
            let cta = b.special(Special::CtaidX);
            let i = b.mad(cta, 4u32, STAMPS + slot);
            let a = b.index_addr(base, i, 8);
            b.st(Space::Global, a, now);
            if slot == 0 {
                let sm = b.special(Special::SmId);
                let sm = b.cvt::<U64, U32>(sm);
                let i = b.mad(cta, 4u32, STAMPS + 2);
                let a = b.index_addr(base, i, 8);
                b.st(Space::Global, a, sm);
            }
        });
    }
}

/// Weight rows a lane group covers (16 lanes x 4 rows).
pub const ROWS: u32 = 64;
/// Scratch slots: one per warp (its two half-warps' K slices are added by a shuffle first).
pub const SLOTS: u32 = 8;
/// Scratch floats per source row: 72 puts a warp's two half-warps (2 rows apart) in different
/// banks.
pub const ROW_STRIDE: u32 = 72;

/// Scratch floats for up to `bg` source rows.
pub fn scratch_floats(bg: u32) -> u32 {
    SLOTS * bg * ROW_STRIDE
}

/// Shared row stride of the held W_ih (floats, Ip = 128 plus 4): the 8 lanes of a quarter-warp
/// read 8 consecutive rows' float4s in 8 different bank groups.
pub const WIH_STRIDE: u32 = 132;

/// Shared floats of the stationary path for `bg` rows, `j` units and `c` (the kernel's `chunk`):
/// 0 for gi per step (2 gi and x buffers and W_ih), otherwise gi of every step computed first
/// (max(c, 2) buffers of gi and x, c >= steps, no W_ih, scratch for 2 Bg rows). `Ip` must be
/// 128.
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    let (nb, wih, sc) = if c == 0 {
        (2, 3 * j * WIH_STRIDE, scratch_floats(bg))
    } else {
        (c.max(2), 0, scratch_floats(2 * bg))
    };
    bg * h + nb * bg * 3 * j + wih + nb * bg * ip + sc
}

/// A lane's place in the mat-vec: K slice `slot = 2 warp + half`, rows `g + 16 q`.
pub(super) struct Lane {
    pub slot: Reg<U32>,
    pub g: Reg<U32>,
    pub warp: Reg<U32>,
    pub half: Reg<U32>,
}

impl Lane {
    /// The lane's place: `half = lane >> 4`, `slot = 2 warp + half`, `g = lane & 15`.
    pub fn new(b: &mut KernelBuilder, c: &Ctx<'_>) -> Lane {
        let half = b.shr(c.lane, 4u32);
        Lane {
            slot: b.mad(c.warp, 2u32, half),
            g: b.and(c.lane, 15u32),
            warp: c.warp,
            half,
        }
    }
}

/// Offsets (floats) of the stationary path's shared regions.
pub(super) struct Layout {
    pub gi: Reg<U32>,
    pub w: Reg<U32>,
    pub x: Reg<U32>,
    pub scratch: Reg<U32>,
    /// Floats of one x buffer (`rows x Ip`).
    pub xbuf: Reg<U32>,
}

/// The shared layout (computed where it is used: the step loop has no registers to keep it),
/// per [`smem_floats`]'s two modes.
pub(super) fn layout(b: &mut KernelBuilder, c: &Ctx<'_>) -> Layout {
    let p = c.p;
    // nb = max(chunk, 2) buffers; W_ih only when chunk = 0 (arithmetic, no predicate).
    let nb = b.max(p.chunk, 2u32);
    let gi = b.mul(p.group_rows, p.h);
    let nbg = b.mul(nb, p.group_rows);
    let w = b.mad(nbg, c.r3, gi);
    let one = b.min(p.chunk, 1u32);
    let keep = b.sub(1u32, one);
    let wih = b.mul(c.r3, WIH_STRIDE);
    let wih = b.mul(wih, keep);
    let x = b.add(w, wih);
    let scratch = b.mad(nbg, p.ip, x);
    let xbuf = b.mul(c.rows, p.ip);
    Layout {
        gi,
        w,
        x,
        scratch,
        xbuf,
    }
}

/// `a && !n`.
fn and_not(b: &mut KernelBuilder, a: Reg<Pred>, n: Reg<Pred>) -> Reg<Pred> {
    let nn = b.not(n);
    b.and(a, nn)
}

/// Whether gi of every step is computed before step 0 (`chunk != 0`).
pub(super) fn precomputed(b: &mut KernelBuilder, p: &P) -> Reg<Pred> {
    b.setp(Cmp::Ne, p.chunk, 0u32)
}
