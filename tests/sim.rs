//! The library's PTX interpreter on user kernels: results against the CPU, divergent warps,
//! block reductions, and errors (never panics) for bad arguments, bad accesses, instructions it
//! does not model and kernels that never end.

use ptxflow::ptx::*;
use ptxflow::sim::{Arg, Grid, Memory, Options, Program};

fn program(m: Module) -> Program {
    Program::parse(&m.emit().unwrap()).unwrap()
}

/// `out[i] = (x[i] > 0.5 ? x[i] * 2 : -x[i]) as i32` with a divergent branch per lane.
fn divergent() -> Module {
    let mut b = KernelBuilder::new("divergent");
    let (n, x) = (b.arg::<U32>("n"), b.global_arg::<F32>("x"));
    let out = b.global_arg::<S32>("out");
    b.grid_stride_x(n, |b, i| {
        let v = b.load_at(x, i);
        let big = b.setp(Cmp::Gt, v, 0.5f32);
        let r = b.reg::<F32>();
        b.if_else(
            big,
            |b| {
                let t = b.mul(v, 2.0f32);
                b.mov_to(r, t);
            },
            |b| {
                let t = b.neg(v);
                b.mov_to(r, t);
            },
        );
        let c = b.cvt_round::<S32, F32>(Round::Rni, r);
        b.store_at(out, i, c);
    });
    Module::single(Target::Sm75, b.finish())
}

#[test]
fn divergent_lanes_reconverge_and_match_the_cpu() {
    let prog = program(divergent());
    let x: Vec<f32> = (0..1000)
        .map(|i| ((i * 37) % 101) as f32 / 100.0 * 7.0)
        .collect();
    let mut mem = Memory::new();
    let xa = mem.upload("x", &x);
    let oa = mem.upload("out", &vec![i32::MIN; x.len()]);
    prog.run(Grid::linear(3, 96), &[Arg::U32(1000), xa, oa], &mut mem)
        .unwrap();
    let got = mem.download::<i32>("out").unwrap();
    for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
        let want = if v > 0.5 { v * 2.0 } else { -v }.round_ties_even() as i32;
        assert_eq!(g, want, "out[{i}]");
    }
}

fn block_max() -> Module {
    let mut b = KernelBuilder::new("block_max");
    b.reqntid(128, 1, 1);
    let (x, n) = (b.global_arg::<U32>("x"), b.arg::<U32>("n"));
    let out = b.global_arg::<U32>("out");
    let acc = b.mov(0u32);
    b.grid_stride_x(n, |b, i| {
        let v = b.load_at(x, i);
        let m = b.max(acc, v);
        b.mov_to(acc, m);
    });
    let m = b.block_reduce(acc, Reduce::Max);
    b.if_first_thread(|b| {
        let c = b.special(Special::CtaidX);
        b.store_at(out, c, m);
    });
    Module::single(Target::Sm75, b.finish())
}

#[test]
fn block_reductions_run_with_barriers_across_warps() {
    let prog = program(block_max());
    let x: Vec<u32> = (0..5000u32)
        .map(|i| i.wrapping_mul(2654435761) >> 7)
        .collect();
    let mut mem = Memory::new();
    let xa = mem.upload("x", &x);
    let oa = mem.upload("out", &[0u32; 4]);
    prog.run(Grid::linear(4, 128), &[xa, Arg::U32(5000), oa], &mut mem)
        .unwrap();
    let got = mem.download::<u32>("out").unwrap();
    // Block b's threads own indices i with (i / 128) % 4 == b (grid-stride over 4 blocks).
    for (blk, &g) in got.iter().enumerate() {
        let want = (0..5000)
            .filter(|i| (i / 128) % 4 == blk)
            .map(|i| x[i])
            .max()
            .unwrap();
        assert_eq!(g, want, "block {blk}");
    }
}

#[test]
fn bad_arguments_and_accesses_are_errors() {
    let prog = program(divergent());
    let mut mem = Memory::new();
    let xa = mem.upload("x", &[1.0f32; 10]);
    let oa = mem.upload("out", &[0i32; 10]);
    let e = prog
        .run(Grid::linear(1, 32), &[Arg::F32(10.0), xa, oa], &mut mem)
        .unwrap_err();
    assert!(e.to_string().contains("argument 0"), "{e}");
    let e = prog
        .run(Grid::linear(1, 32), &[xa, oa], &mut mem)
        .unwrap_err();
    assert!(e.to_string().contains("2 arguments given"), "{e}");
    // n larger than the buffers: the first access past the end is an error naming the line.
    let e = prog
        .run(Grid::linear(1, 32), &[Arg::U32(20), xa, oa], &mut mem)
        .unwrap_err();
    assert!(e.to_string().contains("past its 40 B"), "{e}");
    assert!(e.instruction.starts_with("ld.global.f32"), "{e}");
}

