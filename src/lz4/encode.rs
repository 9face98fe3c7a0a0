//! Experimental encoder (variants being measured).

pub const HASH_LOG: u32 = 12;
pub const HASH_ENTRIES: usize = 1 << HASH_LOG;
pub const MFLIMIT: usize = 12;
pub const LAST_LITERALS: usize = 5;
pub const MIN_MATCH: usize = 4;
pub const WINDOW_LANES: usize = 32;

#[inline]
fn read_u32(page: &[u8], p: usize) -> u32 {
    u32::from_le_bytes([page[p], page[p + 1], page[p + 2], page[p + 3]])
}

#[inline]
fn hash(page: &[u8], p: usize) -> usize {
    (read_u32(page, p).wrapping_mul(2_654_435_761) >> (32 - HASH_LOG)) as usize
}

fn write_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 255 {
        out.push(255);
        n -= 255;
    }
    out.push(n as u8);
}

fn emit(out: &mut Vec<u8>, literals: &[u8], m: Option<(u16, usize)>) {
    let lit = literals.len();
    let ml = m.map_or(0, |(_, l)| l - MIN_MATCH);
    out.push(((lit.min(15) as u8) << 4) | ml.min(15) as u8);
    if lit >= 15 {
        write_len(out, lit - 15);
    }
    out.extend_from_slice(literals);
    if let Some((off, _)) = m {
        out.extend_from_slice(&off.to_le_bytes());
        if ml >= 15 {
            write_len(out, ml - 15);
        }
    }
}

pub fn encode_variant(page: &[u8], out: &mut Vec<u8>, in_window: bool, backward: bool) {
    let n = page.len();
    let mut table = vec![0u16; HASH_ENTRIES];
    let mut anchor = 0;
    let mut cursor = 0;
    let mut hashes = [0usize; WINDOW_LANES];
    while cursor + MFLIMIT <= n {
        let lanes = (n - MFLIMIT + 1 - cursor).min(WINDOW_LANES);
        let mut found = None;
        for i in 0..lanes {
            let p = cursor + i;
            let h = hash(page, p);
            hashes[i] = h;
            let mut e = table[h] as usize;
            if in_window {
                for j in (0..i).rev() {
                    if hashes[j] == h {
                        e = cursor + j + 1;
                        break;
                    }
                }
            }
            if e != 0 && read_u32(page, e - 1) == read_u32(page, p) {
                found = Some((i, e - 1));
                break;
            }
        }
        match found {
            None => {
                for (i, &h) in hashes.iter().enumerate().take(lanes) {
                    table[h] = (cursor + i + 1) as u16;
                }
                cursor += WINDOW_LANES;
            }
            Some((f, c)) => {
                for (i, &h) in hashes.iter().enumerate().take(f + 1) {
                    table[h] = (cursor + i + 1) as u16;
                }
                let p = cursor + f;
                let limit = n - LAST_LITERALS;
                let mut end = p + MIN_MATCH;
                while end < limit && page[end] == page[end - (p - c)] {
                    end += 1;
                }
                let (mut s, mut m) = (p, c);
                if backward {
                    while s > anchor && m > 0 && page[s - 1] == page[m - 1] {
                        s -= 1;
                        m -= 1;
                    }
                }
                emit(out, &page[anchor..s], Some(((s - m) as u16, end - s)));
                table[hash(page, end - 2)] = (end - 1) as u16;
                cursor = end;
                anchor = end;
            }
        }
    }
    emit(out, &page[anchor..], None);
}
