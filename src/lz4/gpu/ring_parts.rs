//! Parts of one compress-ring batch: a slot's batch may go to the device as a few consecutive
//! parts, each uploaded, compressed (its own `lz4_compress` launch on a stream of its own) and
//! downloaded on its own, so the first part's download overlaps the later parts' uploads and
//! kernels, and the host drains (waits for and sinks) a batch part by part. A batch then takes
//! about one upload of the batch plus one part's kernel and download from submit to its last
//! byte on the host, instead of the batch's upload, kernel and download one after the other,
//! which the ring's depth has to hide (`pipeline` waits for the batch submitted two steps
//! earlier). The stored pages are the same: each page is compressed alone either way.
//!
//! Part `j` of a slot covers pages `first..first + pages` of the batch: its input, its packed
//! region (`pages * page_bytes` bytes, the kernel's bound) and its place in the downloaded
//! `h_out` all start at byte `first * page_bytes`; its info words (header and two per page)
//! start at word `INFO_HEADER_WORDS * j + 2 * first`; its kernel's scratch follows the scratch
//! of the parts before it. This file holds that arithmetic (no CUDA).

use crate::kernels::lz4::compress::INFO_HEADER_WORDS;

/// Most parts a batch is cut into (each needs its own events, compute stream and scratch; more
/// than 2 measured slower, see `HostTuning::compress_parts`).
pub(crate) const MAX_PARTS: usize = 4;

/// Where part `j` of a batch lies (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// First page of the part in the batch.
    pub(crate) first: usize,
    /// Pages in the part (at least one).
    pub(crate) pages: usize,
    /// First info word of the part.
    pub(crate) info_at: usize,
}

impl Part {
    /// The part's first byte in the batch's input, packed region and `h_out`.
    pub(crate) fn byte_at(&self, page_bytes: usize) -> usize {
        self.first * page_bytes
    }

    /// Input bytes of the part in a batch of `input_bytes` bytes.
    pub(crate) fn input_bytes(&self, input_bytes: usize, page_bytes: usize) -> usize {
        (input_bytes - self.byte_at(page_bytes)).min(self.pages * page_bytes)
    }
}

/// How many parts a batch of `pages` pages goes in when `wanted` are asked for: at most
/// [`MAX_PARTS`] and `pages`, at least one.
pub(crate) fn part_count(pages: usize, wanted: usize) -> usize {
    wanted.clamp(1, MAX_PARTS).min(pages.max(1))
}

/// The parts of a batch of `pages` pages cut into `parts` (see [`part_count`]) of as equal a
/// number of pages as can be, in order.
pub(crate) fn part_plan(pages: usize, parts: usize) -> impl Iterator<Item = Part> {
    let n = part_count(pages, parts);
    (0..n).map(move |j| {
        let first = pages * j / n;
        Part {
            first,
            pages: pages * (j + 1) / n - first,
            info_at: INFO_HEADER_WORDS as usize * j + 2 * first,
        }
    })
}

/// Info words a slot needs for batches of up to `batch_pages` pages in up to [`MAX_PARTS`]
/// parts.
pub(crate) fn slot_info_words(batch_pages: usize) -> usize {
    INFO_HEADER_WORDS as usize * MAX_PARTS + 2 * batch_pages
}

/// Scratch pages a slot needs so that the kernels of up to [`MAX_PARTS`] parts of a batch of
/// `batch_pages` pages run at once, each with its own scratch, when a launch over `n` pages has
/// `warps(n)` warps (one scratch page each): a launch has at most `n + wpb - 1` warps (whole
/// blocks of `wpb`) and at most `full` (the device's worth, the warps of a whole batch).
pub(crate) fn slot_scratch_pages(batch_pages: usize, wpb: usize, full: usize) -> usize {
    full.max((batch_pages + MAX_PARTS * wpb).min(MAX_PARTS * full))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lz4::gpu::layout::info_words;

    #[test]
    fn parts_tile_the_batch_and_their_info_words() {
        for pages in [1, 2, 3, 7, 8, 9, 1000, 4096] {
            for wanted in [0, 1, 2, 3, 4, 8, 9, 100] {
                let plan: Vec<Part> = part_plan(pages, wanted).collect();
                assert_eq!(plan.len(), part_count(pages, wanted));
                assert!(!plan.is_empty() && plan.len() <= MAX_PARTS.min(pages));
                let (mut page, mut word) = (0, 0);
                for p in &plan {
                    assert_eq!(p.first, page, "{pages} pages in {wanted}");
                    assert_eq!(p.info_at, word, "{pages} pages in {wanted}");
                    assert!(p.pages >= 1);
                    // Equal cuts: no part has more than one page over another.
                    assert!(p.pages.abs_diff(pages / plan.len()) <= 1);
                    page += p.pages;
                    word += info_words(p.pages);
                }
                assert_eq!(page, pages);
                assert!(word <= slot_info_words(pages));
            }
        }
    }

    #[test]
    fn part_bytes_cover_a_short_batch() {
        let pb: usize = 4096;
        for input in [1, pb, 5 * pb + 1, 16 * pb - 3, 16 * pb] {
            let pages = input.div_ceil(pb);
            let mut at = 0;
            for p in part_plan(pages, 4) {
                assert_eq!(p.byte_at(pb), at);
                let n = p.input_bytes(input, pb);
                assert!(n > 0 && n <= p.pages * pb && n > (p.pages - 1) * pb);
                at += n;
            }
            assert_eq!(at, input);
        }
    }

    #[test]
    fn scratch_holds_every_part_launch() {
        // warps(n): whole blocks of wpb warps, at most `full` (the device's worth).
        for (batch_pages, wpb, full) in [(4096, 8, 2112), (4096, 1, 2640), (64, 8, 2112)] {
            let warps = |n: usize| (n.div_ceil(wpb) * wpb).min(full);
            for parts in 1..=MAX_PARTS {
                let need: usize = part_plan(batch_pages, parts).map(|p| warps(p.pages)).sum();
                assert!(need <= slot_scratch_pages(batch_pages, wpb, full));
            }
        }
    }
}
