//! What the builder reports when it is misused: the kernel, the instruction (or builder call) and
//! the problem. The builder never panics on misuse: it records the first error, keeps going with
//! a placeholder, and [`Module::emit`](super::Module::emit) returns the error.

use std::fmt;

/// A misuse of the PTX builder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    /// The kernel being built.
    pub kernel: String,
    /// The instruction or builder call that was refused (PTX text where there is one).
    pub instruction: String,
    /// What is wrong and, where there is one, what to do instead.
    pub problem: String,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PTX builder: kernel `{}`, `{}`: {}",
            self.kernel, self.instruction, self.problem
        )
    }
}

impl std::error::Error for BuildError {}
