//! The frame shared by the tensor-core GEMMs `tc` and `tca`: the parameter list (that of
//! `rnn_gemm_*`), the lane setup, W's staging addresses, loads and split stores, register moves,
//! and the epilogue call that ends the kernel (the epilogue itself: `tc_parts`).

use super::tc::TC_THREADS;
use super::tc_parts::{epilogue, split};
use super::{OpA, BM, BN};
use crate::ptx::*;

/// The kernel's loaded parameters (the list of `rnn_gemm_*`).
pub(super) struct Params {
    pub a: Reg<U64>,
    pub w: Reg<U64>,
    pub c: Reg<U64>,
    pub partial: Reg<U64>,
    pub counters: Reg<U64>,
    pub m: Reg<U32>,
    pub k: Reg<U32>,
    pub lda: Reg<U32>,
    pub kps: Reg<U32>,
    pub splits: Param<U32>,
}

/// The [`TC_THREADS`]-thread kernel `rnn_gemm_{nn,tn}_{variant}` of `op`, with its parameters
/// declared and loaded; `tn` is whether `op` is the transpose.
pub(super) fn begin(op: OpA, variant: &str) -> (bool, KernelBuilder, Params) {
    let tn = op == OpA::Transposed;
    let mut b = KernelBuilder::new(&format!(
        "rnn_gemm_{}_{variant}",
        if tn { "tn" } else { "nn" }
    ));
    b.reqntid(TC_THREADS, 1, 1);
    let pa = b.param::<U64>("a");
    let pb = b.param::<U64>("b");
    let pc = b.param::<U64>("c");
    let pp = b.param::<U64>("partial");
    let pcnt = b.param::<U64>("counters");
    let pm = b.param::<U32>("m");
    let _pn = b.param::<U32>("n");
    let pk = b.param::<U32>("k");
    let plda = b.param::<U32>("lda");
    let pkps = b.param::<U32>("k_per_split");
    let splits = b.param::<U32>("splits");
    let (a, w, c) = (b.global_ptr(&pa), b.global_ptr(&pb), b.global_ptr(&pc));
    let (partial, counters) = (b.global_ptr(&pp), b.global_ptr(&pcnt));
    let (m, k, lda, kps) = (
        b.ld_param(&pm),
        b.ld_param(&pk),
        b.ld_param(&plda),
        b.ld_param(&pkps),
    );
    let p = Params {
        a,
        w,
        c,
        partial,
        counters,
        m,
        k,
        lda,
        kps,
        splits,
    };
    (tn, b, p)
}

/// The thread's place: lane (g, t), warp, block (x, z), the block's first row `m0`, the warp's
/// first row `wbase` and the block's inner range `[k_begin, k_end)`.
pub(super) struct Lanes {
    pub tid: Reg<U32>,
    pub bx: Reg<U32>,
    pub bz: Reg<U32>,
    pub lane: Reg<U32>,
    pub warp: Reg<U32>,
    pub g: Reg<U32>,
    pub t: Reg<U32>,
    pub m0: Reg<U32>,
    pub wbase: Reg<U32>,
    pub k_begin: Reg<U32>,
    pub k_end: Reg<U32>,
}

/// The setup of [`Lanes`] (after the shared arrays are declared).
pub(super) fn lanes(b: &mut KernelBuilder, p: &Params) -> Lanes {
    b.comment("setup: lane (g, t), the warp's 32 rows, the block's inner range");
    let tid = b.special(Special::TidX);
    let bx = b.special(Special::CtaidX);
    let bz = b.special(Special::CtaidZ);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let g = b.shr(lane, 2u32);
    let t = b.and(lane, 3u32);
    let m0 = b.mul(bx, BM);
    let wbase = b.mad(warp, 32u32, m0);
    let k_begin = b.mul(bz, p.kps);
    let k_end = b.add(k_begin, p.kps);
    let k_end = b.min(k_end, p.k);
    Lanes {
        tid,
        bx,
        bz,
        lane,
        warp,
        g,
        t,
        m0,
        wbase,
        k_begin,
        k_end,
    }
}

/// W's staging addresses: `ptr`, the thread's global pointer to W at row `wrow`, column `n4`;
/// `st`, where its inner index `kk` of `Wt` row `n4` goes (`kk = 2p + e` to words `4p + e`,
/// hi, and `4p + e + 2`, lo); `rd`, the lane's fragment reads (row g, words `8t ..`).
pub(super) struct WStage {
    pub ptr: Reg<U64>,
    pub st: Addr,
    pub rd: Addr,
}

