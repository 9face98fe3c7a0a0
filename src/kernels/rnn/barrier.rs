//! A grid-wide barrier for persistent kernels launched cooperatively (all blocks co-resident).
//!
//! State: two u32 counters in global memory, `arrive` and `exit`, zero before the launch. Barrier
//! number i (0-based) completes when `arrive` reaches `blocks * (i + 1)`: every thread of a block
//! meets at `bar.sync`, then thread 0 publishes the block's writes with `fence.acq_rel.gpu`, adds
//! 1 to `arrive` (relaxed atomic), and spins with `ld.acquire.gpu` until the count is reached;
//! a second `bar.sync` releases the block. Release (fence + atomic) and acquire (the load that sees
//! the count) order every write before the barrier, in every block, before every read after it.
//! The counter never goes back during a launch, so no generation flag is needed.
//!
//! `arrive` and `wait` may be split to overlap independent work with the barrier's latency.
//! On exit each block adds 1 to `exit`; the last one resets both counters to zero for the next
//! launch (no block reads them any more). A spin longer than [`TIMEOUT_CYCLES`] (a block that
//! never arrives: the grid was not co-resident) sets `status` to 1 and lets the kernel finish
//! with wrong results instead of hanging; the host turns that into an error.

use crate::ptx::*;

/// Cycles a block waits at one barrier before giving up (about 5 s at 1.7 GHz: generous, since
/// compute-sanitizer slows kernels down a lot).
pub const TIMEOUT_CYCLES: u64 = 1 << 33;

/// Registers of one barrier instance (see the module notes).
pub struct GridBarrier {
    arrive: Reg<U64>,
    exit: Reg<U64>,
    status: Reg<U64>,
    blocks: Reg<U32>,
    target: Reg<U32>,
    thread0: Reg<Pred>,
}

impl GridBarrier {
    /// A barrier over `blocks` blocks using the counters at `arrive`/`exit` (global addresses).
    pub fn new(
        b: &mut KernelBuilder,
        arrive: Reg<U64>,
        exit: Reg<U64>,
        status: Reg<U64>,
        blocks: Reg<U32>,
    ) -> Self {
        let tid = b.special(Special::TidX);
        let thread0 = b.setp(Cmp::Eq, tid, 0u32);
        let target = b.mov(0u32);
        GridBarrier {
            arrive,
            exit,
            status,
            blocks,
            target,
            thread0,
        }
    }

    /// The block's writes so far are published and counted.
    pub fn arrive(&self, b: &mut KernelBuilder) {
        b.bar_sync();
        let t = b.add(self.target, self.blocks);
        b.mov_to(self.target, t);
        let arrive = self.arrive;
        b.if_then(self.thread0, |b| {
            b.fence_acq_rel(Scope::Gpu);
            b.red(Space::Global, AtomOp::Add, arrive, 1u32);
        });
    }

    /// Waits until every block has arrived at this barrier.
    pub fn wait(&self, b: &mut KernelBuilder) {
        let (arrive, status, target) = (self.arrive, self.status, self.target);
        b.if_then(self.thread0, |b| {
            let start = b.clock64();
            b.loop_forever(|b, brk, _| {
                let seen = b.ld_acquire_gpu::<U32>(arrive);
                let done = b.setp(Cmp::Ge, seen, target);
                b.bra_if(done, brk);
                give_up_when_late(b, start, status, brk);
            });
            b.fence_acq_rel(Scope::Gpu);
        });
        b.bar_sync();
    }

    /// `arrive` then `wait`.
    pub fn sync(&self, b: &mut KernelBuilder) {
        self.arrive(b);
        self.wait(b);
    }

    /// Exit accounting: the last block out resets both counters.
    pub fn finish(&self, b: &mut KernelBuilder) {
        let (arrive, exit, blocks) = (self.arrive, self.exit, self.blocks);
        b.if_then(self.thread0, |b| {
            let old = b.atom(Space::Global, AtomOp::Add, exit, 1u32);
            let last = b.sub(blocks, 1u32);
            let is_last = b.setp(Cmp::Eq, old, last);
            b.if_then(is_last, |b| {
                b.st(Space::Global, arrive, 0u32);
                b.st(Space::Global, exit, 0u32);
            });
        });
    }
}

/// Inside a spin loop started at clock `start`: once it has spun longer than [`TIMEOUT_CYCLES`],
/// sets the status word at `status` to 1 and leaves through `brk` (wrong results, never a hang).
pub(super) fn give_up_when_late(
    b: &mut KernelBuilder,
    start: Reg<U64>,
    status: Reg<U64>,
    brk: &Label,
) {
    let now = b.clock64();
    let waited = b.sub(now, start);
    let late = b.setp(Cmp::Gt, waited, TIMEOUT_CYCLES);
    b.if_then(late, |b| {
        b.st(Space::Global, status, 1u32);
        b.bra(brk);
    });
}
