//! The GRU rollout kernels: T steps of one GRU or of an ensemble of E GRUs as one persistent
//! cooperative kernel. The maths (PyTorch's convention) and the f64 reference are in
//! `crate::rnn::reference`; the f32 transcendentals are `mathf`'s. Two kernels share this
//! folder's ABI and step structure: `rnn_gru_shared` ([`shared`]: the weights in shared memory,
//! any H and input width) and `rnn_gru_stationary` ([`stationary`]: W_hh in registers, H = 256
//! and a padded input of 128). Same maths up to f32 summation order. Variants of the second:
//! `rnn_gru_stationary48` ([`stationary::rows48`]: lanes hold 48 gate rows, for blocks of at
//! most 16 units) and, on sm_90, `rnn_gru_cluster` / `rnn_gru_cluster_streamed`
//! ([`stationary::cluster`]: the exchange of steps 3 and 4 in distributed shared memory of
//! 16-block clusters, no tagged words, no cooperative launch).
//!
//! This file holds what both share: the parameters (`P`), the block's place in the grid and
//! its per-block registers (`Ctx`, built by `block_context`) and the exchange's view of them
//! (`Exchange`). Helpers: [`tile`] (the shared-memory mat-vec and row copies), [`cell`] (step
//! 2), [`exchange`] (steps 3 and 4). Imports run one way: helpers use this file, kernels use
//! helpers, nothing here uses them.
//!
//! Sizes: batch Bp (multiple of 4, host-padded), input Ip and hidden H (multiples of 128; the host
//! pads the input with zero columns). Arrays (row-major f32): `x` `T x Bp x Ip` (member e reads
//! `x + e * x_member_stride`), `h0` `E x Bp x H`, `w_ih` `E x 3H x Ip`, `w_hh` `E x 3H x H`,
//! `b_ih`/`b_hh` `E x 3H` (the host folds b_hh of the r and z gates into `b_ih`: the kernel reads
//! b_hh only for n), `ln_gain`/`ln_bias` `E x H`, `out` `E x T x Bp x H`; `hx` (exchange,
//! u64) `E x T x Bp x H`; `state` holds `epoch, count, status, -` (u32) per member.
//!
//! Batch rows are independent (layer norm is per row too), so the grid is split into groups:
//! block c is member e, batch group g (rows `g Bg .. + Bg`, the last group may be shorter, a
//! multiple of 4) and unit slice s (J units from `j0 = 2 floor(s (H/2) / S)`, J even and equal
//! up to 2 across slices, so the host can pick S to fill the SMs), `c = (e G + g) S + s` with
//! `G = ceil(Bp / Bg)`. Only the S blocks of one (e, g) exchange states. Launch:
//! cooperative (spinning needs co-residency), `E G S` blocks of [`THREADS`] threads, dynamic
//! shared memory per the kernel's `smem_floats`. Local gate row `3 jj + q` is gate q of unit
//! j0 + jj. Per step t:
//! 1. `gh = W_hh h` (each kernel's own mat-vec); bar.sync;
//! 2. cell, a thread per (row, unit): r, z from `gi + gh` (gi holds both biases), `n =
//!    tanh(gi_n + r (gh_n + b_hn))` (b_hn through the read-only cache), `h' = n + z (h - n)` (one
//!    fma), with `mathf`'s SFU forms of sigmoid and tanh. h' goes
//!    to `hx[e][t][row][unit]` as one 64-bit word `f32 bits | tag << 32` (`st.relaxed.gpu`),
//!    `tag = epoch + t + 1`; without layer norm and dropout also straight to `out`;
//! 3. exchange (`exchange::gather`): the block polls its rows of `hx[e][t]` with 16-byte
//!    `ld.relaxed.gpu.v2.u64` loads (each 8-byte element single-copy atomic, so a value and its
//!    tag arrive together), re-reading only pairs whose tag is not yet this step's, and stores
//!    the values into its shared h; bar.sync. No fence, counter or barrier: each word validates
//!    itself. `hx[e][t]` is written once per launch, so there is no reuse hazard; stale words of
//!    earlier launches carry older tags (`epoch` advances by T per launch: at the start, after a
//!    bar.sync that follows every thread's read of it, thread 0 of each block counts the block
//!    in (`fence.acq_rel` + atomic add); the member's last block adds T and resets the count).
//!    A tag could only repeat after 2^32 steps of one object. The step loop skips the last
//!    step's gather unless layer norm or dropout need whole rows.
//! 4. with layer norm or dropout (`exchange::transform`): one warp per row normalises in
//!    place (two warp sums) and applies dropout (hash of (e, t, row, unit)); the block's own
//!    units go to `out`; bar.sync.
//!
//! A poll longer than `barrier::TIMEOUT_CYCLES` (blocks not co-resident) sets the member's
//! status word and goes on with wrong values instead of hanging; the host reports an error.

