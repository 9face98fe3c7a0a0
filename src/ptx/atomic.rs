//! Atomics and reductions on global and shared memory. Float atomic min/max are compare-and-swap
//! loops, which run on every target we ship.

use super::kernel::KernelBuilder;
use super::mem::Space;
use super::reg::{Addr, Operand, Reg};
use super::types::*;

/// Atomic operations. `Add`, `Min`, `Max` follow the value type; `Exch` is bitwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomOp {
    /// `atom.add`.
    Add,
    /// `atom.min`.
    Min,
    /// `atom.max`.
    Max,
    /// `atom.exch`: store, returning the old value.
    Exch,
    /// `atom.and` (bitwise).
    And,
    /// `atom.or` (bitwise).
    Or,
    /// `atom.xor` (bitwise).
    Xor,
}

impl KernelBuilder {
    fn atom_type<T: Word>(op: AtomOp) -> &'static str {
        match op {
            AtomOp::Exch | AtomOp::And | AtomOp::Or | AtomOp::Xor => T::BITS_NAME,
            AtomOp::Add if T::NAME == "s64" => "u64",
            _ => T::NAME,
        }
    }

    fn atom_checks<T: Word>(&mut self, space: Space, op: AtomOp) -> &'static str {
        let sp = match space {
            Space::Global => "global",
            Space::Shared => "shared",
            other => {
                self.fail(
                    format!("atom/red on {other:?}"),
                    "atomics work on global or shared memory",
                );
                "global"
            }
        };
        let float = T::NAME.starts_with('f');
        self.ensure(
            !(float
                && matches!(
                    op,
                    AtomOp::Min | AtomOp::Max | AtomOp::And | AtomOp::Or | AtomOp::Xor
                )),
            "atom_checks",
            &format!("float atomic {op:?}: use atom_float"),
        );
        if float && T::BITS == 64 && op == AtomOp::Add {
            self.need(60, 5, 0);
        }
        sp
    }

    fn atom_name(op: AtomOp) -> &'static str {
        match op {
            AtomOp::Add => "add",
            AtomOp::Min => "min",
            AtomOp::Max => "max",
            AtomOp::Exch => "exch",
            AtomOp::And => "and",
            AtomOp::Or => "or",
            AtomOp::Xor => "xor",
        }
    }

    /// `atom.<space>.<op>`: returns the old value.
    pub fn atom<T: Word>(
        &mut self,
        space: Space,
        op: AtomOp,
        addr: impl Into<Addr>,
        v: impl Operand<T>,
    ) -> Reg<T> {
        let sp = self.atom_checks::<T>(space, op);
        let d = self.reg::<T>();
        let ty = Self::atom_type::<T>(op);
        self.instr(format!(
            "atom.{sp}.{}.{ty} {d}, {}, {}",
            Self::atom_name(op),
            addr.into(),
            v.ptx()
        ));
        d
    }

    /// `red.<space>.<op>`: an atomic update whose old value is not needed.
    pub fn red<T: Word>(
        &mut self,
        space: Space,
        op: AtomOp,
        addr: impl Into<Addr>,
        v: impl Operand<T>,
    ) {
        self.ensure(op != AtomOp::Exch, "red", "red has no exch; use atom");
        let sp = self.atom_checks::<T>(space, op);
        let ty = Self::atom_type::<T>(op);
        self.instr(format!(
            "red.{sp}.{}.{ty} {}, {}",
            Self::atom_name(op),
            addr.into(),
            v.ptx()
        ));
    }

    /// `atom.<space>.cas.bN`: stores `new` if the value equals `cmp`; returns the old value.
    pub fn atom_cas<T: Word>(
        &mut self,
        space: Space,
        addr: impl Into<Addr>,
        cmp: impl Operand<T>,
        new: impl Operand<T>,
    ) -> Reg<T> {
        let sp = self.atom_checks::<T>(space, AtomOp::Exch);
        let d = self.reg::<T>();
        self.instr(format!(
            "atom.{sp}.cas.{} {d}, {}, {}, {}",
            T::BITS_NAME,
            addr.into(),
            cmp.ptx(),
            new.ptx()
        ));
        d
    }

    /// [`KernelBuilder::atom_float`] with `max` choosing [`AtomOp::Max`] over [`AtomOp::Min`].
    pub fn atom_float_minmax<T: Word + Float + Num>(
        &mut self,
        space: Space,
        max: bool,
        addr: impl Into<Addr>,
        v: Reg<T>,
    ) -> Reg<T> {
        let op = if max { AtomOp::Max } else { AtomOp::Min };
        self.atom_float(space, op, addr, v)
    }

    /// Atomic float min or max (`op` is [`AtomOp::Min`] or [`AtomOp::Max`]; f32/f64) as a
    /// compare-and-swap loop; returns the old value. NaN inputs are ignored (PTX `min`/`max`
    /// semantics).
    pub fn atom_float<T: Word + Float + Num>(
        &mut self,
        space: Space,
        op: AtomOp,
        addr: impl Into<Addr>,
        v: Reg<T>,
    ) -> Reg<T> {
        self.ensure(
            matches!(op, AtomOp::Min | AtomOp::Max),
            "atom_float",
            &format!("float atomic {op:?}: only Min and Max are compare-and-swap loops"),
        );
        let max = op == AtomOp::Max;
        let addr = addr.into();
        let old = self.ld::<T>(
            if space == Space::Shared {
                Space::Shared
            } else {
                Space::Global
            },
            addr.clone(),
        );
        let top = self.label("fminmax");
        let done = self.label("fminmax_done");
        self.place(&top);
        let want = if max {
            self.max(old, v)
        } else {
            self.min(old, v)
        };
        // Compare bit patterns, not values: a NaN in memory must not loop forever.
        let same = self.reg::<Pred>();
        self.instr(format!("setp.eq.{} {same}, {want}, {old}", T::BITS_NAME));
        self.bra_if(same, &done);
        let seen = self.atom_cas(space, addr, old, want);
        let raced = self.reg::<Pred>();
        self.instr(format!("setp.ne.{} {raced}, {seen}, {old}", T::BITS_NAME));
        self.mov_to(old, seen);
        self.bra_if(raced, &top);
        self.place(&done);
        old
    }
}
