//! The expanded f32 forward's launch pieces in the PTX interpreter (all in the built-in kernel
//! since session 12; variants name them):
//! - the fused row sum (`forward_fast::Options::fused`, `f1-g0`: the last block of each point
//!   block adds the chunk rows): values bit-identical to the two-launch kernel's (`l0-f0-g0`,
//!   session 11's) rows summed by `gaussian_reduce_rows`, with one chunk and with several (row
//!   groups of 4 and a remainder), over two launches on the same counters (each launch leaves
//!   them at zero), and the same chunk rows;
//! - the lazy subtract staging (`l1`): the same bits on plain, mixed and all-flagged tiles;
//! - the chunk table (`f1-g100`): equal chunks from the table give the same bits as equal
//!   chunks from `chunk_len`, uneven ones the one-chunk values within 1e-6 relative.
//!
//! On the GPU the bench's `PTXFLOW_GAUSS_FAST_AB` compares values bit for bit, and the GPU tests
//! run the built-in kernel.

mod common;
mod gaussian_support;

use gaussian_support::device::{options, random_problem, rounded};
use gaussian_support::*;
use ptxflow::gaussian::generate::convert;
use ptxflow::gaussian::gpu::fast;
use ptxflow::gaussian::gpu::stage_prepared;
use ptxflow::gaussian::layout::{self, Prepared};
use ptxflow::kernels::gaussian::common::{f32_exp_scale, GAUSSIAN_PAD};
use ptxflow::kernels::gaussian::forward::BLOCK;
use ptxflow::kernels::gaussian::{forward_fast, reduce};
use ptxflow::kernels::KernelId;
use ptxflow::ptx::Target;
use ptxflow::sim::{Arg, Grid, Memory, Options, Program};

fn prepared(q: &Problem) -> Vec<Prepared<f32>> {
    let mut prep = Vec::new();
    let eps = options(false).diag_eps as f32;
    layout::prepare(&convert::<f32>(&q.gaussians), false, eps, &mut prep).unwrap();
    prep
}

fn program_of(m: &ptxflow::ptx::Module) -> Program {
    Program::parse(&m.emit().unwrap()).unwrap_or_else(|e| panic!("{e}"))
}

