//! Control flow: branches, structured `if`/loops built from the label generator, and `exit`.
//! Loop-carried values are ordinary registers updated with [`KernelBuilder::mov_to`].

use super::arith::Cmp;
use super::kernel::KernelBuilder;
use super::reg::{Label, Operand, Reg};
use super::types::*;

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
        self.guarded(p, false, |b| b.bra(label));
    }

    /// `@!p bra label`.
    pub fn bra_unless(&mut self, p: Reg<Pred>, label: &Label) {
        self.guarded(p, true, |b| b.bra(label));
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
    /// bounds sizes; see `ops::gpu::MAX_ELEMENTS`), otherwise the loop would not terminate.
    pub fn for_range(
        &mut self,
        start: impl Operand<U32>,
        end: impl Operand<U32>,
        step: impl Operand<U32>,
        body: impl FnOnce(&mut Self, Reg<U32>, &Label),
    ) {
        let i = self.mov::<U32>(start);
        let end_r = self.mov::<U32>(end);
        let step_r = self.mov::<U32>(step);
        let top = self.label("loop");
        let exit = self.label("loop_end");
        self.place(&top);
        let done = self.setp(Cmp::Ge, i, end_r);
        self.bra_if(done, &exit);
        body(self, i, &exit);
        let next = self.add(i, step_r);
        self.mov_to(i, next);
        self.bra(&top);
        self.place(&exit);
    }

    /// A loop that runs until the body branches to the break label; the body also gets the
    /// continue label (the top of the loop).
    pub fn loop_forever(&mut self, body: impl FnOnce(&mut Self, &Label, &Label)) {
        let top = self.label("loop");
        let exit = self.label("loop_end");
        self.place(&top);
        body(self, &exit, &top);
        self.bra(&top);
        self.place(&exit);
    }
}
