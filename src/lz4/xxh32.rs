//! xxHash32 (Yann Collet's 32-bit non-cryptographic hash), the checksum of the LZ4 frame format
//! (header byte, block and content checksums), written from its specification: four 32-bit
//! accumulators consume 16-byte stripes (`acc = rotl(acc + lane * P2, 13) * P1`), are merged,
//! the total length is added, the tail is mixed in 4 bytes then 1 byte at a time, and a final
//! avalanche spreads the bits. Implemented here rather than taken from a crate: it is ~80 lines,
//! needs streaming (content checksum over a file), and is checked against published vectors and
//! against the `lz4` tool and `lz4_flex` in the tests.

const P1: u32 = 0x9E37_79B1;
const P2: u32 = 0x85EB_CA77;
const P3: u32 = 0xC2B2_AE3D;
const P4: u32 = 0x27D4_EB2F;
const P5: u32 = 0x1656_67B1;

#[inline]
fn round(acc: u32, lane: u32) -> u32 {
    acc.wrapping_add(lane.wrapping_mul(P2))
        .rotate_left(13)
        .wrapping_mul(P1)
}

#[inline]
fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Streaming xxHash32 state: feed bytes with [`Xxh32::update`], read with [`Xxh32::digest`].
#[derive(Clone, Debug)]
pub struct Xxh32 {
    seed: u32,
    acc: [u32; 4],
    buf: [u8; 16],
    buf_len: usize,
    total_len: u64,
}

impl Xxh32 {
    /// A fresh state with the given seed (the LZ4 frame format uses seed 0).
    pub fn new(seed: u32) -> Self {
        Xxh32 {
            seed,
            acc: [
                seed.wrapping_add(P1).wrapping_add(P2),
                seed.wrapping_add(P2),
                seed,
                seed.wrapping_sub(P1),
            ],
            buf: [0; 16],
            buf_len: 0,
            total_len: 0,
        }
    }

    fn stripe(&mut self, s: &[u8]) {
        for k in 0..4 {
            self.acc[k] = round(self.acc[k], le32(&s[4 * k..]));
        }
    }

    /// Feeds `data` (any length, any number of calls).
    pub fn update(&mut self, mut data: &[u8]) {
        self.total_len += data.len() as u64;
        if self.buf_len > 0 {
            let take = (16 - self.buf_len).min(data.len());
            self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&data[..take]);
            self.buf_len += take;
            data = &data[take..];
            if self.buf_len < 16 {
                return;
            }
            let buf = self.buf;
            self.stripe(&buf);
            self.buf_len = 0;
        }
        let mut chunks = data.chunks_exact(16);
        // The four lanes in locals (registers) over the whole run of stripes.
        let [mut a, mut b, mut c, mut d] = self.acc;
        for s in &mut chunks {
            let w = |k: usize| u32::from_le_bytes([s[k], s[k + 1], s[k + 2], s[k + 3]]);
            a = round(a, w(0));
            b = round(b, w(4));
            c = round(c, w(8));
            d = round(d, w(12));
        }
        self.acc = [a, b, c, d];
        let rest = chunks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buf_len = rest.len();
    }

    /// The hash of everything fed so far (the state stays usable).
    pub fn digest(&self) -> u32 {
        let mut h = if self.total_len >= 16 {
            let [a, b, c, d] = self.acc;
            a.rotate_left(1)
                .wrapping_add(b.rotate_left(7))
                .wrapping_add(c.rotate_left(12))
                .wrapping_add(d.rotate_left(18))
        } else {
            self.seed.wrapping_add(P5)
        };
        // The specification adds the length modulo 2^32.
        h = h.wrapping_add(self.total_len as u32);
        let tail = &self.buf[..self.buf_len];
        let mut words = tail.chunks_exact(4);
        for w in &mut words {
            h = h
                .wrapping_add(le32(w).wrapping_mul(P3))
                .rotate_left(17)
                .wrapping_mul(P4);
        }
        for &b in words.remainder() {
            h = h
                .wrapping_add((b as u32).wrapping_mul(P5))
                .rotate_left(11)
                .wrapping_mul(P1);
        }
        h ^= h >> 15;
        h = h.wrapping_mul(P2);
        h ^= h >> 13;
        h = h.wrapping_mul(P3);
        h ^ (h >> 16)
    }
}

/// One-shot xxHash32 of `data` with `seed`.
pub fn xxh32(data: &[u8], seed: u32) -> u32 {
    let mut s = Xxh32::new(seed);
    s.update(data);
    s.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_vectors() {
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"", 1), 0x0B2C_B792);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(
            xxh32(b"Nobody inspects the spammish repetition", 0),
            0xE229_3B2F
        );
    }

    #[test]
    fn streaming_matches_one_shot() {
        let data: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let whole = xxh32(&data, 7);
        for step in [1, 3, 15, 16, 17, 64, 999] {
            let mut s = Xxh32::new(7);
            for c in data.chunks(step) {
                s.update(c);
            }
            assert_eq!(s.digest(), whole, "step {step}");
        }
    }
}
