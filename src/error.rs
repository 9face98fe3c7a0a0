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
    NoDevice {
        /// Why: the driver's message, or "no devices".
        reason: String,
    },

    /// A CUDA driver call failed. `call` names what ptxflow was doing.
    #[error("CUDA driver error during {call}: {source}")]
    Driver {
        /// The operation ptxflow was doing (for example "allocate device buffer").
        call: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// The driver refused to load (JIT) the PTX module of a kernel.
    #[error("loading PTX module for kernel `{kernel}` failed: {source}")]
    ModuleLoad {
        /// The kernel's PTX entry name.
        kernel: String,
        /// The driver's error (its JIT log is not included).
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// Sizes that must agree do not.
    #[error("shape mismatch for {what}: expected {expected}, got {got}")]
    Shape {
        /// The input or buffer whose size is wrong.
        what: String,
        /// The size it must have, in words (for example "a multiple of 3").
        expected: String,
        /// The size it has.
        got: String,
    },

    /// A request exceeds what a pipeline was created for.
    #[error("capacity exceeded for {what}: needed {needed}, capacity {capacity}")]
    Capacity {
        /// The pipeline resource that is too small.
        what: String,
        /// How many elements (or bytes, as `what` says) the request needs.
        needed: usize,
        /// How many the pipeline was created for.
        capacity: usize,
    },

    /// Input values are invalid (non-finite, out of range, inconsistent).
    #[error("invalid input: {what}")]
    Input {
        /// What is wrong with the input.
        what: String,
    },

    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file (or directory) the operation was on.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// An I/O operation without a file path failed: a reader or writer the caller passed in (for
    /// example an LZ4 stream over a socket), or a `?` on a plain `std::io::Result`. Errors about a
    /// named file use [`Error::Io`], which says which file.
    ///
    /// ```
    /// fn read_all(r: &mut impl std::io::Read) -> ptxflow::Result<Vec<u8>> {
    ///     let mut bytes = Vec::new();
    ///     r.read_to_end(&mut bytes)?; // std::io::Error -> Error::IoBare
    ///     Ok(bytes)
    /// }
    /// assert_eq!(read_all(&mut &b"abc"[..]).unwrap(), b"abc");
    /// ```
    #[error("I/O error: {0}")]
    IoBare(#[from] std::io::Error),

    /// A file was read but its content is malformed (truncated, bad header, missing fields).
    #[error("{}: {problem}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is malformed, and where when known.
        problem: String,
    },

    /// Compressed data is corrupt (LZ4 blocks or frames).
    #[error("corrupt data: {what}")]
    Corrupt {
        /// Which check failed (block, offset, checksum).
        what: String,
    },

    /// A launch does not fit the kernel's contract (argument count or types, block shape,
    /// dynamic shared memory); caught before anything reaches the driver.
    #[error("launch of kernel `{kernel}` rejected: {problem}")]
    Launch {
        /// The kernel's PTX entry name.
        kernel: String,
        /// What does not fit (argument, type, block shape).
        problem: String,
    },

    /// The PTX builder was misused (see [`crate::ptx::BuildError`]).
    #[error(transparent)]
    Build(#[from] crate::ptx::BuildError),

    /// The PTX interpreter stopped (see [`crate::sim::SimError`]).
    #[error(transparent)]
    Sim(#[from] crate::sim::SimError),

    /// A kernel reported an error through its status output.
    #[error("kernel `{kernel}` reported error code {code}: {detail}")]
    Kernel {
        /// The kernel's PTX entry name.
        kernel: &'static str,
        /// A kernel-specific code: what its status output held, or which host check of it failed.
        code: u32,
        /// What the code means.
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