fn run(prog: &Program, grid: (u32, u32), args: &[Arg], mem: &mut Memory, threads: u32) {
    let g = Grid {
        blocks: (grid.0, grid.1, 1),
        threads: (threads, 1, 1),
        dyn_shared_bytes: 0,
    };
    prog.run_with(g, args, mem, Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
}

/// (values, chunk rows) of the two-launch kernel (`l0-f0-g0`, session 11's) +
/// `gaussian_reduce_rows` and, per
/// launch, of the fused variant (`f1-g0`), with Gaussian chunks of `chunk_len`.
type Outputs = ((Vec<f32>, Vec<f32>), Vec<(Vec<f32>, Vec<f32>)>);

fn forward_both(q: &Problem, chunk_len: u32, launches: usize) -> Outputs {
    forward_pair(q, chunk_len, launches, "f1-g0")
}

/// [`forward_both`] with the fused variant `name` (equal chunks, so `g0`).
fn forward_pair(q: &Problem, chunk_len: u32, launches: usize, name: &str) -> Outputs {
    let prep = prepared(q);
    let n_pad = prep.len().div_ceil(GAUSSIAN_PAD as usize) * GAUSSIAN_PAD as usize;
    let (mut staged, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prep, n_pad, &mut staged, &mut comp);
    let o = fast::stage(&prep, n_pad, f32_exp_scale(), &mut recs);
    let points = convert::<f32>(&q.points);
    let b = points.len() / 3;
    let point_blocks = (b as u32).div_ceil(BLOCK * forward_fast::POINTS_PER_THREAD);
    let chunks = (n_pad as u32).div_ceil(chunk_len);
    let grid = (point_blocks, chunks);
    let mut mem = Memory::new();
    let prep_a = mem.upload("prep", &staged);
    let fast_a = mem.upload("fast", &recs);
    let pts_a = mem.upload("points", &points);
    let rows_len = chunks as usize * b;
    let part = mem.upload("partial", &vec![f32::NAN; rows_len]);
    let out = mem.upload("values", &vec![f32::NAN; b]);
    let counters = mem.upload("counters", &vec![0u32; point_blocks as usize]);
    let args = [
        prep_a,
        fast_a,
        Arg::U32(n_pad as u32),
        Arg::U32(chunk_len),
        pts_a,
        Arg::U32(b as u32),
        part,
        Arg::F32(o[0]),
        Arg::F32(o[1]),
        Arg::F32(o[2]),
    ];
    // The two-launch kernel (equal chunks, no fused sum), then the row sums (one chunk: its
    // rows are the values).
    let two_launch = program_of(&forward_fast::variant("l0-f0-g0").expect("the l0-f0-g0 variant"));
    run(&two_launch, grid, &args, &mut mem, BLOCK);
    let rows = program_of(&KernelId::GaussianReduceRowsF32.build(Target::Sm75));
    let bb = Arg::U32(b as u32);
    let sum_args = [part, Arg::U32(chunks), bb, bb, Arg::F32(1.0), out];
    run(&rows, (1, 1), &sum_args, &mut mem, reduce::BLOCK);
    let base_rows = mem.download::<f32>("partial").unwrap();
    let base = if chunks == 1 {
        base_rows[..b].to_vec()
    } else {
        mem.download::<f32>("values").unwrap()
    };
    let fused = program_of(&forward_fast::variant(name).expect("a fused variant"));
    let mut got = Vec::new();
    for k in 0..launches {
        let (part_name, values_name) = (format!("partial{k}"), format!("values{k}"));
        let part = mem.upload(&part_name, &vec![f32::NAN; rows_len]);
        let out = mem.upload(&values_name, &vec![f32::NAN; b]);
        // One chunk: the rows are the values, and the values pointer is not used.
        let values = if chunks == 1 { fast_a } else { out };
        let mut fargs = args.to_vec();
        fargs[6] = part;
        fargs.extend([values, counters]);
        run(&fused, grid, &fargs, &mut mem, BLOCK);
        assert_eq!(
            mem.download::<u32>("counters").unwrap(),
            vec![0u32; point_blocks as usize],
            "every launch leaves the counters at zero"
        );
        let rows = mem.download::<f32>(&part_name).unwrap();
        let values = if chunks == 1 {
            rows[..b].to_vec()
        } else {
            mem.download::<f32>(&values_name).unwrap()
        };
        got.push((values, rows));
    }
    ((base, base_rows), got)
}

/// Values of the scheduled fused variant with chunk `starts` (`starts[c]..starts[c + 1]`).
fn scheduled(q: &Problem, starts: &[u32]) -> Vec<f32> {
    let prep = prepared(q);
    let n_pad = prep.len().div_ceil(GAUSSIAN_PAD as usize) * GAUSSIAN_PAD as usize;
    assert_eq!(*starts.last().unwrap() as usize, n_pad);
    let (mut staged, mut comp, mut recs) = (Vec::new(), Vec::new(), Vec::new());
    stage_prepared(&prep, n_pad, &mut staged, &mut comp);
    let o = fast::stage(&prep, n_pad, f32_exp_scale(), &mut recs);
    let points = convert::<f32>(&q.points);
    let b = points.len() / 3;
    let point_blocks = (b as u32).div_ceil(BLOCK * forward_fast::POINTS_PER_THREAD);
    let chunks = starts.len() as u32 - 1;
    let mut mem = Memory::new();
    let args = [
        mem.upload("prep", &staged),
        mem.upload("fast", &recs),
        Arg::U32(n_pad as u32),
        Arg::U32(0),
        mem.upload("points", &points),
        Arg::U32(b as u32),
        mem.upload("partial", &vec![f32::NAN; chunks as usize * b]),
        Arg::F32(o[0]),
        Arg::F32(o[1]),
        Arg::F32(o[2]),
        mem.upload("values", &vec![f32::NAN; b]),
        mem.upload("counters", &vec![0u32; point_blocks as usize]),
        mem.upload("starts", starts),
    ];
    let prog = program_of(&forward_fast::variant("f1-g100").expect("the f1-g100 variant"));
    run(&prog, (point_blocks, chunks), &args, &mut mem, BLOCK);
    mem.download::<f32>("values").unwrap()
}

#[test]
fn interpreted_chunk_schedule_reads_its_table() {
    let q = rounded::<f32>(&random_problem(300, 1700, 43));
    // 300 Gaussians, padded to 512.
    let even: Vec<u32> = (0..=16).map(|c| 32 * c).collect();
    let ((_, _), got) = forward_both(&q, 32, 1);
    assert_eq!(bits(&scheduled(&q, &even)), bits(&got[0].0));
    let ((one, _), _) = forward_both(&q, 512, 0);
    let uneven = scheduled(&q, &[0, 128, 224, 256, 288, 320, 512]);
    for (a, b) in uneven.iter().zip(&one) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1e-30), "{a} vs {b}");
    }
}

