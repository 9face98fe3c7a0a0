//! Byte movement for the half-warp decoders: literals within the page buffer, the common
//! sequence's copy steps; pages out and matches are in [`page`](super::super::page), shared with
//! the warp decoder.

use super::{for_each_item, Half};
use crate::ptx::*;

/// Copies `len` bytes from shared `src` to shared `dst` (`src >= dst` or apart), 16 a step.
pub(super) fn copy_forward(
    b: &mut KernelBuilder,
    h: &Half,
    src: Reg<U32>,
    dst: Reg<U32>,
    len: Reg<U32>,
) {
    for_each_item(b, h, len, 0, |b, i, inside| {
        let s = b.add(src, i);
        let t = b.add(dst, i);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, s);
            b.st_narrow(Space::Shared, Narrow::U8, t, v);
        });
        // A later step may read what this one wrote (a match of a short offset).
        h.sync(b);
    });
}

/// One step of the common sequence's copy: lane `sub + first` of the `span` bytes takes a
/// literal (below `lit`) or a match byte (the match lies wholly before the literals).
#[allow(clippy::too_many_arguments)]
pub(super) fn short_copy_step(
    b: &mut KernelBuilder,
    h: &Half,
    first: u32,
    lit_src: Reg<U32>,
    op_addr: Reg<U32>,
    lit: Reg<U32>,
    offset: Reg<U32>,
    span: Reg<U32>,
) {
    let k = if first == 0 {
        h.sub
    } else {
        b.add(h.sub, first)
    };
    let is_lit = b.setp(Cmp::Lt, k, lit);
    let from_lit = b.add(lit_src, k);
    let dst = b.add(op_addr, k);
    let from_match = b.sub(dst, offset);
    let src = b.selp(from_lit, from_match, is_lit);
    let inside = b.setp(Cmp::Lt, k, span);
    b.when(inside, |b| {
        let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, src);
        b.st_narrow(Space::Shared, Narrow::U8, dst, v);
    });
}
