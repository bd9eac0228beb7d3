//! Latency histograms (microseconds), medians and Jain's fairness index.

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Histogram of durations in microseconds, 1 µs to 10 min, 3 digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.max(1));
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lat {
    pub n: u64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Lat {
    pub fn of(h: &Histogram<u64>) -> Lat {
        if h.is_empty() {
            return Lat::default();
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Lat {
            n: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    pub fn json(&self) -> Value {
        json!({"n": self.n, "p50_ms": self.p50, "p99_ms": self.p99,
               "p999_ms": self.p999, "max_ms": self.max})
    }
}

/// Jain's fairness index (sum x)^2 / (n * sum x^2); 1.0 = perfectly even.
pub fn jain(counts: &[u64]) -> f64 {
    if counts.is_empty() {
        return 1.0;
    }
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sq: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if sq == 0.0 {
        return 0.0;
    }
    sum * sum / (counts.len() as f64 * sq)
}

/// Median of the values (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median of the ratios a[i] / b[i] of runs made side by side (same
/// repetition): slow drift of the machine's speed cancels out.
pub fn paired_ratio(a: &[f64], b: &[f64]) -> f64 {
    median(&ratios(a, b))
}

/// a[i] / b[i] for each repetition i.
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(_, y)| **y > 0.0)
        .map(|(x, y)| x / y)
        .collect()
}

/// Lowest and highest of the finite values, when there are two or more:
/// how far the repetitions reach.
pub fn range(values: &[f64]) -> Option<(f64, f64)> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.len() < 2 {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

/// (max - min) / median of the values, in %: how much the runs disagree.
pub fn spread_pct(values: &[f64]) -> f64 {
    let m = median(values);
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m > 0.0 && values.len() > 1 {
        100.0 * (hi - lo) / m
    } else {
        0.0
    }
}

/// Percentile (0..=100) of a list of samples by nearest rank.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = samples.to_vec();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// A fast deterministic PRNG (splitmix64) for key choice.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// True with probability `p` (a uniform draw in [0, 1) below `p`).
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// `name µs, ...`: the server's µs per call (INFO commandstats), the median
/// over the runs, of each command called in some run at least
/// `1/min_share` as often as that run's busiest one, except `skip`.
pub fn server_time<'r>(
    runs: impl Iterator<Item = &'r [(String, u64, f64)]> + Clone,
    min_share: u64,
    skip: &[&str],
) -> String {
    let mut names: Vec<&str> = Vec::new();
    for stats in runs.clone() {
        let top = stats.iter().map(|c| c.1).max().unwrap_or(0);
        for (name, calls, _) in stats {
            if calls * min_share >= top
                && !skip.contains(&name.as_str())
                && !names.contains(&name.as_str())
            {
                names.push(name);
            }
        }
    }
    names
        .iter()
        .map(|n| {
            let v: Vec<f64> = runs
                .clone()
                .filter_map(|stats| stats.iter().find(|c| c.0 == *n).map(|c| c.2))
                .collect();
            format!("{n} {:.2}", median(&v))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1, 0, 0, 0]) - 0.25).abs() < 1e-12);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
    }

    #[test]
    fn rng_stays_in_range() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            assert!(r.below(64) < 64);
        }
        let reads = (0..100_000).filter(|_| r.chance(0.9)).count();
        assert!((89_000..91_000).contains(&reads), "{reads}");
    }
}
