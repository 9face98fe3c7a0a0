//! `lz4_compress`: stores pages as LZ4 blocks, one warp per page, by the specification in
//! `crate::lz4::block_encode` (byte-identical to `compress_page`).
//!
//! Launch: 1-D grid, blocks of 32..=[`WIDE_MAX_BLOCK`] threads (whole warps; the host takes more
//! than [`MAX_BLOCK`] only for launches that fill every SM, see [`Variant::wide`]), dynamic shared memory
//! `warps_per_block * compress_shared_per_warp(page_bytes)`. Warps take pages from a counter
//! (`info[0]`, zeroed by the host with `info[1]` before the launch), so any grid size works.
//!
//! Parameters: `input` (the batch, pages back to back, 16-byte aligned), `input_bytes`,
//! `page_bytes` (a multiple of 1024, at most 65536), `n_pages` (= ceil(input_bytes/page_bytes)),
//! `scratch` (`page_bytes` per warp of the grid), `packed` (capacity `n_pages * page_bytes`), `info`
//! (u32 words: `[0]` page counter, `[1]` bytes allocated in `packed`, `[2..4]` unused, then per
//! page `[4 + 2k]` = stored bytes | [`RAW_FLAG`](super::RAW_FLAG), `[5 + 2k]` = byte offset of the
//! page in `packed`, a multiple of 16).
//!
//! Shared memory per warp: the u16 hash table sized for `page_bytes` (`2^L` entries, `L` = 10, 11
//! or 12 as the spec's `hash_log`), then the staged page and 16 bytes of slack.
//!
//! Per page, a warp: copies the page into its shared stage with 16-byte loads, OR-ing all bytes;
//! zeroes the `2^L` entries of the page's table (`L` from its own length; 4, 8 or 16 vector stores
//! per lane); takes the all-zero or short (`P < 13`, raw) fast path, or parses windows of 32
//! positions (`parse_masks`, the table's build): lane `i` hashes position `cursor + i` (two
//! aligned shared words and a `prmt.f4e`), `match.any` on the hash groups equal buckets, and each
//! lane reads its table entry and that candidate's 4 bytes once per window; the positions already
//! in the table are a warp-uniform mask, so each lane's sequential candidate is its highest
//! earlier peer in that mask (its 4 bytes one shuffle away) or else the entry; a ballot of valid
//! lanes picks the first (in a window where no lane has an earlier peer, one ballot of the
//! entries serves every match). The next lookup is emitted beside each sequence's emission, so
//! the scheduler overlaps the two. In a window without peers each lane first compares 4 bytes
//! after and 4 before its own candidate (`lane_ext`), so a match there takes its end and
//! backward run with one shuffle; elsewhere, and for runs of 4 or more, the extension compares 16
//! bytes forward and 16 backward in one step (byte loads, bounds as stop bits in the ballot, both
//! runs leading-zero counts), longer runs 32 bytes a step. Lanes write each sequence
//! cooperatively into the warp's global scratch: short sequences (< 15 literals, match < 19) in
//! one step, those of 15..=269 literals 32 bytes a step with their one length byte, others by
//! the general path. At the window's end the highest inserted lane of each hash group writes its
//! entry (no atomics). Once the bytes written plus those that must follow reach `P`, the page is
//! stored raw. Finally lane 0 reserves the stored size (rounded up to 16) in `packed` with one
//! atomic, and the warp copies the block (or the raw page) there with 16-byte stores.
//! Session 8's build (`parse`: the table re-read, candidates re-checked and inserts made after
//! every match) stays as [`Variant`] `reread` for comparisons.
//!
//! Session 12 (issue 17): the table's build packs each lane's runs as window positions
//! (`direct`): a solo window's match takes its sequence start, end and offset bytes from the one
//! shuffled word, tests "the match may go on" only off the short sequence's way, and branches on
//! to the next match itself (`fastloop`); lanes group by the hash itself (`keyed`); every
//! predicated load goes straight into the register it updates (`merge`), so ptxas keeps no
//! register per such load across the loops (64 registers instead of 72 on sm_90, and the match
//! loop's warp-uniform values in vector registers: fewer moves).
//!
//! Files: `kernel` (the entry: page loop, table reset, the all-zero and raw paths),
//! `parse_masks` and `parse` (the window loops), `table` (buckets, slots, unaligned words),
//! `window` (a match of `parse_masks`), `direct`
//! (a solo window's match of the table's build), `extend` and `lane_ext` (match extension),
//! `emit` (sequence writing), `page_io` (page in, block out). They share the per-page registers `Page` and the constants here; imports run from the
//! kernel down to the helpers, and from every file up to this one.

