//! The backward's warp sums of the per-point terms and its staged point loads and stores.

use crate::kernels::gaussian::common::KFloat;
use crate::ptx::*;

/// Sums three per-lane values over the warp in 16 operations instead of 3 x 10: the first
/// exchange (xor 16) swaps a for b so each lane carries one of them, the second (xor 8) swaps
/// that for c, then xor 4, 2, 1 finish. Lane 0 ends with sum(a), lane 16 with sum(b), lanes 8 and
/// 24 with sum(c). Fixed order: bit-identical from run to run. `low16` / `low8`: lane bit 4 / 3
/// clear.
pub(super) fn warp_sum3<T: KFloat>(
    b: &mut KernelBuilder,
    v: [Reg<T>; 3],
    low16: Reg<Pred>,
    low8: Reg<Pred>,
) -> Reg<T> {
    let send = b.selp(v[1], v[0], low16);
    let keep = b.selp(v[0], v[1], low16);
    let got = b.shfl(Shfl::Xor, send, 16u32);
    let x = b.add(keep, got);
    let other_c = b.shfl(Shfl::Xor, v[2], 16u32);
    let c = b.add(v[2], other_c);
    let send = b.selp(c, x, low8);
    let keep = b.selp(x, c, low8);
    let got = b.shfl(Shfl::Xor, send, 8u32);
    let mut y = b.add(keep, got);
    for k in [4u32, 2, 1] {
        let o = b.shfl(Shfl::Xor, y, k);
        y = b.add(y, o);
    }
    y
}

pub(super) fn store4<T: KFloat>(b: &mut KernelBuilder, addr: Addr, v: [Reg<T>; 4]) {
    if T::BYTES == 4 {
        b.st_v4(Space::Shared, addr, v);
    } else {
        b.st_v2(Space::Shared, addr.clone(), [v[0], v[1]]);
        b.st_v2(Space::Shared, addr.off(16), [v[2], v[3]]);
    }
}

pub(super) fn load4<T: KFloat>(b: &mut KernelBuilder, addr: Addr) -> [Reg<T>; 4] {
    if T::BYTES == 4 {
        b.ld_v4::<T>(Space::Shared, addr)
    } else {
        let [a, c] = b.ld_v2::<T>(Space::Shared, addr.clone());
        let [d, e] = b.ld_v2::<T>(Space::Shared, addr.off(16));
        [a, c, d, e]
    }
}
