//! What the GRU rows print from block 0's clock stamps (`gru::stationary::STAMPS`): the
//! prologue's and every step's phases, the upper warps' partials, thread 0's gather in the probe
//! kernel and the cluster kernels' per-block spans.

use crate::SHAPE;
use ptxflow::rnn::gpu::gru::{GpuGru, GruExchange};

/// Prints the phases of block 0 of `gg`'s stamped launch `st` (us at `mhz`) for the row `name`.
pub fn print(name: &str, gg: &GpuGru, st: &[u64], mhz: f64) {
    let us = |i: usize| st[i + 1].wrapping_sub(st[i]) as f64 / mhz;
    let steps: Vec<[f64; 3]> = (0..SHAPE.steps)
        .map(|t| [us(3 + 3 * t), us(4 + 3 * t), us(5 + 3 * t)])
        .collect();
    let tot = |k: usize| steps.iter().map(|p| p[k]).sum::<f64>();
    let list = |k: usize| {
        steps
            .iter()
            .map(|p| format!("{:.2}", p[k]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // The cluster kernels: mbarriers, then W_hh's loads, staging and gi in one phase.
    let prologue = if gg.kernel_name().starts_with("rnn_gru_held") {
        format!(
            "W_ih + staging issue {:.2}, W_hh issue + staging landed {:.2}, partials of W_ih x_0 {:.2}",
            us(0),
            us(1),
            us(2)
        )
    } else if gg.exchange() == GruExchange::Global {
        format!(
            "staging + gi ({}) {:.2}, W_hh issue {:.2}, barrier {:.2}",
            if gg.projection_steps() > 1 {
                "every step"
            } else {
                "step 0"
            },
            us(0),
            us(1),
            us(2)
        )
    } else {
        format!(
            "mbarrier init {:.2}, W_hh issue + staging + gi (every step) {:.2}, cluster barrier {:.2}",
            us(0),
            us(1),
            us(2)
        )
    };
    println!(
        "SUMMARY gpu/rnn {name} phases of block 0 (us at {mhz:.0} MHz): {prologue}; steps: mat-vec {:.2} [{}], cell {:.2} [{}], next gi + exchange {:.2} [{}]; total {:.2}",
        tot(0), list(0), tot(1), list(1), tot(2), list(2),
        st[3 + 3 * SHAPE.steps].wrapping_sub(st[0]) as f64 / mhz
    );
    let split = [
        "rnn_gru_held48s",
        "rnn_gru_held64s",
        "rnn_gru_held48sw",
        "rnn_gru_held48swxc",
        "rnn_gru_held48swxcp",
    ];
    if gg.kernel_name().ends_with('p') {
        gather_probe(name, st, SHAPE.steps, mhz);
    }
    if split.contains(&gg.kernel_name()) {
        // Thread 128's stamps (`STAMPS - 16 + t`): the upper warps' partials of W_ih x
        // done, after the step's mat-vec barrier (stamp 4 + 3 t).
        let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize - 16;
        let upper: Vec<String> = (0..SHAPE.steps)
            .map(|t| {
                let d = st[base + t].wrapping_sub(st[4 + 3 * t]) as i64;
                format!("{:.2}", d as f64 / mhz)
            })
            .collect();
        println!(
            "SUMMARY gpu/rnn {name} upper warps' partials of W_ih x_(t+2) after the mat-vec barrier (us): [{}]",
            upper.join(" ")
        );
    }
    if gg.exchange() != GruExchange::Global {
        println!(
            "SUMMARY gpu/rnn {name} blocks: {}",
            block_spans(st, gg.blocks())
        );
    }
}

/// Thread 0's gather in the probe kernel (`rnn_gru_held48swxcp`, `gru::stationary::PROBES`):
/// per step, its start after thread 0's cell, its first poll round checked, the rest to its end,
/// the end to the step's barrier (us), and the rounds polled.
fn gather_probe(name: &str, st: &[u64], steps: usize, mhz: f64) {
    let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize;
    let us = |a: u64, b: u64| b.wrapping_sub(a) as i64 as f64 / mhz;
    let mut rows: [Vec<String>; 5] = Default::default();
    for t in 0..steps.min(16).saturating_sub(1) {
        let p = &st[base + 4 * t..base + 4 * t + 4];
        let (cell, barrier) = (st[5 + 3 * t], st[6 + 3 * t]);
        rows[0].push(format!("{:.2}", us(cell, p[0])));
        rows[1].push(format!("{:.2}", us(p[0], p[1])));
        rows[2].push(format!("{:.2}", us(p[1], p[2])));
        rows[3].push(format!("{:.2}", us(p[2], barrier)));
        rows[4].push(p[3].to_string());
    }
    let [a, b, c, d, r] = rows.map(|v| v.join(" "));
    println!(
        "SUMMARY gpu/rnn {name} thread 0's gather (us): start after its cell [{a}], first poll round checked [{b}], then to its end [{c}], end to the barrier [{d}]; poll rounds [{r}]"
    );
}

/// The per-block `%globaltimer` stamps of a cluster kernel (`STAMPS + 4 c`: start, end, SM):
/// when the blocks started and ended relative to the first start, and how many SMs ran more
/// than one block.
fn block_spans(st: &[u64], blocks: usize) -> String {
    let base = ptxflow::kernels::rnn::gru::stationary::STAMPS as usize;
    let b: Vec<(u64, u64, u64)> = (0..blocks)
        .map(|c| (st[base + 4 * c], st[base + 4 * c + 1], st[base + 4 * c + 2]))
        .collect();
    let t0 = b.iter().map(|x| x.0).min().unwrap_or(0);
    let us = |t: u64| t.wrapping_sub(t0) as f64 / 1e3;
    let last_start = b.iter().map(|x| x.0).max().unwrap_or(0);
    let first_end = b.iter().map(|x| x.1).min().unwrap_or(0);
    let last = b.iter().max_by_key(|x| x.1).copied().unwrap_or((0, 0, 0));
    let mut per_sm = std::collections::BTreeMap::new();
    for x in &b {
        *per_sm.entry(x.2).or_insert(0u32) += 1;
    }
    let doubled = per_sm.values().filter(|&&n| n > 1).count();
    format!(
        "last start +{:.2} us, first end +{:.2} us, last end +{:.2} us (SM {} with {} blocks); {} SMs, {doubled} of them with 2+ blocks",
        us(last_start),
        us(first_end),
        us(last.1),
        last.2,
        per_sm.get(&last.2).copied().unwrap_or(0),
        per_sm.len()
    )
}
