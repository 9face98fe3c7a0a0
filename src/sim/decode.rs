//! Decoding of one PTX instruction line into the interpreter's form.

use super::instr::*;
use super::parse::{err, split_operands};
use super::SimError;
use crate::ptx::ScalarType;
use std::collections::HashMap;

/// What the declarations resolved: register classes, shared symbols, labels, parameters.
pub(crate) struct Symbols {
    pub reg_base: HashMap<String, usize>,
    pub syms: HashMap<String, u64>,
    pub labels: HashMap<String, usize>,
    pub params: Vec<(String, ScalarType)>,
}

impl Symbols {
    pub(crate) fn reg(&self, tok: &str, ln: usize, t: &str) -> Result<usize, SimError> {
        let body = tok.trim_start_matches('%');
        let split = body
            .find(|c: char| c.is_ascii_digit())
            .ok_or_else(|| err(ln, t, format!("operand `{tok}`")))?;
        let (p, n) = body.split_at(split);
        let base = self
            .reg_base
            .get(&format!("%{p}"))
            .ok_or_else(|| err(ln, t, format!("undeclared register `{tok}`")))?;
        let i: usize = n
            .parse()
            .map_err(|_| err(ln, t, format!("register `{tok}`")))?;
        Ok(base + i)
    }
    pub(crate) fn val(&self, tok: &str, ln: usize, t: &str) -> Result<V, SimError> {
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
            "%clock" | "%clock64" | "%globaltimer" => V::Sp(Sp::Clock),
            t2 if t2.starts_with('%') => V::R(self.reg(t2, ln, t)?),
            t2 if self.syms.contains_key(t2) => V::I(self.syms[t2]),
            t2 if t2.starts_with("0f") && t2.len() == 10 => {
                V::I(u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "f32 immediate"))?)
            }
            t2 if t2.starts_with("0d") && t2.len() == 18 => {
                V::I(u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "f64 immediate"))?)
            }
            t2 if t2.starts_with("0x") => {
                V::I(u64::from_str_radix(&t2[2..], 16).map_err(|_| err(ln, t, "hex immediate"))?)
            }
            t2 if t2.starts_with('-') => V::I(
                t2.parse::<i64>()
                    .map_err(|_| err(ln, t, format!("operand `{t2}`")))? as u64,
            ),
            t2 => V::I(
                t2.parse::<u64>()
                    .map_err(|_| err(ln, t, format!("unknown operand `{t2}`")))?,
            ),
        })
    }
    pub(crate) fn addr(&self, tok: &str, ln: usize, t: &str) -> Result<(V, i64), SimError> {
        let inner = tok.trim_start_matches('[').trim_end_matches(']');
        match inner.split_once('+') {
            Some((b, o)) => Ok((
                self.val(b, ln, t)?,
                o.parse().map_err(|_| err(ln, t, "address offset"))?,
            )),
            None => Ok((self.val(inner, ln, t)?, 0)),
        }
    }
}

