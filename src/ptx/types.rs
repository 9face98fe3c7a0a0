//! PTX register types as Rust marker types, so that mixing types in one instruction is a compile
//! error. Each marker names its PTX type, its register class (declaration prefix) and its width.
//!
//! 8-bit values have no register type of their own here: PTX allows `.u8` registers only in
//! `ld`/`st`/`cvt`, so byte loads and stores go through `U16`/`U32` registers (`ld.global.u8 %r`).

/// A PTX value type that can live in a register.
pub trait PtxType: Copy + Default + 'static {
    /// Instruction type suffix: `u32`, `f64`, `pred`.
    const NAME: &'static str;
    /// Bit-size suffix used by untyped instructions (`mov.b32`, `shfl.sync.*.b32`).
    const BITS_NAME: &'static str;
    /// Register name prefix; also identifies the register class in declarations.
    const PREFIX: &'static str;
    /// Width in bits (1 for predicates).
    const BITS: u32;
    /// Position of this class in the declaration order (fixed so output is deterministic).
    const CLASS: usize;
}

/// Integer types (arithmetic with `.lo` multiplies, bit operations).
pub trait Int: PtxType {
    /// Whether the type is signed (`.s32`) rather than unsigned (`.u32`, `.u64`).
    const SIGNED: bool;
}
/// Floating-point types (rounded arithmetic, transcendental ops).
pub trait Float: PtxType {}
/// Types with arithmetic (`add`, `sub`, `mul`, `min`, `max`).
pub trait Num: PtxType {}
/// 32-bit or 64-bit values that warp shuffles and atomics exchange.
pub trait Word: PtxType {}

macro_rules! ptx_type {
    ($name:ident, $ptx:literal, $bits_name:literal, $prefix:literal, $bits:literal, $class:literal) => {
        #[doc = concat!("The PTX `.", $ptx, "` type.")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;
        impl PtxType for $name {
            const NAME: &'static str = $ptx;
            const BITS_NAME: &'static str = $bits_name;
            const PREFIX: &'static str = $prefix;
            const BITS: u32 = $bits;
            const CLASS: usize = $class;
        }
    };
}

ptx_type!(Pred, "pred", "pred", "%p", 1, 0);
ptx_type!(U16, "u16", "b16", "%rh", 16, 1);
ptx_type!(U32, "u32", "b32", "%r", 32, 2);
ptx_type!(S32, "s32", "b32", "%rs", 32, 3);
ptx_type!(U64, "u64", "b64", "%rd", 64, 4);
ptx_type!(S64, "s64", "b64", "%rsd", 64, 5);
ptx_type!(F16, "f16", "b16", "%hf", 16, 6);
ptx_type!(F32, "f32", "b32", "%f", 32, 7);
ptx_type!(F64, "f64", "b64", "%fd", 64, 8);
ptx_type!(B32, "b32", "b32", "%b", 32, 9);

/// The type name `ld`/`st`/`mov` take for `T`: `.f16` registers move as `.b16`.
pub(crate) fn data_name<T: PtxType>() -> &'static str {
    if T::NAME == "f16" {
        "b16"
    } else {
        T::NAME
    }
}

/// Number of register classes (declaration slots).
pub const NUM_CLASSES: usize = 10;

/// Declaration type and prefix of each class, in declaration order.
pub const CLASS_DECLS: [(&str, &str); NUM_CLASSES] = [
    ("pred", "%p"),
    ("u16", "%rh"),
    ("u32", "%r"),
    ("s32", "%rs"),
    ("u64", "%rd"),
    ("s64", "%rsd"),
    ("f16", "%hf"),
    ("f32", "%f"),
    ("f64", "%fd"),
    ("b32", "%b"),
];

impl Int for U16 {
    const SIGNED: bool = false;
}
impl Int for U32 {
    const SIGNED: bool = false;
}
impl Int for S32 {
    const SIGNED: bool = true;
}
impl Int for U64 {
    const SIGNED: bool = false;
}
impl Int for S64 {
    const SIGNED: bool = true;
}
impl Float for F32 {}
impl Float for F64 {}
impl Num for U16 {}
impl Num for U32 {}
impl Num for S32 {}
impl Num for U64 {}
impl Num for S64 {}
impl Num for F32 {}
impl Num for F64 {}
impl Word for U32 {}
impl Word for S32 {}
impl Word for U64 {}
impl Word for S64 {}
impl Word for F32 {}
impl Word for F64 {}

/// Memory-only widths for byte and half-word loads/stores into wider integer registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Narrow {
    /// `.u8`
    U8,
    /// `.s8` (sign-extending load)
    S8,
    /// `.u16`
    U16,
    /// `.s16`
    S16,
}

impl Narrow {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Narrow::U8 => "u8",
            Narrow::S8 => "s8",
            Narrow::U16 => "u16",
            Narrow::S16 => "s16",
        }
    }
}
