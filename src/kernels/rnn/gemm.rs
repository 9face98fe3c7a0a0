//! `rnn_gemm_nn` / `rnn_gemm_tn`: `C = op(A) B` in f32 for the randomized SVD's tall-skinny
//! products (`A Omega`, `A Q`: op = identity; `A^T Q`: op = transpose), tiled in shared memory
//! with register blocking and split along the inner dimension.
//!
//! Shapes (row-major f32): C is `M x N`, B is `K x N`, op(A) is `M x K`; A is stored `M x lda`
//! (nn) or `K x lda` (tn). The host guarantees `M % BM == 0`, `N % BN == 0`, `K % BK == 0`,
//! `lda % 4 == 0` and 16-byte aligned bases (it pads A and the sketches with zeros), so the
//! kernel has no edge cases.
//!
//! Launch: grid `(M / BM, N / BN, S)` (S also passed as `splits`), [`THREADS`] threads. Block
//! (x, y, z) owns the `BM x BN` tile (x, y) of C and the inner range `[z kps, (z + 1) kps)` (kps
//! a multiple of BK). Per `BK`-slice it stages op(A) and B (`Bs[k][n]`) in one of two shared
//! buffers while the other one is multiplied (one `bar.sync` per slice); the next slice is
//! loaded into registers before the current one is multiplied. Thread t owns 4 rows and the
//! columns `6 (t % 8) .. +6` of the tile and accumulates k ascending within the range (24 fmas
//! per k):
//! - tn copies rows of A straight into `As[k][m]` (row stride [`AS_STRIDE`]); thread t owns rows
//!   `4 (t / 8) .. +4`: per k one 16-byte load of A and three 8-byte loads of B;
//! - nn copies rows of A straight into `As[m][k]` (row stride [`ASN_STRIDE`]; a warp loads 4
//!   rows x 128 contiguous bytes); thread t owns rows `t / 8 + 32 i` (i < 4): per 4 k four
//!   16-byte loads of A (the 4 rows a warp reads at once fall in distinct banks) and twelve
//!   8-byte loads of B. No transposing scalar stores.
//!
//! With S = 1 the block writes its tile of C. With S > 1 it writes its partial tile to
//! `partial[z]` (`S x M x N`), fences, and counts itself in `counters[x * gridDim.y + y]`; the
//! last block of the tile to arrive sums the S partials in order z = 0..S (deterministic; two
//! partials' loads in flight per trip), writes C and resets the counter to 0 for the next launch.

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
/// Floats of one staged A tile (nn or tn).
const fn a_tile_len(trans: bool) -> u32 {
    if trans {
        BK * AS_STRIDE
    } else {
        BM * ASN_STRIDE
    }
}

/// `C = A B`.
pub fn build_nn(target: Target) -> Module {
    build(target, false)
}

/// `C = A^T B`.
pub fn build_tn(target: Target) -> Module {
    build(target, true)
}

struct Ctx {
    a: Reg<U64>,
    bm: Reg<U64>,
    lda: Reg<U32>,
    n: Reg<U32>,
    m0: Reg<U32>,
    n0: Reg<U32>,
    tid: Reg<U32>,
    trans: bool,
    /// nn: element offset in A of the thread's first load at k0 = 0 (row m0 + t / 8, column
    /// 4 (t % 8)); load j is 32 j rows further.
    nn_ld: Reg<U32>,
    /// nn: `As` index of the thread's first store (row t / 8, column 4 (t % 8)).
    nn_st: Reg<U32>,
}

fn ld_v4_if(b: &mut KernelBuilder, addr: Reg<U64>, pred: Option<Reg<Pred>>) -> [Reg<F32>; 4] {
    match pred {
        None => b.ld_v4::<F32>(Space::GlobalNc, addr),
        Some(p) => {
            let mut out = None;
            b.guarded(p, false, |b| {
                out = Some(b.ld_v4::<F32>(Space::GlobalNc, addr))
            });
            out.expect("the closure always runs")
        }
    }
}

/// A thread's A and B float4 registers of one slice.
type Fragments = (Vec<[Reg<F32>; 4]>, Vec<[Reg<F32>; 4]>);

