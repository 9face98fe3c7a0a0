//! Parser of the modelled PTX subset into pre-resolved instructions (registers as indices,
//! symbols as shared-window addresses, labels as instruction indices). Anything outside the
//! subset is an error naming the line.

use super::SimError;
use crate::ptx::ScalarType;
use std::collections::HashMap;

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

fn ty_of(s: &str) -> Option<Ty> {
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
    Shfl(ShflMode),
    Ballot,
    VoteAny,
    VoteAll,
    MatchAny,
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

/// A parsed kernel, ready for [`launch`](super::launch).
#[derive(Clone, Debug)]
pub struct Program {
    pub(crate) instrs: Vec<Instr>,
    pub(crate) n_regs: usize,
    pub(crate) params: Vec<(String, ScalarType)>,
    pub(crate) text: Vec<String>,
    /// Bytes of static shared memory (laid out before the dynamic array).
    pub(crate) static_shared: u64,
}

/// Shared-window address of the first shared symbol (non-zero so a missing symbol base shows).
pub const SHARED_BASE: u64 = 0x400;

fn split_operands(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for ch in s.chars() {
        match ch {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(ch);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn err(line: usize, text: &str, problem: impl Into<String>) -> SimError {
    SimError {
        line: line + 1,
        instruction: text.trim().to_string(),
        problem: problem.into(),
    }
}

impl Program {
    /// Parses the first `.entry` of a PTX module; an error for any instruction outside the
    /// modelled subset (see the [module docs](super)).
    pub fn parse(ptx: &str) -> Result<Program, SimError> {
        let text: Vec<String> = ptx.lines().map(str::to_string).collect();
        let mut reg_base: HashMap<String, usize> = HashMap::new();
        let mut n_regs = 0;
        let mut params = Vec::new();
        let mut syms: HashMap<String, u64> = HashMap::new();
        let mut static_shared = 0u64;
        let mut dynamic: Option<String> = None;
        let mut labels = HashMap::new();
        let mut raw = Vec::new();
        let mut entries = 0;
        for (ln, line) in text.iter().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with("//") {
                continue;
            }
            if t.contains(".entry ") {
                entries += 1;
                if entries > 1 {
                    return Err(err(ln, t, "one kernel per module is modelled"));
                }
            }
            if let Some(rest) = t.strip_prefix(".reg ") {
                let name = rest.split_whitespace().nth(1).unwrap_or("");
                let Some((prefix, count)) = name.trim_end_matches(';').split_once('<') else {
                    return Err(err(ln, t, "register declarations are `%p<n>` ranges"));
                };
                let count: usize = count
                    .trim_end_matches('>')
                    .parse()
                    .map_err(|_| err(ln, t, "register count"))?;
                reg_base.insert(prefix.to_string(), n_regs);
                n_regs += count;
            } else if t.starts_with(".param ") {
                let words: Vec<&str> = t.split_whitespace().collect();
                let ty = words
                    .get(1)
                    .and_then(|w| ScalarType::parse(w))
                    .ok_or_else(|| err(ln, t, "parameter type"))?;
                let name = words.last().unwrap_or(&"").trim_end_matches(',');
                params.push((name.to_string(), ty));
            } else if t.starts_with(".extern .shared") {
                let name = sym_name(t);
                dynamic = Some(name);
            } else if t.starts_with(".shared") {
                let name = sym_name(t);
                let bytes: u64 = t
                    .rsplit_once('[')
                    .and_then(|(_, b)| b.trim_end_matches("];").parse().ok())
                    .ok_or_else(|| err(ln, t, "static shared arrays need a byte length"))?;
                syms.insert(name, SHARED_BASE + static_shared);
                static_shared += bytes.div_ceil(16) * 16;
            } else if t.starts_with(".local") || t.starts_with(".const") || t.starts_with(".global")
            {
                return Err(err(
                    ln,
                    t,
                    "local, const and global variables are not modelled",
                ));
            } else if t.ends_with(':') && !t.starts_with('.') {
                labels.insert(t.trim_end_matches(':').to_string(), raw.len());
            } else if t.ends_with(';') && !t.starts_with('.') {
                raw.push((ln, t.trim_end_matches(';').to_string()));
            }
        }
        if let Some(d) = dynamic {
            syms.insert(d, SHARED_BASE + static_shared);
        }
        let reg = |tok: &str, ln: usize, t: &str| -> Result<usize, SimError> {
            let body = tok.trim_start_matches('%');
            let split = body
                .find(|c: char| c.is_ascii_digit())
                .ok_or_else(|| err(ln, t, format!("operand `{tok}`")))?;
            let (p, n) = body.split_at(split);
            let base = reg_base
                .get(&format!("%{p}"))
                .ok_or_else(|| err(ln, t, format!("undeclared register `{tok}`")))?;
            let i: usize = n
                .parse()
                .map_err(|_| err(ln, t, format!("register `{tok}`")))?;
            Ok(base + i)
        };
        let val = |tok: &str, ln: usize, t: &str| -> Result<V, SimError> {
            let dim = |s: &str| match s {
                "x" => Some(0u8),
                "y" => Some(1),
                "z" => Some(2),
                _ => None,
            };
            if let Some((sp, d)) = tok.split_once('.') {
                if let Some(d) = dim(d) {
                    let s = match sp {
                        "%tid" => Some(Sp::Tid(d)),
                        "%ntid" => Some(Sp::Ntid(d)),
                        "%ctaid" => Some(Sp::Ctaid(d)),
                        "%nctaid" => Some(Sp::Nctaid(d)),
                        _ => None,
                    };
                    if let Some(s) = s {
                        return Ok(V::Sp(s));
                    }
                }
            }
            Ok(match tok {
                "%laneid" => V::Sp(Sp::LaneId),
                "%warpid" => V::Sp(Sp::WarpId),
                t2 if t2.starts_with('%') => V::R(reg(t2, ln, t)?),
                t2 if syms.contains_key(t2) => V::I(syms[t2]),
                t2 if t2.starts_with("0f") && t2.len() == 10 => V::I(
                    u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "f32 immediate"))?,
                ),
                t2 if t2.starts_with("0d") && t2.len() == 18 => V::I(
                    u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "f64 immediate"))?,
                ),
                t2 if t2.starts_with("0x") => V::I(
                    u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "hex immediate"))?,
                ),
                t2 if t2.starts_with('-') => V::I(
                    t2.parse::<i64>()
                        .map_err(|_| err(ln, t, format!("operand `{t2}`")))?
                        as u64,
                ),
                t2 => V::I(
                    t2.parse::<u64>()
                        .map_err(|_| err(ln, t, format!("unknown operand `{t2}`")))?,
                ),
            })
        };
        let addr = |tok: &str, ln: usize, t: &str| -> Result<(V, i64), SimError> {
            let inner = tok.trim_start_matches('[').trim_end_matches(']');
            match inner.split_once('+') {
                Some((b, o)) => Ok((
                    val(b, ln, t)?,
                    o.parse().map_err(|_| err(ln, t, "address offset"))?,
                )),
                None => Ok((val(inner, ln, t)?, 0)),
            }
        };
        let mut instrs = Vec::new();
        for (line, t) in &raw {
            let (line, t) = (*line, t.as_str());
            let (guard, body) = match t.strip_prefix('@') {
                Some(rest) => {
                    let (g, body) = rest.split_once(' ').ok_or_else(|| err(line, t, "guard"))?;
                    let neg = g.starts_with('!');
                    (Some((reg(g.trim_start_matches('!'), line, t)?, neg)), body)
                }
                None => (None, t),
            };
            let (opcode, ops) = body.split_once(' ').unwrap_or((body, ""));
            let ops = split_operands(ops);
            let parts: Vec<&str> = opcode.split('.').collect();
            let ty = parts.iter().rev().find_map(|p| ty_of(p)).unwrap_or(Ty {
                kind: Kind::B,
                bits: 32,
            });
            let mut ins = Instr {
                guard,
                op: Op::Nop,
                ty,
                d: vec![],
                s: vec![],
                addr: None,
                line,
            };
            let dst_src = |ins: &mut Instr, nd: usize| -> Result<(), SimError> {
                if ops.len() < nd {
                    return Err(err(line, t, "missing operands"));
                }
                ins.d = ops[..nd]
                    .iter()
                    .map(|o| reg(o, line, t))
                    .collect::<Result<_, _>>()?;
                ins.s = ops[nd..]
                    .iter()
                    .map(|o| val(o, line, t))
                    .collect::<Result<_, _>>()?;
                Ok(())
            };
            let unsupported = || err(line, t, format!("`{opcode}` is not modelled"));
            let op = |k: usize| -> Result<&str, SimError> {
                ops.get(k)
                    .map(String::as_str)
                    .ok_or_else(|| err(line, t, "missing operands"))
            };
            let has = |w: &str| parts.contains(&w);
            match parts[0] {
                "mov" if ops.first().is_some_and(|o| o.starts_with('{')) => {
                    ins.op = Op::Unpack;
                    let halves = split_operands(ops[0].trim_matches(|c| c == '{' || c == '}'));
                    ins.d = halves
                        .iter()
                        .map(|o| reg(o, line, t))
                        .collect::<Result<_, _>>()?;
                    ins.s = vec![val(op(1)?, line, t)?];
                }
                "mov" if ops.get(1).is_some_and(|o| o.starts_with('{')) => {
                    ins.op = Op::Pack;
                    ins.d = vec![reg(&ops[0], line, t)?];
                    let halves = split_operands(op(1)?.trim_matches(|c| c == '{' || c == '}'));
                    ins.s = halves
                        .iter()
                        .map(|o| val(o, line, t))
                        .collect::<Result<_, _>>()?;
                }
                "mov" | "add" | "sub" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor"
                | "not" | "shl" | "shr" | "selp" | "brev" | "clz" | "popc" | "prmt" | "cvta"
                | "neg" | "abs" | "rcp" | "sqrt" | "rsqrt" | "ex2" | "lg2" | "sin" | "cos"
                | "fma" => {
                    ins.op = match parts[0] {
                        "mov" => Op::Mov,
                        "add" => Op::Add,
                        "sub" => Op::Sub,
                        "div" => Op::Div,
                        "rem" => Op::Rem,
                        "min" => Op::Min,
                        "max" => Op::Max,
                        "and" => Op::And,
                        "or" => Op::Or,
                        "xor" => Op::Xor,
                        "not" => Op::Not,
                        "shl" => Op::Shl,
                        "shr" => Op::Shr,
                        "selp" => Op::Selp,
                        "brev" => Op::Brev,
                        "clz" => Op::Clz,
                        "popc" => Op::Popc,
                        "prmt" => Op::Prmt,
                        "neg" => Op::Neg,
                        "abs" => Op::Abs,
                        "rcp" => Op::Rcp,
                        "sqrt" => Op::Sqrt,
                        "rsqrt" => Op::Rsqrt,
                        "ex2" => Op::Ex2,
                        "lg2" => Op::Lg2,
                        "sin" => Op::Sin,
                        "cos" => Op::Cos,
                        "fma" => Op::Fma,
                        _ => Op::Cvta,
                    };
                    if matches!(ins.op, Op::Cvta) && !has("global") {
                        return Err(unsupported());
                    }
                    dst_src(&mut ins, 1)?;
                }
                "mul" | "mad" => {
                    let wide = has("wide");
                    ins.op = match (parts[0], wide, has("hi")) {
                        ("mul", false, true) => Op::MulHi,
                        ("mul", false, false) => Op::MulLo,
                        ("mul", true, _) => Op::MulWide,
                        ("mad", false, false) => Op::MadLo,
                        ("mad", true, _) => Op::MadWide,
                        _ => return Err(unsupported()),
                    };
                    if ins.ty.kind == Kind::F {
                        ins.op = if parts[0] == "mul" {
                            Op::MulLo
                        } else {
                            Op::Fma
                        };
                    }
                    dst_src(&mut ins, 1)?;
                }
                "setp" => {
                    ins.op = Op::Setp(match parts.get(1).copied().unwrap_or("") {
                        "eq" => Cmp::Eq,
                        "ne" => Cmp::Ne,
                        "lt" => Cmp::Lt,
                        "le" => Cmp::Le,
                        "gt" => Cmp::Gt,
                        "ge" => Cmp::Ge,
                        "equ" => Cmp::Equ,
                        "neu" => Cmp::Neu,
                        "ltu" => Cmp::Ltu,
                        "leu" => Cmp::Leu,
                        "gtu" => Cmp::Gtu,
                        "geu" => Cmp::Geu,
                        "num" => Cmp::Num,
                        "nan" => Cmp::Nan,
                        _ => return Err(unsupported()),
                    });
                    if parts.len() > 3 || ops.first().is_some_and(|o| o.contains('|')) {
                        return Err(err(line, t, "combining setp forms are not modelled"));
                    }
                    dst_src(&mut ins, 1)?;
                }
                "cvt" => {
                    let tys: Vec<Ty> = parts.iter().filter_map(|p| ty_of(p)).collect();
                    let [to, from] = tys[..] else {
                        return Err(err(line, t, "cvt needs two types"));
                    };
                    let round = parts[1..].iter().find_map(|p| match *p {
                        "rn" | "rni" => Some(Round::Near),
                        "rz" | "rzi" => Some(Round::Zero),
                        "rm" | "rmi" => Some(Round::Down),
                        "rp" | "rpi" => Some(Round::Up),
                        _ => None,
                    });
                    let int_round = parts[1..].iter().any(|p| p.len() == 3 && p.ends_with('i'));
                    ins.ty = to;
                    ins.op = Op::Cvt {
                        from,
                        round,
                        int_round,
                    };
                    dst_src(&mut ins, 1)?;
                }
                "ld" | "st" if parts.get(1) == Some(&"param") => {
                    if parts[0] == "st" {
                        return Err(unsupported());
                    }
                    let name = ops
                        .get(1)
                        .map(|o| o.trim_start_matches('[').trim_end_matches(']'))
                        .unwrap_or("");
                    let idx = params
                        .iter()
                        .position(|(p, _)| p == name)
                        .ok_or_else(|| err(line, t, format!("unknown parameter `{name}`")))?;
                    ins.op = Op::LdParam(idx);
                    ins.d = vec![reg(op(0)?, line, t)?];
                }
                "ld" | "st" => {
                    let space = match parts[1] {
                        "global" => Space::Global,
                        "shared" => Space::Shared,
                        _ => return Err(unsupported()),
                    };
                    if has("acquire") || has("relaxed") || has("volatile") {
                        return Err(unsupported());
                    }
                    let vec = if has("v4") {
                        4
                    } else if has("v2") {
                        2
                    } else {
                        1
                    };
                    if ops.len() != 2 {
                        return Err(err(line, t, "ld/st take two operands"));
                    }
                    let (data, a) = if parts[0] == "ld" {
                        (&ops[0], &ops[1])
                    } else {
                        (&ops[1], &ops[0])
                    };
                    let regs = split_operands(data.trim_matches(|c| c == '{' || c == '}'));
                    ins.addr = Some(addr(a, line, t)?);
                    let bytes = ins.ty.bits / 8;
                    if parts[0] == "ld" {
                        ins.op = Op::Ld { space, bytes, vec };
                        ins.d = regs
                            .iter()
                            .map(|r| reg(r, line, t))
                            .collect::<Result<_, _>>()?;
                    } else {
                        ins.op = Op::St { space, bytes, vec };
                        ins.s = regs
                            .iter()
                            .map(|r| val(r, line, t))
                            .collect::<Result<_, _>>()?;
                    }
                }
                "atom" | "red" => {
                    if !has("add") {
                        return Err(unsupported());
                    }
                    let space = if has("shared") {
                        Space::Shared
                    } else {
                        Space::Global
                    };
                    let ret = parts[0] == "atom";
                    ins.op = Op::AtomAdd { space, ret };
                    let (d, a, v) = if ret {
                        (Some(op(0)?), op(1)?, op(2)?)
                    } else {
                        (None, op(0)?, op(1)?)
                    };
                    if let Some(d) = d {
                        ins.d = vec![reg(d, line, t)?];
                    }
                    ins.addr = Some(addr(a, line, t)?);
                    ins.s = vec![val(v, line, t)?];
                }
                "shfl" => {
                    let mode = match parts.get(2).copied() {
                        Some("idx") => ShflMode::Idx,
                        Some("bfly") => ShflMode::Bfly,
                        Some("down") => ShflMode::Down,
                        Some("up") => ShflMode::Up,
                        _ => return Err(unsupported()),
                    };
                    let full = ops.get(4).map(String::as_str) == Some("0xffffffff");
                    let clamp = if mode == ShflMode::Up { "0" } else { "31" };
                    if !full
                        || ops.get(3).map(String::as_str) != Some(clamp)
                        || ops[0].contains('|')
                    {
                        return Err(err(
                            line,
                            t,
                            "only full-warp shuffles of 32 lanes are modelled",
                        ));
                    }
                    ins.op = Op::Shfl(mode);
                    ins.d = vec![reg(&ops[0], line, t)?];
                    ins.s = vec![val(&ops[1], line, t)?, val(&ops[2], line, t)?];
                }
                "vote" => {
                    ins.op = match parts.get(2).copied() {
                        Some("ballot") => Op::Ballot,
                        Some("any") => Op::VoteAny,
                        Some("all") => Op::VoteAll,
                        _ => return Err(unsupported()),
                    };
                    dst_src(&mut ins, 1)?;
                }
                "match" if has("any") => {
                    ins.op = Op::MatchAny;
                    dst_src(&mut ins, 1)?;
                }
                "bar" if has("warp") => ins.op = Op::BarWarp,
                "bar" | "barrier"
                    if has("sync") && ops.first().map(String::as_str) == Some("0") =>
                {
                    ins.op = Op::BarSync
                }
                "membar" | "fence" => ins.op = Op::Nop,
                "bra" => {
                    let target = ops.first().map(String::as_str).unwrap_or("");
                    ins.op = Op::Bra(
                        *labels
                            .get(target)
                            .ok_or_else(|| err(line, t, format!("unknown label `{target}`")))?,
                    )
                }
                "ret" | "exit" => ins.op = Op::Ret,
                _ => return Err(unsupported()),
            }
            instrs.push(ins);
        }
        if entries == 0 {
            return Err(err(0, "", "no .entry in the PTX"));
        }
        Ok(Program {
            instrs,
            n_regs,
            params,
            text,
            static_shared,
        })
    }

    /// The parameters (full PTX names and types), in order.
    pub fn params(&self) -> &[(String, ScalarType)] {
        &self.params
    }

    /// The PTX text of instruction `i` (index as in [`Counts::per_instr`](super::Counts)).
    pub fn instr_text(&self, i: usize) -> &str {
        self.instrs
            .get(i)
            .and_then(|ins| self.text.get(ins.line))
            .map_or("", |t| t.trim())
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.instrs.len()
    }

    /// True for a kernel without instructions.
    pub fn is_empty(&self) -> bool {
        self.instrs.is_empty()
    }
}

fn sym_name(t: &str) -> String {
    t.split_whitespace()
        .last()
        .unwrap_or("")
        .split('[')
        .next()
        .unwrap_or("")
        .to_string()
}
