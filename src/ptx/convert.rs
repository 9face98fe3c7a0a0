//! Conversions: `cvt` (C's cast roundings or an explicit one), bit casts, and packing of 64-bit
//! registers from 32-bit halves.

use super::arith::is_float;
use super::kernel::KernelBuilder;
use super::reg::Reg;
use super::types::*;

/// Rounding for conversions that need one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Float result, round to nearest even.
    Rn,
    /// Float result, toward zero.
    Rz,
    /// Integer result, round to nearest even integer.
    Rni,
    /// Integer result, toward zero (C's cast).
    Rzi,
    /// Integer result, toward minus infinity (floor).
    Rmi,
    /// Integer result, toward plus infinity (ceil).
    Rpi,
}

impl Round {
    fn name(self) -> &'static str {
        match self {
            Round::Rn => ".rn",
            Round::Rz => ".rz",
            Round::Rni => ".rni",
            Round::Rzi => ".rzi",
            Round::Rmi => ".rmi",
            Round::Rpi => ".rpi",
        }
    }
}

impl KernelBuilder {
    /// `cvt` with the rounding C's casts use: float->int truncates (`.rzi`), int->float and
    /// float narrowing round to nearest (`.rn`), widening needs none.
    pub fn cvt<D: PtxType, S: PtxType>(&mut self, a: Reg<S>) -> Reg<D> {
        self.ensure(D::NAME != S::NAME, "cvt", "cvt between identical types");
        let round = match (is_float::<D>(), is_float::<S>()) {
            (false, true) => Some(Round::Rzi),
            (true, false) => Some(Round::Rn),
            (true, true) if D::BITS < S::BITS => Some(Round::Rn),
            _ => None,
        };
        self.cvt_emit(round, a)
    }

    /// `cvt` with an explicit rounding mode.
    pub fn cvt_round<D: PtxType, S: PtxType>(&mut self, round: Round, a: Reg<S>) -> Reg<D> {
        self.cvt_emit(Some(round), a)
    }

    fn cvt_emit<D: PtxType, S: PtxType>(&mut self, round: Option<Round>, a: Reg<S>) -> Reg<D> {
        self.ensure(
            D::BITS > 1 && S::BITS > 1,
            "cvt_emit",
            "cvt does not take predicates; use selp",
        );
        let d = self.reg::<D>();
        let r = round.map(Round::name).unwrap_or("");
        self.instr(format!("cvt{r}.{}.{} {d}, {a}", D::NAME, S::NAME));
        d
    }

    /// Reinterprets the bits of a same-width register (`mov.b32 %r, %f`).
    pub fn bitcast<D: PtxType, S: PtxType>(&mut self, a: Reg<S>) -> Reg<D> {
        self.ensure(D::BITS == S::BITS, "bitcast", "bitcast needs equal widths");
        let d = self.reg::<D>();
        self.instr(format!("mov.{} {d}, {a}", D::BITS_NAME));
        d
    }

    /// Splits a 64-bit register into (low, high) 32-bit halves.
    pub fn unpack64<S: PtxType>(&mut self, a: Reg<S>) -> (Reg<U32>, Reg<U32>) {
        self.ensure(
            S::BITS == 64,
            "unpack64",
            "unpack64 needs a 64-bit register",
        );
        let (lo, hi) = (self.reg::<U32>(), self.reg::<U32>());
        self.instr(format!("mov.b64 {{{lo}, {hi}}}, {a}"));
        (lo, hi)
    }

    /// Joins (low, high) 32-bit halves into a 64-bit register.
    pub fn pack64<D: PtxType>(&mut self, lo: Reg<U32>, hi: Reg<U32>) -> Reg<D> {
        self.ensure(D::BITS == 64, "pack64", "pack64 needs a 64-bit result");
        let d = self.reg::<D>();
        self.instr(format!("mov.b64 {d}, {{{lo}, {hi}}}"));
        d
    }
}