mod direct;
mod emit;
mod extend;
mod kernel;
mod lane_ext;
mod page_io;
mod parse;
mod parse_masks;
mod table;
mod window;

pub use kernel::{build, build_variant};

use super::warp::Lanes;
use crate::ptx::*;

/// Most threads per block (5 warps: what 1 KiB pages fit in 48 KiB; a larger bound makes ptxas
/// cap registers at 80 and spill).
pub const MAX_BLOCK: u32 = 160;
/// Most threads per block of [`Variant::wide`] builds (16 warps).
pub const WIDE_MAX_BLOCK: u32 = 512;
/// Register bound per thread. For session 8's build ptxas alone takes 88 (sm_90), which lets an
/// SM quarter hold 5 warps; at 72 (ptxas then uses 70, no spills; 80 or 64 spill) it holds 7,
/// and with the 8 KiB table of 4 KiB pages shared memory holds 27 warps per SM instead of 20.
/// The table's build uses 68..72 (no spills on any target).
pub const MAX_REGS: u32 = 72;
/// Words before the per-page entries in `info`.
pub const INFO_HEADER_WORDS: u32 = 4;
/// Fibonacci hash multiplier of the spec.
const HASH_MULTIPLIER: u32 = 2_654_435_761;

/// Builds of `lz4_compress` (issue 17's experiments; every build gives the same bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    /// The parse with candidate masks (`parse_masks`: the table read once per window) instead of
    /// a table read, candidate read and insert rule per match (`parse`).
    pub masks: bool,
    /// `.maxnreg` (none: [`MAX_REGS`]).
    pub max_regs: Option<u32>,
    /// Extension (with `masks` only): the first step's loads unpredicated (they stay inside the
    /// warp's table and stage slack) and its bounds as stop bits in the ballot.
    pub bits: bool,
    /// Sequence emission with fewer instructions on the short path.
    pub lean: bool,
    /// Unaligned shared words (with `masks`) by `prmt.f4e` with the address as selector.
    pub f4e: bool,
    /// Windows where no lane has an earlier peer in its bucket (with `masks`) take a loop whose
    /// candidates are the entries alone, checked by one ballot per window.
    pub solo: bool,
    /// Fewer instructions per window (with `masks`): an empty entry's candidate read unguarded,
    /// the table writers found with one mask compare.
    pub trim: bool,
    /// `match.any` (slow) only for windows where two lanes share a bucket (with `masks`), found
    /// by marking the entries with shared atomics.
    pub probe: bool,
    /// The next lookup emitted beside each sequence's emission (with `masks`), so the two
    /// share a basic block and their latencies overlap.
    pub pipe: bool,
    /// Solo windows (with `masks,bits,f4e,solo`) with at least this many candidates (0: none):
    /// each lane's forward and backward runs of its entry's candidate computed once per window,
    /// so a match takes them with one shuffle (`lane_ext`).
    pub lanes: u32,
    /// Fewer uniform instructions per match (with `masks,bits,lean`): the lowest matching lane
    /// by `popc(~m & (m - 1))`, the extension's "longer than 16" test on the masks themselves
    /// (so ptxas folds `31 - flo` into the additions), the next live mask as `-4 << (end - 2)`,
    /// offset bytes by `prmt`.
    pub tight: bool,
    /// Sequences of 15..=269 literals and a match shorter than 19 bytes (with `lean`) take a
    /// path of their own (one literal length byte) instead of the general one.
    pub medium: bool,
    /// Blocks of up to [`WIDE_MAX_BLOCK`] threads, beyond the default 48 KiB of shared memory
    /// (issue 17, session 11): with 4 KiB pages an SM then holds 2 blocks of 14 warps (28
    /// warps, the register bound at 72) instead of 9 of 3 (27: the 1 KiB reserved per block).
    pub wide: bool,
    /// Windows whose shared buckets are hash collisions (each lane at most one earlier peer,
    /// holding another word; with `solo`) take the solo loop, each lane masked once its peer is
    /// in the table (session 11), instead of the lookup per match. H100, dickens: 83.6 GB/s
    /// against 83.3 with `wide`, 86.8 against 85.7 with `wide,packmin`, but with `packmin` ptxas
    /// spills 24 bytes at 72 registers, and the PTX interpreter counts 2-6% more instructions
    /// per byte on nci, xml and x-ray: off by default.
    pub pairs: bool,
    /// With `lanes`: each lane packs its backward run already bounded by its candidate's
    /// position and its match end in the top bits, so a match unpacks them with fewer
    /// operations (session 11: 3 fewer SASS instructions per solo match; 85.7 GB/s against
    /// 83.3 with `wide` alone on an H100).
    pub packmin: bool,
    /// With `lanes,packmin,tight,lean,bits,pipe`: a solo window's match in fewer operations
    /// (session 12, file `direct`): the lanes pack their sequence start and match end as window
    /// positions, the "may go on" flag is checked only off the short sequence's way, and the
    /// short sequence takes the offset's bytes from the shuffled word.
    pub direct: bool,
    /// With `direct`: windows group their lanes by the hash itself (the table slot one
    /// multiply-add from it), and a solo window tests "entry in the table" in its ballot (the
    /// empty entry's replacement word only on the lookup path).
    pub keyed: bool,
    /// With `direct`: windows where lanes share buckets take their matches the `direct` way
    /// too: each lane packs the runs of its entry's candidate and of its highest earlier peer,
    /// and a lookup picks the word of the candidate it found (a lower peer, rare, takes the
    /// 32-lane extension).
    pub peers: bool,
    /// Predicated byte loads of the emission and extension straight into the register they
    /// update (PTX's `@p ld` into it), instead of a loaded register and a `mov`: ptxas then
    /// needs no register per such load kept across the whole loop (session 12: 19 of the 72).
    pub merge: bool,
    /// With `direct`: a short sequence's match step ends with the loop's own test and branch
    /// back (one branch fewer per match).
    pub fastloop: bool,
    /// Experiment only (session 11; the bytes differ from the spec): the table halved once more
    /// (2 KiB for 4 KiB pages), to measure what the occupancy of a smaller table would give.
    pub small: bool,
    /// Experiment only (the kernel ignores it): extra shared bytes per warp in the launch, to
    /// measure the speed at lower occupancy.
    pub pad: u32,
}

