//! The crate's one error type. Every variant carries the context a user needs to act on it.

use std::path::PathBuf;

/// Result alias used throughout ptxflow.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ptxflow.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable CUDA device: libcuda is missing, the driver failed to initialise, or there are
    /// zero devices. Callers that have a CPU path fall back to it.
    #[error("no CUDA device: {reason}")]
    NoDevice { reason: String },

    /// A CUDA driver call failed. `call` names what ptxflow was doing.
    #[error("CUDA driver error during {call}: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// The driver refused to load (JIT) the PTX module of a kernel.
    #[error("loading PTX module for kernel `{kernel}` failed: {source}")]
    ModuleLoad {
        kernel: String,
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// Sizes that must agree do not.
    #[error("shape mismatch for {what}: expected {expected}, got {got}")]
    Shape {
        what: String,
        expected: String,
        got: String,
    },

    /// A request exceeds what a pipeline was created for.
    #[error("capacity exceeded for {what}: needed {needed}, capacity {capacity}")]
    Capacity {
        what: String,
        needed: usize,
        capacity: usize,
    },

    /// Input values are invalid (non-finite, out of range, inconsistent).
    #[error("invalid input: {what}")]
    Input { what: String },

    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A file was read but its content is malformed (truncated, bad header, missing fields).
    #[error("{}: {problem}", path.display())]
    Format { path: PathBuf, problem: String },

    /// Compressed data is corrupt (LZ4 blocks or frames).
    #[error("corrupt data: {what}")]
    Corrupt { what: String },

    /// A launch does not fit the kernel's contract (argument count or types, block shape,
    /// dynamic shared memory); caught before anything reaches the driver.
    #[error("launch of kernel `{kernel}` rejected: {problem}")]
    Launch { kernel: String, problem: String },

    /// The PTX builder was misused (see [`crate::ptx::BuildError`]).
    #[error(transparent)]
    Build(#[from] crate::ptx::BuildError),

    /// The PTX interpreter stopped (see [`crate::sim::SimError`]).
    #[error(transparent)]
    Sim(#[from] crate::sim::SimError),

    /// A kernel reported an error through its status output.
    #[error("kernel `{kernel}` reported error code {code}: {detail}")]
    Kernel {
        kernel: &'static str,
        code: u32,
        detail: String,
    },
}

impl Error {
    /// Wraps a driver error with the name of the operation that failed.
    pub fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error + Copy {
        move |source| Error::Driver { call, source }
    }

    /// Shorthand for [`Error::Input`].
    pub fn input(what: impl Into<String>) -> Error {
        Error::Input { what: what.into() }
    }

    /// True when this error means "no GPU here", so a caller may take its CPU path.
    pub fn is_no_device(&self) -> bool {
        matches!(self, Error::NoDevice { .. })
    }
}
