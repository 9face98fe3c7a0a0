//! Outputs that are never half-written: a command writes into a temporary file beside the
//! destination (same directory, so the final rename stays on one file system) and renames it
//! over the destination only once everything succeeded. On an error, or a panic, the temporary
//! file is removed and an existing destination is left as it was.

use ptxflow::{Error, Result};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A destination being written through a temporary file; [`AtomicOutput::commit`] publishes it.
pub struct AtomicOutput {
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl AtomicOutput {
    /// Creates `.<name>.ptxflow-<pid>.tmp` beside `dest`. Fails with [`Error::Io`] (naming
    /// `dest`) when the directory is not writable.
    pub fn create(dest: &Path) -> Result<Self> {
        let name = dest
            .file_name()
            .ok_or_else(|| Error::input(format!("{} is not a file name", dest.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".ptxflow-{}.tmp", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = File::create(&tmp).map_err(io(dest))?;
        Ok(AtomicOutput {
            file: Some(file),
            tmp,
            dest: dest.to_path_buf(),
        })
    }

    /// The temporary file to write (`&File` implements `Write`, and can go to another thread).
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("the file lives until commit")
    }

    /// The destination path (for messages).
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Flushes and renames the temporary file over the destination.
    pub fn commit(mut self) -> Result<()> {
        let mut file = self.file.take().expect("commit runs once");
        file.flush().map_err(io(&self.dest))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.dest).map_err(io(&self.dest))
    }
}

impl Drop for AtomicOutput {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` atomically (see the module docs).
#[allow(dead_code)]
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    let out = AtomicOutput::create(dest)?;
    out.file().write_all(bytes).map_err(io(dest))?;
    out.commit()
}
