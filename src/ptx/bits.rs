//! Bitwise instructions: logic, shifts, bit-field extract/insert, population count, leading
//! zeros, byte permute. Logic ops take integer registers or predicates.

use super::kernel::KernelBuilder;
use super::reg::{Operand, Reg};
use super::types::*;

/// Types the logic ops accept: integers (as `.bN`) and predicates.
pub trait Logic: PtxType {}
impl Logic for Pred {}
impl Logic for U16 {}
impl Logic for U32 {}
impl Logic for S32 {}
impl Logic for U64 {}
impl Logic for S64 {}

impl KernelBuilder {
    fn logic2<T: Logic>(&mut self, op: &str, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "{op}.{} {d}, {}, {}",
            T::BITS_NAME,
            a.ptx(),
            b.ptx()
        ));
        d
    }

    /// `and` (integers or predicates).
    pub fn and<T: Logic>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.logic2("and", a, b)
    }

    /// `or`.
    pub fn or<T: Logic>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.logic2("or", a, b)
    }

    /// `xor`.
    pub fn xor<T: Logic>(&mut self, a: impl Operand<T>, b: impl Operand<T>) -> Reg<T> {
        self.logic2("xor", a, b)
    }

    /// `not`.
    pub fn not<T: Logic>(&mut self, a: impl Operand<T>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!("not.{} {d}, {}", T::BITS_NAME, a.ptx()));
        d
    }

    /// `shl` by a u32 amount.
    pub fn shl<T: Int>(&mut self, a: impl Operand<T>, by: impl Operand<U32>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!(
            "shl.{} {d}, {}, {}",
            T::BITS_NAME,
            a.ptx(),
            by.ptx()
        ));
        d
    }

    /// `shr`: logical for unsigned types, arithmetic for signed.
    pub fn shr<T: Int>(&mut self, a: impl Operand<T>, by: impl Operand<U32>) -> Reg<T> {
        let d = self.reg::<T>();
        self.instr(format!("shr.{} {d}, {}, {}", T::NAME, a.ptx(), by.ptx()));
        d
    }

    /// `bfe`: extract `len` bits starting at bit `pos` (sign-extended for signed types).
    pub fn bfe<T: Int>(
        &mut self,
        a: impl Operand<T>,
        pos: impl Operand<U32>,
        len: impl Operand<U32>,
    ) -> Reg<T> {
        self.ensure(T::BITS >= 32, "bfe", "bfe works on 32- and 64-bit values");
        let d = self.reg::<T>();
        self.instr(format!(
            "bfe.{} {d}, {}, {}, {}",
            T::NAME,
            a.ptx(),
            pos.ptx(),
            len.ptx()
        ));
        d
    }

    /// `bfi`: insert the low `len` bits of `a` into `b` at bit `pos`.
    pub fn bfi<T: Int>(
        &mut self,
        a: impl Operand<T>,
        b: impl Operand<T>,
        pos: impl Operand<U32>,
        len: impl Operand<U32>,
    ) -> Reg<T> {
        self.ensure(T::BITS >= 32, "bfi", "bfi works on 32- and 64-bit values");
        let d = self.reg::<T>();
        self.instr(format!(
            "bfi.{} {d}, {}, {}, {}, {}",
            T::BITS_NAME,
            a.ptx(),
            b.ptx(),
            pos.ptx(),
            len.ptx()
        ));
        d
    }

    /// `bmsk.clamp.b32`: `width` set bits from bit `pos` on (bits past 31 dropped; 0 when
    /// `pos >= 32` or `width == 0`; a `width` of 32 or more reaches bit 31). PTX ISA 7.6, sm_70.
    pub fn bmsk(&mut self, pos: impl Operand<U32>, width: impl Operand<U32>) -> Reg<U32> {
        self.require(70, super::target::PtxVersion(7, 6));
        let d = self.reg::<U32>();
        self.instr(format!(
            "bmsk.clamp.b32 {d}, {}, {}",
            pos.ptx(),
            width.ptx()
        ));
        d
    }

    /// `popc`: number of set bits.
    pub fn popc<T: Int>(&mut self, a: impl Operand<T>) -> Reg<U32> {
        self.ensure(T::BITS >= 32, "popc", "popc works on 32- and 64-bit values");
        let d = self.reg::<U32>();
        self.instr(format!("popc.{} {d}, {}", T::BITS_NAME, a.ptx()));
        d
    }

    /// `clz`: number of leading zero bits.
    pub fn clz<T: Int>(&mut self, a: impl Operand<T>) -> Reg<U32> {
        self.ensure(T::BITS >= 32, "clz", "clz works on 32- and 64-bit values");
        let d = self.reg::<U32>();
        self.instr(format!("clz.{} {d}, {}", T::BITS_NAME, a.ptx()));
        d
    }

    /// `brev`: bit reversal.
    pub fn brev<T: Int>(&mut self, a: impl Operand<T>) -> Reg<T> {
        self.ensure(T::BITS >= 32, "brev", "brev works on 32- and 64-bit values");
        let d = self.reg::<T>();
        self.instr(format!("brev.{} {d}, {}", T::BITS_NAME, a.ptx()));
        d
    }

    /// Index of the lowest set bit of a u32 (32 when zero): `brev` then `bfind.shiftamt`.
    pub fn ffs(&mut self, a: Reg<U32>) -> Reg<U32> {
        let r = self.brev::<U32>(a);
        let d = self.reg::<U32>();
        self.instr(format!("bfind.shiftamt.u32 {d}, {r}"));
        // bfind returns 0xffffffff for zero input; map it to 32.
        let z = self.setp::<U32>(super::arith::Cmp::Eq, d, u32::MAX);
        self.selp::<U32>(32u32, d, z)
    }

    /// `prmt.b32.f4e`: the 4 bytes of {b, a} from byte `c & 3` on (forward 4 extract; only
    /// the low two bits of `c` count, so an unaligned address can serve as the selector).
    pub fn prmt_f4e(
        &mut self,
        a: impl Operand<U32>,
        b: impl Operand<U32>,
        c: impl Operand<U32>,
    ) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.instr(format!(
            "prmt.b32.f4e {d}, {}, {}, {}",
            a.ptx(),
            b.ptx(),
            c.ptx()
        ));
        d
    }

    /// `prmt.b32`: byte permute of the 8 bytes {b, a} by selector `c`.
    pub fn prmt(
        &mut self,
        a: impl Operand<U32>,
        b: impl Operand<U32>,
        c: impl Operand<U32>,
    ) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.instr(format!(
            "prmt.b32 {d}, {}, {}, {}",
            a.ptx(),
            b.ptx(),
            c.ptx()
        ));
        d
    }
}
