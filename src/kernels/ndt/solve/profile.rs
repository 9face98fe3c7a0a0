//! Cycle counters of the device solver's build with [`OPT_PROFILE`] (a measurement build, never
//! the table's kernel): thread 0 of block 0, which runs the serving loop's thread-0 work and is
//! lane 0 of the solver warp (the default `REDUCER_BLOCK0`), adds the `%clock64` cycles since
//! its previous stamp to the counter of the phase that just ended. The counters live in block
//! 0's shared memory for the whole launch; the finish writes them into the state buffer after
//! its [`STATE_WORDS`] words ([`PROF_WORDS`] more, which the host allocates for this build).
//! Each stamp costs a few shared-memory round trips of that one thread.

use super::{SolveCtx, STATE_WORDS};
use crate::ptx::*;

/// `Variant::solve_opts` bit: the cycle counters of this module.
pub const OPT_PROFILE: u32 = 1;
/// Counter: block 0's thread 0 saw the next request in the relay (since the release).
pub const P_SEEN: usize = 0;
/// Counter: block 0 had the request's terms in shared memory.
pub const P_TERMS: usize = 1;
/// Counter: block 0 had done its points.
pub const P_POINTS: usize = 2;
/// Counter: block 0 had reduced its block, stored its partial and counted itself.
pub const P_COUNTED: usize = 3;
/// Counter: every block had counted itself (block 0 waited for the stragglers).
pub const P_ALL: usize = 4;
/// Counter: block 0 had staged the state and reduced the partials (the solver step starts).
pub const P_REDUCED: usize = 5;
/// Counter: the line search's feed (to the trial or to the Newton step).
pub const P_FEED: usize = 6;
/// Counter: decode, checks and the two Cholesky factorisations.
pub const P_CHOL: usize = 7;
/// Counter: the triangular solves (or the host's eigen-path answer).
pub const P_SOLVE: usize = 8;
/// Counter: the stop tests, the direction and the line search's start (to the request).
pub const P_NEXT: usize = 9;
/// Counter: the state words stored for the next evaluation.
pub const P_STORE: usize = 10;
/// Counter: the sines and cosines, the request record and the relay release.
pub const P_SEND: usize = 11;
/// Count (not cycles): steps that ended in a line-search trial.
pub const P_TRIALS: usize = 12;
/// Count: Newton steps (`next_step`).
pub const P_NEWTON: usize = 13;
/// Count: evaluations block 0 served.
pub const P_EVALS: usize = 14;
/// The previous stamp's `%clock64`.
const P_LAST: usize = 15;
/// Nanoseconds (`%globaltimer`, summed over the evaluations after the first): from the
/// solver's release of a request to a block's thread 0 seeing it, the mean over the blocks.
pub const P_RELAY_NS: usize = 16;
/// Nanoseconds: from the release to a block counting itself (its partial stored), the mean
/// over the blocks.
pub const P_COUNTED_NS: usize = 17;
/// Evaluations in [`P_RELAY_NS`] and [`P_COUNTED_NS`].
pub const P_RELAY_N: usize = 18;
/// The last release's `%globaltimer` (0: the first request, not counted).
/// (Means over the blocks: `G_*` words below.)
const P_RELEASED: usize = 19;
/// Counter words.
pub const PROF_WORDS: usize = 20;
/// Words of the state buffer after [`STATE_WORDS`] that the profile build uses: the counters,
/// then three words in device memory to which every block's thread 0 adds the low 32 bits of
/// its `%globaltimer` when it sees a request and when it counts itself, and 1 (`atom.add`, which
/// the interpreter models; a wrap of the low bits inside an evaluation spoils that sample).
pub const PROF_STATE_WORDS: usize = PROF_WORDS + 3;
const G_SEEN: usize = STATE_WORDS + PROF_WORDS;
const G_COUNTED: usize = G_SEEN + 1;
const G_BLOCKS: usize = G_SEEN + 2;

/// With the counters (`arr`): where `who` holds, counter `k` += cycles since the last stamp.
pub(super) fn stamp(
    b: &mut KernelBuilder,
    arr: &Option<SharedArray<U64>>,
    who: Reg<Pred>,
    k: usize,
) {
    let Some(arr) = arr.clone() else {
        return;
    };
    b.if_then(who, |b| {
        let now = b.clock64();
        let last = b.ld::<U64>(Space::Shared, arr.at(P_LAST as u32));
        let d = b.sub(now, last);
        let acc = b.ld::<U64>(Space::Shared, arr.at(k as u32));
        let acc = b.add(acc, d);
        b.st(Space::Shared, arr.at(k as u32), acc);
        b.st(Space::Shared, arr.at(P_LAST as u32), now);
    });
}

/// With the counters: where `who` holds, count `k` += 1.
pub(super) fn count(
    b: &mut KernelBuilder,
    arr: &Option<SharedArray<U64>>,
    who: Reg<Pred>,
    k: usize,
) {
    let Some(arr) = arr.clone() else {
        return;
    };
    b.if_then(who, |b| {
        let acc = b.ld::<U64>(Space::Shared, arr.at(k as u32));
        let acc = b.add(acc, 1u64);
        b.st(Space::Shared, arr.at(k as u32), acc);
    });
}

