//! Asynchronous copies from global to shared memory (`cp.async`, sm_80): the copy needs no
//! register, so a thread can have every copy of a staging phase in flight at once and wait
//! for all of them together.

use super::kernel::KernelBuilder;
use super::reg::Reg;
use super::types::*;

impl KernelBuilder {
    /// `cp.async.cg.shared.global [dst], [src], 16`: 16 bytes from global `src` to shared `dst`
    /// (both 16-byte aligned), through L2 only. Completes at [`KernelBuilder::cp_async_wait_all`].
    pub fn cp_async_16(&mut self, dst: Reg<U32>, src: Reg<U64>) {
        self.need(80, 7, 0);
        self.instr(format!("cp.async.cg.shared.global [{dst}], [{src}], 16"));
    }

    /// `cp.async.wait_all`: this thread's `cp.async` copies have landed and are visible to it
    /// (a block barrier after it makes them visible to the block).
    pub fn cp_async_wait_all(&mut self) {
        self.need(80, 7, 0);
        self.instr("cp.async.wait_all");
    }

    /// `cp.async.commit_group`: this thread's `cp.async` copies since the last commit form a
    /// group (for [`KernelBuilder::cp_async_wait_group`]).
    pub fn cp_async_commit_group(&mut self) {
        self.need(80, 7, 0);
        self.instr("cp.async.commit_group");
    }

    /// `cp.async.wait_group n`: every committed group but the `n` most recent has landed and is
    /// visible to this thread.
    pub fn cp_async_wait_group(&mut self, n: u32) {
        self.need(80, 7, 0);
        self.instr(format!("cp.async.wait_group {n}"));
    }
}
