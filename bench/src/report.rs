//! Sections of the printed table, bars, and the JSON document; the
//! violations and errors a run notes for its section.

use std::cell::RefCell;

use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub struct Bar {
    /// What is compared, e.g. "module cycles/s vs raw".
    pub what: String,
    pub measured: f64,
    pub threshold: f64,
    /// `x` (ratio), `ms`, `%` (of one core), `B` (bytes), `count` (a whole
    /// number) or empty (plain number).
    pub unit: &'static str,
    /// The bar is an upper limit (latency, memory) rather than a lower one.
    pub at_most: bool,
    /// Lowest and highest value over the repetitions (the median is
    /// `measured`): how far the machine's noise reaches.
    pub range: Option<(f64, f64)>,
}

impl Bar {
    fn new(
        what: impl Into<String>,
        measured: f64,
        threshold: f64,
        unit: &'static str,
        at_most: bool,
    ) -> Bar {
        Bar {
            what: what.into(),
            measured,
            threshold,
            unit,
            at_most,
            range: None,
        }
    }

    /// Ratio of runs made side by side: the median of a[i] / b[i] over the
    /// repetitions, with their range.
    pub fn paired(what: impl Into<String>, a: &[f64], b: &[f64], at_least: f64) -> Bar {
        let r = crate::stats::ratios(a, b);
        Bar::ratio(what, crate::stats::median(&r), at_least).with_range(&r)
    }

    /// Records the range of the repetitions' values.
    pub fn with_range(mut self, values: &[f64]) -> Bar {
        self.range = crate::stats::range(values);
        self
    }

    /// A ratio that must reach `at_least`.
    pub fn ratio(what: impl Into<String>, measured: f64, at_least: f64) -> Bar {
        Bar::new(what, measured, at_least, "x", false)
    }

    /// A ratio that must stay at or below `limit`.
    pub fn ratio_at_most(what: impl Into<String>, measured: f64, limit: f64) -> Bar {
        Bar::new(what, measured, limit, "x", true)
    }

    pub fn at_most_ms(what: impl Into<String>, measured: f64, limit: f64) -> Bar {
        Bar::new(what, measured, limit, "ms", true)
    }

    pub fn at_most_pct(what: impl Into<String>, measured: f64, limit: f64) -> Bar {
        Bar::new(what, measured, limit, "%", true)
    }

    pub fn at_most_bytes(what: impl Into<String>, measured: f64, limit: f64) -> Bar {
        Bar::new(what, measured, limit, "B", true)
    }

    /// A plain number (a count) that must stay at or below `limit`.
    pub fn at_most(what: impl Into<String>, measured: f64, limit: f64) -> Bar {
        Bar::new(what, measured, limit, "count", true)
    }

    /// Jain index or another plain number that must reach `at_least`.
    pub fn at_least(what: impl Into<String>, measured: f64, at_least: f64) -> Bar {
        Bar::new(what, measured, at_least, "", false)
    }

    pub fn pass(&self) -> bool {
        if !self.measured.is_finite() {
            return false;
        }
        if self.at_most {
            self.measured <= self.threshold
        } else {
            self.measured >= self.threshold
        }
    }

    fn fmt(&self, x: f64, rule: bool) -> String {
        match self.unit {
            "x" if rule => format!("{}x", num(x)),
            "x" if x < 10.0 => format!("{x:.3}x"),
            "x" => format!("{x:.2}x"),
            "ms" if rule => format!("{} ms", num(x)),
            "ms" => format!("{x:.2} ms"),
            "%" if rule => format!("{}%", num(x)),
            "%" => format!("{x:.2}%"),
            "B" if rule => format!("{} B", num(x)),
            "B" => format!("{x:.1} B"),
            "count" => format!("{x:.0}"),
            _ if rule => num(x),
            _ => format!("{x:.4}"),
        }
    }

    fn rule(&self) -> String {
        format!(
            "{} {}",
            if self.at_most { "<=" } else { ">=" },
            self.fmt(self.threshold, true)
        )
    }

    fn value(&self) -> String {
        if self.measured.is_finite() {
            self.fmt(self.measured, false)
        } else {
            "n/a".into()
        }
    }