/// [`WStage`] in the `Wt` array `ws` of row stride `stride` words.
pub(super) fn w_stage(
    b: &mut KernelBuilder,
    p: &Params,
    l: &Lanes,
    ws: &SharedArray<B32>,
    stride: u32,
    (wrow, n4, kk): (Reg<U32>, Reg<U32>, Reg<U32>),
) -> WStage {
    let we = b.mad(wrow, BN, n4);
    let ptr = b.index_addr(p.w, we, 4);
    let srow = b.mul(n4, stride);
    let pe = b.and(kk, 1u32);
    let p2 = b.shr(kk, 1u32);
    let pw = b.mad(p2, 4u32, pe);
    let sidx = b.add(srow, pw);
    let st: Addr = b.shared_index(ws, sidx).into();
    let t8 = b.shl(l.t, 3u32);
    let ridx = b.mad(l.g, stride, t8);
    let rd: Addr = b.shared_index(ws, ridx).into();
    WStage { ptr, st, rd }
}

/// Splits and stores a chunk's W loads: value i of load q is inner index `rows q + i` of the
/// thread's `Wt` row (store address `st`, row stride `stride` words).
pub(super) fn store_w(
    b: &mut KernelBuilder,
    wregs: &[[Reg<F32>; 4]],
    st: &Addr,
    rows: u32,
    stride: u32,
) {
    for (q, v) in wregs.iter().enumerate() {
        for (i, x) in v.iter().enumerate() {
            let (h, l) = split(b, *x);
            let off = i64::from(4 * (rows * q as u32 + i as u32) * stride);
            b.st(Space::Shared, st.off(off), h);
            b.st(Space::Shared, st.off(off + 8), l);
        }
    }
}

/// A 16-byte load into fresh registers, predicated on `pred` when given.
pub(super) fn ld4_into(
    b: &mut KernelBuilder,
    space: Space,
    at: impl Into<Addr>,
    pred: Option<Reg<Pred>>,
) -> [Reg<F32>; 4] {
    let at = at.into();
    let v = [0; 4].map(|_| b.reg::<F32>());
    let body = |b: &mut KernelBuilder| {
        let x = b.ld_v4::<F32>(space, at);
        mov_quads(b, &[v], &[x]);
    };
    match pred {
        None => body(b),
        Some(p) => b.guarded(p, false, body),
    }
    v
}

/// W's global loads of one chunk: `quads` float4 `bytes` apart from `ptr`, predicated on `pred`
/// when given; `fresh`: always into fresh registers ([`ld4_into`]), else [`ld4`].
pub(super) fn w_loads(
    b: &mut KernelBuilder,
    ptr: Reg<U64>,
    (quads, bytes): (u32, u32),
    pred: Option<Reg<Pred>>,
    fresh: bool,
) -> Vec<[Reg<F32>; 4]> {
    (0..quads)
        .map(|q| {
            let at = Addr::from(ptr).off(i64::from(bytes * q));
            if fresh {
                ld4_into(b, Space::Global, at, pred)
            } else {
                ld4(b, Space::Global, at, pred)
            }
        })
        .collect()
}

/// A 16-byte load: plain, or into fresh registers under `pred` when given.
pub(super) fn ld4(
    b: &mut KernelBuilder,
    space: Space,
    at: impl Into<Addr>,
    pred: Option<Reg<Pred>>,
) -> [Reg<F32>; 4] {
    match pred {
        None => b.ld_v4::<F32>(space, at),
        Some(_) => ld4_into(b, space, at, pred),
    }
}

/// `dst = src`, quad by quad.
pub(super) fn mov_quads(b: &mut KernelBuilder, dst: &[[Reg<F32>; 4]], src: &[[Reg<F32>; 4]]) {
    for (d, s) in dst.iter().zip(src) {
        for q in 0..4 {
            b.mov_to(d[q], s[q]);
        }
    }
}

/// The 12 zeroed accumulator tiles.
pub(super) fn zero_acc(b: &mut KernelBuilder) -> Vec<[Reg<F32>; 4]> {
    (0..12).map(|_| [0; 4].map(|_| b.mov(0.0f32))).collect()
}

/// The epilogue, then the module.
pub(super) fn finish(
    mut b: KernelBuilder,
    target: Target,
    tn: bool,
    p: &Params,
    l: &Lanes,
    flag: &SharedArray<U32>,
    acc: &[[Reg<F32>; 4]],
) -> Module {
    epilogue(&mut b, tn, p, l, flag, acc);
    Module::single(target, b.finish())
}
