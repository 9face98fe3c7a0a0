//! A kernel's launch contract: its parameters (names and PTX types, pointers with their element
//! type where the builder knows it) and its block-shape bounds (`.reqntid`/`.maxntid`) and whether
//! it uses dynamic shared memory. The builder records it while the kernel is written
//! ([`Kernel::signature`](super::Kernel::signature)); [`Signature::from_ptx`] recovers the same
//! contract from emitted PTX text (pointer element types aside, which PTX does not state), so a
//! kernel embedded as text is checked exactly like one built at run time.

use std::fmt;

/// A scalar PTX type as it appears in a parameter or a pointer's element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// `.u8` (pointer elements only).
    U8,
    /// `.s8` (pointer elements only).
    S8,
    /// `.u16`
    U16,
    /// `.s16`
    S16,
    /// `.u32`
    U32,
    /// `.s32`
    S32,
    /// `.u64`
    U64,
    /// `.s64`
    S64,
    /// `.f16`
    F16,
    /// `.f32`
    F32,
    /// `.f64`
    F64,
}

impl ScalarType {
    /// The PTX spelling without the dot (`u32`).
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::U8 => "u8",
            ScalarType::S8 => "s8",
            ScalarType::U16 => "u16",
            ScalarType::S16 => "s16",
            ScalarType::U32 => "u32",
            ScalarType::S32 => "s32",
            ScalarType::U64 => "u64",
            ScalarType::S64 => "s64",
            ScalarType::F16 => "f16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }

    /// Parses a PTX type name (`u32`, `.f64`, `b32` as `u32`); `None` for anything else.
    pub fn parse(s: &str) -> Option<ScalarType> {
        Some(match s.trim_start_matches('.') {
            "u8" | "b8" => ScalarType::U8,
            "s8" => ScalarType::S8,
            "u16" | "b16" => ScalarType::U16,
            "s16" => ScalarType::S16,
            "u32" | "b32" => ScalarType::U32,
            "s32" => ScalarType::S32,
            "u64" | "b64" => ScalarType::U64,
            "s64" => ScalarType::S64,
            "f16" => ScalarType::F16,
            "f32" => ScalarType::F32,
            "f64" => ScalarType::F64,
            _ => return None,
        })
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            ScalarType::U8 | ScalarType::S8 => 1,
            ScalarType::U16 | ScalarType::S16 | ScalarType::F16 => 2,
            ScalarType::U32 | ScalarType::S32 | ScalarType::F32 => 4,
            ScalarType::U64 | ScalarType::S64 | ScalarType::F64 => 8,
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of one kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// A value of this type (`.param .u32 n`).
    Scalar(ScalarType),
    /// A global-memory pointer to elements of this type (emitted as `.param .u64`; declared with
    /// [`KernelBuilder::global_arg`](super::KernelBuilder::global_arg)).
    GlobalPtr(ScalarType),
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamType::Scalar(t) => write!(f, "{t}"),
            ParamType::GlobalPtr(t) => write!(f, "pointer to {t}"),
        }
    }
}

/// One parameter: its name as declared (without the `<kernel>_param_` prefix) and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSig {
    /// The name given to the builder (`x` for `saxpy_param_x`).
    pub name: String,
    /// Its type.
    pub ty: ParamType,
}

/// A kernel's launch contract (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Entry point name.
    pub name: String,
    /// Parameters in declaration order.
    pub params: Vec<ParamSig>,
    /// `.reqntid`: the exact block shape every launch must use.
    pub reqntid: Option<[u32; 3]>,
    /// `.maxntid`: the most threads (x*y*z) a block may have.
    pub maxntid: Option<[u32; 3]>,
    /// Whether the kernel declares dynamic (`.extern`) shared memory, sized at launch.
    pub dynamic_shared: bool,
}

impl Signature {
    /// Checks a block shape and dynamic shared size against the contract; the error says why.
    pub fn check_block(&self, block: (u32, u32, u32), dyn_shared_bytes: u32) -> Result<(), String> {
        let (x, y, z) = block;
        let threads = u64::from(x) * u64::from(y) * u64::from(z);
        if threads == 0 {
            return Err(format!("block ({x}, {y}, {z}) has no threads"));
        }
        if let Some([rx, ry, rz]) = self.reqntid {
            if (x, y, z) != (rx, ry, rz) {
                return Err(format!(
                    "block ({x}, {y}, {z}) but the kernel requires .reqntid {rx}, {ry}, {rz}"
                ));
            }
        }
        if let Some([mx, my, mz]) = self.maxntid {
            let most = u64::from(mx) * u64::from(my) * u64::from(mz);
            if threads > most {
                return Err(format!(
                    "block ({x}, {y}, {z}) has {threads} threads, above .maxntid {mx}, {my}, {mz}"
                ));
            }
        }
        if dyn_shared_bytes > 0 && !self.dynamic_shared {
            return Err(format!(
                "{dyn_shared_bytes} B of dynamic shared memory given but the kernel declares none"
            ));
        }
        Ok(())
    }

    /// The contract of entry `entry` in PTX text (one kernel per module for the dynamic-shared
    /// flag, which is module-scope). Pointer parameters come back as `Scalar(U64)`.
    pub fn from_ptx(ptx: &str, entry: &str) -> Result<Signature, String> {
        let head = format!(".entry {entry}(");
        let start = ptx
            .find(&head)
            .ok_or_else(|| format!("no `.entry {entry}` in the PTX"))?;
        let rest = &ptx[start + head.len()..];
        let close = rest
            .find(')')
            .ok_or_else(|| format!("unterminated parameter list of `{entry}`"))?;
        let prefix = format!("{entry}_param_");
        let mut params = Vec::new();
        for decl in rest[..close].split(',') {
            let decl = decl.trim();
            if decl.is_empty() {
                continue;
            }
            let words: Vec<&str> = decl.split_whitespace().collect();
            let (ty, name) = match words.as_slice() {
                [".param", ty, .., name] => (*ty, *name),
                _ => return Err(format!("unrecognised parameter `{decl}` of `{entry}`")),
            };
            let ty = ScalarType::parse(ty)
                .ok_or_else(|| format!("parameter `{name}` of `{entry}` has type `{ty}`"))?;
            params.push(ParamSig {
                name: name.strip_prefix(&prefix).unwrap_or(name).to_string(),
                ty: ParamType::Scalar(ty),
            });
        }
        let body_start = rest.find('{').unwrap_or(rest.len());
        let attrs = &rest[close..body_start];
        let dims = |key: &str| -> Option<[u32; 3]> {
            let line = attrs.lines().find(|l| l.trim_start().starts_with(key))?;
            let v: Vec<u32> = line.trim_start()[key.len()..]
                .split(',')
                .filter_map(|s| s.trim().parse().ok())
                .collect();
            Some([
                *v.first()?,
                v.get(1).copied().unwrap_or(1),
                v.get(2).copied().unwrap_or(1),
            ])
        };
        Ok(Signature {
            name: entry.to_string(),
            params,
            reqntid: dims(".reqntid"),
            maxntid: dims(".maxntid"),
            dynamic_shared: ptx.contains(".extern .shared"),
        })
    }
}