impl Variant {
    /// The build of the table's `lz4_compress`: `masks,bits,lean,f4e,solo,trim,pipe,tight,lanes,
    /// medium,wide,packmin,direct,keyed,merge,fastloop` (issue 17, dickens 4 KiB pages, 256 MiB,
    /// on an H100, `benches/lz4_kernels.rs`, one process, medians of 7-15 alternating rounds).
    /// Session 12: 94.6 GB/s against 85.7 for session 11's build (`...,packmin`) and 93.9 without
    /// `fastloop`; earlier runs: `...,direct,keyed,merge` 94.0, `direct` 92.2-93.0,
    /// `direct,keyed` 92.7, `...,merge,peers` 92.5; xml 109.4 against 103.8, nci 137.3 against
    /// 130.8; ncu: 2.12 G warp instructions against 2.65 G (75.3 per match against 94.3; a
    /// solo window's short match 37 SASS instructions against 62), 64 registers against 72, issue
    /// slots 72.7% against 82.6% (short-scoreboard stalls 2.79 against 1.86 per issue).
    /// Session 11:
    /// 85.7-86.4 GB/s against 82.6-83.2 for session 10's build (`...,medium`), 83.3-84.0 with
    /// `wide` alone (28 page-warps per SM instead of 27), 83.6 with `wide,pairs`, 86.8-87.5 with
    /// `wide,packmin,pairs` (which spills 24 bytes, so `pairs` stays off); nci 131.9 against
    /// 130.5, xml 104.6 against 102.4, canterbury.tar 96.3 against 93.7; ncu: 2.65 G warp
    /// instructions against 2.70 G, issue slots 82.6% against 80.6%. Session 10: 83.3 GB/s against 77.0 for
    /// session 9's build (`masks,bits,lean,f4e,solo,trim,pipe`), 78.9 with `tight` alone, 80.3
    /// with `tight,lanes`, 81.0 with `tight,medium`, 77.3 with `lanes` alone; ncu: 2.70 G warp
    /// instructions against 2.88 G. Session 9: 76.5 GB/s against 59.7 for session 8's kernel
    /// (`PTXFLOW_LZ4_COMPRESS=reread`), 70.7 without `solo,trim,pipe`, 74.5 without `pipe`, 74.6
    /// with `probe` too; ncu: 2.88 G warp instructions against 3.98 G.
    pub const TABLE: Variant = Variant {
        masks: true,
        max_regs: None,
        bits: true,
        lean: true,
        f4e: true,
        solo: true,
        trim: true,
        probe: false,
        pipe: true,
        lanes: 1,
        tight: true,
        medium: true,
        wide: true,
        pairs: false,
        packmin: true,
        direct: true,
        keyed: true,
        peers: false,
        merge: true,
        fastloop: true,
        small: false,
        pad: 0,
    };

