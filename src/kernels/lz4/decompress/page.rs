//! The page being decoded as both decompressors see it (the warp decoder: 32 lanes a page,
//! warp-uniform branches; the half-warp decoders: 16 or 8 lanes a page, divergent branches), and
//! the byte movement written once over it: pages out to global memory and matches within the
//! page buffer.

use crate::kernels::lz4::warp::ld_shared_u32_unaligned;
use crate::ptx::*;

/// The registers of the page being decoded that both decoders have, and their branch kind.
#[derive(Clone, Copy)]
pub(super) struct Page<'a> {
    /// Bytes of the staged block, bytes of the original page.
    pub stored: Reg<U32>,
    pub orig: Reg<U32>,
    /// Shared address of the staged block and of the page buffer.
    pub ib: Reg<U32>,
    pub ob: Reg<U32>,
    /// The status written on the way out.
    pub code: Reg<U32>,
    /// The original length is an upper bound (fewer bytes are fine).
    pub bounded: Reg<Pred>,
    pub fail: &'a Label,
    /// This lane's index in the page's group of lanes, and the group's width (32, 16 or 8).
    pub lane: Reg<U32>,
    pub width: u32,
    /// The group's lanes for `bar.warp.sync` (`None`: the whole warp, `Some`: a register).
    pub mask: Option<Reg<U32>>,
    /// Branches are warp-uniform (`bra.uni`): the whole warp decodes one page.
    pub uniform: bool,
}

impl Page<'_> {
    /// An unconditional branch of this decoder's kind.
    pub fn bra(&self, b: &mut KernelBuilder, label: &Label) {
        if self.uniform {
            b.bra_uni(label);
        } else {
            b.bra(label);
        }
    }

    /// A branch when `p` holds, of this decoder's kind.
    pub fn bra_if(&self, b: &mut KernelBuilder, p: Reg<Pred>, label: &Label) {
        if self.uniform {
            b.bra_uni_if(p, label);
        } else {
            b.bra_if(p, label);
        }
    }

    /// `bar.warp.sync` over the page's lanes.
    pub fn sync(&self, b: &mut KernelBuilder) {
        match self.mask {
            None => b.warp_sync(FULL_MASK),
            Some(mask) => b.instr(format!("bar.warp.sync {mask}")),
        }
    }

    /// A loop over `count` items, `width` a pass: lane `lane` takes item `base + lane`, `inside`
    /// when it is below `count`. `body` gets the item scaled to bytes (`item << shift`; the item
    /// itself when `shift` is 0) and `inside`, on which it predicates its accesses.
    pub fn for_each_item(
        &self,
        b: &mut KernelBuilder,
        count: Reg<U32>,
        shift: u32,
        body: impl FnOnce(&mut KernelBuilder, Reg<U32>, Reg<Pred>),
    ) {
        let branch = if self.uniform {
            LoopBranch::Uniform
        } else {
            LoopBranch::Divergent
        };
        let lane = self.lane;
        b.for_range_with(branch, 0u32, count, self.width, |b, base, _| {
            let item = b.add(base, lane);
            let inside = b.setp(Cmp::Lt, item, count);
            let offset = if shift == 0 { item } else { b.shl(item, shift) };
            body(b, offset, inside);
        });
    }

    /// A branch when `p` does not hold, of this decoder's kind.
    pub fn bra_unless(&self, b: &mut KernelBuilder, p: Reg<Pred>, label: &Label) {
        if self.uniform {
            b.bra_uni_unless(p, label);
        } else {
            b.bra_unless(p, label);
        }
    }

    /// Sets the status to `code` and leaves the page when `bad` holds. The status is written
    /// only on the way out, so the hot path carries no conditional moves.
    pub fn fail_if(&self, b: &mut KernelBuilder, bad: Reg<Pred>, code: u32) {
        let ok = b.label("ok");
        self.bra_unless(b, bad, &ok);
        b.mov_to(self.code, code);
        self.bra(b, self.fail);
        b.place(&ok);
    }
}

