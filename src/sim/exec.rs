//! The interpreter's scheduler and instruction semantics (see the [module docs](super)).

use super::memory::{check_args, Arg, Memory};
use super::parse::{Cmp, Instr, Kind, Op, Program, Round, ShflMode, Sp, Space, Ty, SHARED_BASE, V};
use super::SimError;
use std::collections::HashMap;

/// Launch geometry: blocks and threads per block (x, y, z), and dynamic shared memory per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Blocks in x, y, z.
    pub blocks: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub threads: (u32, u32, u32),
    /// Bytes of dynamic shared memory per block.
    pub dyn_shared_bytes: u32,
}

impl Grid {
    /// A 1-D grid of `blocks` blocks of `threads` threads, no dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Grid {
        Grid {
            blocks: (blocks, 1, 1),
            threads: (threads, 1, 1),
            dyn_shared_bytes: 0,
        }
    }

    /// The same grid with `bytes` of dynamic shared memory per block.
    pub fn with_dyn_shared(self, bytes: u32) -> Grid {
        Grid {
            dyn_shared_bytes: bytes,
            ..self
        }
    }
}

/// Checks beyond the defaults.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Every branch must be warp-uniform and no warp may diverge (for kernels that promise it).
    pub uniform_branches: bool,
    /// Stop with an error after this many warp instructions (a kernel that never ends).
    pub max_warp_instructions: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            uniform_branches: false,
            max_warp_instructions: 1 << 32,
        }
    }
}

/// Executed warp instructions, by kind.
#[derive(Default, Debug, Clone)]
pub struct Counts {
    /// Every warp instruction.
    pub total: u64,
    /// Shared-memory loads, stores and atomics.
    pub shared: u64,
    /// Global-memory loads, stores and atomics.
    pub global: u64,
    /// Shuffles, votes and matches.
    pub warp_ops: u64,
    /// Executions per instruction index.
    pub per_instr: Vec<u64>,
}

struct Warp {
    pc: [usize; 32],
    live: u32,
    regs: Vec<u64>,
    block: u32,
    warp_in_block: u32,
    waiting: bool,
}

fn mask(bits: u32, v: u64) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

fn sext(bits: u32, v: u64) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        let s = 64 - bits;
        ((v << s) as i64) >> s
    }
}

struct Ctx<'a> {
    prog: &'a Program,
    grid: Grid,
    params: &'a [u64],
    opts: Options,
}

impl Program {
    /// Runs the kernel with type-checked arguments and the default [`Options`].
    pub fn run(&self, grid: Grid, args: &[Arg], mem: &mut Memory) -> Result<Counts, SimError> {
        self.run_with(grid, args, mem, Options::default())
    }

    /// Runs the kernel with type-checked arguments.
    pub fn run_with(
        &self,
        grid: Grid,
        args: &[Arg],
        mem: &mut Memory,
        opts: Options,
    ) -> Result<Counts, SimError> {
        check_args(&self.params, args)?;
        let bits: Vec<u64> = args.iter().map(|a| a.bits()).collect();
        self.run_raw(grid, &bits, mem, opts)
    }