    /// [`direct`](Self::direct) with what it builds on (`lanes,packmin,tight,lean,bits,pipe`).
    pub fn direct_solo(&self) -> bool {
        self.direct
            && self.lanes > 0
            && self.packmin
            && self.tight
            && self.lean
            && self.bits
            && self.pipe
    }

    /// [`keyed`](Self::keyed) with what it builds on ([`direct_solo`](Self::direct_solo)).
    pub fn keyed_windows(&self) -> bool {
        self.keyed && self.direct_solo()
    }

    /// [`peers`](Self::peers) with what it builds on ([`direct_solo`](Self::direct_solo)).
    pub fn peer_runs(&self) -> bool {
        self.peers && self.direct_solo()
    }

    /// `.maxntid` of the build.
    pub fn max_block(&self) -> u32 {
        if self.wide {
            WIDE_MAX_BLOCK
        } else {
            MAX_BLOCK
        }
    }

    /// Halvings of the largest table for a page of `page_len` bytes (the spec's, or one more up
    /// to 2 with [`small`](Self::small)).
    pub fn table_halvings(&self, page_len: u32) -> u32 {
        let h = super::table_halvings(page_len);
        if self.small {
            (h + 1).min(2)
        } else {
            h
        }
    }

    /// Dynamic shared memory one warp of this build uses for pages of `page_bytes` (with the
    /// experiment's [`pad`](Self::pad)).
    pub fn shared_per_warp(&self, page_bytes: u32) -> u32 {
        (super::MAX_TABLE_BYTES >> self.table_halvings(page_bytes))
            + page_bytes
            + super::STAGE_SLACK_BYTES
            + self.pad
    }
}

/// What the per-page code needs: addresses, lane constants and loop-carried registers.
struct Page {
    ln: Lanes,
    /// Lane 0 of the warp (it takes pages, reserves output and writes the info words).
    lane0: Reg<Pred>,
    /// The page's index in the batch.
    index: Reg<U32>,
    /// The kernel's `info` words and `packed` output (global addresses).
    info: Reg<U64>,
    packed: Reg<U64>,
    /// Shared addresses of the warp's hash table and of its staged page.
    table: Reg<U32>,
    spage: Reg<U32>,
    /// The warp's global scratch, where the block is written before it is stored.
    scratch: Reg<U64>,
    /// Bytes of this page (the last page of a batch may be short).
    p_len: Reg<U32>,
    /// `32 - L`: the hash's right shift for this page's table of `2^L` buckets.
    hash_shift: Reg<U32>,
    /// Bytes of the block written to scratch so far (warp-uniform).
    out: Reg<U32>,
    raw: Label,
    /// Combined extension step: lane < 16, its byte step (4 + lane, or 15 - lane backwards),
    /// its backward distance (lane - 15), and the forward limit as a shared address.
    ext_fwd: Reg<Pred>,
    ext_step: Reg<U32>,
    ext_k: Reg<U32>,
    ext_limit: Reg<U32>,
    /// `lane - 1`, `spage + lane - 1` and `scratch + lane`: per-lane bases of sequence bytes.
    lane_m1: Reg<U32>,
    spage_lane_m1: Reg<U32>,
    scratch_lane: Reg<U64>,
    /// The build's switches ([`Variant::bits`], [`Variant::lean`]).
    variant: Variant,
}

/// The match half of a sequence: its offset (distance back) and its length in bytes.
#[derive(Clone, Copy)]
struct Match {
    offset: Reg<U32>,
    len: Reg<U32>,
    /// `len` holds the length minus 4 (the token's code; [`Variant::direct`] builds), and the
    /// short sequence's lanes up to `lit + 2` store by one signed compare.
    minus4: bool,
}

impl Match {
    /// A match of `len` bytes at distance `offset`.
    fn new(offset: Reg<U32>, len: Reg<U32>) -> Match {
        Match {
            offset,
            len,
            minus4: false,
        }
    }
}

/// The shared byte at `src` into `dst` where `p` holds (`dst` unchanged elsewhere): with
/// [`Variant::merge`] loaded straight into `dst`.
fn load_byte_where(b: &mut KernelBuilder, pc: &Page, p: Reg<Pred>, dst: Reg<U32>, src: Reg<U32>) {
    b.when(p, |b| {
        if pc.variant.merge {
            b.ld_narrow_to(dst, Space::Shared, Narrow::U8, src);
        } else {
            let loaded = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, src);
            b.mov_to(dst, loaded);
        }
    });
}

/// Where `page_io::finish` copies the stored bytes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// The LZ4 block, from the warp's global scratch.
    Block,
    /// The page itself (it did not compress), from the shared stage.
    Raw,
}
