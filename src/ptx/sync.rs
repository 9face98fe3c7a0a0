//! Special registers, warp-level operations (shuffles, votes, match), barriers and fences
//! (atomics: `atomic.rs`).
//!
//! Shuffles and votes always use the `.sync` forms with an explicit member mask (sm_70 and later
//! require it). 64-bit shuffles are two 32-bit shuffles of the halves.

use super::kernel::KernelBuilder;
use super::reg::{Operand, Reg};
use super::types::*;

/// Every lane of the warp.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// Special registers readable with `mov`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `%tid.x`: thread index in the block, x.
    TidX,
    /// `%tid.y`.
    TidY,
    /// `%tid.z`.
    TidZ,
    /// `%ntid.x`: block size, x.
    NtidX,
    /// `%ntid.y`.
    NtidY,
    /// `%ctaid.x`: block index in the grid, x.
    CtaidX,
    /// `%ctaid.y`.
    CtaidY,
    /// `%ctaid.z`.
    CtaidZ,
    /// `%nctaid.x`: grid size in blocks, x.
    NctaidX,
    /// `%nctaid.y`.
    NctaidY,
    /// `%laneid`: lane in the warp, 0..32.
    LaneId,
    /// `%warpid`: the warp's slot on its SM (may change during execution; not a block-relative index).
    WarpId,
    /// `%smid`: the SM the thread runs on (for diagnostics).
    SmId,
}

impl Special {
    fn name(self) -> &'static str {
        match self {
            Special::TidX => "%tid.x",
            Special::TidY => "%tid.y",
            Special::TidZ => "%tid.z",
            Special::NtidX => "%ntid.x",
            Special::NtidY => "%ntid.y",
            Special::CtaidX => "%ctaid.x",
            Special::CtaidY => "%ctaid.y",
            Special::CtaidZ => "%ctaid.z",
            Special::NctaidX => "%nctaid.x",
            Special::NctaidY => "%nctaid.y",
            Special::LaneId => "%laneid",
            Special::WarpId => "%warpid",
            Special::SmId => "%smid",
        }
    }
}

/// Shuffle modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shfl {
    /// `shfl.sync.up`: read from lane `lane - delta`.
    Up,
    /// `shfl.sync.down`: read from lane `lane + delta`.
    Down,
    /// `shfl.sync.bfly`: read from lane `lane ^ mask`.
    Xor,
    /// `shfl.sync.idx`: read from the given lane.
    Idx,
}

/// Memory-ordering scope for `membar`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The block (`.cta`).
    Cta,
    /// The device (`membar.gl`; `.gpu` in scoped instructions).
    Gpu,
    /// The device and the host (`.sys`).
    Sys,
}

