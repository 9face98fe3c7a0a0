//! The expanded forward's chunk schedule (`forward_fast::Options::schedule`): Gaussian chunks
//! that shorten towards the end of the grid. Blocks start in grid order (chunk after chunk), so
//! the last chunks' blocks make the last wave; with equal chunks that wave is a fraction of the
//! slots and each of its blocks as long as any other, and SMs idle while it finishes. Here each
//! chunk takes the remaining Gaussians times point blocks / (slots guide / 100) (guided
//! self-scheduling over the resident slots), clamped to the schedule's bounds.

use super::launch::ForwardPlan;
use crate::kernels::gaussian::forward::CHUNK_ALIGN;
use crate::kernels::gaussian::forward_fast::Schedule;

/// Chunk starts for n_pad Gaussians (`starts[c]..starts[c + 1]` is chunk c; the last entry is
/// n_pad): one chunk where the point blocks fill the slots, else the guided lengths of
/// [`Schedule`] with `max` raised to `uniform_len` (the uniform plan's chunk) where that is
/// longer. Every length is a multiple of [`CHUNK_ALIGN`] (n_pad is).
pub fn starts(
    n_pad: u32,
    point_blocks: u32,
    slots: u32,
    s: Schedule,
    uniform_len: u32,
) -> Vec<u32> {
    let mut out = vec![0u32];
    if point_blocks >= slots || n_pad == 0 {
        out.push(n_pad);
        return out;
    }
    let max = s.max.max(uniform_len).max(CHUNK_ALIGN);
    let min = s.min.clamp(CHUNK_ALIGN, max);
    let mut at = 0u32;
    while at < n_pad {
        let rem = n_pad - at;
        let guided = u64::from(rem) * u64::from(point_blocks) * 100
            / (u64::from(slots) * u64::from(s.guide.max(1)));
        let len = (guided.min(u64::from(u32::MAX)) as u32 / CHUNK_ALIGN * CHUNK_ALIGN)
            .clamp(min, max)
            .min(rem);
        at += len;
        out.push(at);
    }
    out
}

/// The plan of a scheduled forward: `uniform` (the plan the kernel would take without a
/// schedule) with the schedule's chunk count and its longest chunk as `chunk_len`.
pub fn plan(n_pad: u32, slots: u32, s: Schedule, uniform: ForwardPlan) -> (ForwardPlan, Vec<u32>) {
    let st = starts(n_pad, uniform.point_blocks, slots, s, uniform.chunk_len);
    let longest = st.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let plan = ForwardPlan {
        point_blocks: uniform.point_blocks,
        chunks: (st.len() - 1) as u32,
        chunk_len: longest.max(CHUNK_ALIGN),
    };
    (plan, st)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guided_chunks_cover_the_gaussians_and_shorten() {
        let s = Schedule::default();
        // The bench's shape: 131 point blocks, 792 slots, 10240 Gaussians (uniform 448).
        let st = starts(10240, 131, 792, s, 448);
        assert_eq!(*st.last().unwrap(), 10240);
        let lens: Vec<u32> = st.windows(2).map(|w| w[1] - w[0]).collect();
        // Every chunk within the bounds but the last: what remains (at least CHUNK_ALIGN).
        let (last, body) = lens.split_last().unwrap();
        assert!(body
            .iter()
            .all(|l| l % CHUNK_ALIGN == 0 && *l >= 64 && *l <= 768));
        assert!(*last % CHUNK_ALIGN == 0 && *last >= CHUNK_ALIGN && *last <= 64);
        assert!(lens.windows(2).all(|w| w[1] <= w[0]), "{lens:?}");
        // The built-in schedule (guide 75): 9 chunks of 768, then shorter ones, 25 in all.
        assert_eq!(&lens[..9], &[768, 768, 768, 768, 768, 768, 768, 768, 768]);
        assert_eq!(lens.len(), 25, "{lens:?}");
        // Points filling the slots: one chunk.
        assert_eq!(starts(512, 800, 792, s, 512), vec![0, 512]);
        // Few Gaussians: chunks of at least CHUNK_ALIGN, all covered.
        let st = starts(64, 1, 792, Schedule { min: 32, ..s }, 32);
        assert_eq!(st, vec![0, 32, 64]);
    }
}