    /// Runs the kernel with raw parameter bits (one `u64` per parameter, unchecked types).
    pub fn run_raw(
        &self,
        grid: Grid,
        params: &[u64],
        mem: &mut Memory,
        opts: Options,
    ) -> Result<Counts, SimError> {
        let fail = |problem: String| SimError {
            line: 0,
            instruction: String::new(),
            problem,
        };
        if params.len() != self.params.len() {
            return Err(fail(format!(
                "{} parameters given, the kernel takes {}",
                params.len(),
                self.params.len()
            )));
        }
        let (bx, by, bz) = grid.blocks;
        let (tx, ty, tz) = grid.threads;
        let blocks = u64::from(bx) * u64::from(by) * u64::from(bz);
        let threads = u64::from(tx) * u64::from(ty) * u64::from(tz);
        if blocks == 0 || threads == 0 || threads > 1024 || blocks > 1 << 20 {
            return Err(fail(format!(
                "grid {:?} x block {:?}: need 1..=1024 threads and 1..=2^20 blocks",
                grid.blocks, grid.threads
            )));
        }
        let (blocks, threads) = (blocks as u32, threads as u32);
        let wpb = threads.div_ceil(32);
        let shared_bytes = self.static_shared as usize + grid.dyn_shared_bytes as usize;
        let mut shared: Vec<Vec<u8>> = (0..blocks).map(|_| vec![0xA5u8; shared_bytes]).collect();
        let mut warps: Vec<Warp> = (0..blocks * wpb)
            .map(|i| {
                let wib = i % wpb;
                let lanes = (threads - wib * 32).min(32);
                Warp {
                    pc: [0; 32],
                    live: if lanes == 32 {
                        u32::MAX
                    } else {
                        (1u32 << lanes) - 1
                    },
                    regs: vec![0; self.n_regs * 32],
                    block: i / wpb,
                    warp_in_block: wib,
                    waiting: false,
                }
            })
            .collect();
        let mut counts = Counts {
            per_instr: vec![0; self.instrs.len()],
            ..Counts::default()
        };
        let cx = Ctx {
            prog: self,
            grid,
            params,
            opts,
        };
        let mut quantum = 7usize;
        loop {
            let mut progressed = false;
            let mut any_left = false;
            for w in warps.iter_mut() {
                if w.live == 0 {
                    continue;
                }
                any_left = true;
                if w.waiting {
                    continue;
                }
                quantum = (quantum * 31 + 17) % 97 + 1;
                for _ in 0..quantum {
                    if w.live == 0 || w.waiting {
                        break;
                    }
                    let sh = &mut shared[w.block as usize];
                    cx.step(w, sh, mem, &mut counts)?;
                    progressed = true;
                }
                if counts.total > opts.max_warp_instructions {
                    return Err(fail(format!(
                        "more than {} warp instructions: the kernel does not end",
                        opts.max_warp_instructions
                    )));
                }
            }
            if !any_left {
                return Ok(counts);
            }
            // Release every block whose live warps all wait at the barrier.
            for b in 0..blocks {
                let ws = &mut warps[(b * wpb) as usize..((b + 1) * wpb) as usize];
                if ws.iter().any(|w| w.waiting) && ws.iter().all(|w| w.waiting || w.live == 0) {
                    ws.iter_mut().for_each(|w| w.waiting = false);
                    progressed = true;
                }
            }
            if !progressed {
                return Err(fail("deadlock: warps wait at bar.sync forever".into()));
            }
        }
    }
}