impl KernelBuilder {
    /// Reads a special register (u32).
    pub fn special(&mut self, s: Special) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.instr(format!("mov.u32 {d}, {}", s.name()));
        d
    }

    /// `%clock64`: the SM's cycle counter.
    pub fn clock64(&mut self) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.instr(format!("mov.u64 {d}, %clock64"));
        d
    }

    /// `%globaltimer`: the device-wide nanosecond timer (comparable between SMs).
    pub fn globaltimer(&mut self) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.instr(format!("mov.u64 {d}, %globaltimer"));
        d
    }

    /// `ctaid.x * ntid.x + tid.x`: the global thread index in x (fits u32 for our launches).
    pub fn global_tid_x(&mut self) -> Reg<U32> {
        let tid = self.special(Special::TidX);
        let ntid = self.special(Special::NtidX);
        let cta = self.special(Special::CtaidX);
        self.mad(cta, ntid, tid)
    }

    /// `nctaid.x * ntid.x`: the grid-stride step in x.
    pub fn grid_size_x(&mut self) -> Reg<U32> {
        let ntid = self.special(Special::NtidX);
        let ncta = self.special(Special::NctaidX);
        self.mul(ntid, ncta)
    }

    /// `bar.sync 0`: block-wide barrier (all threads of the block must reach it).
    pub fn bar_sync(&mut self) {
        self.instr("bar.sync 0");
    }

    /// `bar.warp.sync mask`.
    pub fn warp_sync(&mut self, mask: u32) {
        self.need(70, 6, 0);
        self.instr(format!("bar.warp.sync {mask:#x}"));
    }

    /// `membar.{cta,gl,sys}`.
    pub fn membar(&mut self, scope: Scope) {
        let s = match scope {
            Scope::Cta => "cta",
            Scope::Gpu => "gl",
            Scope::Sys => "sys",
        };
        self.instr(format!("membar.{s}"));
    }

    /// `fence.acq_rel.{cta,gpu,sys}`.
    pub fn fence_acq_rel(&mut self, scope: Scope) {
        self.need(70, 6, 0);
        let s = match scope {
            Scope::Cta => "cta",
            Scope::Gpu => "gpu",
            Scope::Sys => "sys",
        };
        self.instr(format!("fence.acq_rel.{s}"));
    }

    /// `shfl.sync` of a 32- or 64-bit value over the lanes in `mask`. `b` is the lane delta
    /// (up/down), the xor mask (xor) or the source lane (idx).
    pub fn shfl_mask<T: Word>(
        &mut self,
        mode: Shfl,
        v: Reg<T>,
        b: impl Operand<U32>,
        mask: u32,
    ) -> Reg<T> {
        self.need(30, 6, 0);
        let (m, c) = match mode {
            Shfl::Up => ("up", 0),
            Shfl::Down => ("down", 0x1f),
            Shfl::Xor => ("bfly", 0x1f),
            Shfl::Idx => ("idx", 0x1f),
        };
        let b = b.ptx();
        if T::BITS == 32 {
            let d = self.reg::<T>();
            self.instr(format!("shfl.sync.{m}.b32 {d}, {v}, {b}, {c}, {mask:#x}"));
            d
        } else {
            let (lo, hi) = self.unpack64(v);
            let (dlo, dhi) = (self.reg::<U32>(), self.reg::<U32>());
            self.instr(format!(
                "shfl.sync.{m}.b32 {dlo}, {lo}, {b}, {c}, {mask:#x}"
            ));
            self.instr(format!(
                "shfl.sync.{m}.b32 {dhi}, {hi}, {b}, {c}, {mask:#x}"
            ));
            self.pack64(dlo, dhi)
        }
    }

    /// Full-warp `shfl.sync`.
    pub fn shfl<T: Word>(&mut self, mode: Shfl, v: Reg<T>, b: impl Operand<U32>) -> Reg<T> {
        self.shfl_mask(mode, v, b, FULL_MASK)
    }

    /// Sum over the full warp with xor shuffles; every lane ends with the total.
    pub fn warp_sum<T: Word + Num>(&mut self, v: Reg<T>) -> Reg<T> {
        let mut acc = v;
        for k in [16u32, 8, 4, 2, 1] {
            let o = self.shfl(Shfl::Xor, acc, k);
            acc = self.add(acc, o);
        }
        acc
    }

    /// `vote.sync.ballot.b32`: bit i set when lane i's predicate is true.
    pub fn ballot(&mut self, p: Reg<Pred>) -> Reg<U32> {
        self.need(30, 6, 0);
        let d = self.reg::<U32>();
        self.instr(format!("vote.sync.ballot.b32 {d}, {p}, {FULL_MASK:#x}"));
        d
    }

    /// `vote.sync.any.pred`.
    pub fn vote_any(&mut self, p: Reg<Pred>) -> Reg<Pred> {
        self.vote("any", p)
    }

    /// `vote.sync.all.pred`.
    pub fn vote_all(&mut self, p: Reg<Pred>) -> Reg<Pred> {
        self.vote("all", p)
    }

    /// `vote.sync.uni.pred`: true when every active lane has the same predicate.
    pub fn vote_uni(&mut self, p: Reg<Pred>) -> Reg<Pred> {
        self.vote("uni", p)
    }

    fn vote(&mut self, mode: &str, p: Reg<Pred>) -> Reg<Pred> {
        self.need(30, 6, 0);
        let d = self.reg::<Pred>();
        self.instr(format!("vote.sync.{mode}.pred {d}, {p}, {FULL_MASK:#x}"));
        d
    }

    /// `match.any.sync.b32`: mask of the lanes holding the same value as this lane.
    pub fn match_any(&mut self, v: Reg<U32>) -> Reg<U32> {
        self.need(70, 6, 0);
        let d = self.reg::<U32>();
        self.instr(format!("match.any.sync.b32 {d}, {v}, {FULL_MASK:#x}"));
        d
    }
}
