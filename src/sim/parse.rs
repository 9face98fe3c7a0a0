//! Parser of the modelled PTX subset into pre-resolved instructions (registers as indices,
//! symbols as shared-window addresses, labels as instruction indices). Anything outside the
//! subset is an error naming the line.

use super::decode::{decode, Symbols};
pub(crate) use super::instr::*;
use super::SimError;
use crate::ptx::ScalarType;
use std::collections::HashMap;

/// A parsed kernel, ready for [`Program::run`].
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

pub(crate) fn split_operands(s: &str) -> Vec<String> {
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

pub(crate) fn err(line: usize, text: &str, problem: impl Into<String>) -> SimError {
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
        let sy = Symbols {
            reg_base,
            syms,
            labels,
            params,
        };
        let mut instrs = Vec::new();
        for (line, t) in &raw {
            instrs.push(decode(&sy, *line, t)?);
        }
        if entries == 0 {
            return Err(err(0, "", "no .entry in the PTX"));
        }
        Ok(Program {
            instrs,
            n_regs,
            params: sy.params,
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
