//! The device solver's state between evaluations: its word layout in device memory and the
//! shared-memory copy the reducing block stages ([`super::SolveCtx::stage`]).

use crate::ptx::*;

/// State words (u64 each, device memory): pose, direction, pending pose (6 f64 each).
pub const S_POSE: usize = 0;
pub(super) const S_DIR: usize = 6;
pub(super) const S_PENDING: usize = 12;
/// Phase, iterations, evaluations (u32 in the low half).
pub(super) const S_PHASE: usize = 18;
pub(super) const S_ITERS: usize = 19;
pub(super) const S_EVALS: usize = 20;
/// The line search: `f0, g0`, the ends (`a, f, g` each), flags, widths, bounds, trial.
pub(super) const S_F0: usize = 21;
pub(super) const S_G0: usize = 22;
pub(super) const S_LO_A: usize = 23;
pub(super) const S_HI_A: usize = 26;
pub(super) const S_BRACKETED: usize = 29;
pub(super) const S_STAGE1: usize = 30;
pub(super) const S_WIDTH: usize = 31;
pub(super) const S_WIDTH1: usize = 32;
pub(super) const S_STEP_MIN: usize = 33;
pub(super) const S_STEP_MAX: usize = 34;
pub(super) const S_TRIAL: usize = 35;
pub(super) const S_LS_EVALS: usize = 36;
/// Nanoseconds spent in solver steps so far, and the kernel's start (`%globaltimer`).
pub(super) const S_SOLVE_NS: usize = 37;
pub(super) const S_START_NS: usize = 38;
/// Eigen-path requests to the host so far (u32).
pub(super) const S_ASSISTS: usize = 39;
/// The line search's best-end sums ([`VALUES`] f64).
pub(super) const S_LO_SUMS: usize = 40;
/// The solver state: kept in device memory between evaluations, staged into shared memory by
/// the block that reduces last while it reduces ([`SolveCtx::stage`]); thread 0 reads the
/// staged copy and writes both. Every store is fenced for the solver warp with `bar.warp.sync`
/// before (the other lanes' earlier reads of the word) and after (their later reads), so the
/// staged words are race-free within the warp (the solver warp runs the step uniformly).
#[derive(Clone)]
pub(crate) struct State {
    pub(super) global: Reg<U64>,
    pub(super) staged: SharedArray<U64>,
    /// Lane 0 of the solver warp: the one that stores.
    pub(super) lane0: Reg<Pred>,
    /// Stores go to device memory too (not with `OPT_SHARED_STATE`).
    pub(super) global_too: bool,
}

impl State {
    pub(crate) fn ld_f64(&self, b: &mut KernelBuilder, w: usize) -> Reg<F64> {
        b.ld::<F64>(Space::Shared, self.staged.at(w as u32))
    }

    pub(crate) fn ld_u32(&self, b: &mut KernelBuilder, w: usize) -> Reg<U32> {
        b.ld::<U32>(Space::Shared, self.staged.at(w as u32))
    }

    pub(crate) fn st_f64(&self, b: &mut KernelBuilder, w: usize, v: Reg<F64>) {
        let a = self.staged.at(w as u32);
        let g = self.global_too;
        self.lane0_store(b, |b| {
            if g {
                put_f64(b, self.global, w, v);
            }
            b.st(Space::Shared, a, v);
        });
    }

    pub(crate) fn st_u32(&self, b: &mut KernelBuilder, w: usize, v: Reg<U32>) {
        let a = self.staged.at(w as u32);
        let g = self.global_too;
        self.lane0_store(b, |b| {
            if g {
                put_u32(b, self.global, w, v);
            }
            b.st(Space::Shared, a, v);
        });
    }

    pub(super) fn ld_u64(&self, b: &mut KernelBuilder, w: usize) -> Reg<U64> {
        b.ld::<U64>(Space::Shared, self.staged.at(w as u32))
    }

    pub(super) fn st_u64(&self, b: &mut KernelBuilder, w: usize, v: Reg<U64>) {
        let (g, a) = (
            Addr::from(self.global).off(8 * w as i64),
            self.staged.at(w as u32),
        );
        let global_too = self.global_too;
        self.lane0_store(b, |b| {
            if global_too {
                b.st(Space::Global, g, v);
            }
            b.st(Space::Shared, a, v);
        });
    }

    /// `store` on lane 0 between two `bar.warp.sync` of the whole solver warp.
    fn lane0_store(&self, b: &mut KernelBuilder, store: impl FnOnce(&mut KernelBuilder)) {
        b.warp_sync(u32::MAX);
        b.when(self.lane0, store);
        b.warp_sync(u32::MAX);
    }
}

/// Word `w` of global memory at `base` = `v` (the mapped results, the state's first write).
pub(crate) fn put_f64(b: &mut KernelBuilder, base: Reg<U64>, w: usize, v: Reg<F64>) {
    b.st(Space::Global, Addr::from(base).off(8 * w as i64), v);
}

/// The u32 `v` into the low half of word `w` at `base`.
pub(crate) fn put_u32(b: &mut KernelBuilder, base: Reg<U64>, w: usize, v: Reg<U32>) {
    b.st(Space::Global, Addr::from(base).off(8 * w as i64), v);
}

impl State {
    /// Word `w` of the state for the next evaluation, by the caller's lane 0 (no warp
    /// synchronization: nothing reads it before the next step): device memory, or with
    /// `OPT_SHARED_STATE` the staged copy.
    pub(super) fn put_next_f64(&self, b: &mut KernelBuilder, w: usize, v: Reg<F64>) {
        if self.global_too {
            put_f64(b, self.global, w, v);
        } else {
            b.st(Space::Shared, self.staged.at(w as u32), v);
        }
    }

    /// [`State::put_next_f64`] for a u32 (the low half of word `w`).
    pub(super) fn put_next_u32(&self, b: &mut KernelBuilder, w: usize, v: Reg<U32>) {
        if self.global_too {
            put_u32(b, self.global, w, v);
        } else {
            b.st(Space::Shared, self.staged.at(w as u32), v);
        }
    }
}