/// Copies a raw page from the (unaligned) stage to `dst`: words (two aligned words and a byte
/// permute, which may read up to 4 bytes past the page: slack), then the tail bytes.
pub(super) fn copy_raw_out(b: &mut KernelBuilder, pg: &Page, dst: Reg<U64>) {
    let words = b.shr(pg.orig, 2u32);
    pg.for_each_item(b, words, 2, |b, wb, inside| {
        let a = b.add(pg.ib, wb);
        let g = b.index_addr(dst, wb, 1);
        b.when(inside, |b| {
            let v = ld_shared_u32_unaligned(b, a);
            b.st(Space::Global, g, v);
        });
    });
    copy_tail_out(b, pg, pg.ib, dst, pg.orig, 4);
}

/// Copies the `len` rebuilt bytes from the page buffer to `dst`: 16-byte chunks, then the tail.
pub(super) fn copy_page_out(b: &mut KernelBuilder, pg: &Page, dst: Reg<U64>, len: Reg<U32>) {
    pg.sync(b);
    let chunks = b.shr(len, 4u32);
    pg.for_each_item(b, chunks, 4, |b, kb, inside| {
        let s = b.add(pg.ob, kb);
        let g = b.index_addr(dst, kb, 1);
        b.when(inside, |b| {
            let v = b.ld_v4::<U32>(Space::Shared, s);
            b.st_v4::<U32>(Space::Global, g, v);
        });
    });
    copy_tail_out(b, pg, pg.ob, dst, len, 16);
}

/// Copies the last `len % unit` of `len` bytes (`unit` a power of two up to 32) from the shared
/// address `from` to `dst` (after the whole units copied before), one byte per lane: one step
/// when the group has `unit` lanes or more, else steps of the group's width.
fn copy_tail_out(
    b: &mut KernelBuilder,
    pg: &Page,
    from: Reg<U32>,
    dst: Reg<U64>,
    len: Reg<U32>,
    unit: u32,
) {
    let tail_at = b.and(len, !(unit - 1));
    let tail = b.and(len, unit - 1);
    let copy_byte = |b: &mut KernelBuilder, i: Reg<U32>, inside: Reg<Pred>| {
        let k = b.add(tail_at, i);
        let a = b.add(from, k);
        let g = b.index_addr(dst, k, 1);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
            b.st_narrow(Space::Global, Narrow::U8, g, v);
        });
    };
    if unit <= pg.width {
        let inside = b.setp(Cmp::Lt, pg.lane, tail);
        copy_byte(b, pg.lane, inside);
    } else {
        pg.for_each_item(b, tail, 0, copy_byte);
    }
}

/// Copies the match of `len` bytes to page byte `op` from `offset` bytes back in the page
/// buffer. Steps of `min(distance, width)` bytes: the distance starts at `offset` and doubles
/// while below the group's width (the source stays put), so a step never reads a byte it has not
/// yet written and the period holds.
pub(super) fn copy_match(
    b: &mut KernelBuilder,
    pg: &Page,
    op: Reg<U32>,
    offset: Reg<U32>,
    len: Reg<U32>,
) {
    let lane = pg.lane;
    let src = b.sub(op, offset);
    let dst = b.mov(op);
    let left = b.mov(len);
    let branch = if pg.uniform {
        LoopBranch::Uniform
    } else {
        LoopBranch::Divergent
    };
    b.loop_with(branch, |b, copied, _| {
        let none = b.setp(Cmp::Eq, left, 0u32);
        pg.bra_if(b, none, copied);
        let dist = b.sub(dst, src);
        let chunk = b.min(dist, pg.width);
        let chunk = b.min(chunk, left);
        let inside = b.setp(Cmp::Lt, lane, chunk);
        let from = b.add(pg.ob, src);
        let from = b.add(from, lane);
        let to = b.add(pg.ob, dst);
        let to = b.add(to, lane);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, from);
            b.st_narrow(Space::Shared, Narrow::U8, to, v);
        });
        let next_dst = b.add(dst, chunk);
        b.mov_to(dst, next_dst);
        let next_left = b.sub(left, chunk);
        b.mov_to(left, next_left);
        let wide = b.setp(Cmp::Ge, dist, pg.width);
        let advance = b.selp(chunk, 0u32, wide);
        let next_src = b.add(src, advance);
        b.mov_to(src, next_src);
        pg.sync(b);
    });
}
