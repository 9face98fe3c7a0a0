//! The fused row sum of `gaussian_forward_fast_f32` (`super::forward_fast::Options::fused`):
//! the chunk rows of a point block added by the last of its blocks to finish, in the order of
//! `gaussian_reduce_rows` (`super::reduce`), so the values are bit-identical to the two-launch
//! path's and the second launch goes away.

use super::common::addr2d;
use super::forward::BLOCK;
use crate::ptx::*;

const _: () = assert!(FINISH_ROWS.is_power_of_two());

/// The parameters the fused row sum reads (loaded again where they are used, so that nothing
/// of it holds a register through the pair loop).
pub(super) struct FinishParams {
    /// The chunk rows (`out`).
    pub(super) out: Param<U64>,
    pub(super) num_points: Param<U32>,
    pub(super) values: Param<U64>,
    pub(super) counters: Param<U64>,
    /// Points each thread owns.
    pub(super) points_per_thread: u32,
}

/// Rows loaded before they are added (in row order).
const FINISH_ROWS: u32 = 4;

/// The fused row sum (`Options::fused`), after the chunk rows are stored. With one chunk `out`
/// already holds the values. With S > 1 chunks every thread fences its row stores (GPU scope),
/// thread 0 counts the block in `counters[blockIdx.x]` (`atom.add` after a fence; the S-th
/// arrival, the last, resets the count to 0 for the next launch and fences again) and tells the
/// block through `flag[0]` (shared); the last block then adds the S rows of its points (thread
/// t: points blockIdx.x BLOCK P + p BLOCK + t, as the kernel's), row 0 first (strong GPU-scope
/// loads: the other blocks' rows are not in this SM's L1), as `gaussian_reduce_rows` does (sum
/// from 0 in row order; its scale of 1 changes no value), and stores them in `values`.
pub(super) fn finish_rows(b: &mut KernelBuilder, prm: &FinishParams, flag: &SharedArray<U32>) {
    b.comment("fused row sum: the last block of this point block adds the chunk rows");
    let chunks = b.special(Special::NctaidY);
    let multi = b.setp(Cmp::Gt, chunks, 1u32);
    b.if_then(multi, |b| {
        b.fence_acq_rel(Scope::Gpu);
        b.bar_sync();
        let tid = b.special(Special::TidX);
        let t0 = b.setp(Cmp::Eq, tid, 0u32);
        b.if_then(t0, |b| {
            b.fence_acq_rel(Scope::Gpu);
            let pblock = b.special(Special::CtaidX);
            let counters = b.global_ptr(&prm.counters);
            let c = b.index_addr(counters, pblock, 4);
            let old = b.atom::<U32>(Space::Global, AtomOp::Add, c, 1u32);
            let last_old = b.sub(chunks, 1u32);
            let last = b.setp(Cmp::Eq, old, last_old);
            let w = b.selp(1u32, 0u32, last);
            let dst = b.shared_index(flag, 0u32);
            b.st(Space::Shared, dst, w);
            b.if_then(last, |b| {
                b.st(Space::Global, c, 0u32);
                b.fence_acq_rel(Scope::Gpu);
            });
        });
        b.bar_sync();
        let src = b.shared_index(flag, 0u32);
        let w = b.ld::<U32>(Space::Shared, src);
        let is_last = b.setp(Cmp::Ne, w, 0u32);
        b.if_then(is_last, |b| add_rows(b, prm, chunks));
    });
}

/// The last block's sum of the `chunks` rows for this thread's points.
fn add_rows(b: &mut KernelBuilder, prm: &FinishParams, chunks: Reg<U32>) {
    let n = prm.points_per_thread;
    let out = b.global_ptr(&prm.out);
    let num_points = b.ld_param(&prm.num_points);
    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let first = b.mad(pblock, BLOCK * n, tid);
    let idx: Vec<Reg<U32>> = (0..n).map(|p| b.add(first, p * BLOCK)).collect();
    let valid: Vec<Reg<Pred>> = idx
        .iter()
        .map(|&i| b.setp(Cmp::Lt, i, num_points))
        .collect();
    let acc: Vec<Reg<F32>> = (0..n).map(|_| b.mov(0.0f32)).collect();
    let stride = b.mul_wide(num_points, 4u32);
    let rem = b.and(chunks, FINISH_ROWS - 1);
    let full = b.sub(chunks, rem);
    let add = |b: &mut KernelBuilder, r: Reg<U32>, count: u32| {
        let mut at = addr2d(b, out, r, num_points, first, 4);
        let mut vals = Vec::new();
        for u in 0..count {
            if u > 0 {
                at = b.add(at, stride);
            }
            for (p, &ok) in valid.iter().enumerate() {
                let v = b.mov(0.0f32);
                b.guarded(ok, false, |b| {
                    let a = Addr::from(at).off(i64::from(p as u32 * BLOCK * 4));
                    let x = b.ld_relaxed_gpu::<F32>(a);
                    b.mov_to(v, x);
                });
                vals.push(v);
            }
        }
        for (k, v) in vals.into_iter().enumerate() {
            let p = k % n as usize;
            let s = b.add(acc[p], v);
            b.mov_to(acc[p], s);
        }
    };
    b.for_range(0u32, full, FINISH_ROWS, |b, r, _| add(b, r, FINISH_ROWS));
    b.for_range(full, chunks, 1u32, |b, r, _| add(b, r, 1));
    let values = b.global_ptr(&prm.values);
    for p in 0..n as usize {
        b.guarded(valid[p], false, |b| {
            let a = b.index_addr(values, idx[p], 4);
            b.st(Space::Global, a, acc[p]);
        });
    }
}