pub mod cell;
pub mod exchange;
pub mod shared;
pub mod stationary;
pub mod tile;

use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;

/// Kernel parameters in registers.
pub(super) struct P {
    pub x: Reg<U64>,
    pub x_member_stride: Reg<U32>,
    pub h0: Reg<U64>,
    pub w_ih: Reg<U64>,
    pub w_hh: Reg<U64>,
    pub b_ih: Reg<U64>,
    pub b_hh: Reg<U64>,
    pub gain: Reg<U64>,
    pub beta: Reg<U64>,
    pub hx: Reg<U64>,
    pub out: Reg<U64>,
    pub state: Reg<U64>,
    pub steps: Reg<U32>,
    pub batch: Reg<U32>,
    pub batch_pad: Reg<U32>,
    pub ip: Reg<U32>,
    pub h: Reg<U32>,
    pub slices: Reg<U32>,
    pub group_rows: Reg<U32>,
    pub chunk: Reg<U32>,
    pub ln: Reg<Pred>,
    pub eps: Reg<F32>,
    pub drop: Reg<Pred>,
    pub drop_threshold: Reg<U32>,
    pub scale: Reg<F32>,
    pub seed_lo: Reg<U32>,
    pub seed_hi: Reg<U32>,
}

/// The pointer parameters, in signature order.
const POINTERS: [&str; 11] = [
    "x", "h0", "w_ih", "w_hh", "b_ih", "b_hh", "ln_gain", "ln_bias", "hx", "out", "state",
];

/// The u32 parameters, in signature order (after [`POINTERS`]).
const SIZES: [&str; 14] = [
    "x_member_stride",
    "steps",
    "batch",
    "batch_pad",
    "input_pad",
    "hidden",
    "slices",
    "rows",
    "chunk",
    "layer_norm",
    "dropout",
    "drop_threshold",
    "seed_lo",
    "seed_hi",
];

/// Position of `name` in a parameter list (a name this file spells, so always there).
fn slot(names: &[&str], name: &str) -> usize {
    names
        .iter()
        .position(|n| *n == name)
        .expect("the GRU kernels read only parameters they declare")
}

fn params(b: &mut KernelBuilder) -> P {
    let ptrs: Vec<Param<U64>> = POINTERS.iter().map(|n| b.param::<U64>(n)).collect();
    let sizes: Vec<Param<U32>> = SIZES.iter().map(|n| b.param::<U32>(n)).collect();
    let peps = b.param::<F32>("ln_eps");
    let pscale = b.param::<F32>("drop_scale");
    let g: Vec<Reg<U64>> = ptrs.iter().map(|p| b.global_ptr(p)).collect();
    let u: Vec<Reg<U32>> = sizes.iter().map(|p| b.ld_param(p)).collect();
    let ptr = |name: &str| g[slot(&POINTERS, name)];
    let size = |name: &str| u[slot(&SIZES, name)];
    let ln = b.setp(Cmp::Ne, size("layer_norm"), 0u32);
    let drop = b.setp(Cmp::Ne, size("dropout"), 0u32);
    let eps = b.ld_param(&peps);
    let scale = b.ld_param(&pscale);
    P {
        x: ptr("x"),
        h0: ptr("h0"),
        w_ih: ptr("w_ih"),
        w_hh: ptr("w_hh"),
        b_ih: ptr("b_ih"),
        b_hh: ptr("b_hh"),
        gain: ptr("ln_gain"),
        beta: ptr("ln_bias"),
        hx: ptr("hx"),
        out: ptr("out"),
        state: ptr("state"),
        x_member_stride: size("x_member_stride"),
        steps: size("steps"),
        batch: size("batch"),
        batch_pad: size("batch_pad"),
        ip: size("input_pad"),
        h: size("hidden"),
        slices: size("slices"),
        group_rows: size("rows"),
        chunk: size("chunk"),
        ln,
        eps,
        drop,
        drop_threshold: size("drop_threshold"),
        scale,
        seed_lo: size("seed_lo"),
        seed_hi: size("seed_hi"),
    }
}

