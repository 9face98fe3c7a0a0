//! An on-disk cache of the driver's JIT output, so a process loads cubins instead of compiling
//! PTX: the first load of a kernel on a device JIT-compiles its PTX once through the driver's
//! linker (`cuLinkCreate` / `cuLinkAddData` / `cuLinkComplete`), loads the cubin and keeps it in
//! the user's cache directory; later processes load the cubin directly (`cuModuleLoadData`).
//!
//! Entries are keyed by the PTX text, the device (name and compute capability), the driver
//! version and the cache format, so a driver update or another GPU simply misses. Each file
//! repeats its key and a checksum of the cubin: a damaged, truncated or foreign entry is
//! ignored (and replaced), and a cubin the driver refuses falls back to the PTX. The cache never
//! turns a working load into an error.
//!
//! Off unless asked for: `PTXFLOW_JIT_CACHE=1` (or a `PTXFLOW_JIT_CACHE_DIR`) turns it on;
//! `PTXFLOW_JIT_CACHE=0` forces it off. Measured on an H100 (driver 580.159.04), cubins from the
//! driver's linker are not the code `cuModuleLoadData` of the PTX gives: `ndt_derivatives` took
//! 156 registers instead of 128 and the 256-hypothesis NDT batch ran 16% slower, LZ4 decompression
//! 3% slower. The driver's own compute cache (`CUDA_CACHE_PATH`, on by default) keeps the JIT output
//! of the PTX across processes with the same code (a second `ptxflow info` loads all modules in
//! under 4 ms), so it is the default.
//!
//! Where, when on: `$PTXFLOW_JIT_CACHE_DIR`, else `$XDG_CACHE_HOME/ptxflow/jit`, else
//! `$HOME/.cache/ptxflow/jit`.

use cudarc::driver::{sys, CudaContext, CudaModule, DriverError};
use cudarc::nvrtc::Ptx;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// File header; bump the version when the layout changes.
const MAGIC: &[u8; 8] = b"PTXFJC01";

static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static LOAD_NS: AtomicU64 = AtomicU64::new(0);

/// What the module loads of this process cost, and how the on-disk JIT cache served them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JitStats {
    /// Modules loaded from a cached cubin.
    pub hits: u64,
    /// Modules compiled from PTX (cache off, missing or unusable entry).
    pub misses: u64,
    /// Wall time spent loading modules (JIT included), milliseconds.
    pub load_ms: f64,
}

/// Module-load statistics of this process so far.
pub fn jit_stats() -> JitStats {
    JitStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        load_ms: LOAD_NS.load(Ordering::Relaxed) as f64 * 1e-6,
    }
}

/// The cache directory, or `None` when the cache is turned off or no directory is known.
pub fn jit_cache_dir() -> Option<PathBuf> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    match std::env::var("PTXFLOW_JIT_CACHE")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        Some("0" | "off" | "false" | "no") => return None,
        Some("1" | "on" | "true" | "yes") => {}
        // Off by default (see the module docs), unless a directory was named for it.
        _ if non_empty("PTXFLOW_JIT_CACHE_DIR").is_none() => return None,
        _ => {}
    }
    if let Some(d) = non_empty("PTXFLOW_JIT_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = non_empty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("ptxflow").join("jit"));
    }
    non_empty("HOME").map(|h| PathBuf::from(h).join(".cache").join("ptxflow").join("jit"))
}

/// Whether the on-disk cache holds an entry for `kernel` (for any device or driver): a cheap
/// hint, without touching the driver, that loading it will not need a JIT.
pub fn jit_cache_has(kernel: &str) -> bool {
    let Some(dir) = jit_cache_dir() else {
        return false;
    };
    let prefix = format!("{kernel}-");
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.filter_map(|e| e.ok()).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".cubin")
        })
    })
}