/// `p` with every `every`-th Gaussian (from the first; none for `usize::MAX`) shrunk 100x (flagged: its tile keeps the subtract form)
/// and a point near each.
fn with_tiny(p: &Problem, every: usize) -> Problem {
    let mut g = p.gaussians.clone();
    let mut pts = p.points.clone();
    for (j, row) in g.chunks_exact_mut(layout::STRIDE).enumerate() {
        if every != usize::MAX && j % every == 0 {
            for v in &mut row[3..9] {
                *v *= 0.01;
            }
            pts.extend([row[0] + 0.5 * row[3], row[1], row[2] - 0.5 * row[8]]);
        }
    }
    Problem {
        name: "tiny",
        gaussians: g,
        points: pts,
    }
}

#[test]
fn interpreted_lazy_staging_is_bit_identical() {
    // Lazy subtract staging (l1, the built-in's) and staging both forms in every tile (l0,
    // session 11's), on plain, mixed and all-flagged tiles: the same bits. (Larger tiles, t2,
    // are not bit-identical in general: a flagged Gaussian sends its whole tile to the
    // subtract form.)
    let base = random_problem(300, 1000, 45);
    for q in [
        with_tiny(&base, usize::MAX),
        with_tiny(&base, 37),
        with_tiny(&base, 1),
    ] {
        let q = rounded::<f32>(&q);
        for name in ["l1-f1-g0", "l0-f1-g0"] {
            let ((base, base_rows), got) = forward_pair(&q, 192, 1, name);
            let (values, rows) = &got[0];
            assert_eq!(bits(values), bits(&base), "{name}: values");
            assert_eq!(bits(rows), bits(&base_rows), "{name}: chunk rows");
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn interpreted_fused_row_sum_is_bit_identical_to_the_two_launch_path() {
    // 1700 points: 2 point blocks of 768 and a partial third; 300 Gaussians (n_pad 512).
    let q = rounded::<f32>(&random_problem(300, 1700, 41));
    for (chunk_len, launches) in [(32, 2), (64, 1), (96, 1), (512, 1)] {
        let ((base, base_rows), got) = forward_both(&q, chunk_len, launches);
        assert!(base.iter().all(|v| v.is_finite()));
        for (k, (values, rows)) in got.iter().enumerate() {
            assert_eq!(
                bits(values),
                bits(&base),
                "chunk_len {chunk_len}, launch {k}: values"
            );
            assert_eq!(
                bits(rows),
                bits(&base_rows),
                "chunk_len {chunk_len}, launch {k}: chunk rows"
            );
        }
    }
}
