//! `rnn_orth` (the randomized SVD's CholeskyQR) run by the PTX interpreter (`ptxflow::sim`, no
//! GPU needed) against its CPU mirror `ptxflow::rnn::cholqr::cholqr`, bit for bit: one block (so
//! the Gram's sum runs in the mirror's row order), two slabs, two passes, graded columns, `l`
//! below the padded width 48. `PTXFLOW_ORTH_PTX=FILE` runs that PTX instead (e.g. an older
//! build's, to show a change leaves the results alone).

use ptxflow::kernels::rnn::orth::{THREADS, WIDTH};
use ptxflow::kernels::KernelId;
use ptxflow::rng::Rng;
use ptxflow::rnn::cholqr::cholqr;
use ptxflow::sim::{Arg, Grid, Memory, Program};

fn run(
    ptx: &str,
    y: &[f32],
    rows: usize,
    l: usize,
    passes: u32,
    blocks: u32,
) -> (Vec<f32>, Vec<f64>) {
    let w = WIDTH as usize;
    let prog = Program::parse(ptx).expect("the interpreter models rnn_orth");
    let mut mem = Memory::new();
    let args = vec![
        mem.upload("y", y),
        Arg::U32(rows as u32),
        Arg::U32(l as u32),
        Arg::U32(passes),
        mem.upload("partial", &vec![f64::NAN; blocks as usize * w * w]),
        mem.upload("gram", &vec![f64::NAN; w * w]),
        mem.upload("rt", &vec![f64::NAN; 2 * w * w]),
        mem.upload("bar", &[0u32; 4]),
        Arg::U64(0),
        Arg::U32(0),
    ];
    prog.run(Grid::linear(blocks, THREADS), &args, &mut mem)
        .expect("rnn_orth runs");
    let q = mem.download::<f32>("y").expect("y");
    let rt = mem.download::<f64>("rt").expect("rt");
    let slot = ((passes - 1) % 2) as usize;
    (q, rt[slot * w * w..(slot + 1) * w * w].to_vec())
}

#[test]
fn orth_matches_its_cpu_mirror_in_the_interpreter() {
    let (rows, l, w) = (64usize, 42usize, WIDTH as usize);
    let mut rng = Rng::new(7);
    let y: Vec<f32> = (0..rows * w)
        .map(|i| {
            let c = i % w;
            if c < l {
                (rng.normal() * 0.8f64.powi(c as i32)) as f32
            } else {
                0.0
            }
        })
        .collect();
    let id = KernelId::RnnOrth;
    let built = id.build(id.targets()[0]).emit().expect("emit");
    let ptx = match std::env::var("PTXFLOW_ORTH_PTX") {
        Ok(path) => {
            let other = std::fs::read_to_string(path).expect("PTXFLOW_ORTH_PTX file");
            // Two blocks (the grid barrier and the partials' reduction), against the built one.
            let (a, b) = (
                run(&other, &y, rows, l, 2, 2),
                run(&built, &y, rows, l, 2, 2),
            );
            assert!(a == b, "two blocks: the PTX given and the built one differ");
            other
        }
        Err(_) => built,
    };
    let (q, rt) = run(&ptx, &y, rows, l, 2, 1);
    let (q_cpu, rt_cpu) = cholqr(&y, rows, w, l, 2);
    let bits32 = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits32(&q) == bits32(&q_cpu),
        "Q differs from the CPU mirror"
    );
    assert!(
        bits64(&rt) == bits64(&rt_cpu),
        "R_total differs from the CPU mirror"
    );
}
