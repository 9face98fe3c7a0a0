//! The serving loop's hooks for the device solver ([`super::super::Variant::solve`]):
//! which block reduces, the state staging and where the sums go (see `kernels::ndt::solve`).

use super::ServerRegs;
use crate::kernels::ndt::solve::OPT_RELAXED_COUNT;
use crate::ptx::*;

impl ServerRegs {
    /// The profile build's counters (`kernels::ndt::solve::profile`) at the server's stamp `k`
    /// of block 0 ([`super::STAMP_TERMS`], [`super::STAMP_POINTS`]); nothing otherwise.
    pub(in crate::kernels::ndt::derivatives) fn prof_block0(
        &self,
        b: &mut KernelBuilder,
        k: usize,
    ) {
        use crate::kernels::ndt::solve::profile::{P_POINTS, P_TERMS};
        if let Some((sv, _)) = &self.solve {
            match k {
                super::STAMP_TERMS => sv.prof(b, self.first_thread, P_TERMS),
                super::STAMP_POINTS => sv.prof(b, self.first_thread, P_POINTS),
                _ => {}
            }
        }
    }

    /// The profile build's counters once a block's thread 0 (`is0`) has seen a request.
    pub(in crate::kernels::ndt::derivatives) fn prof_seen(
        &self,
        b: &mut KernelBuilder,
        is0: Reg<Pred>,
    ) {
        use crate::kernels::ndt::solve::profile::P_SEEN;
        if let Some((sv, _)) = &self.solve {
            sv.prof(b, self.first_thread, P_SEEN);
            sv.prof_seen(b, is0, self.seen_at);
        }
    }

    /// Whether this is the device solver's build with option bit `opt`
    /// (`kernels::ndt::solve::OPT_*`).
    pub(in crate::kernels::ndt::derivatives) fn solve_opt(&self, opt: u32) -> bool {
        self.solve.as_ref().is_some_and(|(s, _)| s.has(opt))
    }

    /// Whether this is the device solver's build.
    pub(in crate::kernels::ndt::derivatives) fn solves(&self) -> bool {
        self.solve.is_some()
    }

    /// The device solver's choice of the reducing block (thread 0 of each block, after its
    /// count at `counter`; `last`: it counted last): block 0, which waits until all `nblk`
    /// blocks have counted (acquire), so the solver always runs on the same SM with its code
    /// in that SM's instruction cache. Returns 1 in block 0, 0 elsewhere, and 0 in block 0
    /// too if the count does not complete within twice the idle timeout (then no request
    /// follows, every block times out and the host falls back). With the `reducer` parameter
    /// at `REDUCER_LAST`: 1 in the block that counted last, as the server does.
    pub(in crate::kernels::ndt::derivatives) fn block0_waits_for_all(
        &self,
        b: &mut KernelBuilder,
        counter: Reg<U64>,
        last: Reg<Pred>,
        nblk: Reg<U32>,
    ) -> Reg<U32> {
        let Some((sv, _)) = &self.solve else {
            return b.selp(1u32, 0u32, last);
        };
        use crate::kernels::ndt::solve::profile::{P_ALL, P_COUNTED};
        sv.prof(b, self.first_thread, P_COUNTED);
        sv.prof_counted(b, self.is0);
        let old_rule = sv.last_block_reduces(b);
        let by_count = b.and(old_rule, last);
        let flag = b.selp(1u32, 0u32, by_count);
        let (blk0, idle) = (self.blk0, self.idle_ns);
        let wait = b.not(old_rule);
        let wait = b.and(wait, blk0);
        b.if_then(wait, |b| {
            let done = b.label("counted");
            b.bra_if(last, &done);
            let start = b.globaltimer();
            let limit = b.add(idle, idle);
            let give_up = b.label("count_late");
            let relaxed = sv.has(OPT_RELAXED_COUNT);
            b.loop_forever(|b, brk, _| {
                let n = if relaxed {
                    b.ld_relaxed_gpu::<U32>(counter)
                } else {
                    b.ld_acquire_gpu::<U32>(counter)
                };
                let all = b.setp(Cmp::Ge, n, nblk);
                if relaxed {
                    b.if_then(all, |b| {
                        b.fence_acq_rel(Scope::Gpu);
                        b.bra(brk);
                    });
                } else {
                    b.bra_if(all, brk);
                }
                let now = b.globaltimer();
                let waited = b.sub(now, start);
                let late = b.setp(Cmp::Gt, waited, limit);
                b.bra_if(late, &give_up);
            });
            b.place(&done);
            b.mov_to(flag, 1u32);
            b.place(&give_up);
        });
        sv.prof(b, self.first_thread, P_ALL);
        flag
    }

    /// In the block that reduces last (every thread): the device solver's state into shared
    /// memory ([`SolveCtx::stage`]); nothing for the server.
    pub(in crate::kernels::ndt::derivatives) fn stage_solver(
        &self,
        b: &mut KernelBuilder,
        tid: Reg<U32>,
    ) {
        if let Some((sv, _)) = &self.solve {
            sv.stage(b, tid);
        }
    }

    /// The shared array the last block leaves the sums in for the device solver (`None`: the
    /// server, which writes them to `results`).
    pub(in crate::kernels::ndt::derivatives) fn solve_sums(&self) -> Option<&SharedArray<F64>> {
        self.solve.as_ref().map(|(s, _)| s.sums())
    }
}
