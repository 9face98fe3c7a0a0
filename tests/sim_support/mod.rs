//! The tests' view of the library's PTX interpreter ([`ptxflow::sim`]) with the LZ4 kernels'
//! promises enforced: warp-uniform control flow everywhere, and any interpreter error fails
//! the test with the PTX line.

pub use ptxflow::sim::Counts;
use ptxflow::sim::{Grid, Options};

/// A parsed kernel.
pub struct Program(ptxflow::sim::Program);

impl Program {
    pub fn parse(ptx: &str) -> Program {
        Program(ptxflow::sim::Program::parse(ptx).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The PTX text of instruction `i`.
    pub fn instr_text(&self, i: usize) -> &str {
        self.0.instr_text(i)
    }
}

/// Global memory: named buffers.
#[derive(Default)]
pub struct Memory(ptxflow::sim::Memory);

impl Memory {
    pub fn new() -> Self {
        Memory::default()
    }

    pub fn add(&mut self, name: &str, data: Vec<u8>) -> u64 {
        self.0.add(name, data)
    }

    pub fn get(&self, name: &str) -> &[u8] {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("no buffer `{name}`"))
    }
}

/// Runs `prog` on `blocks` blocks of `threads` threads with `dyn_shared` bytes of dynamic
/// shared memory per block; parameters are raw bits in order.
pub fn launch(
    prog: &Program,
    blocks: u32,
    threads: u32,
    dyn_shared: u32,
    params: &[u64],
    mem: &mut Memory,
) -> Counts {
    launch_with(prog, blocks, threads, dyn_shared, params, mem, true)
}

/// [`launch`], with warp-uniform branches required or (`uniform == false`, for kernels whose
/// half-warps branch on their own) not.
pub fn launch_with(
    prog: &Program,
    blocks: u32,
    threads: u32,
    dyn_shared: u32,
    params: &[u64],
    mem: &mut Memory,
    uniform: bool,
) -> Counts {
    let opts = Options {
        uniform_branches: uniform,
        ..Options::default()
    };
    let grid = Grid::linear(blocks, threads).with_dyn_shared(dyn_shared);
    prog.0
        .run_raw(grid, params, &mut mem.0, opts)
        .unwrap_or_else(|e| panic!("{e}"))
}
