//! The weight-stationary mat-vec (see `stationary`'s module notes): a lane's weights held in
//! registers (`hold`), the partial sums of its K slice into the scratch (`partials`) and the
//! ordered sum of the slots (`sum`).

use super::{Lane, ROW_STRIDE, SLOTS};
use crate::ptx::*;

/// Registers holding a lane's weights: `w[q * KS/4 + m]` is rows `g + 16 q` (q < `qs`), k
/// `slot KS + 4m ..`.
pub(super) struct Held {
    pub ks: u32,
    pub qs: u32,
    pub w: Vec<[Reg<F32>; 4]>,
}

/// Loads the lane's weights from global memory: `row_elem(lr)` is the element index of local
/// row lr's first weight, `k` the row length.
pub(super) fn hold(
    b: &mut KernelBuilder,
    ks: u32,
    lane: &Lane,
    base: Reg<U64>,
    r3: Reg<U32>,
    row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>,
) -> Held {
    hold_rows(b, ks, 4, lane, base, r3, row_elem)
}

/// [`hold`] of rows `g + 16 q` for q < `qs` only (`qs` = 3 when 3J = 48: a quarter fewer
/// registers and fmas than the 64 rows of [`hold`]).
pub(super) fn hold_rows(
    b: &mut KernelBuilder,
    ks: u32,
    qs: u32,
    lane: &Lane,
    base: Reg<U64>,
    r3: Reg<U32>,
    row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>,
) -> Held {
    let last = b.sub(r3, 1u32);
    let k0 = b.mul(lane.slot, ks);
    let mut w = Vec::with_capacity((ks * qs) as usize / 4);
    for q in 0..qs {
        let lr = b.add(lane.g, 16 * q);
        let lr = b.min(lr, last);
        let e = row_elem(b, lr);
        let e = b.add(e, k0);
        let a: Addr = b.index_addr(base, e, 4).into();
        for m in 0..ks / 4 {
            w.push(b.ld_v4::<F32>(Space::GlobalNc, a.off(16 * i64::from(m))));
        }
    }
    Held { ks, qs, w }
}

/// The source of one [`partials`]: `rows` (a multiple of 4, at most `Bg`) rows at shared offset
/// `src` (row stride `k` floats), summed into the scratch at `scratch`.
#[derive(Clone, Copy)]
pub(super) struct Sources {
    pub src: Reg<U32>,
    pub k: Reg<U32>,
    pub rows: Reg<U32>,
    pub scratch: Reg<U32>,
}

/// Partial sums of `from` with the held weights (see the module notes). No barrier inside.
pub(super) fn partials(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    held: &Held,
    lane: &Lane,
    from: &Sources,
) {
    let Sources {
        src,
        k,
        rows,
        scratch,
    } = *from;
    let (ks, qs) = (held.ks, held.qs);
    let k0 = b.mul(lane.slot, ks);
    let src0 = b.add(src, k0);
    // Slot (warp) stride rows x ROW_STRIDE; the lane stores rows r0 + 2 half + i, units g + 16 q.
    let stride = b.mul(rows, ROW_STRIDE);
    let s0 = b.mad(lane.warp, stride, scratch);
    let s0 = b.add(s0, lane.g);
    let h2 = b.shl(lane.half, 1u32);
    let s0 = b.mad(h2, ROW_STRIDE, s0);
    let kbytes = b.shl(k, 2u32);
    // The upper half-warp takes its 4 source rows in the order 2 3 0 1, so that accumulators
    // 0..8 of both halves are the rows it keeps and 8..16 the rows its partner keeps.
    let hoff = b.mul(h2, kbytes);
    b.for_range(0u32, rows, 4u32, |b, r0, _| {
        let acc: Vec<Reg<F32>> = (0..4 * qs).map(|_| b.mov(0.0f32)).collect();
        let first = b.mad(r0, k, src0);
        let a0 = b.shared_index(smem, first);
        let ra = b.add(a0, hoff);
        let rb = b.add(ra, kbytes);
        let k2 = b.shl(kbytes, 1u32);
        let rc = b.add(a0, k2);
        let rc = b.sub(rc, hoff);
        let rd = b.add(rc, kbytes);
        let rowa = [
            Addr::from(ra),
            Addr::from(rb),
            Addr::from(rc),
            Addr::from(rd),
        ];
        // One float4 of one row at a time keeps the live set at 64 + 16 + 4 values.
        for m in 0..ks / 4 {
            for (bb, a) in rowa.iter().enumerate() {
                let h = b.ld_v4::<F32>(Space::Shared, a.off(16 * i64::from(m)));
                for (i, &hv) in h.iter().enumerate() {
                    for q in 0..qs {
                        let w = held.w[(q * (ks / 4) + m) as usize][i];
                        let a = acc[bb * qs as usize + q as usize];
                        let s = b.fma(hv, w, a);
                        b.mov_to(a, s);
                    }
                }
            }
        }
        // Both K slices of the warp: keep + partner's copy (slot 2w's value first is not needed:
        // f32 addition of two values is commutative).
        let si = b.mad(r0, ROW_STRIDE, s0);
        let sa: Addr = b.shared_index(smem, si).into();
        for n in 0..2 * qs {
            let recv = b.shfl(Shfl::Xor, acc[(2 * qs + n) as usize], 16u32);
            let v = b.add(acc[n as usize], recv);
            let (i, q) = (n / qs, n % qs);
            b.st(
                Space::Shared,
                sa.off(4 * i64::from(i * ROW_STRIDE + 16 * q)),
                v,
            );
        }
    });
}

/// The 8-slot sum of output (row, lr) of the last [`partials`] over `rows` rows.
pub(super) fn sum(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    scratch: Reg<U32>,
    rows: Reg<U32>,
    row: Reg<U32>,
    lr: Reg<U32>,
) -> Reg<F32> {
    let stride = b.mul(rows, ROW_STRIDE);
    let sbytes = b.shl(stride, 2u32);
    let i = b.mad(row, ROW_STRIDE, scratch);
    let i = b.add(i, lr);
    let a = b.shared_index(smem, i);
    let total = b.ld::<F32>(Space::Shared, a);
    let mut a = a;
    for _ in 1..SLOTS {
        a = b.add(a, sbytes);
        let v = b.ld::<F32>(Space::Shared, a);
        let s = b.add(total, v);
        b.mov_to(total, s);
    }
    total
}
