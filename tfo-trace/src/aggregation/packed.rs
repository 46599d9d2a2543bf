//! Counters kept compact: a value made of fixed-size counters is written as its words
//! ([`Words`]: u64s, in a fixed order), and those as a bitmap of the non-zero ones followed
//! by each non-zero one as a LEB128 varint ([`pack`], [`unpack`]). What `report` keeps of a
//! destination seen more than once (`report::connections`): most of its ~60 counters are 0
//! and the rest small, so ~40 bytes where the counters take ~400; a million destinations
//! must fit in a report's 200 MiB.
//!
//! Each type's [`Words`] sits beside the type and names every field (a destructuring
//! `let`), so a field added to it and not to its words does not compile.

/// A value as a sequence of u64 words, and back.
pub(crate) trait Words: Sized {
    /// Appends the value's words.
    fn put(&self, out: &mut Vec<u64>);
    /// The value from the words [`Words::put`] wrote.
    fn take(words: &mut Taker<'_>) -> Self;
}

/// Words being read back: past the end every word reads 0 (a value of zeros).
pub(crate) struct Taker<'a> {
    words: std::slice::Iter<'a, u64>,
}

impl<'a> Taker<'a> {
    pub(crate) fn new(words: &'a [u64]) -> Self {
        Taker { words: words.iter() }
    }

    pub(crate) fn word(&mut self) -> u64 {
        self.words.next().copied().unwrap_or(0)
    }

    /// A word written from a u32 (a larger one, from a corrupt input, saturates).
    pub(crate) fn u32(&mut self) -> u32 {
        u32::try_from(self.word()).unwrap_or(u32::MAX)
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::try_from(self.word()).unwrap_or(u16::MAX)
    }

    /// An `Option<u64>` written by [`put_option`].
    pub(crate) fn option(&mut self) -> Option<u64> {
        let some = self.word() != 0;
        let value = self.word();
        some.then_some(value)
    }
}

/// An `Option<u64>` as two words: whether it is there, and its value.
pub(crate) fn put_option(out: &mut Vec<u64>, v: Option<u64>) {
    out.extend([u64::from(v.is_some()), v.unwrap_or(0)]);
}

/// `words` packed: their count, a bitmap of the non-zero ones, then each of those.
pub(crate) fn pack(words: &[u64]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(16 + words.len() / 8);
    varint(&mut out, words.len() as u64);
    let bitmap_at = out.len();
    out.resize(bitmap_at + words.len().div_ceil(8), 0);
    for (i, &w) in words.iter().enumerate() {
        if w != 0 {
            out[bitmap_at + i / 8] |= 1 << (i % 8);
            varint(&mut out, w);
        }
    }
    out.into_boxed_slice()
}

/// The words [`pack`] packed, into `out` (cleared first).
pub(crate) fn unpack(packed: &[u8], out: &mut Vec<u64>) {
    out.clear();
    let mut at = 0;
    let n = read_varint(packed, &mut at) as usize;
    let bitmap = packed.get(at..at + n.div_ceil(8)).unwrap_or(&[]);
    at += bitmap.len();
    out.extend((0..n.min(bitmap.len() * 8)).map(|i| {
        if bitmap[i / 8] & (1 << (i % 8)) != 0 {
            read_varint(packed, &mut at)
        } else {
            0
        }
    }));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `*at` (moved past it); a cut one reads as far as it goes.
fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&b) = bytes.get(*at) else { break };
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_zeros_cost_a_bit() {
        let words = [0, 1, 0, 0, 127, 128, u64::MAX, 0, 0, 1_764_731_520_123_456_789, 0];
        let packed = pack(&words);
        let mut back = Vec::new();
        unpack(&packed, &mut back);
        assert_eq!(back, words);
        let zeros = pack(&[0; 64]);
        assert_eq!(zeros.len(), 1 + 8, "the count and the bitmap");
        unpack(&pack(&[]), &mut back);
        assert!(back.is_empty());
        let mut t = Taker::new(&[7]);
        assert_eq!((t.word(), t.word(), t.option()), (7, 0, None), "past the end: zeros");
    }
}