/// FNV-1a, 64 bits: stable across builds and platforms (a cache key must not depend on the
/// standard library's hasher), with a seed so two passes give 128 bits.
fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The device and driver half of the key.
fn device_key(ctx: &CudaContext) -> Option<String> {
    let name = ctx.name().ok()?;
    let cc = ctx.compute_capability().ok()?;
    let mut version = 0i32;
    // SAFETY: cuDriverGetVersion only writes the version into the given integer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .ok()?;
    Some(format!(
        "{name}|sm_{}{}|driver {version}|ptxflow {}",
        cc.0,
        cc.1,
        env!("CARGO_PKG_VERSION")
    ))
}

/// The cache entry for `kernel`'s PTX on this device: its path and the key it must repeat.
fn entry(dir: &Path, kernel: &str, ptx: &str, device: &str) -> (PathBuf, String) {
    let key = format!(
        "{device}|{kernel}|{}|{:016x}{:016x}",
        ptx.len(),
        fnv1a(ptx.as_bytes(), 0),
        fnv1a(ptx.as_bytes(), 0x9e37_79b9_7f4a_7c15)
    );
    let file = format!(
        "{kernel}-{:016x}{:016x}.cubin",
        fnv1a(key.as_bytes(), 0),
        fnv1a(key.as_bytes(), 1)
    );
    (dir.join(file), key)
}

/// Reads an entry: the cubin when the header, key, length and checksum all match.
fn read_entry(path: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (klen, rest) = rest.split_first_chunk::<4>()?;
    let klen = u32::from_le_bytes(*klen) as usize;
    if rest.len() < klen || &rest[..klen] != key.as_bytes() {
        return None;
    }
    let rest = &rest[klen..];
    let (sum, cubin) = rest.split_first_chunk::<8>()?;
    (!cubin.is_empty() && u64::from_le_bytes(*sum) == fnv1a(cubin, 0)).then(|| cubin.to_vec())
}

