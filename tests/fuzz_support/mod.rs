//! Shared machinery of the fuzz tests (`fuzz_pointclouds`, `lz4_fuzz`): a counting global
//! allocator, a case runner that checks "no panic, bounded allocation, bounded time", and the
//! byte mutations. Deterministic: every case comes from a seeded [`Rng`], so a failure names a
//! case number that reproduces with the same seed.
//!
//! Knobs: `PTXFLOW_FUZZ_CASES` (cases per target; default [`DEFAULT_CASES`]) and
//! `PTXFLOW_FUZZ_SEED` (default 12).
#![allow(dead_code)]

use ptxflow::rng::Rng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Cases per fuzz target when `PTXFLOW_FUZZ_CASES` is unset: the CI budget.
pub const DEFAULT_CASES: usize = 1500;
/// Peak heap above the case's starting point that any one case may reach.
pub const PEAK_LIMIT_BYTES: usize = 64 << 20;
/// A single request this far above the starting point is refused outright (the process then
/// aborts with "memory allocation of N bytes failed"), so a broken parser cannot thrash the machine.
pub const HARD_LIMIT_BYTES: usize = 1 << 30;
/// Wall time one case may take (debug build, opt-level 1, two busy cores).
pub const TIME_LIMIT: Duration = Duration::from_secs(5);

/// Counts the live heap bytes of each thread and their peak; allocations of other test threads
/// (the harness runs tests in parallel) do not disturb a case's figure.
pub struct CountingAlloc;

thread_local! {
    // `const` initialisers without destructors: usable from inside the allocator at any time.
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static CEILING: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn grow(bytes: usize) -> bool {
    LIVE.try_with(|live| {
        let now = live.get().saturating_add(bytes);
        if now > CEILING.try_with(Cell::get).unwrap_or(usize::MAX) {
            return false;
        }
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        true
    })
    .unwrap_or(true)
}

fn shrink(bytes: usize) {
    // Memory freed on another thread than the one that allocated it only lowers this count.
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(bytes)));
}

// SAFETY: every method forwards to `System` with the caller's layout unchanged; the counting
// touches only thread-local `Cell`s with const initialisers (no allocation, no reentrancy).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !grow(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !grow(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout` (every path above forwards).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !grow(new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: same contract as our caller's; `ptr` came from `System`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > layout.size() {
                shrink(new_size - layout.size());
            }
        } else if new_size < layout.size() {
            shrink(layout.size() - new_size);
        }
        p
    }
}

/// Cases per target (`PTXFLOW_FUZZ_CASES`, default [`DEFAULT_CASES`]).
pub fn cases() -> usize {
    std::env::var("PTXFLOW_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// The seed (`PTXFLOW_FUZZ_SEED`, default 12), mixed with `salt` so targets differ.
pub fn rng(salt: u64) -> Rng {
    let seed: u64 = std::env::var("PTXFLOW_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt)
}

/// What one case cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub peak_bytes: usize,
    pub time: Duration,
}

/// Runs `f` on case `id` of target `what` and checks: no panic, heap peak (above the live bytes
/// at the start) under [`PEAK_LIMIT_BYTES`], time under [`TIME_LIMIT`]. Panics (failing the
/// test) with the case, its size and its first bytes otherwise.
pub fn run_case<T>(what: &str, id: usize, input: &[u8], f: impl FnOnce() -> T) -> (T, Cost) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    CEILING.with(|c| c.set(base.saturating_add(HARD_LIMIT_BYTES)));
    let t0 = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(f));
    let time = t0.elapsed();
    CEILING.with(|c| c.set(usize::MAX));
    let peak_bytes = PEAK.with(Cell::get).saturating_sub(base);
    let show = || {
        let hex: String = input.iter().take(96).map(|b| format!("{b:02x}")).collect();
        format!(
            "{what} case {id} ({} bytes, starting {hex}; PTXFLOW_FUZZ_SEED reproduces)",
            input.len()
        )
    };
    let t = match r {
        Ok(t) => t,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{} panicked: {msg}", show());
        }
    };
    assert!(
        peak_bytes < PEAK_LIMIT_BYTES,
        "{} allocated a peak of {peak_bytes} bytes (limit {PEAK_LIMIT_BYTES})",
        show()
    );
    assert!(
        time < TIME_LIMIT,
        "{} took {time:?} (limit {TIME_LIMIT:?})",
        show()
    );
    (t, Cost { peak_bytes, time })
}

