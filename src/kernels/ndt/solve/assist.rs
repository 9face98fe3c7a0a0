//! [`super::OPT_FAST_ASSIST`]: the eigen-path round trip to the host without system fences.
//!
//! The ordinary protocol (`newton.rs`) stores the request, fences at system scope, stores the
//! request word, then polls the mailbox's word, fences again and reads the answer: two fences
//! and two PCIe round trips besides the host's work. Here each side appends a check word
//! ([`assist_check`] of the token and the payload) and the reader accepts a payload only when
//! the check matches, so no ordering between the payload and the word is needed: the kernel
//! stores the request with strong relaxed stores and no fence (the host re-reads until the
//! check matches), and it polls the whole answer (word, `Δ`, flags, check) with strong relaxed
//! loads in one round trip. Payloads are f64 bit patterns; a torn read matches its check with
//! a probability of about 2^-64.

use super::{Solver, ASSIST_GRADIENT, ASSIST_HESSIAN, ASSIST_WORD, STOP_HOST, STOP_SINGULAR};
use crate::kernels::ndt::derivatives::hessian_index;
use crate::ptx::*;

/// Word of the mapped results that holds the request's check ([`assist_check`] of the request
/// word and the 27 payload words `ASSIST_HESSIAN..ASSIST_WORD`).
pub const ASSIST_CHECK: usize = 80;
/// Word of the mailbox that holds the answer's check (of word 0 and words 1..8).
pub const MAILBOX_CHECK: usize = 8;

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xD6E8_FEB8_6659_FD93;

/// The check of `token` and `words`: `token · K1 ⊕ (⊕ w) ⊕ rotl(Σ (w ⊕ w >> 29) + K2, 31)`
/// (wrapping; any order of the words gives the same value).
pub fn assist_check(token: u64, words: &[u64]) -> u64 {
    let x = words.iter().fold(0u64, |a, w| a ^ w);
    let s = words.iter().fold(K2, |a, w| a.wrapping_add(w ^ (w >> 29)));
    token.wrapping_mul(K1) ^ x ^ s.rotate_left(31)
}

/// [`assist_check`] in the kernel (pairwise trees, so the chain is short).
fn check(b: &mut KernelBuilder, token: Reg<U64>, words: &[Reg<U64>]) -> Reg<U64> {
    let mut xs: Vec<Reg<U64>> = words.to_vec();
    let mut ss: Vec<Reg<U64>> = words
        .iter()
        .map(|w| {
            let h = b.shr(*w, 29u32);
            b.xor(*w, h)
        })
        .collect();
    while xs.len() > 1 {
        xs = xs
            .chunks(2)
            .map(|c| {
                if c.len() == 2 {
                    b.xor(c[0], c[1])
                } else {
                    c[0]
                }
            })
            .collect();
        ss = ss
            .chunks(2)
            .map(|c| {
                if c.len() == 2 {
                    b.add(c[0], c[1])
                } else {
                    c[0]
                }
            })
            .collect();
    }
    let s = b.add(ss[0], K2);
    let hi = b.shl(s, 31u32);
    let lo = b.shr(s, 33u32);
    let rot = b.or(hi, lo);
    let t = b.mul(token, K1);
    let v = b.xor(t, xs[0]);
    b.xor(v, rot)
}

impl Solver<'_> {
    /// The fenceless eigen-path request (see the module docs); the same contract as
    /// `Solver::assist`: `delta` and `pd` set, or a branch to `finish` (singular, or no
    /// answer within the idle timeout).
    #[allow(clippy::needless_range_loop, clippy::too_many_arguments)] // `assist`'s, and the word
    pub(super) fn fast_assist(
        &self,
        b: &mut KernelBuilder,
        h: &[Reg<F64>],
        grad: &[Reg<F64>; 6],
        delta: &[Reg<F64>; 6],
        pd: Reg<Pred>,
        finish: &Label,
        word: Reg<U64>,
    ) {
        let r = self.r;
        let out = Addr::from(self.out);
        b.comment("device solve: the eigen path on the host, fenceless (checked payloads)");
        let mut payload: Vec<(usize, Reg<U64>)> = Vec::with_capacity(27);
        for i in 0..6 {
            for j in i..6 {
                let k = hessian_index(i, j);
                payload.push((ASSIST_HESSIAN + k - 7, b.bitcast::<U64, F64>(h[k])));
            }
            payload.push((ASSIST_GRADIENT + i, b.bitcast::<U64, F64>(grad[i])));
        }
        let words: Vec<Reg<U64>> = payload.iter().map(|p| p.1).collect();
        let ck = check(b, word, &words);
        b.when(r.lane0, |b| {
            for (w, v) in &payload {
                b.st_relaxed_sys::<U64>(out.off(8 * *w as i64), *v);
            }
            b.st_relaxed_sys::<U64>(out.off(8 * ASSIST_CHECK as i64), ck);
            b.st_relaxed_sys::<U64>(out.off(8 * ASSIST_WORD as i64), word);
        });
        let start = b.globaltimer();
        let mb = Addr::from(self.mailbox);
        let got: Vec<Reg<U64>> = (0..=MAILBOX_CHECK).map(|_| b.reg::<U64>()).collect();
        b.loop_forever(|b, done, _| {
            for (k, g) in got.iter().enumerate() {
                let v = b.ld_relaxed_sys::<U64>(mb.off(8 * k as i64));
                b.mov_to(*g, v);
            }
            let want = check(b, word, &got[1..MAILBOX_CHECK]);
            let seen = b.setp(Cmp::Eq, got[0], word);
            let valid = b.setp(Cmp::Eq, got[MAILBOX_CHECK], want);
            let ok = b.and(seen, valid);
            b.bra_if(ok, done);
            let now = b.globaltimer();
            let waited = b.sub(now, start);
            let late = b.setp(Cmp::Gt, waited, self.idle_ns);
            b.if_then(late, |b| {
                b.mov_to(self.stop, STOP_HOST);
                b.bra(finish);
            });
        });
        for k in 0..6 {
            let v = b.bitcast::<F64, U64>(got[1 + k]);
            b.mov_to(delta[k], v);
        }
        let flags = b.cvt::<U32, U64>(got[7]);
        let some = b.and(flags, 1u32);
        let none = b.setp(Cmp::Eq, some, 0u32);
        b.if_then(none, |b| {
            b.mov_to(self.stop, STOP_SINGULAR);
            b.bra(finish);
        });
        let p = b.and(flags, 2u32);
        let p = b.setp(Cmp::Ne, p, 0u32);
        b.mov_to(pd, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_ignores_order_and_sees_changes() {
        let w: Vec<u64> = (0..27u64)
            .map(|k| k.wrapping_mul(0x1234_5678_9abc))
            .collect();
        let mut r = w.clone();
        r.reverse();
        assert_eq!(assist_check(7, &w), assist_check(7, &r));
        let mut c = w.clone();
        c[3] ^= 1 << 40;
        assert_ne!(assist_check(7, &w), assist_check(7, &c));
        assert_ne!(assist_check(7, &w), assist_check(8, &w));
    }
}
