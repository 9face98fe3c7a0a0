//! One instruction's per-lane work for the interpreter (see the [module docs](super)): memory
//! accesses with their alignment and store-conflict checks, atomics, and the ALU.

use super::alu::{alu, mask, sext};
use super::exec::{Ctx, Warp};
use super::memory::{cell, Memory};
use super::parse::{Instr, Kind, Op, Space};
use std::collections::HashMap;

/// The little-endian value of a memory cell's bytes.
fn le_bytes(cell: &[u8]) -> u64 {
    cell.iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

impl Ctx<'_> {
    /// Runs `ins` in the lanes of `on`.
    pub(super) fn lanes(
        &self,
        ins: &Instr,
        w: &mut Warp,
        on: u32,
        sh: &mut [u8],
        mem: &mut Memory,
    ) -> Result<(), String> {
        let mut writes: HashMap<(bool, u64), (u8, usize)> = HashMap::new();
        let bits = ins.ty.bits;
        for l in 0..32 {
            if on >> l & 1 == 0 {
                continue;
            }
            match &ins.op {
                Op::LdParam(i) => w.regs[ins.d[0] * 32 + l] = mask(bits, self.params[*i]),
                Op::Ld { space, bytes, vec } | Op::St { space, bytes, vec } => {
                    let (b, o) = ins.addr.as_ref().ok_or("memory operand")?;
                    let addr = self.rd(w, b, l).wrapping_add(*o as u64);
                    let (bytes, vec) = (u64::from(*bytes), *vec as u64);
                    if !addr.is_multiple_of(bytes * vec) {
                        return Err(format!(
                            "misaligned {}-byte access at {addr:#x}",
                            bytes * vec
                        ));
                    }
                    let store = matches!(ins.op, Op::St { .. });
                    for e in 0..vec {
                        let ea = addr + e * bytes;
                        let cell = cell(*space, ea, bytes, sh, mem)?;
                        if store {
                            let v = self.rd(w, &ins.s[e as usize], l);
                            for k in 0..bytes {
                                let key = (*space == Space::Shared, ea + k);
                                let byte = (v >> (8 * k)) as u8;
                                if let Some((old, ol)) = writes.insert(key, (byte, l)) {
                                    if old != byte {
                                        return Err(format!(
                                            "lanes {ol} and {l} store different bytes to {:#x}",
                                            ea + k
                                        ));
                                    }
                                }
                                cell[k as usize] = byte;
                            }
                        } else {
                            let v = le_bytes(cell);
                            let v = if ins.ty.kind == Kind::S {
                                sext(bits, v) as u64
                            } else {
                                v
                            };
                            w.regs[ins.d[e as usize] * 32 + l] = v;
                        }
                    }
                }
                Op::AtomAdd { space, ret } | Op::AtomBits { space, ret, .. } => {
                    let (b, o) = ins.addr.as_ref().ok_or("memory operand")?;
                    let addr = self.rd(w, b, l).wrapping_add(*o as u64);
                    let n = u64::from(bits / 8);
                    if !addr.is_multiple_of(n) {
                        return Err(format!("misaligned {n}-byte atomic at {addr:#x}"));
                    }
                    let cell = cell(*space, addr, n, sh, mem)?;
                    let old = le_bytes(cell);
                    let v = self.rd(w, &ins.s[0], l);
                    let op = match ins.op {
                        Op::AtomBits { or: true, .. } => Op::Or,
                        Op::AtomBits { or: false, .. } => Op::And,
                        _ => Op::Add,
                    };
                    let new = alu(&op, ins.ty, &[old, v])?;
                    cell.copy_from_slice(&new.to_le_bytes()[..n as usize]);
                    if *ret {
                        w.regs[ins.d[0] * 32 + l] = old;
                    }
                }
                Op::CpAsync16 => {
                    let (b, o) = ins.addr.as_ref().ok_or("memory operand")?;
                    let dst = self.rd(w, b, l).wrapping_add(*o as u64);
                    let src = self.rd(w, &ins.s[0], l);
                    if !dst.is_multiple_of(16) || !src.is_multiple_of(16) {
                        return Err(format!("misaligned cp.async {src:#x} -> {dst:#x}"));
                    }
                    let mut v = [0u8; 16];
                    v.copy_from_slice(cell(Space::Global, src, 16, sh, mem)?);
                    cell(Space::Shared, dst, 16, sh, mem)?.copy_from_slice(&v);
                }
                Op::Unpack => {
                    let v = self.rd(w, &ins.s[0], l);
                    w.regs[ins.d[0] * 32 + l] = v & 0xffff_ffff;
                    w.regs[ins.d[1] * 32 + l] = v >> 32;
                }
                op => {
                    let mut s = [0u64; 4];
                    for (k, v) in ins.s.iter().enumerate().take(4) {
                        s[k] = self.rd(w, v, l);
                    }
                    let r = alu(op, ins.ty, &s[..ins.s.len().min(4)])?;
                    w.regs[ins.d[0] * 32 + l] = r;
                }
            }
        }
        Ok(())
    }
}
