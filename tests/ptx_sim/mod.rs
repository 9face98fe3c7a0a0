//! A lock-step interpreter of the PTX subset ptxflow's LZ4 kernels use, for tests without a GPU.
//!
//! Every warp runs its 32 lanes in lock step; a branch whose predicate differs between lanes
//! panics (the kernels promise warp-uniform control flow), as does any global access outside the
//! named buffers, any shared access outside the block's dynamic shared memory, a misaligned
//! access, and two lanes storing different values to one address in one instruction. Warps of
//! the grid are interleaved a few instructions at a time, so warps share pages and atomics as on
//! a device. It also counts executed warp instructions by kind, for cost estimates.
#![allow(dead_code)]

mod parse;

pub use parse::Program;
use parse::{Cmp, Instr, Sp, Space, K, SHARED_BASE, V};
use std::collections::HashMap;

/// Global memory: named buffers at fake, far-apart device addresses.
pub struct Memory {
    bufs: Vec<(String, u64, Vec<u8>)>,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl Memory {
    pub fn new() -> Self {
        Memory { bufs: Vec::new() }
    }

    /// Adds a buffer and returns its device address (256-byte aligned, like cuMemAlloc).
    pub fn add(&mut self, name: &str, data: Vec<u8>) -> u64 {
        let base = 0x1_0000_0000u64 * (self.bufs.len() as u64 + 1);
        self.bufs.push((name.to_string(), base, data));
        base
    }

    pub fn get(&self, name: &str) -> &[u8] {
        &self.bufs.iter().find(|b| b.0 == name).expect("buffer").2
    }

    fn locate(&mut self, addr: u64, n: u64, line: usize) -> &mut [u8] {
        for (name, base, data) in &mut self.bufs {
            if addr >= *base && addr < *base + 0x1_0000_0000 {
                let off = addr - *base;
                assert!(
                    off + n <= data.len() as u64,
                    "global access of {n} B at {name}+{off} past its {} B (PTX line {line})",
                    data.len()
                );
                return &mut data[off as usize..(off + n) as usize];
            }
        }
        panic!("global access at {addr:#x} outside every buffer (PTX line {line})");
    }
}

/// Executed warp instructions, by kind.
#[derive(Default, Debug, Clone)]
pub struct Counts {
    pub total: u64,
    pub shared: u64,
    pub global: u64,
    pub warp_ops: u64,
    /// Executions per instruction index.
    pub per_instr: Vec<u64>,
}

struct Warp {
    pc: usize,
    regs: Vec<u64>,
    warp_in_block: u32,
    block: u32,
    done: bool,
}

fn mask(bits: u32, v: u64) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

/// Runs `prog` on a grid of `blocks` blocks of `threads` threads (whole warps) with `dyn_shared`
/// bytes of dynamic shared memory per block and the given parameter values (in order).
pub fn launch(
    prog: &Program,
    blocks: u32,
    threads: u32,
    dyn_shared: u32,
    params: &[u64],
    mem: &mut Memory,
) -> Counts {
    assert!(threads % 32 == 0 && threads > 0);
    assert_eq!(params.len(), prog.params.len(), "parameter count");
    let wpb = threads / 32;
    let mut shared: Vec<Vec<u8>> = (0..blocks)
        .map(|_| vec![0xA5u8; dyn_shared as usize])
        .collect();
    let mut warps: Vec<Warp> = (0..blocks * wpb)
        .map(|i| Warp {
            pc: 0,
            regs: vec![0; prog.n_regs * 32],
            warp_in_block: i % wpb,
            block: i / wpb,
            done: false,
        })
        .collect();
    let mut counts = Counts {
        per_instr: vec![0; prog.instrs.len()],
        ..Counts::default()
    };
    let mut quantum = 7usize;
    while warps.iter().any(|w| !w.done) {
        for w in warps.iter_mut().filter(|w| !w.done) {
            quantum = (quantum * 31 + 17) % 97 + 1;
            for _ in 0..quantum {
                if w.done {
                    break;
                }
                let sh = &mut shared[w.block as usize];
                step(prog, w, blocks, threads, sh, params, mem, &mut counts);
            }
        }
    }
    counts
}

#[allow(clippy::too_many_arguments)]
fn step(
    prog: &Program,
    w: &mut Warp,
    blocks: u32,
    threads: u32,
    sh: &mut [u8],
    params: &[u64],
    mem: &mut Memory,
    c: &mut Counts,
) {
    let ins: &Instr = &prog.instrs[w.pc];
    c.total += 1;
    c.per_instr[w.pc] += 1;
    w.pc += 1;
    let n = prog.n_regs;
    let _ = n;
    let lane_on = |w: &Warp, l: usize| match ins.guard {
        None => true,
        Some((p, neg)) => (w.regs[p * 32 + l] != 0) != neg,
    };
    let rd = |w: &Warp, v: &V, l: usize| -> u64 {
        match v {
            V::R(r) => w.regs[r * 32 + l],
            V::I(i) => *i,
            V::Sp(Sp::TidX) => (w.warp_in_block * 32) as u64 + l as u64,
            V::Sp(Sp::NtidX) => threads as u64,
            V::Sp(Sp::CtaidX) => w.block as u64,
            V::Sp(Sp::NctaidX) => blocks as u64,
            V::Sp(Sp::LaneId) => l as u64,
        }
    };
    let on: Vec<bool> = (0..32).map(|l| lane_on(w, l)).collect();
    let bits = ins.bits;
    match &ins.k {
        K::Bra(t) => {
            let taken = on.iter().filter(|&&x| x).count();
            assert!(
                taken == 0 || taken == 32,
                "divergent branch at PTX line {}: {}",
                ins.line,
                prog.text[ins.line]
            );
            if taken == 32 {
                w.pc = *t;
            }
            return;
        }
        K::Ret => {
            assert!(on.iter().all(|&x| x), "divergent exit");
            w.done = true;
            return;
        }
        K::BarWarp => return,
        K::Ballot | K::VoteAny | K::MatchAny | K::ShflIdx => {
            c.warp_ops += 1;
            assert!(
                on.iter().all(|&x| x),
                "predicated warp op at PTX line {}",
                ins.line
            );
            let vals: Vec<u64> = (0..32).map(|l| rd(w, &ins.s[0], l)).collect();
            let ballot: u64 = (0..32).filter(|&l| vals[l] != 0).map(|l| 1u64 << l).sum();
            for l in 0..32 {
                let r = match ins.k {
                    K::Ballot => ballot,
                    K::VoteAny => (ballot != 0) as u64,
                    K::MatchAny => (0..32)
                        .filter(|&j| vals[j] as u32 == vals[l] as u32)
                        .map(|j| 1u64 << j)
                        .sum(),
                    _ => vals[(rd(w, &ins.s[1], l) & 31) as usize],
                };
                w.regs[ins.d[0] * 32 + l] = r;
            }
            return;
        }
        _ => {}
    }
    // Memory instructions: collect per lane, check stores for conflicting writers.
    let mut writes: HashMap<(bool, u64), (u64, usize)> = HashMap::new();
    for l in 0..32 {
        if !on[l] {
            continue;
        }
        let a = |w: &Warp| -> u64 {
            let (b, o) = ins.addr.as_ref().unwrap();
            rd(w, b, l).wrapping_add(*o as u64)
        };
        match &ins.k {
            K::LdParam(i) => w.regs[ins.d[0] * 32 + l] = mask(bits, params[*i]),
            K::Ld { space, bytes, vec } | K::St { space, bytes, vec } => {
                let addr = a(w);
                let (bytes, vec) = (*bytes as u64, *vec as u64);
                assert!(
                    addr % (bytes * vec) == 0,
                    "misaligned {}-byte access at {addr:#x} (PTX line {})",
                    bytes * vec,
                    ins.line
                );
                let store = matches!(ins.k, K::St { .. });
                for e in 0..vec {
                    let ea = addr + e * bytes;
                    let cell = cell(*space, ea, bytes, sh, mem, ins.line);
                    if store {
                        let v = rd(w, &ins.s[e as usize], l);
                        for k in 0..bytes {
                            let key = (*space == Space::Shared, ea + k);
                            let byte = (v >> (8 * k)) as u8 as u64;
                            if let Some((old, ol)) = writes.insert(key, (byte, l)) {
                                assert!(old == byte, "lanes {ol} and {l} store different bytes to {:#x} (PTX line {})", ea + k, ins.line);
                            }
                            cell[k as usize] = byte as u8;
                        }
                    } else {
                        let v = cell
                            .iter()
                            .rev()
                            .fold(0u64, |acc, &x| (acc << 8) | x as u64);
                        w.regs[ins.d[e as usize] * 32 + l] = v;
                    }
                }
            }
            K::AtomAdd(space) => {
                let addr = a(w);
                assert!(addr % 4 == 0);
                let cell = cell(*space, addr, 4, sh, mem, ins.line);
                let old = u32::from_le_bytes(cell[..4].try_into().unwrap());
                let v = rd(w, &ins.s[0], l) as u32;
                cell.copy_from_slice(&old.wrapping_add(v).to_le_bytes());
                w.regs[ins.d[0] * 32 + l] = old as u64;
            }
            _ => {
                let s: Vec<u64> = ins.s.iter().map(|v| rd(w, v, l)).collect();
                let m = |v: u64| mask(bits, v);
                let r = match &ins.k {
                    K::Mov | K::Cvta => s[0],
                    K::Add => m(s[0].wrapping_add(s[1])),
                    K::Sub => m(s[0].wrapping_sub(s[1])),
                    K::MulLo => m(s[0].wrapping_mul(s[1])),
                    K::MulHi => ((s[0] as u32 as u64) * (s[1] as u32 as u64)) >> 32,
                    K::MulWide => (s[0] as u32 as u64) * (s[1] as u32 as u64),
                    K::MadLo => m(s[0].wrapping_mul(s[1]).wrapping_add(s[2])),
                    K::MadWide => ((s[0] as u32 as u64) * (s[1] as u32 as u64)).wrapping_add(s[2]),
                    K::Div => {
                        assert!(s[1] != 0, "division by zero at PTX line {}", ins.line);
                        m(s[0] / s[1])
                    }
                    K::Min => s[0].min(s[1]),
                    K::Max => s[0].max(s[1]),
                    K::And => s[0] & s[1],
                    K::Or => s[0] | s[1],
                    K::Xor => s[0] ^ s[1],
                    K::Not => m(!s[0]),
                    K::Shl => {
                        if s[1] >= bits as u64 {
                            0
                        } else {
                            m(s[0] << s[1])
                        }
                    }
                    K::Shr => {
                        if s[1] >= bits as u64 {
                            0
                        } else {
                            s[0] >> s[1]
                        }
                    }
                    K::Setp(cmp) => {
                        let (a, b) = (m(s[0]), m(s[1]));
                        (match cmp {
                            Cmp::Eq => a == b,
                            Cmp::Ne => a != b,
                            Cmp::Lt => a < b,
                            Cmp::Le => a <= b,
                            Cmp::Gt => a > b,
                            Cmp::Ge => a >= b,
                        }) as u64
                    }
                    K::Selp => {
                        if s[2] != 0 {
                            s[0]
                        } else {
                            s[1]
                        }
                    }
                    K::Brev => (s[0] as u32).reverse_bits() as u64,
                    K::Clz => (s[0] as u32).leading_zeros() as u64,
                    K::Prmt => {
                        let bytes = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
                        let sel = s[2] as u32;
                        (0..4).fold(0u64, |acc, k| {
                            let nib = (sel >> (4 * k)) & 7;
                            acc | (((bytes >> (8 * nib)) & 0xff) << (8 * k))
                        })
                    }
                    k => panic!("unhandled {k:?}"),
                };
                w.regs[ins.d[0] * 32 + l] = r;
            }
        }
    }
    match ins.k {
        K::Ld { space, .. } | K::St { space, .. } | K::AtomAdd(space) => {
            if space == Space::Shared {
                c.shared += 1
            } else {
                c.global += 1
            }
        }
        _ => {}
    }
}

fn cell<'a>(
    space: Space,
    addr: u64,
    n: u64,
    sh: &'a mut [u8],
    mem: &'a mut Memory,
    line: usize,
) -> &'a mut [u8] {
    match space {
        Space::Global => mem.locate(addr, n, line),
        Space::Shared => {
            assert!(
                addr >= SHARED_BASE,
                "shared access at {addr:#x} below the shared window (PTX line {line})"
            );
            let off = (addr - SHARED_BASE) as usize;
            assert!(
                off + n as usize <= sh.len(),
                "shared access at +{off} past the {} B of the block (PTX line {line})",
                sh.len()
            );
            &mut sh[off..off + n as usize]
        }
    }
}
