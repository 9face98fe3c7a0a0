//! Arithmetic and comparison instructions (conversions: `convert.rs`).
//!
//! Float `add`/`sub`/`mul` are emitted with `.rn`, which both fixes the rounding and forbids
//! ptxas from contracting them into an FMA: results then match a CPU doing the same operations.
//! Fused multiply-add is explicit ([`KernelBuilder::fma`]).

use super::kernel::KernelBuilder;
use super::reg::{Operand, Reg};
use super::target::PtxVersion;
use super::types::*;

pub(super) fn is_float<T: PtxType>() -> bool {
    matches!(T::NAME, "f32" | "f64" | "f16")
}

/// Comparison operators for `setp`. The `*u` forms and `Num`/`Nan` are for floats only
/// (true when either operand is NaN / when neither / when either is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `a == b` (ordered for floats: false when either is NaN).
    Eq,
    /// `a != b` (ordered for floats).
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `a == b` or either is NaN (floats only).
    Equ,
    /// `a != b` or either is NaN (floats only).
    Neu,
    /// `a < b` or either is NaN (floats only).
    Ltu,
    /// `a <= b` or either is NaN (floats only).
    Leu,
    /// `a > b` or either is NaN (floats only).
    Gtu,
    /// `a >= b` or either is NaN (floats only).
    Geu,
    /// Neither operand is NaN (floats only).
    Num,
    /// Either operand is NaN (floats only).
    Nan,
}

impl Cmp {
    fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Equ => "equ",
            Cmp::Neu => "neu",
            Cmp::Ltu => "ltu",
            Cmp::Leu => "leu",
            Cmp::Gtu => "gtu",
            Cmp::Geu => "geu",
            Cmp::Num => "num",
            Cmp::Nan => "nan",
        }
    }
    fn float_only(self) -> bool {
        !matches!(
            self,
            Cmp::Eq | Cmp::Ne | Cmp::Lt | Cmp::Le | Cmp::Gt | Cmp::Ge
        )
    }
}

