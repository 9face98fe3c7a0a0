//! `rnn_gru_held48` / `rnn_gru_held64`: the weight-stationary rollout (same ABI and steps, see
//! `stationary`'s notes; H = 256, Ip = 128) with W_ih held in registers for the whole rollout
//! too, for grids of one block per SM (`.minnctapersm 1`: W_hh and W_ih take 72 or 96
//! registers). Lanes hold rows `g + 16 q` for q < 3 (`rnn_gru_held48`, 3J <= 48) or q < 4
//! (`rnn_gru_held64`, 3J <= 64) of both matrices (`matvec::hold_rows`, KS = 16 for W_hh, 8 for
//! W_ih).
//!
//! Why: `rnn_gru_stationary48` computes gi of every step before step 0 (5 phases of partials,
//! slot sums and two barriers each, then W_hh's loads): 7.7 us of its 23.8 us on an H100. Here
//! the prologue issues the loads of W_ih, W_hh, h0, x of every step (`cp.async`, in the order
//! they are needed) and b_ih of the block's gate rows, then computes gi of step 0 and the
//! partials of `W_ih x_1`. gi runs two steps ahead of the cells: in step t, after the cells,
//! the 8-slot sums of step t + 1 (threads without cells take them first, so they run beside
//! the cells) and the partials of `W_ih x_{t+2}` (while the other blocks' states are on their
//! way). The sums are `precompute_sums`' (the slots in order plus b_ih), so gi, and every
//! state, are bit-identical to `rnn_gru_stationary48`'s / `rnn_gru_stationary`'s precompute
//! mode.
//!
//! The launch's epoch (tags of the exchange words) comes from one relaxed 64-bit atomic of
//! thread 0 that also counts the block in (`Count`), waited for only at the prologue's barrier.
//!
//! `rnn_gru_held48s` / `rnn_gru_held64s` split the roles between the warps (same steps, same
//! partial sums, so bit-identical states): W_ih is held by four "upper" warps only (`wide`: a
//! K-block of 16 per half-warp), which take the partials of `W_ih x_{t+2}` (and, in
//! `rnn_gru_held64s`, the gi sums of step t + 1) right after the mat-vec barrier, while the four
//! "lower" warps (128 threads) take the cells, the gather (and in `rnn_gru_held48s` the gi sums).
//! The upper warps are 2, 3, 6 and 7, so the two groups issue from different schedulers (warp w
//! from scheduler w % 4): with warps 4..8 as the upper group, the cells shared their schedulers
//! with the partials' FMAs and took 0.44 instead of 0.28 us a step (H100). In `rnn_gru_held48`
//! every warp takes all of it in turn, so the gather starts only after the partials.
//!
//! `rnn_gru_held48w` / `rnn_gru_held48sw` (`rnn_gru_held48` / `rnn_gru_held48s` otherwise) stage
//! the weights through shared memory (`staged`): W_ih's rows with `x_0`, `x_1` and h0 (group 1),
//! W_hh's rows (group 2); the lanes read their W_ih after the prologue's barrier and their W_hh
//! after a second wait and barrier that follow the partials of `W_ih x_1` (stamp `[3]` then
//! includes W_hh's landing).
//!
//! Shared layout (floats): h `Bg x H` | x `nb Bg x Ip` (every step, nb = max(chunk, 1) >=
//! steps) | W_hh scratch | two W_ih scratches (step parity) | two gi buffers (`Bg x 64` each,
//! rows of 3J) | b_ih `3J` (64 floats) | the epoch (4 floats). The W_ih scratch of parity s % 2
//! is written in step s - 2 (after the cells) and read by the sums of step s in step s - 1
//! (after its mat-vec barrier); gi buffer s % 2 is written there and read by the cells of step
//! s. Each is rewritten only two steps later, after the barriers between. Clock stamps
//! ([`super::STAMPS`]): `[0]` start, `[1]` W_ih and x_0, x_1, h0 issued, `[2]` W_hh and the
//! later steps' x issued, x_0, x_1 and h0 landed (barrier), `[3]` gi of step 0 and partials of
//! `W_ih x_1`; per step t at `4 + 3 t + i`: i = 0 mat-vec, 1 cell, 2 gi of t + 1, partials of
//! `W_ih x_{t+2}` and the exchange (and transform); `rnn_gru_held48s` also at `STAMPS - 16 + t`
//! (thread 64): the upper warps' partials of `W_ih x_{t+2}` done.
//!
//! Schedule of `rnn_gru_held48sw` (session 11, `How`; same sums in the same order, so states
//! bit-identical): `rnn_gru_held48swxc` (the host's default for this shape) copies x of steps
//! 0 .. 3 in the prologue and x of step t + 3 in step t (upper warps) instead of every step's x
//! in the prologue (14 KiB less to land per block before step 0: the prologue moves ~96 KiB per
//! SM from L2 at ~6 TB/s for the whole GPU), and lets the threads with a cell issue the gather's
//! first poll loads right after their cell and take their gi sums of step t + 1 while the loads
//! are out (the others sum first, then poll). `rnn_gru_held48swxcp` is the same kernel with
//! thread 0's gather timed (`super::PROBES`; bench instrumentation). Session 11's other
//! schedules (gi sums by the upper warps, each warp gathering its own K slice with no barrier,
//! every lower thread summing inside the round trip) measured slower on an H100 and were
//! removed in session 12.