impl Ctx<'_> {
    fn special(&self, w: &Warp, s: Sp, l: usize) -> u64 {
        let (tx, ty, _) = self.grid.threads;
        let (bx, by, _) = self.grid.blocks;
        let t = w.warp_in_block * 32 + l as u32;
        let dim3 = |v: u32, x: u32, y: u32, d: u8| match d {
            0 => v % x,
            1 => (v / x) % y,
            _ => v / (x * y),
        };
        let pick = |t: (u32, u32, u32), d: u8| match d {
            0 => t.0,
            1 => t.1,
            _ => t.2,
        };
        u64::from(match s {
            Sp::Tid(d) => dim3(t, tx, ty, d),
            Sp::Ntid(d) => pick(self.grid.threads, d),
            Sp::Ctaid(d) => dim3(w.block, bx, by, d),
            Sp::Nctaid(d) => pick(self.grid.blocks, d),
            Sp::LaneId => l as u32,
            Sp::WarpId => w.warp_in_block,
        })
    }

    fn rd(&self, w: &Warp, v: &V, l: usize) -> u64 {
        match v {
            V::R(r) => w.regs[r * 32 + l],
            V::I(i) => *i,
            V::Sp(s) => self.special(w, *s, l),
        }
    }

    fn step(
        &self,
        w: &mut Warp,
        sh: &mut [u8],
        mem: &mut Memory,
        c: &mut Counts,
    ) -> Result<(), SimError> {
        let prog = self.prog;
        let mut pc0 = usize::MAX;
        for l in 0..32 {
            if w.live >> l & 1 == 1 {
                pc0 = pc0.min(w.pc[l]);
            }
        }
        let Some(ins) = prog.instrs.get(pc0) else {
            return Err(SimError {
                line: 0,
                instruction: String::new(),
                problem: "a thread ran past the last instruction".into(),
            });
        };
        let fail = |problem: String| SimError {
            line: ins.line + 1,
            instruction: prog.text[ins.line].trim().to_string(),
            problem,
        };
        let mut group = 0u32;
        for l in 0..32 {
            if w.live >> l & 1 == 1 && w.pc[l] == pc0 {
                group |= 1 << l;
            }
        }
        if self.opts.uniform_branches && group != w.live {
            return Err(fail("the warp diverged (uniform branches required)".into()));
        }
        let mut on = 0u32;
        for l in 0..32 {
            if group >> l & 1 == 1 {
                let g = match ins.guard {
                    None => true,
                    Some((p, neg)) => (w.regs[p * 32 + l] != 0) != neg,
                };
                if g {
                    on |= 1 << l;
                }
                w.pc[l] = pc0 + 1;
            }
        }
        c.total += 1;
        c.per_instr[pc0] += 1;
        match &ins.op {
            Op::Bra(t) => {
                if self.opts.uniform_branches && on != 0 && on != group {
                    return Err(fail("divergent branch (uniform branches required)".into()));
                }
                for l in 0..32 {
                    if on >> l & 1 == 1 {
                        w.pc[l] = *t;
                    }
                }
                return Ok(());
            }
            Op::Ret => {
                w.live &= !on;
                return Ok(());
            }
            Op::BarWarp | Op::Nop => return Ok(()),
            Op::BarSync => {
                if group != w.live || on != group {
                    return Err(fail(
                        "bar.sync reached by a diverged or predicated warp".into(),
                    ));
                }
                w.waiting = true;
                return Ok(());
            }
            Op::Shfl(_) | Op::Ballot | Op::VoteAny | Op::VoteAll | Op::MatchAny => {
                c.warp_ops += 1;
                if on != u32::MAX {
                    return Err(fail(format!(
                        "full-warp operation with lanes {:#010x} active (all 32 must be)",
                        on
                    )));
                }
                let vals: Vec<u64> = (0..32).map(|l| self.rd(w, &ins.s[0], l)).collect();
                let ballot: u64 = (0..32).filter(|&l| vals[l] != 0).map(|l| 1u64 << l).sum();
                let mut out = [0u64; 32];
                for (l, o) in out.iter_mut().enumerate() {
                    *o = match &ins.op {
                        Op::Ballot => ballot,
                        Op::VoteAny => u64::from(ballot != 0),
                        Op::VoteAll => u64::from(ballot == 0xffff_ffff),
                        Op::MatchAny => (0..32)
                            .filter(|&j| vals[j] as u32 == vals[l] as u32)
                            .map(|j| 1u64 << j)
                            .sum(),
                        Op::Shfl(mode) => {
                            let b = (self.rd(w, &ins.s[1], l) & 31) as usize;
                            let src = match mode {
                                ShflMode::Idx => b,
                                ShflMode::Bfly => l ^ b,
                                ShflMode::Down if l + b < 32 => l + b,
                                ShflMode::Up if l >= b => l - b,
                                _ => l,
                            };
                            vals[src] & 0xffff_ffff
                        }
                        _ => 0,
                    };
                }
                for (l, o) in out.iter().enumerate() {
                    w.regs[ins.d[0] * 32 + l] = *o;
                }
                return Ok(());
            }
            _ => {}
        }
        self.lanes(ins, w, on, sh, mem).map_err(fail)?;
        match ins.op {
            Op::Ld { space, .. } | Op::St { space, .. } | Op::AtomAdd { space, .. } => {
                if space == Space::Shared {
                    c.shared += 1
                } else {
                    c.global += 1
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn lanes(
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
                    if addr % (bytes * vec) != 0 {
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
                            let v = cell
                                .iter()
                                .rev()
                                .fold(0u64, |acc, &x| (acc << 8) | x as u64);
                            let v = if ins.ty.kind == Kind::S {
                                sext(bits, v) as u64
                            } else {
                                v
                            };
                            w.regs[ins.d[e as usize] * 32 + l] = v;
                        }
                    }
                }
                Op::AtomAdd { space, ret } => {
                    let (b, o) = ins.addr.as_ref().ok_or("memory operand")?;
                    let addr = self.rd(w, b, l).wrapping_add(*o as u64);
                    let n = u64::from(bits / 8);
                    if addr % n != 0 {
                        return Err(format!("misaligned {n}-byte atomic at {addr:#x}"));
                    }
                    let cell = cell(*space, addr, n, sh, mem)?;
                    let old = cell
                        .iter()
                        .rev()
                        .fold(0u64, |acc, &x| (acc << 8) | x as u64);
                    let v = self.rd(w, &ins.s[0], l);
                    let new = alu(&Op::Add, ins.ty, &[old, v])?;
                    cell.copy_from_slice(&new.to_le_bytes()[..n as usize]);
                    if *ret {
                        w.regs[ins.d[0] * 32 + l] = old;
                    }
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

fn cell<'a>(
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

fn f_in(bits: u32, v: u64) -> f64 {
    if bits == 32 {
        f64::from(f32::from_bits(v as u32))
    } else {
        f64::from_bits(v)
    }
}

fn f_out(bits: u32, x: f64) -> u64 {
    if bits == 32 {
        u64::from((x as f32).to_bits())
    } else {
        x.to_bits()
    }
}

/// Float ops in the instruction's own precision (f32 arithmetic rounds like the GPU's `.rn`).
fn float(op: &Op, bits: u32, s: &[u64]) -> Result<u64, String> {
    if bits == 32 {
        let a: Vec<f32> = s.iter().map(|&v| f32::from_bits(v as u32)).collect();
        let r = match op {
            Op::Add => a[0] + a[1],
            Op::Sub => a[0] - a[1],
            Op::MulLo => a[0] * a[1],
            Op::Fma => a[0].mul_add(a[1], a[2]),
            Op::Div => a[0] / a[1],
            Op::Min => a[0].min(a[1]),
            Op::Max => a[0].max(a[1]),
            Op::Neg => -a[0],
            Op::Abs => a[0].abs(),
            Op::Rcp => 1.0 / a[0],
            Op::Sqrt => a[0].sqrt(),
            Op::Rsqrt => 1.0 / a[0].sqrt(),
            Op::Ex2 => a[0].exp2(),
            Op::Lg2 => a[0].log2(),
            Op::Sin => a[0].sin(),
            Op::Cos => a[0].cos(),
            _ => return Err(format!("{op:?} is not modelled on f32")),
        };
        return Ok(u64::from(r.to_bits()));
    }
    let a: Vec<f64> = s.iter().map(|&v| f64::from_bits(v)).collect();
    let r = match op {
        Op::Add => a[0] + a[1],
        Op::Sub => a[0] - a[1],
        Op::MulLo => a[0] * a[1],
        Op::Fma => a[0].mul_add(a[1], a[2]),
        Op::Div => a[0] / a[1],
        Op::Min => a[0].min(a[1]),
        Op::Max => a[0].max(a[1]),
        Op::Neg => -a[0],
        Op::Abs => a[0].abs(),
        Op::Rcp => 1.0 / a[0],
        Op::Sqrt => a[0].sqrt(),
        Op::Rsqrt => 1.0 / a[0].sqrt(),
        _ => return Err(format!("{op:?} is not modelled on f64")),
    };
    Ok(r.to_bits())
}

fn alu(op: &Op, ty: Ty, s: &[u64]) -> Result<u64, String> {
    let bits = ty.bits;
    let m = |v: u64| mask(bits, v);
    let signed = ty.kind == Kind::S;
    let need = |n: usize| -> Result<(), String> {
        if s.len() < n {
            Err("missing operands".into())
        } else {
            Ok(())
        }
    };
    match op {
        Op::Setp(cmp) => {
            need(2)?;
            return Ok(u64::from(compare(*cmp, ty, s[0], s[1])));
        }
        Op::Selp => {
            need(3)?;
            return Ok(if s[2] != 0 { s[0] } else { s[1] });
        }
        Op::Cvt {
            from,
            round,
            int_round,
        } => {
            need(1)?;
            return convert(ty, *from, *round, *int_round, s[0]);
        }
        Op::Mov | Op::Cvta => {
            need(1)?;
            return Ok(m(s[0]));
        }
        Op::Pack => {
            need(2)?;
            return Ok((s[0] & 0xffff_ffff) | (s[1] << 32));
        }
        _ => {}
    }
    if ty.kind == Kind::F {
        if bits != 32 && bits != 64 {
            return Err("only f32 and f64 arithmetic is modelled".into());
        }
        let n = match op {
            Op::Fma => 3,
            Op::Neg
            | Op::Abs
            | Op::Rcp
            | Op::Sqrt
            | Op::Rsqrt
            | Op::Ex2
            | Op::Lg2
            | Op::Sin
            | Op::Cos => 1,
            _ => 2,
        };
        need(n)?;
        return float(op, bits, s);
    }
    let u = |i: usize| m(s[i]);
    let i = |k: usize| sext(bits, s[k]);
    let n = match op {
        Op::MadLo | Op::MadWide | Op::Prmt => 3,
        Op::Not | Op::Neg | Op::Abs | Op::Brev | Op::Clz | Op::Popc => 1,
        _ => 2,
    };
    need(n)?;
    Ok(match op {
        Op::Add => m(s[0].wrapping_add(s[1])),
        Op::Sub => m(s[0].wrapping_sub(s[1])),
        Op::MulLo => m(s[0].wrapping_mul(s[1])),
        Op::MulHi if signed => m(((i128::from(i(0)) * i128::from(i(1))) >> bits) as u64),
        Op::MulHi => m(((u128::from(u(0)) * u128::from(u(1))) >> bits) as u64),
        Op::MulWide if signed => (i(0).wrapping_mul(i(1))) as u64,
        Op::MulWide => u(0).wrapping_mul(u(1)),
        Op::MadLo => m(s[0].wrapping_mul(s[1]).wrapping_add(s[2])),
        Op::MadWide if signed => (i(0).wrapping_mul(i(1))).wrapping_add(s[2] as i64) as u64,
        Op::MadWide => u(0).wrapping_mul(u(1)).wrapping_add(s[2]),
        Op::Div | Op::Rem if u(1) == 0 => return Err("integer division by zero".into()),
        Op::Div if signed => m(i(0).wrapping_div(i(1)) as u64),
        Op::Div => u(0) / u(1),
        Op::Rem if signed => m(i(0).wrapping_rem(i(1)) as u64),
        Op::Rem => u(0) % u(1),
        Op::Min if signed => m(i(0).min(i(1)) as u64),
        Op::Min => u(0).min(u(1)),
        Op::Max if signed => m(i(0).max(i(1)) as u64),
        Op::Max => u(0).max(u(1)),
        Op::Neg => m(i(0).wrapping_neg() as u64),
        Op::Abs => m(i(0).wrapping_abs() as u64),
        Op::And => s[0] & s[1],
        Op::Or => s[0] | s[1],
        Op::Xor => s[0] ^ s[1],
        Op::Not => m(!s[0]),
        Op::Shl if s[1] as u32 as u64 >= u64::from(bits) => 0,
        Op::Shl => m(s[0] << s[1]),
        Op::Shr if signed => {
            let sh = (s[1] as u32).min(bits - 1);
            m((i(0) >> sh) as u64)
        }
        Op::Shr if s[1] as u32 as u64 >= u64::from(bits) => 0,
        Op::Shr => u(0) >> s[1],
        Op::Brev if bits == 64 => s[0].reverse_bits(),
        Op::Brev => u64::from((s[0] as u32).reverse_bits()),
        Op::Clz if bits == 64 => u64::from(s[0].leading_zeros()),
        Op::Clz => u64::from((s[0] as u32).leading_zeros()),
        Op::Popc => u64::from(u(0).count_ones()),
        Op::Prmt => {
            let bytes = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
            let sel = s[2] as u32;
            (0..4).fold(0u64, |acc, k| {
                let nib = (sel >> (4 * k)) & 7;
                acc | (((bytes >> (8 * nib)) & 0xff) << (8 * k))
            })
        }
        other => return Err(format!("{other:?} is not modelled on integers")),
    })
}

fn compare(cmp: Cmp, ty: Ty, a: u64, b: u64) -> bool {
    use std::cmp::Ordering;
    let ord = match ty.kind {
        Kind::F => {
            let (x, y) = (f_in(ty.bits, a), f_in(ty.bits, b));
            let unordered = x.is_nan() || y.is_nan();
            return match cmp {
                Cmp::Num => !unordered,
                Cmp::Nan => unordered,
                Cmp::Equ | Cmp::Neu | Cmp::Ltu | Cmp::Leu | Cmp::Gtu | Cmp::Geu if unordered => {
                    true
                }
                _ if unordered => false,
                Cmp::Eq | Cmp::Equ => x == y,
                Cmp::Ne | Cmp::Neu => x != y,
                Cmp::Lt | Cmp::Ltu => x < y,
                Cmp::Le | Cmp::Leu => x <= y,
                Cmp::Gt | Cmp::Gtu => x > y,
                Cmp::Ge | Cmp::Geu => x >= y,
            };
        }
        Kind::S => sext(ty.bits, a).cmp(&sext(ty.bits, b)),
        _ => mask(ty.bits, a).cmp(&mask(ty.bits, b)),
    };
    match cmp {
        Cmp::Eq | Cmp::Equ => ord == Ordering::Equal,
        Cmp::Ne | Cmp::Neu => ord != Ordering::Equal,
        Cmp::Lt | Cmp::Ltu => ord == Ordering::Less,
        Cmp::Le | Cmp::Leu => ord != Ordering::Greater,
        Cmp::Gt | Cmp::Gtu => ord == Ordering::Greater,
        Cmp::Ge | Cmp::Geu => ord != Ordering::Less,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

fn convert(to: Ty, from: Ty, round: Option<Round>, int_round: bool, v: u64) -> Result<u64, String> {
    if to.kind == Kind::Pred || from.kind == Kind::Pred {
        return Err("cvt does not take predicates".into());
    }
    if (to.kind == Kind::F || from.kind == Kind::F) && (to.bits == 16 || from.bits == 16) {
        return Err("f16 conversions are not modelled".into());
    }
    match (from.kind == Kind::F, to.kind == Kind::F) {
        (true, true) => Ok(f_out(to.bits, f_in(from.bits, v))),
        (false, true) => {
            let x = if from.kind == Kind::S {
                sext(from.bits, v) as f64
            } else {
                mask(from.bits, v) as f64
            };
            // Exact for every integer up to 2^53; u64/s64 beyond that round once more.
            Ok(f_out(to.bits, x))
        }
        (true, false) => {
            let x = f_in(from.bits, v);
            let r = match (round, int_round) {
                (Some(Round::Near), _) => x.round_ties_even(),
                (Some(Round::Down), _) => x.floor(),
                (Some(Round::Up), _) => x.ceil(),
                _ => x.trunc(),
            };
            if r.is_nan() {
                return Ok(0);
            }
            Ok(if to.kind == Kind::S {
                let lo = -(2f64.powi(to.bits as i32 - 1));
                let hi = 2f64.powi(to.bits as i32 - 1) - 1.0;
                mask(to.bits, r.clamp(lo, hi) as i64 as u64)
            } else {
                let hi = 2f64.powi(to.bits as i32) - 1.0;
                mask(to.bits, r.clamp(0.0, hi) as u64)
            })
        }
        (false, false) => {
            let x = if from.kind == Kind::S {
                sext(from.bits, v) as u64
            } else {
                mask(from.bits, v)
            };
            Ok(mask(to.bits, x))
        }
    }
}