impl KernelBuilder {
    fn op2<T: PtxType>(&mut self, op: &str, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!("{op}.{} {d}, {}, {}", T::NAME, a.ptx(), b.ptx()));
        d
    }

    fn op1<T: PtxType>(&mut self, op: &str, a: impl Operand<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!("{op}.{} {d}, {}", T::NAME, a.ptx()));
        d
    }

    /// `add` (floats: `add.rn`).
    pub fn add<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2(if is_float::<T>() { "add.rn" } else { "add" }, a, b)
    }

    /// `sub` (floats: `sub.rn`).
    pub fn sub<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2(if is_float::<T>() { "sub.rn" } else { "sub" }, a, b)
    }

    /// `mul` (integers: low half, `mul.lo`; floats: `mul.rn`).
    pub fn mul<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2(if is_float::<T>() { "mul.rn" } else { "mul.lo" }, a, b)
    }

    /// `mul.hi`: the high half of an integer product.
    pub fn mul_hi<T: Int>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2("mul.hi", a, b)
    }

    /// `mul.wide.u32`: the full 64-bit product of two u32 (byte offsets from indices).
    pub fn mul_wide(&mut self, a: impl Operand<U32>, b: impl Operand<U32>) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.instr(format!("mul.wide.u32 {d}, {}, {}", a.ptx(), b.ptx()));
        d
    }

    /// `mad.lo`: integer `a * b + c`.
    pub fn mad<T: Int>(
        &mut self,
        a: impl Operand<T>,
        b: impl Operand<T>,
        c: impl Operand<T>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "mad.lo.{} {d}, {}, {}, {}",
            T::NAME,
            a.ptx(),
            b.ptx(),
            c.ptx()
        ));
        d
    }

    /// `mad.wide.u32`: `a * b + c` with a u64 addend and result (address arithmetic).
    pub fn mad_wide(
        &mut self,
        a: impl Operand<U32>,
        b: impl Operand<U32>,
        c: impl Operand<U64>,
    ) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.instr(format!(
            "mad.wide.u32 {d}, {}, {}, {}",
            a.ptx(),
            b.ptx(),
            c.ptx()
        ));
        d
    }

    /// `fma.rn`: fused `a * b + c` with one rounding.
    pub fn fma<T: Float>(
        &mut self,
        a: impl Operand<T>,
        b: impl Operand<T>,
        c: impl Operand<T>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "fma.rn.{} {d}, {}, {}, {}",
            T::NAME,
            a.ptx(),
            b.ptx(),
            c.ptx()
        ));
        d
    }

    /// `div` (integers truncate; floats `div.rn`, IEEE correctly rounded).
    pub fn div<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2(if is_float::<T>() { "div.rn" } else { "div" }, a, b)
    }

    /// `div.approx.f32`: fast division (2 ulp), for where exactness does not matter.
    pub fn div_approx(&mut self, a: impl Operand<F32>, b: impl Operand<F32>) -> Reg<F32> {
        self.op2("div.approx", a, b)
    }

    /// `rem`: integer remainder.
    pub fn rem<T: Int>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2("rem", a, b)
    }

    /// `min` (floats: NaN-avoiding, as PTX defines it).
    pub fn min<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2("min", a, b)
    }

    /// `max`.
    pub fn max<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.op2("max", a, b)
    }

    /// `abs` (signed integers and floats).
    pub fn abs<T: Num>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.ensure(
            T::NAME.starts_with('s') || is_float::<T>(),
            "abs",
            "abs needs a signed or float type",
        );
        self.op1("abs", a)
    }

    /// `neg` (signed integers and floats).
    pub fn neg<T: Num>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.ensure(
            T::NAME.starts_with('s') || is_float::<T>(),
            "neg",
            "neg needs a signed or float type",
        );
        self.op1("neg", a)
    }

    /// `rcp.rn`: correctly rounded reciprocal.
    pub fn rcp<T: Float>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.op1("rcp.rn", a)
    }

    /// Approximate reciprocal (`rcp.approx.f32`, `rcp.approx.ftz.f64`).
    pub fn rcp_approx<T: Float>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.op1(
            if T::BITS == 64 {
                "rcp.approx.ftz"
            } else {
                "rcp.approx"
            },
            a,
        )
    }

    /// `rcp.approx.ftz.f32`: one SFU instruction, subnormals flushed to zero.
    pub fn rcp_approx_ftz(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("rcp.approx.ftz", a)
    }

    /// `sqrt.rn`: correctly rounded square root.
    pub fn sqrt<T: Float>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.op1("sqrt.rn", a)
    }

    /// `sqrt.approx.f32`.
    pub fn sqrt_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("sqrt.approx", a)
    }

    /// `rsqrt.approx` (f32 and f64; PTX has no exact form).
    pub fn rsqrt<T: Float>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.op1("rsqrt.approx", a)
    }

    /// `sin.approx.f32` (PTX has no exact sine; absolute error about 2^-20.9 in [-pi, pi]).
    pub fn sin_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("sin.approx", a)
    }

    /// `cos.approx.f32`.
    pub fn cos_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("cos.approx", a)
    }

    /// `ex2.approx.f32`: 2^a.
    pub fn ex2_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("ex2.approx", a)
    }

    /// `ex2.approx.ftz.f32`: 2^a with subnormal inputs and results flushed to zero. One SFU
    /// instruction (the non-`ftz` form adds a rescaling sequence for subnormal results); a
    /// result below 2^-126 comes back as exactly 0.
    pub fn ex2_approx_ftz(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("ex2.approx.ftz", a)
    }

    /// `lg2.approx.f32`: log2(a).
    pub fn lg2_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        self.op1("lg2.approx", a)
    }

    /// e^a for f32 through `ex2.approx` (a * log2 e first).
    pub fn exp_approx(&mut self, a: impl Operand<F32>) -> Reg<F32> {
        let t = self.mul(a, std::f32::consts::LOG2_E);
        self.ex2_approx(t)
    }

    /// `setp`: compares `a` with `b` into a predicate.
    pub fn setp<T: Num>(&mut self, cmp: Cmp, a: impl Operand<T>, b: impl Operand<T>) -> Reg<Pred> {
        self.ensure(
            is_float::<T>() || !cmp.float_only(),
            &format!("setp.{}.{}", cmp.name(), T::NAME),
            &format!(
                "comparison {cmp:?} is for floats only (NaN-aware); on integers use Eq, Ne, Lt, \
                 Le, Gt or Ge (the type decides signedness)"
            ),
        );
        let d = self.reg::<Pred>();
        self.instr(format!(
            "setp.{}.{} {d}, {}, {}",
            cmp.name(),
            T::NAME,
            a.ptx(),
            b.ptx()
        ));
        d
    }

    /// `selp`: `if p { a } else { b }`.
    pub fn selp<T: Num>(&mut self, a: impl Operand<T>, b: impl Operand<T>, p: Reg<Pred>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "selp.{} {d}, {}, {}, {p}",
            T::NAME,
            a.ptx(),
            b.ptx()
        ));
        d
    }

    /// Records the ISA needs of an instruction family (used by the warp and atomic helpers).
    pub(crate) fn need(&mut self, sm: u32, major: u32, minor: u32) {
        self.require(sm, PtxVersion(major, minor));
    }
}
