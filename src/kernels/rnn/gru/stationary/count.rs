//! The held kernels' launch epoch and count-in (`held`): one relaxed 64-bit atomic of thread 0.

use crate::kernels::rnn::gru::Ctx;
use crate::ptx::*;

/// The launch's epoch and the block's count-in (`gru`'s `epoch, count` words, as one u64):
/// thread 0 adds `1 << 32` to the member's u64 `count << 32 | epoch` with one relaxed atomic,
/// whose old value gives the epoch and the blocks counted in before; the block that finds
/// `blocks - 1` stores `epoch + T` with a zero count (every block's atomic precedes it, and the
/// next launch is stream-ordered after this one). One atomic and no fence or read to order
/// (`gru::block_context` reads the epoch, then fences and counts in, stalling warp 0 for a round
/// trip at the start): its value is only used after the prologue's barrier (thread 0 publishes
/// the epoch in shared memory).
pub(super) struct Count {
    old: Reg<U64>,
    word: Reg<U64>,
}

impl Count {
    /// Thread 0: the atomic (its result is not waited for here).
    pub fn issue(b: &mut KernelBuilder, c: &Ctx<'_>, t0: Reg<Pred>) -> Self {
        let state_bytes = b.mul_wide(c.e, 16u32);
        let word = b.add(c.p.state, state_bytes);
        // Defined in thread 0 only (its every use is thread 0's): written straight by the
        // atomic, so nothing waits for it until the epoch is published.
        let mut old = None;
        b.guarded(t0, false, |b| {
            old = Some(b.atom::<U64>(Space::Global, AtomOp::Add, word, 1u64 << 32));
        });
        Count {
            old: old.expect("the guarded closure runs"),
            word,
        }
    }

    /// Thread 0: the epoch into shared float `slot` (before the prologue's barrier).
    pub fn publish(&self, b: &mut KernelBuilder, c: &Ctx<'_>, t0: Reg<Pred>, slot: Reg<U32>) {
        b.guarded(t0, false, |b| {
            let (epoch, _) = b.unpack64(self.old);
            let sa = b.shared_index(c.smem, slot);
            b.st(Space::Shared, sa, epoch);
        });
    }

    /// Thread 0 of the member's last block: `epoch + T`, count 0.
    pub fn close(&self, b: &mut KernelBuilder, c: &Ctx<'_>, t0: Reg<Pred>) {
        let p = c.p;
        let rows_less_one = b.sub(p.group_rows, 1u32);
        let groups = b.add(p.batch_pad, rows_less_one);
        let groups = b.div(groups, p.group_rows);
        let blocks = b.mul(groups, p.slices);
        let last = b.sub(blocks, 1u32);
        b.if_then(t0, |b| {
            let (epoch, before) = b.unpack64(self.old);
            let is_last = b.setp(Cmp::Eq, before, last);
            b.if_then(is_last, |b| {
                let next = b.add(epoch, p.steps);
                let zero = b.mov(0u32);
                let w = b.pack64::<U64>(next, zero);
                b.st(Space::Global, self.word, w);
            });
        });
    }
}