use super::cluster::prologue::{copy_h0_async, copy_x_async};
use super::count::Count;
use super::held_gi::{gi_sums, layout, x_partials, x_partials_wide, BIAS_FLOATS};
pub use super::held_gi::{smem_floats, smem_floats_staged};
use super::held_step::{steps, Env};
use super::matvec::hold_rows;
use super::wide::{self, Upper};
use super::{staged, Lane, Stamps};
use crate::kernels::rnn::gru::{kernel_per_sm, Accounting, Ctx, THREADS};
use crate::ptx::*;

/// Builds `rnn_gru_held48` (lane rows q < 3).
pub fn build48(target: Target) -> Module {
    build(target, "rnn_gru_held48", 3)
}

/// Builds `rnn_gru_held64` (lane rows q < 4).
pub fn build64(target: Target) -> Module {
    build(target, "rnn_gru_held64", 4)
}

/// Builds `rnn_gru_held64o` (`rnn_gru_held64` with the partials of `W_ih x_{t+2}` inside the
/// gather's first L2 round trip; the host's default for the 64-row shape since session 12).
pub fn build64o(target: Target) -> Module {
    let how = How {
        partials_in_gather: true,
        ..How::new(4, None, false)
    };
    build_any(target, "rnn_gru_held64o", how)
}

/// Builds `rnn_gru_held48s` (lane rows q < 3, roles split between the warps: `wide`; the lower
/// warps take the gi sums).
pub fn build48s(target: Target) -> Module {
    build_with(target, "rnn_gru_held48s", 3, Some(GiBy::Lower))
}

/// Builds `rnn_gru_held64s` (lane rows q < 4, roles split between the warps: `wide`; the upper
/// warps take the gi sums).
pub fn build64s(target: Target) -> Module {
    build_with(target, "rnn_gru_held64s", 4, Some(GiBy::Upper))
}

/// Builds `rnn_gru_held48w` (`rnn_gru_held48` with the weights staged: `staged`).
pub fn build48w(target: Target) -> Module {
    build_staged(target, "rnn_gru_held48w", 3, None)
}

/// Builds `rnn_gru_held48sw` (`rnn_gru_held48s` with the weights staged: `staged`).
pub fn build48sw(target: Target) -> Module {
    build_staged(target, "rnn_gru_held48sw", 3, Some(GiBy::Lower))
}

/// Builds `rnn_gru_held48swxc` (`rnn_gru_held48sw` with x of steps 3 .. copied during the steps
/// and the threads with a cell taking their gi sums in the gather's round trip: they poll right
/// after their cell, the others sum first).
pub fn build48swxc(target: Target) -> Module {
    tuned(target, "rnn_gru_held48swxc", false)
}

/// Builds `rnn_gru_held48swxcp` (`rnn_gru_held48swxc` with thread 0's gather timed: `PROBES`).
pub fn build48swxcp(target: Target) -> Module {
    tuned(target, "rnn_gru_held48swxcp", true)
}

/// `rnn_gru_held48sw` with session 11's schedule (`lazy_x` and `overlap`), thread 0's gather
/// timed if `probe` (see [`How`]).
fn tuned(target: Target, name: &str, probe: bool) -> Module {
    let how = How {
        lazy_x: true,
        overlap: true,
        probe,
        ..How::new(3, Some(GiBy::Lower), true)
    };
    build_any(target, name, how)
}

/// With the roles split: which warps take the gi sums (the lower four, with the cells and the
/// gather, or the upper four, after their partials of `W_ih x`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum GiBy {
    Lower,
    Upper,
}

fn build(target: Target, name: &str, qs: u32) -> Module {
    build_with(target, name, qs, None)
}