/// Global loads of one BK slice starting at inner index `k0`: 4 float4 of A, 2 float4 of B (the
/// second only for threads < 128), all predicated on `pred` when given.
fn load_slice(b: &mut KernelBuilder, c: &Ctx, k0: Reg<U32>, pred: Option<Reg<Pred>>) -> Fragments {
    let lane = b.and(c.tid, 31u32);
    let w = b.shr(c.tid, 5u32);
    let mut av = Vec::new();
    for j in 0..4u32 {
        let idx = if c.trans {
            // A^T: row k0 + w + 8j of A, columns m0 + 4 lane ..
            let kr = b.add(k0, w);
            let kr = b.add(kr, 8 * j);
            let col = b.shl(lane, 2u32);
            let col = b.add(col, c.m0);
            b.mad(kr, c.lda, col)
        } else {
            // A: row m0 + t / 8 + 32 j, columns k0 + 4 (t % 8) .. (a warp reads 4 rows x 128
            // contiguous bytes).
            let base = b.add(c.nn_ld, k0);
            b.mad(c.lda, 32 * j, base)
        };
        let addr = b.index_addr(c.a, idx, 4);
        av.push(ld_v4_if(b, addr, pred));
    }
    let mut bv = Vec::new();
    let low = b.setp(Cmp::Lt, c.tid, 128u32);
    let second = match pred {
        Some(p) => b.and(p, low),
        None => low,
    };
    for j in 0..2u32 {
        let idx = b.add(c.tid, 256 * j);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let kr = b.add(k0, row);
        let col = b.mad(chunk, 4u32, c.n0);
        let e = b.mad(kr, c.n, col);
        let addr = b.index_addr(c.bm, e, 4);
        bv.push(ld_v4_if(b, addr, if j == 0 { pred } else { Some(second) }));
    }
    (av, bv)
}

/// Stores a loaded slice into buffer `buf` (0 or 1, a register) of the staged tiles.
#[allow(clippy::too_many_arguments)]
fn store_slice(
    b: &mut KernelBuilder,
    c: &Ctx,
    a_sh: &SharedArray<F32>,
    b_sh: &SharedArray<F32>,
    buf: Reg<U32>,
    av: &[[Reg<F32>; 4]],
    bv: &[[Reg<F32>; 4]],
) {
    let lane = b.and(c.tid, 31u32);
    let w = b.shr(c.tid, 5u32);
    let a_off = b.mul(buf, a_tile_len(c.trans));
    let b_off = b.mul(buf, BK * BN);
    for (j, v) in av.iter().enumerate() {
        let e = if c.trans {
            let k = b.add(w, 8 * j as u32);
            let col = b.shl(lane, 2u32);
            b.mad(k, AS_STRIDE, col)
        } else {
            b.add(c.nn_st, 32 * ASN_STRIDE * j as u32)
        };
        let e = b.add(e, a_off);
        let addr = b.shared_index(a_sh, e);
        b.st_v4(Space::Shared, addr, *v);
    }
    for (j, v) in bv.iter().enumerate() {
        let idx = b.add(c.tid, 256 * j as u32);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let col = b.shl(chunk, 2u32);
        let e = b.mad(row, BN, col);
        let e = b.add(e, b_off);
        let addr = b.shared_index(b_sh, e);
        if j == 0 {
            b.st_v4(Space::Shared, addr, *v);
        } else {
            let has = b.setp(Cmp::Lt, c.tid, 128u32);
            b.guarded(has, false, |b| b.st_v4(Space::Shared, addr, *v));
        }
    }
}