/// Writes an entry atomically (temporary file, then rename); failures only cost the next
/// process a JIT, so they are ignored.
fn write_entry(path: &Path, key: &str, cubin: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let mut data = Vec::with_capacity(MAGIC.len() + 12 + key.len() + cubin.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(&(key.len() as u32).to_le_bytes());
    data.extend_from_slice(key.as_bytes());
    data.extend_from_slice(&fnv1a(cubin, 0).to_le_bytes());
    data.extend_from_slice(cubin);
    // Unique per process and per write, so concurrent writers never share a temporary file.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    if std::fs::write(&tmp, &data).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// JIT-compiles `ptx` for the context's device through the driver's linker and returns the
/// cubin, or `None` if any step fails (the caller then loads the PTX and reports that error).
fn jit_to_cubin(ctx: &CudaContext, ptx: &str) -> Option<Vec<u8>> {
    ctx.bind_to_thread().ok()?;
    let mut src = Vec::with_capacity(ptx.len() + 1);
    src.extend_from_slice(ptx.as_bytes());
    src.push(0);
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: no options are passed (null arrays, count 0); the driver writes the new link
    // state into `state`, destroyed below on every path.
    unsafe { sys::cuLinkCreate_v2(0, std::ptr::null_mut(), std::ptr::null_mut(), &mut state) }
        .result()
        .ok()?;
    // SAFETY: `src` is NUL-terminated PTX that outlives the call; `state` is live; the name is
    // a NUL-terminated literal; no options.
    let added = unsafe {
        sys::cuLinkAddData_v2(
            state,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            src.as_mut_ptr().cast(),
            src.len(),
            c"ptxflow".as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
    .result();
    let mut out = None;
    if added.is_ok() {
        let mut cubin: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: `state` is live; the driver returns a pointer to `size` bytes owned by the
        // link state, copied out before the state is destroyed.
        let done = unsafe { sys::cuLinkComplete(state, &mut cubin, &mut size) }.result();
        if done.is_ok() && !cubin.is_null() && size > 0 {
            // SAFETY: see above: `cubin` points to `size` initialized bytes until cuLinkDestroy.
            out = Some(unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec());
        }
    }
    // SAFETY: `state` came from cuLinkCreate and is destroyed exactly once.
    let _ = unsafe { sys::cuLinkDestroy(state) };
    out
}

/// JIT-compiles the PTX of `kernels` for `gpu` on all cores into the on-disk cache, skipping
/// those already cached, so that the module loads that follow read cubins: a process that needs
/// many kernels (`ptxflow info`) pays the JIT once per core rather than once per kernel. Does
/// nothing when the cache is off; failures are left for the load itself to report. Returns how
/// many kernels were compiled.
pub fn precompile(gpu: &super::Gpu, kernels: &[crate::kernels::KernelId]) -> usize {
    use rayon::prelude::*;
    let ctx = gpu.ctx();
    let Some(dir) = jit_cache_dir() else { return 0 };
    let Some(device) = device_key(ctx) else {
        return 0;
    };
    let (major, minor) = gpu.facts().compute_capability;
    let t = Instant::now();
    let done = kernels
        .par_iter()
        .filter_map(|&id| {
            let target = crate::ptx::Target::best_for(id.targets(), major, minor)?;
            let ptx = crate::embedded::ptx(id, target)?;
            let (path, key) = entry(&dir, id.name(), ptx, &device);
            if read_entry(&path, &key).is_some() {
                return None;
            }
            let cubin = jit_to_cubin(ctx, ptx)?;
            write_entry(&path, &key, &cubin);
            Some(())
        })
        .count();
    LOAD_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    done
}

/// Loads `kernel`'s module from `ptx` on `ctx`, through the on-disk cache when it is on.
/// Errors are those of loading the PTX itself; the cache only ever adds a fallback.
pub(crate) fn load_module(
    ctx: &Arc<CudaContext>,
    kernel: &str,
    ptx: &str,
) -> Result<Arc<CudaModule>, DriverError> {
    let t = Instant::now();
    let r = load_inner(ctx, kernel, ptx);
    LOAD_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

fn load_inner(
    ctx: &Arc<CudaContext>,
    kernel: &str,
    ptx: &str,
) -> Result<Arc<CudaModule>, DriverError> {
    let place = jit_cache_dir().and_then(|dir| Some((dir, device_key(ctx)?)));
    let Some((dir, device)) = place else {
        MISSES.fetch_add(1, Ordering::Relaxed);
        return ctx.load_module(Ptx::from_src(ptx));
    };
    let (path, key) = entry(&dir, kernel, ptx, &device);
    if let Some(cubin) = read_entry(&path, &key) {
        if let Ok(m) = ctx.load_module(Ptx::from_binary(cubin)) {
            HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(m);
        }
        // The driver refused a well-formed entry: drop it and compile afresh.
        let _ = std::fs::remove_file(&path);
    }
    MISSES.fetch_add(1, Ordering::Relaxed);
    if let Some(cubin) = jit_to_cubin(ctx, ptx) {
        if let Ok(m) = ctx.load_module(Ptx::from_binary(cubin.clone())) {
            write_entry(&path, &key, &cubin);
            return Ok(m);
        }
    }
    ctx.load_module(Ptx::from_src(ptx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ptxflow-jit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn entries_round_trip_and_reject_damage() {
        let dir = tmp("rt");
        let (path, key) = entry(&dir, "k", ".version 7.8", "dev");
        assert_eq!(read_entry(&path, &key), None);
        write_entry(&path, &key, b"cubin bytes");
        assert_eq!(
            read_entry(&path, &key).as_deref(),
            Some(&b"cubin bytes"[..])
        );
        // Another key (other PTX, device or driver) never reads this entry.
        assert_eq!(read_entry(&path, "dev|k|other"), None);
        // Truncation and bit flips are caught by the length and checksum.
        let good = std::fs::read(&path).unwrap();
        for cut in [0, 5, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert_eq!(read_entry(&path, &key), None, "cut at {cut}");
        }
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(read_entry(&path, &key), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_separate_ptx_and_devices() {
        let d = Path::new("/x");
        let a = entry(d, "k", "ptx a", "dev1");
        assert_ne!(a, entry(d, "k", "ptx b", "dev1"));
        assert_ne!(a, entry(d, "k", "ptx a", "dev2"));
        assert_eq!(a, entry(d, "k", "ptx a", "dev1"));
    }
}
