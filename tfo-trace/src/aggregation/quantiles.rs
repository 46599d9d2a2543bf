//! Handshake-time distributions in fixed memory: no per-event storage, so a group costs
//! the same whether it saw ten connections or ten million.
//!
//! [`LogHistogram`] keeps 4 buckets per power of two from 1 µs to 2^28 µs (4.5 min), so a
//! quantile is known to within ±9% (the bucket's geometric midpoint), clamped to the
//! smallest and largest value seen. [`Decades`] is the coarse view the `top` header draws:
//! <1 ms, 1-10 ms, 10-100 ms, 100 ms-1 s, >=1 s, where the 1 s SYN timeout stands out.
use serde::Serialize;

/// Sub-buckets per power of two.
const SUB: u32 = 4;
/// Powers of two covered above 1 µs; larger values go to the last bucket.
const OCTAVES: u32 = 28;
/// Bucket 0 holds 0 µs; then SUB buckets per octave; the last bucket is the overflow.
const BUCKETS: usize = (1 + OCTAVES * SUB + 1) as usize;

/// A fixed log-bucket histogram of microsecond values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHistogram {
    counts: Box<[u32; BUCKETS]>,
    n: u64,
    min: u64,
    max: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram { counts: Box::new([0; BUCKETS]), n: 0, min: u64::MAX, max: 0 }
    }
}

/// The bucket of `us`: 0 for 0, then `1 + octave * SUB + sub`.
fn bucket_of(us: u64) -> usize {
    if us == 0 {
        return 0;
    }
    let octave = 63 - us.leading_zeros(); // floor(log2(us))
    if octave >= OCTAVES {
        return BUCKETS - 1;
    }
    // The SUB bits just below the leading one pick the sub-bucket.
    let sub = if octave >= 2 {
        (us >> (octave - 2)) & u64::from(SUB - 1)
    } else {
        (us << (2 - octave)) & u64::from(SUB - 1)
    };
    (1 + octave * SUB) as usize + sub as usize
}

/// The [low, high) range of bucket `b` in µs (as floats: the low octaves are finer than 1 µs).
fn bucket_range(b: usize) -> (f64, f64) {
    if b == 0 {
        return (0.0, 1.0);
    }
    if b == BUCKETS - 1 {
        let top = (1u64 << OCTAVES) as f64;
        return (top, top * 2.0);
    }
    let i = (b - 1) as u32;
    let (octave, sub) = (i / SUB, i % SUB);
    let base = (1u64 << octave) as f64;
    let step = base / f64::from(SUB);
    (base + step * f64::from(sub), base + step * f64::from(sub + 1))
}

impl LogHistogram {
    pub fn record(&mut self, us: u64) {
        let b = bucket_of(us);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.n += 1;
        self.min = self.min.min(us);
        self.max = self.max.max(us);
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn max(&self) -> Option<u64> {
        (self.n > 0).then_some(self.max)
    }

    /// The q-quantile (0.0..=1.0) in µs, or None when empty: the geometric midpoint of the
    /// bucket holding the rank-`ceil(q*n)` value, or the max (min) seen when that bucket
    /// holds the max (min).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                // In the bucket of the largest (or smallest) value seen, that value is a
                // better answer than the midpoint: a group of 1.02 s stalls says 1.02 s.
                if b == bucket_of(self.max) {
                    return Some(self.max);
                }
                if b == bucket_of(self.min) {
                    return Some(self.min);
                }
                let (lo, hi) = bucket_range(b);
                let mid = if lo <= 0.0 { 0.0 } else { (lo * hi).sqrt() };
                return Some((mid.round() as u64).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

/// Handshake times by decade: where the 1 s SYN timeout shows at a glance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Decades {
    pub counts: [u64; 5],
}

impl Decades {
    pub const LABELS: [&'static str; 5] = ["<1ms", "1-10ms", "10-100ms", "0.1-1s", ">=1s"];
    /// Keys of the JSON object, in order.
    pub const KEYS: [&'static str; 5] = ["lt_1ms", "1ms_10ms", "10ms_100ms", "100ms_1s", "ge_1s"];

    pub fn record(&mut self, us: u64) {
        let i = match us {
            0..=999 => 0,
            1_000..=9_999 => 1,
            10_000..=99_999 => 2,
            100_000..=999_999 => 3,
            _ => 4,
        };
        self.counts[i] += 1;
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The fullest bucket (the mode), None when empty.
    pub fn mode(&self) -> Option<usize> {
        let (i, &c) = self.counts.iter().enumerate().max_by_key(|&(i, &c)| (c, std::cmp::Reverse(i)))?;
        (c > 0).then_some(i)
    }

    pub fn as_map(&self) -> serde_json::Map<String, serde_json::Value> {
        Self::KEYS.iter().zip(self.counts).map(|(k, c)| ((*k).to_string(), c.into())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        let mut last = 0;
        for us in [0u64, 1, 2, 3, 4, 5, 7, 8, 100, 999, 1_000, 1_024, 65_000, 1_020_000, 200_000_000] {
            let b = bucket_of(us);
            assert!(b >= last, "bucket of {us} went backwards");
            last = b;
            let (lo, hi) = bucket_range(b);
            assert!(lo <= us as f64 && (us as f64) < hi, "{us} not in bucket {b} = [{lo}, {hi})");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of(1 << OCTAVES), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_bucket_error() {
        let mut h = LogHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        // 98 fast handshakes of ~100 µs and 2 one-second stalls.
        for i in 0..98 {
            h.record(90 + i % 20);
        }
        h.record(1_020_000);
        h.record(1_030_000);
        let p50 = h.quantile(0.5).unwrap();
        assert!((90..=110).contains(&p50), "p50 {p50}");
        // p99 is the 99th value: one of the two stalls, reported within 9% and <= max.
        let p99 = h.quantile(0.99).unwrap();
        assert!((930_000..=1_030_000).contains(&p99), "p99 {p99}");
        assert_eq!(h.quantile(1.0).unwrap(), 1_030_000, "p100 clamps to the max");
        assert_eq!(h.quantile(0.0).unwrap(), 90, "p0 clamps to the min");
        assert_eq!(h.count(), 100);
    }

    #[test]
    fn single_value_is_exact() {
        let mut h = LogHistogram::default();
        h.record(1_006_800);
        assert_eq!(h.quantile(0.5), Some(1_006_800));
        assert_eq!(h.quantile(0.99), Some(1_006_800));
    }

    #[test]
    fn relative_error_is_bounded_everywhere() {
        for us in (1..40).map(|i| 1u64 << (i % 27)).chain([3, 17, 333, 12_345, 987_654, 5_000_001]) {
            let mut h = LogHistogram::default();
            h.record(us);
            h.record(us + us / 100); // keep min != max so the midpoint is used
            let p = h.quantile(0.5).unwrap() as f64;
            let err = (p - us as f64).abs() / us as f64;
            assert!(err <= 0.10, "{us}: {p} off by {err}");
        }
    }

    #[test]
    fn decades_and_mode() {
        let mut d = Decades::default();
        assert_eq!(d.mode(), None);
        for us in [10, 500, 1_000, 50_000, 1_000_000, 1_020_000, 1_500_000] {
            d.record(us);
        }
        assert_eq!(d.counts, [2, 1, 1, 0, 3]);
        assert_eq!(d.mode(), Some(4), "the one-second mode");
        assert_eq!(d.total(), 7);
        assert_eq!(d.as_map()["ge_1s"], 3);
    }
}
