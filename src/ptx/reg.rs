//! Typed registers and operands. A `Reg<T>` is only usable where a `T` is expected; immediates
//! are Rust literals of the matching type, printed deterministically (floats as hex bit patterns).

use super::types::*;
use std::fmt;
use std::marker::PhantomData;

/// Start and end of the owner tag a register prints with (never in emitted PTX).
pub(crate) const TAG_START: char = '\u{1}';
pub(crate) const TAG_END: char = '\u{2}';
/// Marks an address built from an out-of-bounds constant index (see `SharedArray::at`).
pub(crate) const TAG_OOB: char = '\u{3}';

/// A virtual register of PTX type `T`, emitted as its class prefix and index (`%f12`).
///
/// A register belongs to the builder that created it. Its `Display` form carries an invisible
/// owner tag that the builder strips when the text becomes an instruction; a register of another
/// builder is reported as an error at emit instead of reaching ptxas as an unknown symbol.
/// `Debug` prints the plain name.
pub struct Reg<T: PtxType> {
    pub(crate) idx: u32,
    pub(crate) owner: u32,
    _t: PhantomData<T>,
}

impl<T: PtxType> Reg<T> {
    pub(crate) fn new(idx: u32, owner: u32) -> Self {
        Reg {
            idx,
            owner,
            _t: PhantomData,
        }
    }

    /// The plain PTX name (`%f12`), without the owner tag.
    pub fn name(&self) -> String {
        format!("{}{}", T::PREFIX, self.idx)
    }
}

impl<T: PtxType> Clone for Reg<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: PtxType> Copy for Reg<T> {}

impl<T: PtxType> fmt::Display for Reg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TAG_START}{}{TAG_END}{}{}",
            self.owner,
            T::PREFIX,
            self.idx
        )
    }
}

impl<T: PtxType> fmt::Debug for Reg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", T::PREFIX, self.idx)
    }
}

/// Something that can stand as a source operand of type `T`: a register or an immediate.
pub trait Operand<T: PtxType> {
    /// The operand as PTX text.
    fn ptx(&self) -> String;
}

impl<T: PtxType> Operand<T> for Reg<T> {
    fn ptx(&self) -> String {
        self.to_string()
    }
}

impl<T: PtxType> Operand<T> for &Reg<T> {
    fn ptx(&self) -> String {
        self.to_string()
    }
}

macro_rules! imm_int {
    ($rust:ty, $ptx:ty) => {
        impl Operand<$ptx> for $rust {
            fn ptx(&self) -> String {
                self.to_string()
            }
        }
    };
}
imm_int!(u16, U16);
imm_int!(u32, U32);
imm_int!(i32, S32);
imm_int!(u64, U64);
imm_int!(i64, S64);

impl Operand<F32> for f32 {
    fn ptx(&self) -> String {
        format!("0f{:08X}", self.to_bits())
    }
}

impl Operand<F64> for f64 {
    fn ptx(&self) -> String {
        format!("0d{:016X}", self.to_bits())
    }
}

/// A memory address: a base (register or symbol) plus a constant byte offset, printed `[base+off]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addr {
    base: String,
    offset: i64,
}

impl Addr {
    /// The same address moved by `bytes`.
    pub fn off(&self, bytes: i64) -> Addr {
        Addr {
            base: self.base.clone(),
            offset: self.offset + bytes,
        }
    }

    pub(crate) fn symbol(name: &str) -> Addr {
        Addr {
            base: name.to_string(),
            offset: 0,
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            0 => write!(f, "[{}]", self.base),
            o if o > 0 => write!(f, "[{}+{}]", self.base, o),
            o => write!(f, "[{}+{}]", self.base, o), // PTX spells negative offsets `+-8`
        }
    }
}

impl From<Reg<U64>> for Addr {
    fn from(r: Reg<U64>) -> Addr {
        Addr {
            base: r.to_string(),
            offset: 0,
        }
    }
}

impl From<Reg<U32>> for Addr {
    /// 32-bit addresses are valid for the shared, local and param windows.
    fn from(r: Reg<U32>) -> Addr {
        Addr {
            base: r.to_string(),
            offset: 0,
        }
    }
}

/// A branch target; names come from the kernel's label generator and never collide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label(pub(crate) String);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
