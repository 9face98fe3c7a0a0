//! Staging [`CompressedPages`](crate::lz4::CompressedPages) into a decode slot: each entry
//! checked against the data and a page, the stored bytes copied into the slot (the span they
//! cover in one parallel copy when they lie in order, else page by page) and four entry words
//! written per page (offset in the slot, stored bytes, original bytes, raw flag).
//!
//! The checks and the entry words walk every page of a batch (4096 for 16 MiB of 4 KiB pages).
//! On one thread that walk came before the copy (checks) and after it (words); the parallel
//! form checks in tasks of [`TASK`] entries and writes the words beside the copy.

use super::register::ExtOutput;
use crate::lz4::par::par_copy_to_slot;
use crate::lz4::{PageEntry, PageKind};
use crate::{Error, Result};
use rayon::prelude::*;

/// What a fill stages into a slot: stored pages back to back, and 4 entry words per page
/// (offset into `packed`, stored bytes, original bytes or bound, kind; see `kernels::lz4`).
pub struct DecodeStage<'a> {
    /// Room for the stored bytes (`batch_pages * page_bytes`).
    pub packed: &'a mut [u8],
    /// Room for `4 * batch_pages` entry words.
    pub entries: &'a mut [u32],
}

/// One decoded batch as handed to a sink: page `k` is at `out[k * page_bytes..]`, its status
/// word (code and produced bytes) is `status[k]`.
pub struct DecodedBatch<'a> {
    /// Pages in the batch.
    pub pages: usize,
    /// The decoded pages, `page_bytes` apart.
    pub out: &'a [u8],
    /// One status word per page.
    pub status: &'a [u32],
    /// The stored bytes the fill staged.
    pub packed: &'a [u8],
    /// The entry words the fill staged (4 per page).
    pub entries: &'a [u32],
    /// The batch's output went straight into the caller's registered memory, except the head
    /// and tail ranges (`staged()`), which are in `out` at the same offsets.
    pub(crate) direct: Option<&'a ExtOutput>,
}

/// Entries per parallel task.
const TASK: usize = 512;

/// Stages pages `pages` (page `first` on) of `data` into a decode slot, the checks and entry
/// words in parallel tasks when `parallel`. Returns the stored bytes staged. Fails with
/// [`Error::Corrupt`] for an entry outside `data` or larger than a page (the first such page).
pub(crate) fn stage_pages(
    data: &[u8],
    pages: &[PageEntry],
    first: usize,
    page_bytes: usize,
    st: DecodeStage<'_>,
    parallel: bool,
) -> Result<usize> {
    let walk = if parallel && pages.len() > TASK {
        pages
            .par_chunks(TASK)
            .enumerate()
            .map(|(c, chunk)| Walk::of(chunk, c * TASK, data.len(), page_bytes))
            .collect::<Vec<_>>()
            .into_iter()
            .reduce(Walk::then)
    } else {
        Some(Walk::of(pages, 0, data.len(), page_bytes))
    };
    let Some(walk) = walk.filter(|w| !w.empty) else {
        return Ok(0);
    };
    if let Some(k) = walk.bad {
        let e = pages[k];
        return Err(Error::Corrupt {
            what: format!(
                "page {}: entry (offset {}, {} stored, {} original bytes) does not fit \
                 {page_bytes}-byte pages in {} bytes of data",
                first + k,
                e.offset,
                e.stored_bytes,
                e.original_bytes,
                data.len()
            ),
        });
    }
    let (base, end) = (walk.start, walk.end);
    let span = end - base;
    if walk.in_order && span <= st.packed.len() {
        let DecodeStage { packed, entries } = st;
        let mut copy = || par_copy_to_slot(&mut packed[..span], &data[base..end]);
        let words = |words: &mut [u32], pages: &[PageEntry]| {
            for (w, e) in words.chunks_exact_mut(4).zip(pages) {
                w.copy_from_slice(&word(e, e.offset - base));
            }
        };
        let entries = &mut entries[..4 * pages.len()];
        if parallel && pages.len() > TASK {
            rayon::join(copy, || {
                entries
                    .par_chunks_mut(4 * TASK)
                    .zip(pages.par_chunks(TASK))
                    .for_each(|(w, p)| words(w, p))
            });
        } else {
            copy();
            words(entries, pages);
        }
        return Ok(span);
    }
    let mut rest = &mut st.packed[..];
    let mut dsts = Vec::with_capacity(pages.len());
    let mut at = 0;
    for (k, e) in pages.iter().enumerate() {
        let (d, r) = std::mem::take(&mut rest).split_at_mut(e.stored_bytes);
        dsts.push(d);
        rest = r;
        st.entries[4 * k..4 * k + 4].copy_from_slice(&word(e, at));
        at += e.stored_bytes;
    }
    dsts.into_par_iter()
        .zip(pages.par_iter())
        .for_each(|(d, e)| d.copy_from_slice(&data[e.offset..e.offset + e.stored_bytes]));
    Ok(at)
}

