//! The interpreter's pre-resolved instruction form.

/// An operand: register index, immediate, or special register.
#[derive(Clone, Copy, Debug)]
pub(crate) enum V {
    R(usize),
    I(u64),
    Sp(Sp),
}

/// Special registers (`%tid.x` ...); the `u8` is the dimension 0..3.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sp {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    /// `%clock`, `%clock64`: always 0 (the interpreter has no time; spin-loop time-outs never
    /// fire).
    Clock,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
}

/// The value class of an instruction's type suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    U,
    S,
    F,
    B,
    Pred,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ty {
    pub kind: Kind,
    pub bits: u32,
}

pub(crate) fn ty_of(s: &str) -> Option<Ty> {
    let (kind, bits) = match s {
        "pred" => {
            return Some(Ty {
                kind: Kind::Pred,
                bits: 1,
            })
        }
        _ if s.len() >= 2 => (
            match &s[..1] {
                "u" => Kind::U,
                "s" => Kind::S,
                "f" => Kind::F,
                "b" => Kind::B,
                _ => return None,
            },
            s[1..].parse::<u32>().ok()?,
        ),
        _ => return None,
    };
    matches!(bits, 8 | 16 | 32 | 64).then_some(Ty { kind, bits })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    Near,
    Zero,
    Down,
    Up,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Mov,
    Pack,
    Unpack,
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    MadLo,
    MadWide,
    Fma,
    Div,
    Rem,
    Min,
    Max,
    Neg,
    Abs,
    Rcp,
    Sqrt,
    Rsqrt,
    Ex2,
    Lg2,
    Sin,
    Cos,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Brev,
    Clz,
    Popc,
    Prmt,
    /// `prmt.b32.f4e`: 4 bytes from byte `c & 3` of {b, a}.
    PrmtF4e,
    Bfe,
    /// `bmsk.clamp` (`wrap`: false) or `bmsk.wrap`.
    Bmsk {
        wrap: bool,
    },
    Setp(Cmp),
    Selp,
    Cvt {
        from: Ty,
        round: Option<Round>,
        int_round: bool,
    },
    Cvta,
    Ld {
        space: Space,
        bytes: u32,
        vec: usize,
    },
    St {
        space: Space,
        bytes: u32,
        vec: usize,
    },
    AtomAdd {
        space: Space,
        ret: bool,
    },
    /// `cp.async` of 16 bytes, global `s[0]` to shared `addr`: copied when issued (the
    /// interpreter runs each access whole), so `cp.async.wait_all` is a no-op.
    CpAsync16,
    /// `atom.or` / `atom.and` (`or` false) on `.b32`/`.b64`.
    AtomBits {
        space: Space,
        ret: bool,
        or: bool,
    },
    Shfl(ShflMode),
    Ballot,
    VoteAny,
    VoteAll,
    MatchAny,
    /// `mma.sync.aligned.m8n8k4` (`rows` 1) or `.m16n8k4` (`rows` 2) `.row.col.f64`: d = the
    /// 2 `rows` accumulators, s = the `rows` A values, B, then the 2 `rows` C values.
    MmaF64 {
        rows: usize,
    },
    BarSync,
    BarWarp,
    Nop,
    Bra(usize),
    Ret,
    LdParam(usize),
}

#[derive(Clone, Debug)]
pub(crate) struct Instr {
    pub guard: Option<(usize, bool)>,
    pub op: Op,
    pub ty: Ty,
    pub d: Vec<usize>,
    pub s: Vec<V>,
    pub addr: Option<(V, i64)>,
    pub line: usize,
}
