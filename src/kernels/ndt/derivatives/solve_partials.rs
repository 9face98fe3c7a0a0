//! The device solver's builds of `ndt_derivatives` (`Variant::solve_opts`): the entry point,
//! and the value-major block partials of `kernels::ndt::solve::OPT_XPOSE_PARTIALS`.

use super::kernel::build_entry;
use super::{Variant, SLOT_VALUES};
use crate::ptx::*;

/// Builds `ndt_align_device` with the device solver's build options `opts`
/// ([`Variant::solve_opts`]; 0 is the table's kernel).
pub fn build_align_device_opts(target: Target, opts: u32) -> Module {
    build_entry(
        target,
        "ndt_align_device",
        Variant {
            solve_opts: opts,
            cross: opts & crate::kernels::ndt::solve::OPT_CROSS != 0,
            ..Variant::SOLVE
        },
    )
}

/// Step 3b: the index of value `tid` of `slot`'s partial: `slot · SLOT_VALUES + tid`, or with
/// `xpose` (one request) value-major, `tid · nblk + slot`.
pub(super) fn partial_index(
    b: &mut KernelBuilder,
    xpose: bool,
    tid: Reg<U32>,
    nblk: Reg<U32>,
    slot: Reg<U32>,
) -> Reg<U32> {
    if xpose {
        b.mad(tid, nblk, slot)
    } else {
        b.mad(slot, SLOT_VALUES as u32, tid)
    }
}

/// Step 3c with `xpose`: block `s`'s values added to `sums` in value order (value `k` at
/// `k · nblk + s`), the same additions as the slot-major read.
pub(super) fn add_partials_xposed(
    b: &mut KernelBuilder,
    partials: Reg<U64>,
    s: Reg<U32>,
    nblk: Reg<U32>,
    sums: &[Reg<F64>],
) {
    let stride = b.mul_wide(nblk, 8u32);
    let mut a = b.index_addr(partials, s, 8);
    for (k, &acc) in sums.iter().enumerate() {
        if k > 0 {
            a = b.add(a, stride);
        }
        let v = b.ld::<F64>(Space::Global, a);
        let t = b.add(acc, v);
        b.mov_to(acc, t);
    }
}