#[test]
fn instructions_outside_the_model_are_errors() {
    let mut b = KernelBuilder::new("cas");
    let p = b.global_arg::<U32>("p");
    let _ = b.atom_cas::<U32>(Space::Global, p.reg(), 0u32, 1u32);
    let e = Program::parse(&Module::single(Target::Sm75, b.finish()).emit().unwrap()).unwrap_err();
    assert!(e.problem.contains("is not modelled"), "{e}");
    assert!(e.instruction.starts_with("atom.global.cas.b32"), "{e}");
}

#[test]
fn a_kernel_that_never_ends_is_stopped() {
    let mut b = KernelBuilder::new("forever");
    let _ = b.arg::<U32>("n");
    b.loop_forever(|b, _, _| {
        let _ = b.mov(1u32);
    });
    let prog = program(Module::single(Target::Sm75, b.finish()));
    let opts = Options {
        max_warp_instructions: 10_000,
        ..Options::default()
    };
    let e = prog
        .run_with(
            Grid::linear(1, 32),
            &[Arg::U32(0)],
            &mut Memory::new(),
            opts,
        )
        .unwrap_err();
    assert!(e.problem.contains("does not end"), "{e}");
}

/// `bmsk.clamp` against its plain meaning: `width` set bits from bit `pos` on, bits past 31
/// dropped, nothing from bit 32 on or for width 0 (positions and widths up to 40).
#[test]
fn bit_masks_match_the_isa() {
    let mut b = KernelBuilder::new("masks");
    let n = b.arg::<U32>("n");
    let out = b.global_arg::<U32>("out");
    b.grid_stride_x(n, |b, i| {
        let pos = b.rem(i, 41u32);
        let width = b.div(i, 41u32);
        let m = b.bmsk(pos, width);
        b.store_at(out, i, m);
    });
    let prog = program(Module::single(Target::Sm75, b.finish()));
    let n = 41 * 41;
    let mut mem = Memory::new();
    let args = [Arg::U32(n), mem.upload("out", &vec![0u32; n as usize])];
    prog.run(Grid::linear(4, 128), &args, &mut mem).unwrap();
    let got = mem.download::<u32>("out").unwrap();
    for i in 0..n {
        let (pos, width) = (i % 41, i / 41);
        let want = (0..32u32)
            .filter(|&k| k >= pos && k - pos < width)
            .fold(0u32, |acc, k| acc | 1 << k);
        assert_eq!(got[i as usize], want, "bmsk.clamp pos {pos} width {width}");
    }
}

/// `bfe` on u32 and s32 against the PTX ISA's definition (`len` bits from `pos`; bits past the
/// msb read as 0 or the sign; a signed field sign-extended; length 0 gives 0).
#[test]
fn bit_field_extracts_match_the_isa() {
    let mut b = KernelBuilder::new("fields");
    let n = b.arg::<U32>("n");
    let (xu, xs) = (b.global_arg::<U32>("xu"), b.global_arg::<S32>("xs"));
    let (ou, os) = (b.global_arg::<U32>("ou"), b.global_arg::<S32>("os"));
    b.grid_stride_x(n, |b, i| {
        let pos = b.mul(i, 7u32);
        let pos = b.rem(pos, 40u32);
        let len = b.mul(i, 5u32);
        let len = b.rem(len, 36u32);
        let (u, s) = (b.load_at(xu, i), b.load_at(xs, i));
        let (fu, fs) = (b.bfe(u, pos, len), b.bfe(s, pos, len));
        b.store_at(ou, i, fu);
        b.store_at(os, i, fs);
    });
    let prog = program(Module::single(Target::Sm75, b.finish()));
    let x: Vec<u32> = (0..96u32)
        .map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i << 29))
        .collect();
    let xs: Vec<i32> = x.iter().map(|&v| v as i32).collect();
    let mut mem = Memory::new();
    let args = [
        Arg::U32(96),
        mem.upload("xu", &x),
        mem.upload("xs", &xs),
        mem.upload("ou", &[0u32; 96]),
        mem.upload("os", &[0i32; 96]),
    ];
    prog.run(Grid::linear(1, 96), &args, &mut mem).unwrap();
    let (ou, os) = (
        mem.download::<u32>("ou").unwrap(),
        mem.download::<i32>("os").unwrap(),
    );
    for (i, &v) in x.iter().enumerate() {
        let (pos, len) = ((i as u32 * 7) % 40, (i as u32 * 5) % 36);
        let bit = |k: u32, sign: bool| match k {
            k if k <= 31 => (v >> k) & 1,
            _ if sign => v >> 31,
            _ => 0,
        };
        let field = |sign: bool| {
            if len == 0 {
                return 0;
            }
            let sbit = if sign {
                bit((pos + len - 1).min(31), true)
            } else {
                0
            };
            (0..32).fold(0u32, |acc, k| {
                let b = if k < len && pos + k <= 31 {
                    bit(pos + k, sign)
                } else {
                    sbit
                };
                acc | (b << k)
            })
        };
        assert_eq!(ou[i], field(false), "bfe.u32 {v:#x} pos {pos} len {len}");
        assert_eq!(
            os[i] as u32,
            field(true),
            "bfe.s32 {v:#x} pos {pos} len {len}"
        );
    }
}
