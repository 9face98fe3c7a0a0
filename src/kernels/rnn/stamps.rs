//! `%clock64` stamps of the persistent kernels' phases (bench instrumentation, `rnn_orth` and
//! `rnn_gru_stationary`): thread 0 of block 0 writes them to a u64 array when the kernel's
//! `stamps` parameter is non-zero.

use crate::ptx::*;

/// Whether this thread stamps: the `stamps` base is non-zero and this is thread 0 (`tid`) of
/// block 0 (`cta(b)` gives the block index).
pub fn stamping(
    b: &mut KernelBuilder,
    base: Reg<U64>,
    tid: Reg<U32>,
    cta: impl FnOnce(&mut KernelBuilder) -> Reg<U32>,
) -> Reg<Pred> {
    let nz = b.setp(Cmp::Ne, base, 0u64);
    let cta = cta(b);
    let t0 = b.setp(Cmp::Eq, tid, 0u32);
    let b0 = b.setp(Cmp::Eq, cta, 0u32);
    let first = b.and(nz, t0);
    b.and(first, b0)
}

/// Writes `%clock64` to `stamps[idx]` when `on` and `idx < count` (others are dropped); `base(b)`
/// gives the array's global address (read after the clock).
pub fn write_clock(
    b: &mut KernelBuilder,
    on: Reg<Pred>,
    idx: Reg<U32>,
    count: u32,
    base: &dyn Fn(&mut KernelBuilder) -> Reg<U64>,
) {
    let ok = b.setp(Cmp::Lt, idx, count);
    let p = b.and(on, ok);
    b.if_then(p, |b| {
        let t = b.clock64();
        let base = base(b);
        let a = b.index_addr(base, idx, 8);
        b.st(Space::Global, a, t);
    });
}
