//! The backward's shared-memory accesses of four scalars (a point and its g', a thread's terms of
//! a point and a pad): one 16-byte vector access in f32, two in f64.

use crate::kernels::gaussian::common::KFloat;
use crate::ptx::*;

/// Stores `v` at `addr` (16-byte aligned) in shared memory.
pub(super) fn store4<T: KFloat>(b: &mut KernelBuilder, addr: Addr, v: [Reg<T>; 4]) {
    if T::BYTES == 4 {
        b.st_v4(Space::Shared, addr, v);
    } else {
        b.st_v2(Space::Shared, addr.clone(), [v[0], v[1]]);
        b.st_v2(Space::Shared, addr.off(16), [v[2], v[3]]);
    }
}

/// Loads four scalars at `addr` (16-byte aligned) from shared memory.
pub(super) fn load4<T: KFloat>(b: &mut KernelBuilder, addr: Addr) -> [Reg<T>; 4] {
    if T::BYTES == 4 {
        b.ld_v4::<T>(Space::Shared, addr)
    } else {
        let [a, c] = b.ld_v2::<T>(Space::Shared, addr.clone());
        let [d, e] = b.ld_v2::<T>(Space::Shared, addr.off(16));
        [a, c, d, e]
    }
}
