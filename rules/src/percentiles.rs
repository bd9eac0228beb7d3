//! What `INFO lock` prints of a distribution of times (waits, holds): which
//! percentiles, under which names, and what while nothing was recorded.

/// What a histogram answers.
pub trait Distribution {
    /// How many values were recorded.
    fn count(&self) -> u64;
    /// The value at `percentile` (0 to 100) of the recorded ones.
    fn at(&self, percentile: f64) -> u64;
    /// The largest value recorded.
    fn max(&self) -> u64;
}

/// The percentiles printed, with their field suffixes; then `max`.
pub const PERCENTILES: [(&str, f64); 2] = [("p50", 50.0), ("p99", 99.0)];

/// The fields of distribution `name` (`wait_ms`): `<name>_p50`,
/// `<name>_p99`, `<name>_max`, in that order; 0 while nothing was recorded.
/// Each is at most the next, whatever the histogram's rounding.
pub fn fields(name: &str, d: &impl Distribution) -> [(String, u64); 3] {
    let empty = d.count() == 0;
    let value = |v: u64| if empty { 0 } else { v };
    let max = value(d.max());
    let p99 = value(d.at(PERCENTILES[1].1)).min(max);
    let p50 = value(d.at(PERCENTILES[0].1)).min(p99);
    [
        (format!("{name}_{}", PERCENTILES[0].0), p50),
        (format!("{name}_{}", PERCENTILES[1].0), p99),
        (format!("{name}_max"), max),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact percentiles of a list (nearest rank).
    struct Values(Vec<u64>);

    impl Distribution for Values {
        fn count(&self) -> u64 {
            self.0.len() as u64
        }
        fn at(&self, percentile: f64) -> u64 {
            let mut v = self.0.clone();
            v.sort_unstable();
            let rank = ((percentile / 100.0) * v.len() as f64).ceil() as usize;
            v.get(rank.saturating_sub(1)).copied().unwrap_or(0)
        }
        fn max(&self) -> u64 {
            self.0.iter().copied().max().unwrap_or(0)
        }
    }

    /// A histogram whose rounding puts a percentile above its max.
    struct Rounding;

    impl Distribution for Rounding {
        fn count(&self) -> u64 {
            3
        }
        fn at(&self, percentile: f64) -> u64 {
            if percentile < 90.0 {
                12
            } else {
                11
            }
        }
        fn max(&self) -> u64 {
            10
        }
    }

    fn fields_of(d: &impl Distribution) -> Vec<(String, u64)> {
        fields("wait_ms", d).to_vec()
    }

    fn named(values: [u64; 3]) -> Vec<(String, u64)> {
        ["wait_ms_p50", "wait_ms_p99", "wait_ms_max"]
            .iter()
            .map(|n| n.to_string())
            .zip(values)
            .collect()
    }

    #[test]
    fn names_p50_p99_then_max() {
        let values = Values((1..=100).collect());
        assert_eq!(fields_of(&values), named([50, 99, 100]));
        assert_eq!(fields("hold_ms", &values)[2].0, "hold_ms_max");
    }

    #[test]
    fn zero_while_nothing_was_recorded() {
        assert_eq!(fields_of(&Values(Vec::new())), named([0, 0, 0]));
    }

    #[test]
    fn one_value_is_every_percentile() {
        assert_eq!(fields_of(&Values(vec![7])), named([7, 7, 7]));
    }

    #[test]
    fn never_above_the_next_field() {
        assert_eq!(fields_of(&Rounding), named([10, 10, 10]));
    }
}
