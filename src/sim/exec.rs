//! The interpreter's scheduler and warp execution (see the [module docs](super)).

use super::grid::{Counts, Grid, Options};
use super::memory::{check_args, Arg, Memory};
use super::parse::{Op, Program, ShflMode, Sp, Space, V};
use super::SimError;

pub(super) struct Warp {
    pc: [usize; 32],
    live: u32,
    pub(super) regs: Vec<u64>,
    block: u32,
    warp_in_block: u32,
    waiting: bool,
}

pub(super) struct Ctx<'a> {
    prog: &'a Program,
    grid: Grid,
    pub(super) params: &'a [u64],
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
            Sp::Clock => 0,
        })
    }

    pub(super) fn rd(&self, w: &Warp, v: &V, l: usize) -> u64 {
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
            Op::MmaF64 { rows } => {
                let rows = *rows;
                c.warp_ops += 1;
                if on != u32::MAX {
                    return Err(fail(format!(
                        "mma with lanes {:#010x} active (all 32 must be)",
                        on
                    )));
                }
                let f = |v: u64| f64::from_bits(v);
                let n_in = 1 + 3 * rows;
                let vals: Vec<Vec<f64>> = (0..32)
                    .map(|l| (0..n_in).map(|k| f(self.rd(w, &ins.s[k], l))).collect())
                    .collect();
                // Lane 4g + t holds A[g + 8h][t] (h < rows), B[t][g] and C[g + 8h][2t + i]; D =
                // C + A B with the products added to C in k order, each rounded (an fma chain).
                for (l, v) in vals.iter().enumerate() {
                    let (g, t) = (l / 4, l % 4);
                    for h in 0..rows {
                        for i in 0..2 {
                            let n = 2 * t + i;
                            let mut acc = v[rows + 1 + 2 * h + i];
                            for k in 0..4 {
                                acc = vals[4 * g + k][h].mul_add(vals[4 * n + k][rows], acc);
                            }
                            w.regs[ins.d[2 * h + i] * 32 + l] = acc.to_bits();
                        }
                    }
                }
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
            Op::Ld { space, .. }
            | Op::St { space, .. }
            | Op::AtomAdd { space, .. }
            | Op::AtomBits { space, .. } => {
                if space == Space::Shared {
                    c.shared += 1
                } else {
                    c.global += 1
                }
            }
            Op::CpAsync16 => c.global += 1,
            _ => {}
        }
        Ok(())
    }
}
