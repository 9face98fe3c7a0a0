//! Parser of the PTX subset ptxflow's LZ4 kernels emit, into pre-resolved instructions.

use std::collections::HashMap;

/// An operand: register index, immediate, resolved symbol address, or special register.
#[derive(Clone, Copy, Debug)]
pub enum V {
    R(usize),
    I(u64),
    Sp(Sp),
}

#[derive(Clone, Copy, Debug)]
pub enum Sp {
    TidX,
    NtidX,
    CtaidX,
    NctaidX,
    LaneId,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Space {
    Global,
    Shared,
}

#[derive(Clone, Copy, Debug)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug)]
pub enum K {
    Mov,
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    MadLo,
    MadWide,
    Div,
    Min,
    Max,
    And,
    Or,
    Xor,
    Not,
    Shl,
    Shr,
    Setp(Cmp),
    Selp,
    Brev,
    Clz,
    Prmt,
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
    AtomAdd(Space),
    ShflIdx,
    Ballot,
    VoteAny,
    MatchAny,
    BarWarp,
    Bra(usize),
    Ret,
    Cvta,
    LdParam(usize),
}

#[derive(Clone, Debug)]
pub struct Instr {
    pub guard: Option<(usize, bool)>,
    pub k: K,
    /// Operand width in bits (1 for predicates).
    pub bits: u32,
    pub d: Vec<usize>,
    pub s: Vec<V>,
    pub addr: Option<(V, i64)>,
    pub line: usize,
}

/// A parsed kernel.
pub struct Program {
    pub instrs: Vec<Instr>,
    pub n_regs: usize,
    pub params: Vec<String>,
    pub text: Vec<String>,
}

/// Shared-window address of the first shared symbol (non-zero to catch missing symbol bases).
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

impl Program {
    pub fn parse(ptx: &str) -> Program {
        let text: Vec<String> = ptx.lines().map(str::to_string).collect();
        let mut reg_base: HashMap<String, usize> = HashMap::new();
        let mut n_regs = 0;
        let mut params = Vec::new();
        let mut syms: HashMap<String, u64> = HashMap::new();
        let mut labels = HashMap::new();
        let mut raw = Vec::new();
        for (ln, line) in text.iter().enumerate() {
            let t = line.trim();
            if let Some(rest) = t.strip_prefix(".reg ") {
                // `.reg .u32 %r<343>;`
                let name = rest.split_whitespace().nth(1).expect("reg decl");
                let (prefix, count) = name
                    .trim_end_matches(';')
                    .split_once('<')
                    .expect("reg decl <n>");
                let count: usize = count.trim_end_matches('>').parse().expect("reg count");
                reg_base.insert(prefix.to_string(), n_regs);
                n_regs += count;
            } else if t.starts_with(".param ") {
                let name = t
                    .split_whitespace()
                    .nth(2)
                    .expect("param name")
                    .trim_end_matches(',');
                params.push(name.to_string());
            } else if t.starts_with(".extern .shared") || t.starts_with(".shared") {
                let name = t
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .split('[')
                    .next()
                    .unwrap();
                assert!(syms.is_empty(), "one shared symbol supported");
                syms.insert(name.to_string(), SHARED_BASE);
            } else if t.starts_with(".local") {
                panic!("local memory not supported by the simulator");
            } else if t.ends_with(':') && !t.starts_with('.') {
                labels.insert(t.trim_end_matches(':').to_string(), raw.len());
            } else if t.ends_with(';') && !t.starts_with('.') {
                raw.push((ln, t.trim_end_matches(';').to_string()));
            }
        }
        let reg = |tok: &str| -> usize {
            let body = tok.trim_start_matches('%');
            let split = body
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or_else(|| panic!("register {tok}"));
            let (p, n) = body.split_at(split);
            let base = reg_base[&format!("%{p}")];
            base + n.parse::<usize>().unwrap()
        };
        let val = |tok: &str| -> V {
            match tok {
                "%tid.x" => V::Sp(Sp::TidX),
                "%ntid.x" => V::Sp(Sp::NtidX),
                "%ctaid.x" => V::Sp(Sp::CtaidX),
                "%nctaid.x" => V::Sp(Sp::NctaidX),
                "%laneid" => V::Sp(Sp::LaneId),
                t if t.starts_with('%') => V::R(reg(t)),
                t if syms.contains_key(t) => V::I(syms[t]),
                t if t.starts_with("0x") => V::I(u64::from_str_radix(&t[2..], 16).unwrap()),
                t if t.starts_with('-') => V::I(t.parse::<i64>().unwrap() as u64),
                t => V::I(t.parse::<u64>().unwrap_or_else(|_| panic!("operand `{t}`"))),
            }
        };
        let addr = |tok: &str| -> (V, i64) {
            let inner = tok.trim_start_matches('[').trim_end_matches(']');
            match inner.split_once('+') {
                Some((b, o)) => (val(b), o.parse().unwrap()),
                None => (val(inner), 0),
            }
        };
        let mut instrs = Vec::new();
        for (line, t) in raw {
            let (guard, body) = if let Some(rest) = t.strip_prefix('@') {
                let (g, body) = rest.split_once(' ').unwrap();
                let neg = g.starts_with('!');
                (
                    Some((reg(g.trim_start_matches('!')), neg)),
                    body.to_string(),
                )
            } else {
                (None, t.clone())
            };
            let (opcode, ops) = body.split_once(' ').unwrap_or((body.as_str(), ""));
            let ops = split_operands(ops);
            let parts: Vec<&str> = opcode.split('.').collect();
            let ty = *parts.last().unwrap();
            let bits = match ty {
                "pred" => 1,
                "u8" => 8,
                "u16" | "b16" => 16,
                "u64" | "b64" | "s64" => 64,
                _ => 32,
            };
            let mut ins = Instr {
                guard,
                k: K::Ret,
                bits,
                d: vec![],
                s: vec![],
                addr: None,
                line,
            };
            let dst_src = |ins: &mut Instr, nd: usize| {
                ins.d = ops[..nd].iter().map(|o| reg(o)).collect();
                ins.s = ops[nd..].iter().map(|o| val(o)).collect();
            };
            match parts[0] {
                "mov" | "add" | "sub" | "div" | "min" | "max" | "and" | "or" | "xor" | "not"
                | "shl" | "shr" | "selp" | "brev" | "clz" | "prmt" | "cvta" => {
                    ins.k = match parts[0] {
                        "mov" => K::Mov,
                        "add" => K::Add,
                        "sub" => K::Sub,
                        "div" => K::Div,
                        "min" => K::Min,
                        "max" => K::Max,
                        "and" => K::And,
                        "or" => K::Or,
                        "xor" => K::Xor,
                        "not" => K::Not,
                        "shl" => K::Shl,
                        "shr" => K::Shr,
                        "selp" => K::Selp,
                        "brev" => K::Brev,
                        "clz" => K::Clz,
                        "prmt" => K::Prmt,
                        _ => K::Cvta,
                    };
                    if parts[0] == "clz" || parts[0] == "brev" {
                        ins.bits = if ty == "b64" { 64 } else { 32 };
                    }
                    dst_src(&mut ins, 1);
                }
                "mul" | "mad" => {
                    assert!(parts[1] != "hi" || ty == "u32", "mul.hi only for u32");
                    let wide = parts[1] == "wide";
                    ins.k = match (parts[0], wide) {
                        ("mul", false) if parts[1] == "hi" => K::MulHi,
                        ("mul", false) => K::MulLo,
                        ("mul", true) => K::MulWide,
                        ("mad", false) => K::MadLo,
                        _ => K::MadWide,
                    };
                    dst_src(&mut ins, 1);
                }
                "setp" => {
                    ins.k = K::Setp(match parts[1] {
                        "eq" => Cmp::Eq,
                        "ne" => Cmp::Ne,
                        "lt" => Cmp::Lt,
                        "le" => Cmp::Le,
                        "gt" => Cmp::Gt,
                        "ge" => Cmp::Ge,
                        c => panic!("setp.{c}"),
                    });
                    assert!(ty == "u32" || ty == "u64", "setp type {ty}");
                    dst_src(&mut ins, 1);
                }
                "ld" | "st" => {
                    if parts[1] == "param" {
                        let name = ops[1].trim_start_matches('[').trim_end_matches(']');
                        let idx = params.iter().position(|p| p == name).expect("param");
                        ins.k = K::LdParam(idx);
                        ins.d = vec![reg(&ops[0])];
                    } else {
                        let space = match parts[1] {
                            "global" => Space::Global,
                            "shared" => Space::Shared,
                            s => panic!("space {s}"),
                        };
                        let vec = if parts.contains(&"v4") {
                            4
                        } else if parts.contains(&"v2") {
                            2
                        } else {
                            1
                        };
                        let bytes = bits / 8;
                        let (data, a) = if parts[0] == "ld" {
                            (&ops[0], &ops[1])
                        } else {
                            (&ops[1], &ops[0])
                        };
                        let regs: Vec<&str> = data
                            .trim_start_matches('{')
                            .trim_end_matches('}')
                            .split(", ")
                            .collect();
                        ins.addr = Some(addr(a));
                        if parts[0] == "ld" {
                            ins.k = K::Ld { space, bytes, vec };
                            ins.d = regs.iter().map(|r| reg(r)).collect();
                        } else {
                            ins.k = K::St { space, bytes, vec };
                            ins.s = regs.iter().map(|r| val(r)).collect();
                        }
                    }
                }
                "atom" => {
                    assert_eq!(parts[2], "add", "only atom.add");
                    ins.k = K::AtomAdd(if parts[1] == "shared" {
                        Space::Shared
                    } else {
                        Space::Global
                    });
                    ins.d = vec![reg(&ops[0])];
                    ins.addr = Some(addr(&ops[1]));
                    ins.s = vec![val(&ops[2])];
                }
                "shfl" => {
                    assert_eq!(parts[2], "idx", "only shfl.idx");
                    assert_eq!(ops[3], "31");
                    ins.k = K::ShflIdx;
                    dst_src(&mut ins, 1);
                }
                "vote" => {
                    ins.k = match parts[2] {
                        "ballot" => K::Ballot,
                        "any" => K::VoteAny,
                        v => panic!("vote.{v}"),
                    };
                    dst_src(&mut ins, 1);
                }
                "match" => {
                    ins.k = K::MatchAny;
                    dst_src(&mut ins, 1);
                }
                "bar" => {
                    assert_eq!(parts[1], "warp", "block barriers are not simulated");
                    ins.k = K::BarWarp;
                }
                "bra" => {
                    ins.k = K::Bra(
                        *labels
                            .get(ops[0].as_str())
                            .unwrap_or_else(|| panic!("label {}", ops[0])),
                    )
                }
                "ret" | "exit" => ins.k = K::Ret,
                o => panic!("unsupported opcode {o} at line {line}"),
            }
            instrs.push(ins);
        }
        Program {
            instrs,
            n_regs,
            params,
            text,
        }
    }
}