/// Per-block values both paths use (registers of the kernel).
pub(super) struct Ctx<'a> {
    pub p: &'a P,
    pub smem: &'a SharedArray<F32>,
    pub tid: Reg<U32>,
    pub lane: Reg<U32>,
    pub warp: Reg<U32>,
    pub e: Reg<U32>,
    /// e * steps.
    pub member_steps: Reg<U32>,
    pub row0: Reg<U32>,
    pub rows: Reg<U32>,
    pub j0: Reg<U32>,
    pub j1: Reg<U32>,
    /// Units of this block and its gate rows 3J.
    pub j: Reg<U32>,
    pub r3: Reg<U32>,
    /// Member offsets: e 3H (biases), e 3H Ip (W_ih), e 3H H (W_hh), e x_member_stride (x).
    pub bias_base: Reg<U32>,
    pub w_ih_base: Reg<U32>,
    pub w_hh_base: Reg<U32>,
    pub x_base: Reg<U32>,
    pub epoch: Reg<U32>,
}

impl Ctx<'_> {
    /// Address of b_ih of local gate row lr (member e).
    pub fn b_ih_addr(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U64> {
        let gr = self.grow(b, lr);
        let i = b.add(gr, self.bias_base);
        b.index_addr(self.p.b_ih, i, 4)
    }

    /// Element index of the first W_hh weight of local gate row lr (member e).
    pub fn w_hh_row(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U32> {
        let gr = self.grow(b, lr);
        b.mad(gr, self.p.h, self.w_hh_base)
    }

    /// Element index of the first W_ih weight of local gate row lr (member e).
    pub fn w_ih_row(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U32> {
        let gr = self.grow(b, lr);
        b.mad(gr, self.p.ip, self.w_ih_base)
    }

    /// Element index of h0 of the block's batch row r (member e).
    pub fn h0_row(&self, b: &mut KernelBuilder, r: Reg<U32>) -> Reg<U32> {
        let er = b.mad(self.e, self.p.batch_pad, self.row0);
        let er = b.add(er, r);
        b.mul(er, self.p.h)
    }

    /// Local row lr = 3 jj + q  ->  global gate row q H + j0 + jj.
    pub fn grow(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U32> {
        let jj = b.div(lr, 3u32);
        let q = b.rem(lr, 3u32);
        let t = b.mad(q, self.p.h, self.j0);
        b.add(t, jj)
    }
}

/// `m = (d - 1 + 2^shift) / d`: with it, `idx / d` is `(idx * m) >> shift` while
/// `idx d < 2^shift` (the error idx / 2^shift stays under 1/d), a multiply instead of a division.
pub(super) fn reciprocal(b: &mut KernelBuilder, d: Reg<U32>, shift: u32) -> Reg<U32> {
    let dm = b.sub(d, 1u32);
    let m = b.add(dm, 1u32 << shift);
    b.div(m, d)
}

/// What the cell and the exchange need: the kernel's per-block registers ([`Ctx`], reached
/// through `Deref`) and where the block's h rows start in the shared array (floats).
pub(super) struct Exchange<'a> {
    pub c: &'a Ctx<'a>,
    pub o_h: Reg<U32>,
}

impl<'a> std::ops::Deref for Exchange<'a> {
    type Target = Ctx<'a>;
    fn deref(&self) -> &Ctx<'a> {
        self.c
    }
}

impl Exchange<'_> {
    /// Element index of (member e, step t, group row `row`, unit 0) in `hx` and `out`.
    pub fn word_index(&self, b: &mut KernelBuilder, t: Reg<U32>, row: Reg<U32>) -> Reg<U32> {
        let s = b.add(self.member_steps, t);
        let r = b.mad(s, self.p.batch_pad, self.row0);
        let r = b.add(r, row);
        b.mul(r, self.p.h)
    }
}

/// Declares the kernel (name, launch bounds, parameters, dynamic shared array) and runs `body`
/// with the block's [`Ctx`] (see [`block_context`]).
pub(super) fn kernel(
    target: Target,
    name: &str,
    body: impl FnOnce(&mut KernelBuilder, &Ctx<'_>),
) -> Module {
    kernel_with(target, name, Accounting::Epoch, body)
}

/// Whether a kernel keeps the launch epoch of the tagged exchange words (`Epoch`: read it and
/// count the block in, see [`block_context`]) or exchanges without tags (`None`: `epoch` is 0).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Accounting {
    Epoch,
    None,
}