fn build_with(target: Target, name: &str, qs: u32, split: Option<GiBy>) -> Module {
    build_any(target, name, How::new(qs, split, false))
}

fn build_staged(target: Target, name: &str, qs: u32, split: Option<GiBy>) -> Module {
    build_any(target, name, How::new(qs, split, true))
}

/// Builds one held kernel as `how` says.
fn build_any(target: Target, name: &str, how: How) -> Module {
    // The epoch is read and the block counted in by `Count` below, off the prologue's path.
    kernel_per_sm(target, name, Accounting::None, 1, |b, c| {
        let stamps = Stamps::declare(b, c);
        rollout(b, c, &stamps, &how)
    })
}

/// What [`rollout`] builds (see [`build_any`]).
struct How {
    /// Lane rows q < `qs` (3: 48 gate rows, 4: 64).
    qs: u32,
    /// Split roles (the upper warps hold W_ih) and who takes the gi sums.
    split: Option<GiBy>,
    /// Weights staged through shared memory (`staged`).
    staging: bool,
    /// Split roles only: the prologue copies x of steps 0 .. 3 only; in step t the upper warps
    /// copy x of step t + 3 (awaited before the mat-vec barrier of step t + 1, ahead of its
    /// first read by the partials of `W_ih x_{t+3}` after that barrier).
    lazy_x: bool,
    /// Thread 0's gather timings (`super::PROBES`).
    probe: bool,
    /// The gi sums of the lower threads with a cell between the gather's first poll loads and
    /// their check (split roles, gi sums by the lower warps; `held_step::Env`).
    overlap: bool,
    /// Without split roles: the partials of `W_ih x_{t+2}` between the gather's first poll
    /// loads and their check (`held_step::Env`).
    partials_in_gather: bool,
}

impl How {
    fn new(qs: u32, split: Option<GiBy>, staging: bool) -> How {
        How {
            qs,
            split,
            staging,
            lazy_x: false,
            probe: false,
            overlap: false,
            partials_in_gather: false,
        }
    }
}

