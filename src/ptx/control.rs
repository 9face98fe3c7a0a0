//! Control flow: branches, structured `if`/loops built from the label generator, and `exit`.
//! Loop-carried values are ordinary registers updated with [`KernelBuilder::mov_to`].

use super::arith::Cmp;
use super::kernel::KernelBuilder;
use super::reg::{Label, Operand, Reg};
use super::types::*;

/// How a structured loop branches ([`KernelBuilder::for_range_with`],
/// [`KernelBuilder::loop_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoopBranch {
    /// `bra`: threads may leave the loop at different passes. Labels `loop`, `loop_end`.
    #[default]
    Divergent,
    /// `bra.uni`: the caller promises that every active thread of a warp takes each of the
    /// loop's branches alike (the bound and the step are warp-uniform), so ptxas needs no
    /// divergence handling around warp-synchronous instructions in the body (fewer registers, no
    /// spills). Labels `ufor`/`ufor_end` ([`KernelBuilder::for_range_with`]) and
    /// `uloop`/`uloop_end` ([`KernelBuilder::loop_with`]), so uniform loops show in the PTX.
    Uniform,
}

impl KernelBuilder {
    /// `bra label` (divergent branches allowed).
    pub fn bra(&mut self, label: &Label) {
        self.instr(format!("bra {label}"));
    }

    /// `bra.uni label`: the caller promises every active thread takes it.
    pub fn bra_uni(&mut self, label: &Label) {
        self.instr(format!("bra.uni {label}"));
    }

    /// `@p bra label`.
    pub fn bra_if(&mut self, p: Reg<Pred>, label: &Label) {
        self.when(p, |b| b.bra(label));
    }

    /// `@!p bra label`.
    pub fn bra_unless(&mut self, p: Reg<Pred>, label: &Label) {
        self.when_not(p, |b| b.bra(label));
    }

    /// `@p bra.uni label`: the caller promises `p` is the same in every active thread.
    pub fn bra_uni_if(&mut self, p: Reg<Pred>, label: &Label) {
        self.when(p, |b| b.bra_uni(label));
    }

    /// `@!p bra.uni label`: the caller promises `p` is the same in every active thread.
    pub fn bra_uni_unless(&mut self, p: Reg<Pred>, label: &Label) {
        self.when_not(p, |b| b.bra_uni(label));
    }

    /// `exit`: this thread stops.
    pub fn exit(&mut self) {
        self.instr("exit");
    }

    /// Runs `then` only where `p` holds.
    pub fn if_then(&mut self, p: Reg<Pred>, then: impl FnOnce(&mut Self)) {
        let end = self.label("endif");
        self.bra_unless(p, &end);
        then(self);
        self.place(&end);
    }

    /// `if p { then } else { other }`.
    pub fn if_else(
        &mut self,
        p: Reg<Pred>,
        then: impl FnOnce(&mut Self),
        other: impl FnOnce(&mut Self),
    ) {
        let else_l = self.label("else");
        let end = self.label("endif");
        self.bra_unless(p, &else_l);
        then(self);
        self.bra(&end);
        self.place(&else_l);
        other(self);
        self.place(&end);
    }

    /// `for i in (start..end).step_by(step)` over u32, the bound checked before each pass.
    /// The body gets the loop register (read-only by convention) and the loop's exit label.
    /// The addition wraps like PTX `add.u32`: callers keep `end + step <= u32::MAX` (the host
    /// bounds sizes; see `core_ops::gpu::MAX_ELEMENTS`), otherwise the loop would not terminate.
    pub fn for_range(
        &mut self,
        start: impl Operand<U32>,
        end: impl Operand<U32>,
        step: impl Operand<U32>,
        body: impl FnOnce(&mut Self, Reg<U32>, &Label),
    ) {
        self.for_range_with(LoopBranch::Divergent, start, end, step, body);
    }

    /// [`KernelBuilder::for_range`] with its branches emitted as `branch` says.
    pub fn for_range_with(
        &mut self,
        branch: LoopBranch,
        start: impl Operand<U32>,
        end: impl Operand<U32>,
        step: impl Operand<U32>,
        body: impl FnOnce(&mut Self, Reg<U32>, &Label),
    ) {
        let i = self.mov::<U32>(start);
        let end_r = self.mov::<U32>(end);
        let step_r = self.mov::<U32>(step);
        let (top, exit) = match branch {
            LoopBranch::Divergent => ("loop", "loop_end"),
            LoopBranch::Uniform => ("ufor", "ufor_end"),
        };
        let top = self.label(top);
        let exit = self.label(exit);
        self.place(&top);
        let done = self.setp(Cmp::Ge, i, end_r);
        self.branch_if(branch, done, &exit);
        body(self, i, &exit);
        let next = self.add(i, step_r);
        self.mov_to(i, next);
        self.branch(branch, &top);
        self.place(&exit);
    }

    /// A loop that runs until the body branches to the break label; the body also gets the
    /// continue label (the top of the loop).
    pub fn loop_forever(&mut self, body: impl FnOnce(&mut Self, &Label, &Label)) {
        self.loop_with(LoopBranch::Divergent, body);
    }

    /// [`KernelBuilder::loop_forever`] with its back branch emitted as `branch` says (the body
    /// picks its own break branches, e.g. [`KernelBuilder::bra_uni_if`] in a uniform loop).
    pub fn loop_with(&mut self, branch: LoopBranch, body: impl FnOnce(&mut Self, &Label, &Label)) {
        let (top, exit) = match branch {
            LoopBranch::Divergent => ("loop", "loop_end"),
            LoopBranch::Uniform => ("uloop", "uloop_end"),
        };
        let top = self.label(top);
        let exit = self.label(exit);
        self.place(&top);
        body(self, &exit, &top);
        self.branch(branch, &top);
        self.place(&exit);
    }

    fn branch(&mut self, branch: LoopBranch, label: &Label) {
        match branch {
            LoopBranch::Divergent => self.bra(label),
            LoopBranch::Uniform => self.bra_uni(label),
        }
    }

    fn branch_if(&mut self, branch: LoopBranch, p: Reg<Pred>, label: &Label) {
        self.when(p, |b| b.branch(branch, label));
    }
}