/// Worst figures over a run, for the summary line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Worst {
    pub peak_bytes: usize,
    pub time: Duration,
}

impl Worst {
    pub fn add(&mut self, c: Cost) {
        self.peak_bytes = self.peak_bytes.max(c.peak_bytes);
        self.time = self.time.max(c.time);
    }
}

fn pick(rng: &mut Rng, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

/// Values a length field is set to: the edges of every integer width and more than any file holds.
pub const EXTREMES: [u64; 12] = [
    0,
    1,
    2,
    255,
    65_535,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
    1 << 32,
    1_000_000_000_000,
    1 << 62,
    i64::MAX as u64,
    u64::MAX,
];

/// One random byte-level mutation of `v`: changed, inserted or removed bytes, a truncation, a
/// stretched LZ4-style length (nibble 15 and a chain of 255s), an extreme 16/32/64-bit word.
pub fn mutate(rng: &mut Rng, v: &mut Vec<u8>) {
    match rng.below(8) {
        0 | 1 => {
            for _ in 0..1 + rng.below(4) {
                if !v.is_empty() {
                    let at = pick(rng, v.len());
                    v[at] = rng.next_u64() as u8;
                }
            }
        }
        2 => {
            let at = pick(rng, v.len() + 1);
            v.truncate(at);
        }
        3 => {
            let at = pick(rng, v.len() + 1);
            for _ in 0..1 + rng.below(8) {
                v.insert(at, rng.next_u64() as u8);
            }
        }
        4 => {
            if !v.is_empty() {
                let at = pick(rng, v.len());
                let n = 1 + pick(rng, 8);
                v.drain(at..(at + n).min(v.len()));
            }
        }
        5 => {
            if !v.is_empty() {
                let at = pick(rng, v.len());
                v[at] |= if rng.below(2) == 0 { 0xF0 } else { 0x0F };
                for _ in 0..1 + pick(rng, 20) {
                    v.insert((at + 1).min(v.len()), 255);
                }
            }
        }
        6 => {
            if v.len() >= 2 {
                let at = pick(rng, v.len() - 1);
                let o: u16 = [0, 1, 0xFFFF, 0x8000][pick(rng, 4)];
                v[at..at + 2].copy_from_slice(&o.to_le_bytes());
            }
        }
        _ => {
            let x = EXTREMES[pick(rng, EXTREMES.len())];
            let width = [4usize, 8][pick(rng, 2)];
            if v.len() >= width {
                let at = pick(rng, v.len() - width + 1);
                v[at..at + width].copy_from_slice(&x.to_le_bytes()[..width]);
            }
        }
    }
}

/// Replaces one decimal number in the text header (`v[..header_end]`) with an extreme value
/// (or a negative or oversized one). Returns false when the header has no number.
pub fn mutate_header_number(rng: &mut Rng, v: &mut Vec<u8>, header_end: usize) -> bool {
    let end = header_end.min(v.len());
    let mut runs = Vec::new();
    let mut i = 0;
    while i < end {
        if v[i].is_ascii_digit() {
            let s = i;
            while i < end && v[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((s, i));
        } else {
            i += 1;
        }
    }
    if runs.is_empty() {
        return false;
    }
    let (s, e) = runs[pick(rng, runs.len())];
    let text = match rng.below(4) {
        0 => "-1".to_string(),
        1 => "99999999999999999999999".to_string(),
        _ => EXTREMES[pick(rng, EXTREMES.len())].to_string(),
    };
    v.splice(s..e, text.into_bytes());
    true
}