/// [`kernel`] with the epoch accounting `acc`.
pub(super) fn kernel_with(
    target: Target,
    name: &str,
    acc: Accounting,
    body: impl FnOnce(&mut KernelBuilder, &Ctx<'_>),
) -> Module {
    // Two blocks per SM (128 registers) so that an ensemble's grid can be resident.
    kernel_per_sm(target, name, acc, 2, body)
}

/// [`kernel_with`] for at most `per_sm` blocks per SM (`.minnctapersm`: ptxas' register bound).
pub(super) fn kernel_per_sm(
    target: Target,
    name: &str,
    acc: Accounting,
    per_sm: u32,
    body: impl FnOnce(&mut KernelBuilder, &Ctx<'_>),
) -> Module {
    let mut b = KernelBuilder::new(name);
    b.reqntid(THREADS, 1, 1);
    b.minnctapersm(per_sm);
    let p = params(&mut b);
    let smem = b.dynamic_shared::<F32>("smem");
    b.comment("block -> (member, batch group, unit slice), member offsets, epoch");
    let c = block_context(&mut b, &p, &smem, acc);
    body(&mut b, &c);
    Module::single(target, b.finish())
}

/// The block's place in the grid (member, batch group, unit slice; see the module notes), its
/// member's offsets and this launch's epoch. Thread 0 counts the block in once every thread has
/// read the epoch.
fn block_context<'a>(
    b: &mut KernelBuilder,
    p: &'a P,
    smem: &'a SharedArray<F32>,
    acc: Accounting,
) -> Ctx<'a> {
    let tid = b.special(Special::TidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let cta = b.special(Special::CtaidX);
    // Block -> (member, group, slice).
    let slices = p.slices;
    let rows_less_one = b.sub(p.group_rows, 1u32);
    let groups = b.add(p.batch_pad, rows_less_one);
    let groups = b.div(groups, p.group_rows);
    let member_blocks = b.mul(groups, slices);
    let e = b.div(cta, member_blocks);
    let in_member = b.rem(cta, member_blocks);
    let g = b.div(in_member, slices);
    let s = b.rem(in_member, slices);
    // Slice s: units 2 floor(s (H/2) / S) .. 2 floor((s + 1) (H/2) / S) (even counts that differ
    // by at most 2, so any S up to H/2 spreads the units evenly).
    let half = b.shr(p.h, 1u32);
    let pairs_before = b.mul(s, half);
    let j0 = b.div(pairs_before, slices);
    let j0 = b.shl(j0, 1u32);
    let pairs_through = b.add(pairs_before, half);
    let j1 = b.div(pairs_through, slices);
    let j1 = b.shl(j1, 1u32);
    let j = b.sub(j1, j0);
    let row0 = b.mul(g, p.group_rows);
    let left = b.sub(p.batch_pad, row0);
    let rows = b.min(left, p.group_rows);
    let r3 = b.mul(j, 3u32);
    let h3 = b.mul(p.h, 3u32);
    let bias_base = b.mul(e, h3);
    let w_ih_base = b.mul(bias_base, p.ip);
    let w_hh_base = b.mul(bias_base, p.h);
    let x_base = b.mul(e, p.x_member_stride);
    let (epoch, member_steps) = if acc == Accounting::None {
        let epoch = b.mov(0u32);
        (epoch, b.mul(e, p.steps))
    } else {
        let state_bytes = b.mul_wide(e, 16u32);
        let epoch_a = b.add(p.state, state_bytes);
        let epoch = b.ld::<U32>(Space::Global, epoch_a);
        let member_steps = b.mul(e, p.steps);
        b.comment("count the block in (the member's last block advances the epoch by T)");
        // Read accounting, at the start (not on the way out, where thread 0's fence would wait for
        // the last step's stores): once every thread of the block has read the epoch (bar.sync),
        // thread 0 counts the block in; the member's last block advances the epoch by T for the
        // next launch and resets the count.
        b.bar_sync();
        let count_a = b.add(epoch_a, 4u64);
        let thread0 = b.setp(Cmp::Eq, tid, 0u32);
        b.if_then(thread0, |b| {
            b.fence_acq_rel(Scope::Gpu);
            let old = b.atom(Space::Global, AtomOp::Add, count_a, 1u32);
            let last = b.sub(member_blocks, 1u32);
            let is_last = b.setp(Cmp::Eq, old, last);
            b.if_then(is_last, |b| {
                let next = b.add(epoch, p.steps);
                b.st(Space::Global, epoch_a, next);
                b.st(Space::Global, count_a, 0u32);
            });
        });
        (epoch, member_steps)
    };
    Ctx {
        p,
        smem,
        tid,
        lane,
        warp,
        e,
        member_steps,
        row0,
        rows,
        j0,
        j1,
        j,
        r3,
        bias_base,
        w_ih_base,
        w_hh_base,
        x_base,
        epoch,
    }
}
