//! Launch geometry, checks and execution counts of the interpreter.

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