fn build(target: Target, trans: bool) -> Module {
    let name = if trans { "rnn_gemm_tn" } else { "rnn_gemm_nn" };
    let mut b = KernelBuilder::new(name);
    b.reqntid(THREADS, 1, 1);
    let pa = b.param::<U64>("a");
    let pb = b.param::<U64>("b");
    let pc = b.param::<U64>("c");
    let pp = b.param::<U64>("partial");
    let pcnt = b.param::<U64>("counters");
    let pm = b.param::<U32>("m");
    let pn = b.param::<U32>("n");
    let pk = b.param::<U32>("k");
    let plda = b.param::<U32>("lda");
    let pkps = b.param::<U32>("k_per_split");
    let psplits = b.param::<U32>("splits");
    let (a, bm, cm) = (b.global_ptr(&pa), b.global_ptr(&pb), b.global_ptr(&pc));
    let (partial, counters) = (b.global_ptr(&pp), b.global_ptr(&pcnt));
    let (m, n, k, lda, kps) = (
        b.ld_param(&pm),
        b.ld_param(&pn),
        b.ld_param(&pk),
        b.ld_param(&plda),
        b.ld_param(&pkps),
    );
    // Two buffers each; the nn pair is exactly 48 KiB, so the last-block flag reuses a_tile[0]
    // (free after the main loop's final barrier).
    let a_sh = b.shared_array::<F32>("a_tile", 2 * a_tile_len(trans));
    let b_sh = b.shared_array::<F32>("b_tile", 2 * BK * BN);
    let tid = b.special(Special::TidX);
    let bx = b.special(Special::CtaidX);
    let by = b.special(Special::CtaidY);
    let bz = b.special(Special::CtaidZ);
    let m0 = b.mul(bx, BM);
    let n0 = b.mul(by, BN);
    let k_begin = b.mul(bz, kps);
    let k_end = b.add(k_begin, kps);
    let k_end = b.min(k_end, k);
    let (nn_ld, nn_st) = if trans {
        (m0, m0)
    } else {
        let row = b.shr(tid, 3u32);
        let ch = b.and(tid, 7u32);
        let k4 = b.shl(ch, 2u32);
        let grow = b.add(m0, row);
        let ld = b.mad(grow, lda, k4);
        let st = b.mad(row, ASN_STRIDE, k4);
        (ld, st)
    };
    let ctx = Ctx {
        a,
        bm,
        lda,
        n,
        m0,
        n0,
        tid,
        trans,
        nn_ld,
        nn_st,
    };
    let tn = b.and(tid, 7u32);
    let tm = b.shr(tid, 3u32);
    let acc: Vec<Reg<F32>> = (0..24).map(|_| b.mov(0.0f32)).collect();

    let has_work = b.setp(Cmp::Lt, k_begin, k_end);
    b.if_then(has_work, |b| {
        let (av, bv) = load_slice(b, &ctx, k_begin, None);
        let zero = b.mov(0u32);
        store_slice(b, &ctx, &a_sh, &b_sh, zero, &av, &bv);
        b.bar_sync();
        // Byte offsets of the thread's A and B reads in buffer 0.
        let a_first = if trans {
            b.shl(tm, 2u32)
        } else {
            b.mul(tm, ASN_STRIDE)
        };
        let a_base0 = b.shared_index(&a_sh, a_first);
        let a_base1 = b.add(a_base0, 4 * a_tile_len(trans));
        let b_col = b.mul(tn, 6u32);
        let b_base0 = b.shared_index(&b_sh, b_col);
        let b_base1 = b.add(b_base0, 4 * BK * BN);
        let cur = b.mov(0u32);
        b.for_range(k_begin, k_end, BK, |b, k0, _| {
            let next = b.add(k0, BK);
            let has_next = b.setp(Cmp::Lt, next, k_end);
            // Prefetch the next slice (predicated: the last pass loads nothing).
            let (nav, nbv) = load_slice(b, &ctx, next, Some(has_next));
            let odd = b.setp(Cmp::Ne, cur, 0u32);
            let a_base: Addr = b.selp(a_base1, a_base0, odd).into();
            let b_base: Addr = b.selp(b_base1, b_base0, odd).into();
            let b_at = |b: &mut KernelBuilder, kk: u32| {
                let mut bw = Vec::with_capacity(6);
                for h in 0..3u32 {
                    let v =
                        b.ld_v2::<F32>(Space::Shared, b_base.off(i64::from(kk * BN * 4 + 8 * h)));
                    bw.extend(v);
                }
                bw
            };
            let fmas = |b: &mut KernelBuilder, av: [Reg<F32>; 4], bw: &[Reg<F32>]| {
                for i in 0..4 {
                    for j in 0..6 {
                        let s = b.fma(av[i], bw[j], acc[i * 6 + j]);
                        b.mov_to(acc[i * 6 + j], s);
                    }
                }
            };
            if trans {
                for kk in 0..BK {
                    let av4 =
                        b.ld_v4::<F32>(Space::Shared, a_base.off(i64::from(kk * AS_STRIDE * 4)));
                    let bw = b_at(b, kk);
                    fmas(b, av4, &bw);
                }
            } else {
                for k4 in 0..BK / 4 {
                    // Rows t / 8 + 32 i, columns 4 k4 .. +4.
                    let rows: Vec<[Reg<F32>; 4]> = (0..4u32)
                        .map(|i| {
                            b.ld_v4::<F32>(
                                Space::Shared,
                                a_base.off(i64::from(4 * (32 * i * ASN_STRIDE + 4 * k4))),
                            )
                        })
                        .collect();
                    #[allow(clippy::needless_range_loop)] // kq picks one column of four rows
                    for kq in 0..4usize {
                        let bw = b_at(b, 4 * k4 + kq as u32);
                        fmas(b, [rows[0][kq], rows[1][kq], rows[2][kq], rows[3][kq]], &bw);
                    }
                }
            }
            let other = b.xor(cur, 1u32);
            b.if_then(has_next, |b| {
                store_slice(b, &ctx, &a_sh, &b_sh, other, &nav, &nbv)
            });
            b.mov_to(cur, other);
            b.bar_sync();
        });
    });

    // Epilogue: rows m0 + row0 + i step (tn: 4 tm + i; nn: tm + 32 i), columns n0 + 6 tn + j.
    let (row0, step) = if trans {
        (b.mad(tm, 4u32, m0), 1u32)
    } else {
        (b.add(tm, m0), 32u32)
    };
    let col0 = b.mad(tn, 6u32, n0);
    let write_tile =
        |b: &mut KernelBuilder, base: Reg<U64>, row_off: Reg<U32>, vals: &[Reg<F32>]| {
            for i in 0..4u32 {
                let r = b.add(row_off, i * step);
                let e = b.mad(r, n, col0);
                let addr: Addr = b.index_addr(base, e, 4).into();
                for h in 0..3 {
                    let pair = [
                        vals[(i * 6 + 2 * h) as usize],
                        vals[(i * 6 + 2 * h + 1) as usize],
                    ];
                    b.st_v2(Space::Global, addr.off(8 * i64::from(h)), pair);
                }
            }
        };
    let splits = b.ld_param(&psplits);
    let single = b.setp(Cmp::Eq, splits, 1u32);
    b.if_else(
        single,
        |b| write_tile(b, cm, row0, &acc),
        |b| {
            let prow = b.mad(bz, m, row0);
            write_tile(b, partial, prow, &acc);
            b.fence_acq_rel(Scope::Gpu);
            b.bar_sync();
            let t0 = b.setp(Cmp::Eq, tid, 0u32);
            let gy = b.special(Special::NctaidY);
            let ci = b.mad(bx, gy, by);
            let caddr = b.index_addr(counters, ci, 4);
            b.if_then(t0, |b| {
                let old = b.atom(Space::Global, AtomOp::Add, caddr, 1u32);
                let lastv = b.sub(splits, 1u32);
                let is_last = b.setp(Cmp::Eq, old, lastv);
                let flag = b.selp(1.0f32, 0.0f32, is_last);
                b.st(Space::Shared, a_sh.at(0), flag);
            });
            b.bar_sync();
            let flag = b.ld::<F32>(Space::Shared, a_sh.at(0));
            let am_last = b.setp(Cmp::Eq, flag, 1.0f32);
            b.if_then(am_last, |b| {
                b.fence_acq_rel(Scope::Gpu);
                let sums: Vec<Reg<F32>> = (0..24).map(|_| b.mov(0.0f32)).collect();
                // Two partials per trip, their loads issued together; added s, then s + 1.
                b.for_range(0u32, splits, 2u32, |b, s, _| {
                    let s1 = b.add(s, 1u32);
                    let has1 = b.setp(Cmp::Lt, s1, splits);
                    let load = |b: &mut KernelBuilder, s: Reg<U32>, p: Option<Reg<Pred>>| {
                        let prow = b.mad(s, m, row0);
                        let mut vals = Vec::with_capacity(24);
                        for i in 0..4u32 {
                            let r = b.add(prow, i * step);
                            let e = b.mad(r, n, col0);
                            let addr: Addr = b.index_addr(partial, e, 4).into();
                            for h in 0..3 {
                                let v = match p {
                                    None => {
                                        b.ld_v2::<F32>(Space::Global, addr.off(8 * i64::from(h)))
                                    }
                                    Some(p) => {
                                        let v = [b.mov(0.0f32), b.mov(0.0f32)];
                                        b.guarded(p, false, |b| {
                                            let x = b.ld_v2::<F32>(
                                                Space::Global,
                                                addr.off(8 * i64::from(h)),
                                            );
                                            b.mov_to(v[0], x[0]);
                                            b.mov_to(v[1], x[1]);
                                        });
                                        v
                                    }
                                };
                                vals.extend(v);
                            }
                        }
                        vals
                    };
                    let v0 = load(b, s, None);
                    let v1 = load(b, s1, Some(has1));
                    for (idx, sum) in sums.iter().enumerate() {
                        let added = b.add(*sum, v0[idx]);
                        b.mov_to(*sum, added);
                    }
                    for (idx, sum) in sums.iter().enumerate() {
                        let added = b.add(*sum, v1[idx]);
                        let kept = b.selp(added, *sum, has1);
                        b.mov_to(*sum, kept);
                    }
                });
                write_tile(b, cm, row0, &sums);
                b.if_then(t0, |b| b.st(Space::Global, caddr, 0u32));
            });
        },
    );
    Module::single(target, b.finish())
}