impl SolveCtx {
    /// With [`OPT_PROFILE`]: where `who` holds, counter `k` += cycles since the last stamp.
    pub fn prof(&self, b: &mut KernelBuilder, who: Reg<Pred>, k: usize) {
        stamp(b, &self.prof, who, k);
    }

    /// Thread 0 of block 0 at the start: the counters zeroed, the clock taken.
    pub(super) fn prof_start(&self, b: &mut KernelBuilder) {
        let Some(arr) = self.prof.clone() else {
            return;
        };
        for k in 0..PROF_WORDS {
            b.st(Space::Shared, arr.at(k as u32), 0u64);
        }
        let now = b.clock64();
        b.st(Space::Shared, arr.at(P_LAST as u32), now);
        let st = b.global_ptr(&self.p.state);
        for w in [G_SEEN, G_COUNTED, G_BLOCKS] {
            b.st(Space::Global, Addr::from(st).off(8 * w as i64), 0u64);
        }
    }

    /// Every block's thread 0 (`who`): `at` (`%globaltimer`) into the seen sum.
    pub fn prof_seen(&self, b: &mut KernelBuilder, who: Reg<Pred>, at: Reg<U64>) {
        self.prof_add(b, who, G_SEEN, Some(at));
    }

    /// Every block's thread 0 (`who`): now into the counted sum, 1 into the blocks.
    pub fn prof_counted(&self, b: &mut KernelBuilder, who: Reg<Pred>) {
        self.prof_add(b, who, G_COUNTED, None);
    }

    fn prof_add(&self, b: &mut KernelBuilder, who: Reg<Pred>, w: usize, at: Option<Reg<U64>>) {
        if self.prof.is_none() {
            return;
        }
        let st = b.global_ptr(&self.p.state);
        b.if_then(who, |b| {
            let v = at.unwrap_or_else(|| b.globaltimer());
            let v = b.and(v, u64::from(u32::MAX));
            let a = Addr::from(st).off(8 * w as i64);
            let _ = b.atom::<U64>(Space::Global, AtomOp::Add, a, v);
            if w == G_COUNTED {
                let a = Addr::from(st).off(8 * G_BLOCKS as i64);
                let _ = b.atom::<U64>(Space::Global, AtomOp::Add, a, 1u64);
            }
        });
    }

    /// Lane 0 of the solver warp (`who`) before it releases a request: the max words zeroed.
    pub(super) fn prof_before_release(&self, b: &mut KernelBuilder, who: Reg<Pred>) {
        if self.prof.is_none() {
            return;
        }
        let st = b.global_ptr(&self.p.state);
        b.if_then(who, |b| {
            for w in [G_SEEN, G_COUNTED, G_BLOCKS] {
                b.st(Space::Global, Addr::from(st).off(8 * w as i64), 0u64);
            }
        });
    }

    /// Lane 0 (`who`) after the release: its `%globaltimer`.
    pub(super) fn prof_released(&self, b: &mut KernelBuilder, who: Reg<Pred>) {
        let Some(arr) = self.prof.clone() else {
            return;
        };
        b.if_then(who, |b| {
            let now = b.globaltimer();
            b.st(Space::Shared, arr.at(P_RELEASED as u32), now);
        });
    }

    /// Lane 0 (`who`) at the start of a step: the last request's relay and count spans added
    /// (all blocks have counted themselves, so both words are final).
    pub(super) fn prof_spans(&self, b: &mut KernelBuilder, who: Reg<Pred>) {
        let Some(arr) = self.prof.clone() else {
            return;
        };
        let st = b.global_ptr(&self.p.state);
        b.if_then(who, |b| {
            let rel = b.ld::<U64>(Space::Shared, arr.at(P_RELEASED as u32));
            let counted = b.setp(Cmp::Ne, rel, 0u64);
            b.if_then(counted, |b| {
                let rel32 = b.and(rel, u64::from(u32::MAX));
                let n = b.ld_relaxed_gpu::<U64>(Addr::from(st).off(8 * G_BLOCKS as i64));
                let n = b.max(n, 1u64);
                for (g, k) in [(G_SEEN, P_RELAY_NS), (G_COUNTED, P_COUNTED_NS)] {
                    let v = b.ld_relaxed_gpu::<U64>(Addr::from(st).off(8 * g as i64));
                    let mean = b.div(v, n);
                    let d = b.sub(mean, rel32);
                    let acc = b.ld::<U64>(Space::Shared, arr.at(k as u32));
                    let acc = b.add(acc, d);
                    b.st(Space::Shared, arr.at(k as u32), acc);
                }
                let n = b.ld::<U64>(Space::Shared, arr.at(P_RELAY_N as u32));
                let n = b.add(n, 1u64);
                b.st(Space::Shared, arr.at(P_RELAY_N as u32), n);
            });
        });
    }

    /// Where `who` holds: the counters into the state buffer after its [`STATE_WORDS`].
    pub(super) fn prof_dump(&self, b: &mut KernelBuilder, who: Reg<Pred>, state: Reg<U64>) {
        let Some(arr) = self.prof.clone() else {
            return;
        };
        b.if_then(who, |b| {
            for k in 0..PROF_WORDS {
                let v = b.ld::<U64>(Space::Shared, arr.at(k as u32));
                let a = Addr::from(state).off(8 * (STATE_WORDS + k) as i64);
                b.st(Space::Global, a, v);
            }
        });
    }
}