/// Decodes instruction line `t` (PTX line `line`, 0-based).
pub(crate) fn decode(sy: &Symbols, line: usize, t: &str) -> Result<Instr, SimError> {
    let (guard, body) = match t.strip_prefix('@') {
        Some(rest) => {
            let (g, body) = rest.split_once(' ').ok_or_else(|| err(line, t, "guard"))?;
            let neg = g.starts_with('!');
            (
                Some((sy.reg(g.trim_start_matches('!'), line, t)?, neg)),
                body,
            )
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
            .map(|o| sy.reg(o, line, t))
            .collect::<Result<_, _>>()?;
        ins.s = ops[nd..]
            .iter()
            .map(|o| sy.val(o, line, t))
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
                .map(|o| sy.reg(o, line, t))
                .collect::<Result<_, _>>()?;
            ins.s = vec![sy.val(op(1)?, line, t)?];
        }
        "mov" if ops.get(1).is_some_and(|o| o.starts_with('{')) => {
            ins.op = Op::Pack;
            ins.d = vec![sy.reg(&ops[0], line, t)?];
            let halves = split_operands(op(1)?.trim_matches(|c| c == '{' || c == '}'));
            ins.s = halves
                .iter()
                .map(|o| sy.val(o, line, t))
                .collect::<Result<_, _>>()?;
        }
        "mov" | "add" | "sub" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor" | "not"
        | "shl" | "shr" | "selp" | "brev" | "clz" | "popc" | "prmt" | "bfe" | "bmsk" | "cvta"
        | "neg" | "abs" | "rcp" | "sqrt" | "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "fma" => {
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
                "prmt" if has("f4e") => Op::PrmtF4e,
                "prmt" => Op::Prmt,
                "bfe" => Op::Bfe,
                "bmsk" => Op::Bmsk { wrap: has("wrap") },
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
            let idx = sy
                .params
                .iter()
                .position(|(p, _)| p == name)
                .ok_or_else(|| err(line, t, format!("unknown parameter `{name}`")))?;
            ins.op = Op::LdParam(idx);
            ins.d = vec![sy.reg(op(0)?, line, t)?];
        }
        "ld" | "st" => {
            // `.relaxed`, `.acquire` and `.release` accesses (`.gpu` or `.sys` scope) are plain
            // ones here: the interpreter is sequentially consistent and runs each instruction's
            // access whole (mapped host memory is just another buffer).
            let space = match parts[1..]
                .iter()
                .find(|p| !matches!(**p, "relaxed" | "acquire" | "release" | "gpu" | "sys"))
            {
                Some(&"global") => Space::Global,
                Some(&"shared") => Space::Shared,
                _ => return Err(unsupported()),
            };
            if has("volatile") {
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
            ins.addr = Some(sy.addr(a, line, t)?);
            let bytes = ins.ty.bits / 8;
            if parts[0] == "ld" {
                ins.op = Op::Ld { space, bytes, vec };
                ins.d = regs
                    .iter()
                    .map(|r| sy.reg(r, line, t))
                    .collect::<Result<_, _>>()?;
            } else {
                ins.op = Op::St { space, bytes, vec };
                ins.s = regs
                    .iter()
                    .map(|r| sy.val(r, line, t))
                    .collect::<Result<_, _>>()?;
            }
        }
        "atom" | "red" => {
            let space = if has("shared") {
                Space::Shared
            } else {
                Space::Global
            };
            let ret = parts[0] == "atom";
            ins.op = match (has("add"), has("or"), has("and")) {
                (true, ..) => Op::AtomAdd { space, ret },
                (_, or, and) if or || and => Op::AtomBits { space, ret, or },
                _ => return Err(unsupported()),
            };
            let (d, a, v) = if ret {
                (Some(op(0)?), op(1)?, op(2)?)
            } else {
                (None, op(0)?, op(1)?)
            };
            if let Some(d) = d {
                ins.d = vec![sy.reg(d, line, t)?];
            }
            ins.addr = Some(sy.addr(a, line, t)?);
            ins.s = vec![sy.val(v, line, t)?];
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
            if !full || ops.get(3).map(String::as_str) != Some(clamp) || ops[0].contains('|') {
                return Err(err(
                    line,
                    t,
                    "only full-warp shuffles of 32 lanes are modelled",
                ));
            }
            ins.op = Op::Shfl(mode);
            ins.d = vec![sy.reg(&ops[0], line, t)?];
            ins.s = vec![sy.val(&ops[1], line, t)?, sy.val(&ops[2], line, t)?];
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
        "mma" if (has("m8n8k4") || has("m16n8k4")) && has("f64") && ops.len() == 4 => {
            // {d..}, {a..}, {b}, {c..}: the f64 tensor-core tile (see `Op::MmaF64`).
            let regs = |o: &str| -> Result<Vec<usize>, SimError> {
                split_operands(o.trim_matches(|c| c == '{' || c == '}'))
                    .iter()
                    .map(|r| sy.reg(r, line, t))
                    .collect()
            };
            let (d, a, b, c) = (
                regs(&ops[0])?,
                regs(&ops[1])?,
                regs(&ops[2])?,
                regs(&ops[3])?,
            );
            let rows = if has("m16n8k4") { 2 } else { 1 };
            if d.len() != 2 * rows || a.len() != rows || b.len() != 1 || c.len() != 2 * rows {
                return Err(err(line, t, "mma f64 fragments"));
            }
            ins.op = Op::MmaF64 { rows };
            ins.d = d;
            ins.s = a.into_iter().chain(b).chain(c).map(V::R).collect();
        }
        "match" if has("any") => {
            ins.op = Op::MatchAny;
            dst_src(&mut ins, 1)?;
        }
        "bar" if has("warp") => ins.op = Op::BarWarp,
        "bar" | "barrier" if has("sync") && ops.first().map(String::as_str) == Some("0") => {
            ins.op = Op::BarSync
        }
        "membar" | "fence" | "prefetch" => ins.op = Op::Nop,
        // cp.async: the copy happens at issue, so waits and commits are no-ops.
        "cp" if has("async") && !has("shared") => ins.op = Op::Nop,
        "cp" if has("async") && has("global") && ops.len() == 3 && ops[2] == "16" => {
            ins.addr = Some(sy.addr(&ops[0], line, t)?);
            match sy.addr(&ops[1], line, t)? {
                (src, 0) => ins.s = vec![src],
                _ => return Err(unsupported()),
            }
            ins.op = Op::CpAsync16;
        }
        "bra" => {
            let target = ops.first().map(String::as_str).unwrap_or("");
            ins.op = Op::Bra(
                *sy.labels
                    .get(target)
                    .ok_or_else(|| err(line, t, format!("unknown label `{target}`")))?,
            )
        }
        "ret" | "exit" => ins.op = Op::Ret,
        _ => return Err(unsupported()),
    }
    Ok(ins)
}