/// The whole rollout (all threads; after `gru::block_context`). `split`: `rnn_gru_held48s`'s
/// and `rnn_gru_held64s`'s roles (the module notes).
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>, stamps: &Stamps, how: &How) {
    let (qs, split, staging) = (how.qs, how.split, how.staging);
    let lazy_x = how.lazy_x && split.is_some();
    let how_probe = how.probe;
    let gi_upper = split == Some(GiBy::Upper);
    let split = split.is_some();
    let (p, smem) = (c.p, c.smem);
    b.comment("prologue: the lane's place in the mat-vecs");
    let zero = b.mov(0u32);
    let lane = Lane::new(b, c);
    let up = split.then(|| Upper::new(b, c, &lane));
    let at = |b: &mut KernelBuilder, i: u32| stamps.at(b, i);
    at(b, 0);
    b.comment("count the block in (thread 0; the epoch is used after the prologue's barrier)");
    let t0 = b.setp(Cmp::Eq, c.tid, 0u32);
    let count = Count::issue(b, c, t0);
    b.comment("W_ih into registers (held throughout); h0, x of every step and b_ih staged");
    // What the prologue's barrier waits for comes first: x_0, W_ih, h0 (and b_ih), then W_hh,
    // then x of the later steps (`cp.async` group 2, awaited at the step loop's first barrier).
    {
        let lay = layout(b, c);
        let first = b.min(p.steps, 2u32);
        copy_x_async(b, c, zero, first, lay.x);
    }
    // Staged weights: W_ih's rows at `wi`, W_hh's at `wh` (after the epoch's slot).
    let (wi, wh) = if staging {
        let lay = layout(b, c);
        let wi = b.add(lay.bias, BIAS_FLOATS + 4);
        (wi, b.add(wi, 16 * qs * staged::WIH_STRIDE))
    } else {
        (zero, zero)
    };
    let w_ih_row = |b: &mut KernelBuilder, lr| c.w_ih_row(b, lr);
    let wih = match &up {
        _ if staging => {
            let ip = staged::WIH_STRIDE - 4;
            staged::stage(b, c, wi, staged::WIH_STRIDE, ip, p.w_ih, &w_ih_row);
            None
        }
        None => Some(hold_rows(b, 8, qs, &lane, p.w_ih, c.r3, &w_ih_row)),
        Some(u) => Some(wide::hold(b, c, u, qs)),
    };
    // The threads that take the cells, the gi sums and the gather: all, or the lower warps
    // (`tid` then the index among them).
    let threads = if split { THREADS / 2 } else { THREADS };
    let tid = up.as_ref().map_or(c.tid, |u| u.local);
    copy_h0_async(b, c);
    b.cp_async_commit_group();
    // b_ih of gate row tid (tid < 3J), loaded here and stored after W_hh's loads are issued
    // (a store right after the load would hold the warp for the round trip).
    let mine = b.setp(Cmp::Lt, c.tid, c.r3);
    let mut bias = None;
    b.guarded(mine, false, |b| {
        let ba = c.b_ih_addr(b, c.tid);
        bias = Some(b.ld::<F32>(Space::GlobalNc, ba));
    });
    let bias = bias.expect("the guarded closure runs");
    at(b, 1);
    b.comment("W_hh into registers (held throughout)");
    let w_hh_row = |b: &mut KernelBuilder, lr| c.w_hh_row(b, lr);
    let whh = if staging {
        let h = staged::WHH_STRIDE - 4;
        staged::stage(b, c, wh, staged::WHH_STRIDE, h, p.w_hh, &w_hh_row);
        b.cp_async_commit_group();
        None
    } else {
        Some(hold_rows(b, 16, qs, &lane, p.w_hh, c.r3, &w_hh_row))
    };
    {
        let lay = layout(b, c);
        let first = b.min(p.steps, 2u32);
        let later = if lazy_x {
            let upto = b.min(p.steps, 3u32);
            b.sub(upto, first)
        } else {
            b.sub(p.steps, first)
        };
        let dst = b.mad(first, lay.xbuf, lay.x);
        copy_x_async(b, c, first, later, dst);
        b.cp_async_commit_group();
    }
    {
        let lay = layout(b, c);
        let i = b.add(lay.bias, c.tid);
        let sa = b.shared_index(smem, i);
        b.guarded(mine, false, |b| b.st(Space::Shared, sa, bias));
    }
    let epoch_slot = {
        let lay = layout(b, c);
        b.add(lay.bias, BIAS_FLOATS)
    };
    count.publish(b, c, t0, epoch_slot);
    b.cp_async_wait_group(if staging { 2 } else { 1 });
    b.bar_sync();
    let epoch = {
        let sa = b.shared_index(smem, epoch_slot);
        b.ld::<U32>(Space::Shared, sa)
    };
    count.close(b, c, t0);
    // The block's registers with this launch's epoch (tags of the exchange words).
    let c = &Ctx { epoch, ..*c };
    let wih = match (wih, &up) {
        (Some(w), _) => w,
        (None, None) => staged::hold(b, c, 8, qs, &lane, wi, staged::WIH_STRIDE),
        (None, Some(u)) => {
            let mut held = None;
            b.if_then(u.on, |b| {
                held = Some(staged::hold(b, c, 16, qs, &u.lane, wi, staged::WIH_STRIDE));
            });
            held.expect("the if_then closure runs")
        }
    };
    // Partials of W_ih x_s: every warp, or the upper warps only.
    let xp = |b: &mut KernelBuilder, s: Reg<U32>| match &up {
        None => x_partials(b, c, &wih, &lane, s),
        Some(u) => b.if_then(u.on, |b| x_partials_wide(b, c, &wih, u, s)),
    };
    at(b, 2);
    b.comment("gi of step 0; partials of W_ih x_1 (the step loop's first barrier publishes both)");
    xp(b, zero);
    b.bar_sync();
    match &up {
        None => gi_sums(b, c, zero, threads, c.tid),
        Some(u) if gi_upper => b.if_then(u.on, |b| gi_sums(b, c, zero, threads, tid)),
        Some(u) => {
            let lo = b.not(u.on);
            b.if_then(lo, |b| gi_sums(b, c, zero, threads, tid))
        }
    }
    let one = b.mov(1u32);
    let two_plus = b.setp(Cmp::Gt, p.steps, 1u32);
    b.if_then(two_plus, |b| xp(b, one));
    let whh = match whh {
        Some(w) => w,
        None => {
            b.comment("W_hh's staged rows landed (every thread's copies): into registers");
            b.cp_async_wait_group(1);
            b.bar_sync();
            staged::hold(b, c, 16, qs, &lane, wh, staged::WHH_STRIDE)
        }
    };
    at(b, 3);
    let env = Env {
        c,
        stamps,
        lane: &lane,
        up: up.as_ref(),
        whh: &whh,
        wih: &wih,
        qs,
        threads,
        tid,
        gi_upper,
        lazy_x,
        probe: how_probe,
        overlap: how.overlap,
        partials_in_gather: how.partials_in_gather && !split,
        zero,
    };
    steps(b, &env);
}