/// The entry words of page `e` stored at `at` in the slot.
fn word(e: &PageEntry, at: usize) -> [u32; 4] {
    [
        at as u32,
        e.stored_bytes as u32,
        e.original_bytes as u32,
        (e.kind == PageKind::Raw) as u32,
    ]
}

/// What a walk over consecutive entries found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Walk {
    /// No entries.
    empty: bool,
    /// The first entry (counted from the batch's first) that does not fit.
    bad: Option<usize>,
    /// Every entry starts at or after the end of the one before.
    in_order: bool,
    /// The first entry's offset.
    start: usize,
    /// The end of the last entry.
    end: usize,
}

impl Walk {
    /// Walks `pages`, the first of which is entry `at` of the batch, in `data_len` bytes of
    /// data with pages of `page_bytes`.
    fn of(pages: &[PageEntry], at: usize, data_len: usize, page_bytes: usize) -> Walk {
        let start = pages.first().map_or(0, |e| e.offset);
        let mut w = Walk {
            empty: pages.is_empty(),
            bad: None,
            in_order: true,
            start,
            end: start,
        };
        for (k, e) in pages.iter().enumerate() {
            let end = e.offset.checked_add(e.stored_bytes);
            if e.original_bytes > page_bytes
                || e.stored_bytes > page_bytes
                || end.is_none_or(|end| end > data_len)
            {
                w.bad = Some(at + k);
                return w;
            }
            w.in_order &= e.offset >= w.end;
            w.end = e.offset + e.stored_bytes;
        }
        w
    }

    /// This walk followed by `next` (the entries right after).
    fn then(self, next: Walk) -> Walk {
        if self.bad.is_some() || next.empty {
            return self;
        }
        if self.empty {
            return next;
        }
        Walk {
            empty: false,
            bad: next.bad,
            in_order: self.in_order && next.in_order && next.start >= self.end,
            start: self.start,
            end: next.end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize, shuffle: bool) -> (Vec<u8>, Vec<PageEntry>) {
        let mut data = Vec::new();
        let mut v = Vec::new();
        for k in 0..n {
            let stored = 1 + (k * 37) % 100;
            v.push(PageEntry {
                offset: data.len(),
                stored_bytes: stored,
                original_bytes: 128,
                kind: if k % 5 == 0 {
                    PageKind::Raw
                } else {
                    PageKind::Compressed
                },
            });
            data.extend((0..stored).map(|i| (k + i) as u8));
            data.extend([0u8; 3]);
        }
        if shuffle {
            v.swap(n / 2, n / 2 + 700.min(n - n / 2 - 1));
        }
        (data, v)
    }

    fn run(data: &[u8], pages: &[PageEntry], parallel: bool) -> Result<(usize, Vec<u8>, Vec<u32>)> {
        let mut packed = vec![0u8; pages.len() * 128];
        let mut words = vec![0u32; 4 * pages.len()];
        let st = DecodeStage {
            packed: &mut packed,
            entries: &mut words,
        };
        let n = stage_pages(data, pages, 7, 128, st, parallel)?;
        Ok((n, packed, words))
    }

    #[test]
    fn parallel_staging_matches_the_serial_walk() {
        for n in [0, 1, 511, 512, 513, 2000, 4096] {
            for shuffle in [false, true] {
                let (data, pages) = entries(n, shuffle && n > 2);
                let one = run(&data, &pages, false).unwrap();
                let par = run(&data, &pages, true).unwrap();
                assert!(one == par, "{n} pages, shuffled {shuffle}");
            }
        }
    }

    #[test]
    fn staging_names_the_first_bad_entry_either_way() {
        let (data, mut pages) = entries(3000, false);
        pages[2500].stored_bytes = 129;
        pages[1700].offset = data.len();
        for parallel in [false, true] {
            let e = run(&data, &pages, parallel).unwrap_err();
            assert!(e.to_string().contains("page 1707:"), "{e}");
        }
    }
}
