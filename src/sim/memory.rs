//! The interpreter's global memory (named buffers at fake, far-apart device addresses) and its
//! kernel arguments.

use super::parse::{Space, SHARED_BASE};
use super::SimError;
use crate::ptx::ScalarType;

/// Distance between buffer base addresses (so an overrun never lands in the next buffer).
const STRIDE: u64 = 0x1_0000_0000;

/// Global memory: named buffers.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    bufs: Vec<(String, u64, Vec<u8>)>,
}

/// Element types [`Memory::upload`] and [`Memory::download`] convert (little-endian bytes).
pub trait SimElem: Copy {
    /// Size in bytes.
    const BYTES: usize;
    /// PTX element type (for argument checks).
    const TYPE: ScalarType;
    /// Appends the little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// Reads from exactly `BYTES` little-endian bytes.
    fn get(b: &[u8]) -> Self;
}

macro_rules! sim_elem {
    ($($t:ty => $s:ident),+) => {$(
        impl SimElem for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            const TYPE: ScalarType = ScalarType::$s;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )+};
}
sim_elem!(u8 => U8, i8 => S8, u16 => U16, i16 => S16, u32 => U32, i32 => S32, u64 => U64,
    i64 => S64, f32 => F32, f64 => F64);

/// One kernel argument for [`Program::run`](super::Program::run).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A buffer's device address (from [`Memory::upload`]), of elements of this type (`None`
    /// when added as raw bytes).
    Buffer(u64, Option<ScalarType>),
    /// `.u16` (or the bits of an `.f16`).
    U16(u16),
    /// `.u32`
    U32(u32),
    /// `.s32`
    S32(i32),
    /// `.u64` (also a raw address)
    U64(u64),
    /// `.s64`
    S64(i64),
    /// `.f32`
    F32(f32),
    /// `.f64`
    F64(f64),
}

impl Arg {
    /// The parameter's bits as the kernel reads them.
    pub fn bits(self) -> u64 {
        match self {
            Arg::Buffer(a, _) | Arg::U64(a) => a,
            Arg::U16(v) => u64::from(v),
            Arg::U32(v) => u64::from(v),
            Arg::S32(v) => v as u32 as u64,
            Arg::S64(v) => v as u64,
            Arg::F32(v) => u64::from(v.to_bits()),
            Arg::F64(v) => v.to_bits(),
        }
    }

    /// Whether this argument fits a parameter of PTX type `t` (buffers and `u64` fit `.u64`).
    pub fn fits(self, t: ScalarType) -> bool {
        use ScalarType as S;
        matches!(
            (self, t),
            (Arg::Buffer(..) | Arg::U64(_), S::U64)
                | (Arg::U16(_), S::U16 | S::F16)
                | (Arg::U32(_), S::U32)
                | (Arg::S32(_), S::S32)
                | (Arg::S64(_), S::S64)
                | (Arg::F32(_), S::F32)
                | (Arg::F64(_), S::F64)
        )
    }
}

impl Memory {
    /// Empty memory.
    pub fn new() -> Self {
        Memory { bufs: Vec::new() }
    }

    /// Adds a buffer of raw bytes and returns its device address (256-byte aligned, like
    /// cuMemAlloc).
    pub fn add(&mut self, name: &str, data: Vec<u8>) -> u64 {
        let base = STRIDE * (self.bufs.len() as u64 + 1);
        self.bufs.push((name.to_string(), base, data));
        base
    }

    /// Adds a buffer holding `data`; the returned argument carries its element type.
    pub fn upload<T: SimElem>(&mut self, name: &str, data: &[T]) -> Arg {
        let mut bytes = Vec::with_capacity(data.len() * T::BYTES);
        for &v in data {
            v.put(&mut bytes);
        }
        Arg::Buffer(self.add(name, bytes), Some(T::TYPE))
    }

    /// A buffer's bytes.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.bufs
            .iter()
            .find(|b| b.0 == name)
            .map(|b| b.2.as_slice())
    }

    /// A buffer's contents as `T`s (trailing bytes short of a whole element are left out).
    pub fn download<T: SimElem>(&self, name: &str) -> Option<Vec<T>> {
        let b = self.get(name)?;
        Some(b.chunks_exact(T::BYTES).map(T::get).collect())
    }

    pub(crate) fn locate(&mut self, addr: u64, n: u64) -> Result<&mut [u8], String> {
        for (name, base, data) in &mut self.bufs {
            if addr >= *base && addr < *base + STRIDE {
                let off = addr - *base;
                if off + n > data.len() as u64 {
                    return Err(format!(
                        "global access of {n} B at {name}+{off} past its {} B",
                        data.len()
                    ));
                }
                return Ok(&mut data[off as usize..(off + n) as usize]);
            }
        }
        Err(format!("global access at {addr:#x} outside every buffer"))
    }
}

pub(crate) fn check_args(params: &[(String, ScalarType)], args: &[Arg]) -> Result<(), SimError> {
    let e = |problem: String| SimError {
        line: 0,
        instruction: String::new(),
        problem,
    };
    if params.len() != args.len() {
        return Err(e(format!(
            "{} arguments given, the kernel takes {}",
            args.len(),
            params.len()
        )));
    }
    for (i, ((name, t), a)) in params.iter().zip(args).enumerate() {
        if !a.fits(*t) {
            return Err(e(format!(
                "argument {i} ({name}) is {a:?}, the parameter is .{t}"
            )));
        }
    }
    Ok(())
}

/// The bytes at `addr..addr + n` in global memory or in the block's shared memory `sh`.
pub(crate) fn cell<'a>(
    space: Space,
    addr: u64,
    n: u64,
    sh: &'a mut [u8],
    mem: &'a mut Memory,
) -> Result<&'a mut [u8], String> {
    match space {
        Space::Global => mem.locate(addr, n),
        Space::Shared => {
            if addr < SHARED_BASE {
                return Err(format!(
                    "shared access at {addr:#x} below the shared window"
                ));
            }
            let off = (addr - SHARED_BASE) as usize;
            if off + n as usize > sh.len() {
                return Err(format!(
                    "shared access at +{off} past the {} B of the block",
                    sh.len()
                ));
            }
            Ok(&mut sh[off..off + n as usize])
        }
    }
}
