//! Detection on against off: runs paired repetition by repetition
//! ([`Pair`]), the order alternating ([`order`]), the ratio of on to off
//! with its range and whether 1.0 lies within it ([`Ratio`]).

use serde_json::{json, Value};

use crate::report::finite;
use crate::stats::{paired_ratio, range, ratios};

pub(super) fn onoff(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// The runs of one comparison, detection on and off, one pair per
/// repetition.
pub(super) struct Pair<T> {
    pub(super) on: Vec<T>,
    pub(super) off: Vec<T>,
}

impl<T> Pair<T> {
    pub(super) fn new() -> Pair<T> {
        Pair {
            on: Vec::new(),
            off: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, on: bool, v: T) {
        if on {
            self.on.push(v);
        } else {
            self.off.push(v);
        }
    }

    pub(super) fn values(&self, on: bool, f: impl Fn(&T) -> f64) -> Vec<f64> {
        if on { &self.on } else { &self.off }
            .iter()
            .map(f)
            .collect()
    }
}

/// Repetition `rep` runs detection on first when even, off first when odd.
pub(super) fn order(rep: usize) -> [bool; 2] {
    if rep.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

/// The ratio on/off of `f` over the repetitions: median, range, and
/// whether 1.0 lies within that range ("within noise").
pub(super) struct Ratio {
    pub(super) median: f64,
    pub(super) range: Option<(f64, f64)>,
}

impl Ratio {
    pub(super) fn of(on: &[f64], off: &[f64]) -> Ratio {
        let r = ratios(on, off);
        Ratio {
            median: paired_ratio(on, off),
            range: range(&r),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.range {
            Some((lo, hi)) if lo <= 1.0 && 1.0 <= hi => "within noise",
            Some(_) => "OUTSIDE the noise band",
            None => "one repetition: no noise band",
        }
    }

    pub(super) fn text(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!(
                "{:.3}x [{lo:.3} .. {hi:.3}] {}",
                self.median,
                self.verdict()
            ),
            None => format!("{:.3}x ({})", self.median, self.verdict()),
        }
    }

    pub(super) fn json(&self) -> Value {
        json!({"median": finite(self.median),
               "range": self.range.map(|(lo, hi)| json!([finite(lo), finite(hi)])),
               "verdict": self.verdict()})
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_is_within_noise_when_its_repetitions_straddle_one() {
        let within = Ratio::of(&[1.1, 0.9, 1.0], &[1.0, 1.0, 1.0]);
        assert_eq!(within.verdict(), "within noise");
        assert!((within.median - 1.0).abs() < 1e-12);
        let above = Ratio::of(&[1.2, 1.1, 1.3], &[1.0, 1.0, 1.0]);
        assert_eq!(above.verdict(), "OUTSIDE the noise band");
        assert_eq!(above.range, Some((1.1, 1.3)));
        let one = Ratio::of(&[2.0], &[1.0]);
        assert_eq!(one.verdict(), "one repetition: no noise band");
    }

    #[test]
    fn repetitions_alternate_which_setting_runs_first() {
        assert_eq!(order(0), [true, false]);
        assert_eq!(order(1), [false, true]);
        assert_eq!(order(2), [true, false]);
    }
}
