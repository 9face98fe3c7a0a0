//! Shared helpers of the LZ4 integration tests: the xz-compressed corpus, decoded in memory.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// The corpus files (canterbury.tar is the 11 Canterbury files in one tar).
pub const CORPUS: [&str; 6] = [
    "dickens",
    "nci",
    "ooffice",
    "x-ray",
    "xml",
    "canterbury.tar",
];

/// `$PTXFLOW_DATA_DIR/corpus`, defaulting to the shared data folder beside the repository.
pub fn corpus_dir() -> PathBuf {
    let base = std::env::var_os("PTXFLOW_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")));
    base.join("corpus")
}

/// True when PTXFLOW_FULL=1 asks for whole corpus files instead of prefixes.
pub fn full() -> bool {
    std::env::var("PTXFLOW_FULL").is_ok_and(|v| v == "1")
}

/// Collects decoded bytes and stops the xz decoder (with an error it ignores) once `limit` is hit.
struct Prefix {
    bytes: Vec<u8>,
    limit: usize,
}

impl Write for Prefix {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let take = buf.len().min(self.limit - self.bytes.len());
        self.bytes.extend_from_slice(&buf[..take]);
        if self.bytes.len() == self.limit {
            return Err(std::io::Error::other("prefix complete"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The first `limit` bytes (all if `None`) of corpus file `name`, decoded from `name.xz`;
/// `None` (with a note on stderr) when the data folder is missing.
pub fn corpus(name: &str, limit: Option<usize>) -> Option<Vec<u8>> {
    let path = corpus_dir().join(format!("{name}.xz"));
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("skipping: corpus file {} unavailable ({e})", path.display());
            return None;
        }
    };
    let limit = limit.unwrap_or(usize::MAX);
    let mut sink = Prefix {
        bytes: Vec::new(),
        limit,
    };
    let result = lzma_rs::xz_decompress(&mut std::io::BufReader::new(file), &mut sink);
    if sink.bytes.len() < limit {
        result.unwrap_or_else(|e| panic!("decoding {}: {e:?}", path.display()));
    }
    Some(sink.bytes)
}