    fn range_text(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!("[{} .. {}]", self.fmt(lo, false), self.fmt(hi, false)),
            None => String::new(),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "  bar: {:<54} {:>9}  measured {:>9}  {:<11} {}",
            self.what,
            self.rule(),
            self.value(),
            if self.pass() { "PASS" } else { "FALLS SHORT" },
            self.range_text()
        )
    }

    pub fn json(&self) -> Value {
        json!({"what": self.what, "rule": self.rule(), "measured": finite(self.measured),
               "threshold": self.threshold, "pass": self.pass(),
               "range_over_reps": self.range.map(|(lo, hi)| json!([finite(lo), finite(hi)]))})
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// A JSON number, or null for NaN/infinity.
pub fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// A run during which other processes used more than this (% of one core) is
/// measured again (up to `RETRIES` times).
pub const INTERFERENCE_PCT: f64 = 25.0;
pub const RETRIES: usize = 2;

/// The first 20 messages of one kind (errors, violations) a run noted.
#[derive(Default)]
pub struct Findings(RefCell<Vec<String>>);

impl Findings {
    pub fn note(&self, msg: String) {
        let mut noted = self.0.borrow_mut();
        if noted.len() < 20 {
            noted.push(msg);
        }
    }

    pub fn list(&self) -> Vec<String> {
        self.0.borrow().clone()
    }
}

pub struct Section {
    pub id: &'static str,
    pub title: String,
    pub lines: Vec<String>,
    pub bars: Vec<Bar>,
    /// Violations of mutual exclusion seen in this scenario.
    pub violations: Vec<String>,
    /// Unexpected replies, failures, hangs.
    pub errors: Vec<String>,
    /// Runs measured again because other processes used the CPU meanwhile.
    pub discarded: Vec<Value>,
    /// Runs kept although other processes were busy (retries used up).
    pub disturbed_kept: usize,
    pub json: Value,
}

impl Section {
    pub fn new(id: &'static str, title: impl Into<String>) -> Section {
        Section {
            id,
            title: title.into(),
            lines: Vec::new(),
            bars: Vec::new(),
            violations: Vec::new(),
            errors: Vec::new(),
            discarded: Vec::new(),
            disturbed_kept: 0,
            json: Value::Null,
        }
    }

    pub fn line(&mut self, s: impl Into<String>) {
        self.lines.push(s.into());
    }

    pub fn render(&self) -> String {
        let mut out = format!(
            "{} {}: {}\n",
            self.id,
            crate::options::scenario_name(self.id),
            self.title
        );
        for l in &self.lines {
            out.push_str("  ");
            out.push_str(l);
            out.push('\n');
        }
        for b in &self.bars {
            out.push_str(&b.line());
            out.push('\n');
        }
        if !self.discarded.is_empty() || self.disturbed_kept > 0 {
            out.push_str(&format!(
                "  interference: {} run(s) measured again because other processes used > {:.0}% of a core meanwhile (discarded runs in latest.json); {} kept run(s) still disturbed\n",
                self.discarded.len(),
                INTERFERENCE_PCT,
                self.disturbed_kept
            ));
        }
        if self.violations.is_empty() {
            out.push_str("  mutual exclusion: no violation\n");
        } else {
            out.push_str(&format!(
                "  MUTUAL EXCLUSION VIOLATED ({}):\n",
                self.violations.len()
            ));
            for v in self.violations.iter().take(10) {
                out.push_str(&format!("    {v}\n"));
            }
        }
        for e in self.errors.iter().take(10) {
            out.push_str(&format!("  ERROR: {e}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "name": crate::options::scenario_name(self.id), "title": self.title,
            "bars": self.bars.iter().map(Bar::json).collect::<Vec<_>>(),
            "violations": self.violations, "errors": self.errors,
            "discarded_for_interference": self.discarded,
            "kept_runs_disturbed": self.disturbed_kept,
            "data": self.json,
        })
    }
}

/// Formats a rate like `123,456`.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Milliseconds with sensible precision.
pub fn ms(x: f64) -> String {
    if !x.is_finite() {
        "n/a".into()
    } else if x < 10.0 {
        format!("{x:.3}")
    } else if x < 1000.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}
