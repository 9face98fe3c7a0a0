//! Page in and block out for `lz4_compress`: staging a page from global into the warp's shared
//! stage (16-byte loads, OR-ing all bytes to spot all-zero pages), and storing the finished block
//! (from the warp's global scratch) or the raw page (from the stage) into `packed` at an offset
//! reserved with one atomic, with the page's two info words.

use super::{Page, Stored, INFO_HEADER_WORDS};
use crate::kernels::lz4::warp::{bcast, for_each_lane_item, Lanes};
use crate::kernels::lz4::RAW_FLAG;
use crate::ptx::*;

/// Copies `p_len` bytes from `src` to the shared stage; returns "some byte is non-zero" (uniform).
///
/// With `merge` ([`Variant::merge`](super::Variant)) the predicated loads go into registers set
/// before them (ptxas then keeps no register of theirs across the kernel's loops).
pub(super) fn stage(
    b: &mut KernelBuilder,
    ln: &Lanes,
    src: Reg<U64>,
    spage: Reg<U32>,
    p_len: Reg<U32>,
    steps: Reg<U32>,
    merge: bool,
) -> Reg<Pred> {
    let acc = b.mov(0u32);
    b.for_range_with(LoopBranch::Uniform, 0u32, steps, 1u32, |b, s, _| {
        let k = b.mad(s, 32u32, ln.lane);
        let off = b.shl(k, 4u32);
        let end = b.add(off, 16u32);
        let full = b.setp(Cmp::Le, end, p_len);
        let g = b.index_addr(src, off, 1);
        let d = b.add(spage, off);
        let preset = merge.then(|| [0; 4].map(|_| b.mov(0u32)));
        b.when(full, |b| {
            let v = match preset {
                Some(v) => {
                    b.ld_v4_to(v, Space::GlobalNc, g);
                    v
                }
                None => b.ld_v4::<U32>(Space::GlobalNc, g),
            };
            b.st_v4::<U32>(Space::Shared, d, v);
            let o1 = b.or(v[0], v[1]);
            let o2 = b.or(v[2], v[3]);
            let o = b.or(o1, o2);
            let a = b.or(acc, o);
            b.mov_to(acc, a);
        });
    });
    let tail_start = b.and(p_len, !15u32);
    let tail_len = b.and(p_len, 15u32);
    let in_tail = b.setp(Cmp::Lt, ln.lane, tail_len);
    let off = b.add(tail_start, ln.lane);
    let g = b.index_addr(src, off, 1);
    let d = b.add(spage, off);
    let preset = merge.then(|| b.mov(0u32));
    b.when(in_tail, |b| {
        let v = match preset {
            Some(v) => {
                b.ld_narrow_to(v, Space::GlobalNc, Narrow::U8, g);
                v
            }
            None => b.ld_narrow::<U32>(Space::GlobalNc, Narrow::U8, g),
        };
        b.st_narrow(Space::Shared, Narrow::U8, d, v);
        let a = b.or(acc, v);
        b.mov_to(acc, a);
    });
    let nz = b.setp(Cmp::Ne, acc, 0u32);
    b.vote_any(nz)
}

/// Reserves the stored bytes (`pc.out`) in `packed`, copies the block (from scratch) or the raw
/// page (from the shared stage) there, and writes the page's two info words.
pub(super) fn finish(b: &mut KernelBuilder, pc: &Page, from: Stored) {
    let (lane0, info, packed, scratch) = (pc.lane0, pc.info, pc.packed, pc.scratch);
    let raw = from == Stored::Raw;
    let stored = pc.out;
    b.comment("finish: reserve the stored bytes in packed (one atomic), copy them, info words");
    // Scratch bytes written by other lanes must be visible to the copy below.
    b.warp_sync(FULL_MASK);
    let padded = b.add(stored, 15u32);
    let padded = b.and(padded, !15u32);
    let off = b.mov(0u32);
    b.when(lane0, |b| {
        let t = b.atom::<U32>(Space::Global, AtomOp::Add, Addr::from(info).off(4), padded);
        b.mov_to(off, t);
    });
    let off = bcast(b, off, 0u32);
    let chunks = b.shr(padded, 4u32);
    let dst = b.index_addr(packed, off, 1);
    for_each_lane_item(b, pc.ln.lane, chunks, 4, |b, kb, inside| {
        let d = b.index_addr(dst, kb, 1);
        let preset = pc.variant.merge.then(|| [0; 4].map(|_| b.mov(0u32)));
        b.when(inside, |b| {
            let (space, s) = if raw {
                (Space::Shared, Addr::from(b.add(pc.spage, kb)))
            } else {
                (Space::Global, Addr::from(b.index_addr(scratch, kb, 1)))
            };
            let v = match preset {
                Some(v) => {
                    b.ld_v4_to(v, space, s);
                    v
                }
                None => b.ld_v4::<U32>(space, s),
            };
            b.st_v4::<U32>(Space::Global, d, v);
        });
    });
    let word = if raw {
        b.or(stored, RAW_FLAG)
    } else {
        b.mov(stored)
    };
    let idx = b.shl(pc.index, 1u32);
    let idx = b.add(idx, INFO_HEADER_WORDS);
    let ia = b.index_addr(info, idx, 4);
    b.when(lane0, |b| {
        b.st(Space::Global, ia, word);
        b.st(Space::Global, Addr::from(ia).off(4), off);
    });
    // The next page's staging overwrites the shared stage this copy read.
    b.warp_sync(FULL_MASK);
}
