//! What a decode of `n` tokens costs on this machine, and how sure that figure is.
//!
//! Each batch size has a central figure and a band. Calibration times every size several
//! times in interleaved rounds and takes, per round, each size's time relative to one token's
//! in the same round, so that load which comes and goes slows both alike; the band holds the
//! middle half of those ratios. Real steps then keep updating the figures. The draft budget
//! prices plain decoding at the central figure and drafting at the top of the band, so that
//! drafting happens only where it pays even if the machine is as slow as it has been seen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One batch size's decode time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct CostPoint {
    /// Tokens in the batch.
    pub tokens: usize,
    /// The central figure, in milliseconds.
    pub ms: f64,
    /// The band it was seen in (equal to `ms` for a figure given without one).
    pub low_ms: f64,
    pub high_ms: f64,
}

impl CostPoint {
    /// A figure known without a spread.
    pub fn without_spread(tokens: usize, ms: f64) -> Self {
        Self {
            tokens,
            ms,
            low_ms: ms,
            high_ms: ms,
        }
    }

    /// The band's width relative to the central figure.
    pub fn relative_spread(&self) -> f64 {
        (self.high_ms - self.low_ms) / self.ms.max(f64::MIN_POSITIVE)
    }

    fn is_sound(&self) -> bool {
        self.tokens > 0
            && [self.ms, self.low_ms, self.high_ms]
                .iter()
                .all(|v| v.is_finite() && *v > 0.0)
            && self.low_ms <= self.ms
            && self.ms <= self.high_ms
    }
}

/// Where the figures came from, as `medusa info` and Settings say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    /// Given (tests, or a tool that knows the machine): fixed, real steps do not move them.
    Given,
    /// Timed when the engine started.
    Measured,
    /// Read from the decode-cost cache of an earlier load.
    Cached,
}

/// The decode costs as reported: the figures with their bands, where they came from, and
/// whether the machine was too busy for them to be kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct DecodeCosts {
    pub points: Vec<CostPoint>,
    pub source: CostSource,
    /// Why the calibration was not kept in the cache (the machine was busy), if it was not.
    pub busy: Option<String>,
    /// Batch sizes whose figures now come from real steps of this engine.
    pub updated_by_steps: Vec<usize>,
}

impl DecodeCosts {
    /// The figures in one line: `tokens: ms (low-high)`, where they came from, and why they
    /// were not kept if they were not.
    pub fn summary(&self) -> String {
        let figures: Vec<String> = self
            .points
            .iter()
            .map(|p| {
                if p.low_ms == p.high_ms {
                    format!("{}: {:.1}", p.tokens, p.ms)
                } else {
                    format!(
                        "{}: {:.1} ({:.1}-{:.1})",
                        p.tokens, p.ms, p.low_ms, p.high_ms
                    )
                }
            })
            .collect();
        let source = match self.source {
            CostSource::Given => "given",
            CostSource::Measured => "measured now",
            CostSource::Cached => "from the cache",
        };
        let mut line = format!("{} ms by tokens in the batch, {source}", figures.join(", "));
        if !self.updated_by_steps.is_empty() {
            line.push_str(&format!(
                "; sizes {:?} from real steps",
                self.updated_by_steps
            ));
        }
        if let Some(busy) = &self.busy {
            line.push_str(&format!("; not kept, the machine was busy: {busy}"));
        }
        line
    }
}

/// Real steps of one batch size, the most recent kept.
#[derive(Debug, Clone, Default, PartialEq)]
struct StepTimes {
    recent: Vec<f64>,
    next: usize,
}

/// How many recent steps of a size are kept, and how many make its figure.
const RECENT_STEPS: usize = 48;
const STEPS_FOR_A_FIGURE: usize = 12;

impl StepTimes {
    fn push(&mut self, ms: f64) {
        if self.recent.len() < RECENT_STEPS {
            self.recent.push(ms);
        } else {
            self.recent[self.next] = ms;
            self.next = (self.next + 1) % RECENT_STEPS;
        }
    }

    /// Median and quartiles, once enough steps were seen.
    fn point(&self, tokens: usize) -> Option<CostPoint> {
        (self.recent.len() >= STEPS_FOR_A_FIGURE).then(|| {
            let mut sorted = self.recent.clone();
            sorted.sort_by(f64::total_cmp);
            let (low_ms, ms, high_ms) = quartiles(&sorted);
            CostPoint {
                tokens,
                ms,
                low_ms,
                high_ms,
            }
        })
    }
}

/// Lower quartile, median and upper quartile of sorted, non-empty values.
pub(crate) fn quartiles(sorted: &[f64]) -> (f64, f64, f64) {
    let at = |q: f64| {
        let i = q * (sorted.len() - 1) as f64;
        let (below, above) = (i.floor() as usize, i.ceil() as usize);
        sorted[below] + (sorted[above] - sorted[below]) * (i - below as f64)
    };
    (at(0.25), at(0.5), at(0.75))
}

/// Decode time by number of tokens in the batch.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    /// From calibration, the cache or given, by size.
    base: Vec<CostPoint>,
    /// Real steps by size.
    steps: BTreeMap<usize, StepTimes>,
    /// `base` with the sizes real steps have a figure for replaced, monotone.
    points: Vec<CostPoint>,
    source: CostSource,
    busy: Option<String>,
}

impl CostModel {
    /// Figures known without a spread: `(tokens, milliseconds)`.
    pub fn new(points: Vec<(usize, f64)>) -> Self {
        let points = points
            .into_iter()
            .map(|(tokens, ms)| CostPoint::without_spread(tokens, ms))
            .collect();
        Self::with_bands(points, CostSource::Given, None)
    }

    /// Figures with their bands; unsound points (no tokens, a band that does not hold its
    /// figure) are dropped.
    pub fn with_bands(points: Vec<CostPoint>, source: CostSource, busy: Option<String>) -> Self {
        let mut base: Vec<CostPoint> = points.into_iter().filter(CostPoint::is_sound).collect();
        base.sort_by_key(|p| p.tokens);
        base.dedup_by_key(|p| p.tokens);
        let mut model = Self {
            points: Vec::new(),
            base,
            steps: BTreeMap::new(),
            source,
            busy,
        };
        model.merge();
        model
    }

    /// Folds in the time a real decode of `tokens` took, so that the figures follow the
    /// machine as it is now. A size's figure moves once enough of its steps were seen, to
    /// their median, so one slow step does not swing it.
    /// Given figures stay as given: whoever gave them asked for a fixed cost model.
    pub fn observe(&mut self, tokens: usize, ms: f64) {
        if self.source == CostSource::Given || tokens == 0 || !ms.is_finite() || ms <= 0.0 {
            return;
        }
        let times = self.steps.entry(tokens).or_default();
        times.push(ms);
        if times.recent.len() >= STEPS_FOR_A_FIGURE {
            self.merge();
        }
    }

    fn merge(&mut self) {
        self.points = self.combined(|_| true);
    }

    /// The starting figures, each replaced by real steps' figure for its size where `take`
    /// accepts that figure; monotone.
    fn combined(&self, take: impl Fn(&CostPoint) -> bool) -> Vec<CostPoint> {
        let mut combined: BTreeMap<usize, CostPoint> =
            self.base.iter().map(|p| (p.tokens, *p)).collect();
        for (&tokens, times) in &self.steps {
            if let Some(point) = times.point(tokens).filter(|p| take(p)) {
                combined.insert(tokens, point);
            }
        }
        let mut points: Vec<CostPoint> = combined.into_values().collect();
        make_monotone(&mut points);
        points
    }

    /// The figures in use, increasing in tokens.
    pub fn points(&self) -> &[CostPoint] {
        &self.points
    }

    /// Batch sizes whose figures come from real steps.
    pub fn updated_by_steps(&self) -> Vec<usize> {
        self.steps
            .iter()
            .filter(|(_, t)| t.recent.len() >= STEPS_FOR_A_FIGURE)
            .map(|(&n, _)| n)
            .collect()
    }

    pub fn source(&self) -> CostSource {
        self.source
    }

    pub fn report(&self) -> DecodeCosts {
        DecodeCosts {
            points: self.points.clone(),
            source: self.source,
            busy: self.busy.clone(),
            updated_by_steps: self.updated_by_steps(),
        }
    }

    /// Whether real steps now tell clearly other figures than the ones this model started
    /// from: some size's steps, in a narrow band of their own, lie outside the starting band
    /// widened by a tenth. Such figures are worth keeping instead of the starting ones.
    pub fn drifted(&self) -> bool {
        self.steps.iter().any(|(&tokens, times)| {
            let Some(seen) = times.point(tokens) else {
                return false;
            };
            if seen.relative_spread() > BUSY_SPREAD {
                return false;
            }
            let start = interpolate(&self.base, tokens, |p| (p.low_ms, p.high_ms));
            match start {
                Some((low, high)) => seen.ms < 0.9 * low || seen.ms > 1.1 * high,
                None => true,
            }
        })
    }

    /// Takes the steady figures of real steps (a band within `BUSY_SPREAD`) as the ones to keep
    /// and to compare later steps with; an unsteady size keeps its earlier figure, as a busy
    /// moment is no truth to keep.
    pub fn settle(&mut self) {
        self.base = self.combined(|p| p.relative_spread() <= BUSY_SPREAD);
        self.steps.clear();
        self.merge();
    }

    /// The central estimate for `n` tokens: linear between points, extended with the last slope.
    pub fn cost(&self, n: usize) -> f64 {
        self.estimate(n, |p| p.ms)
    }

    /// The top of the band for `n` tokens: what a step of that size is priced at before
    /// drafting for it.
    pub fn cautious_cost(&self, n: usize) -> f64 {
        // Past the last point each end of the band follows its own slope, and the two can cross
        // the central figure; the band always holds it.
        self.estimate(n, |p| p.high_ms).max(self.cost(n))
    }

    /// The bottom of the band for `n` tokens.
    pub fn hopeful_cost(&self, n: usize) -> f64 {
        self.estimate(n, |p| p.low_ms).min(self.cost(n))
    }

    fn estimate(&self, n: usize, figure: impl Fn(&CostPoint) -> f64) -> f64 {
        if n == 0 {
            return 0.0;
        }
        match self.points.as_slice() {
            [] => n as f64,
            [only] => figure(only) * n as f64 / only.tokens as f64,
            points => interpolate(points, n, |p| (figure(p), 0.0))
                .map_or(n as f64, |(ms, _)| ms)
                .max(f64::MIN_POSITIVE),
        }
    }
}

/// A relative band wider than this says the machine was busy while it was timed.
pub const BUSY_SPREAD: f64 = 0.25;

/// Linear interpolation of a pair of figures between the points around `n`, extended with the
/// last two points' slope; `None` with fewer than two points.
fn interpolate(
    points: &[CostPoint],
    n: usize,
    figure: impl Fn(&CostPoint) -> (f64, f64),
) -> Option<(f64, f64)> {
    if points.len() < 2 {
        return points.first().map(|p| {
            let (a, b) = figure(p);
            let scale = n as f64 / p.tokens as f64;
            (a * scale, b * scale)
        });
    }
    let i = points
        .iter()
        .position(|p| p.tokens >= n)
        .unwrap_or(points.len() - 1)
        .max(1);
    let (p0, p1) = (&points[i - 1], &points[i]);
    let ((a0, b0), (a1, b1)) = (figure(p0), figure(p1));
    let t = (n as f64 - p0.tokens as f64) / (p1.tokens - p0.tokens) as f64;
    Some((a0 + (a1 - a0) * t, b0 + (b1 - b0) * t))
}

/// A bigger batch never costs less: a reading below a smaller batch's is noise, so the smaller
/// one's is lowered to it (each of the figure and its band's ends).
fn make_monotone(points: &mut [CostPoint]) {
    for i in (0..points.len().saturating_sub(1)).rev() {
        let next = points[i + 1];
        let point = &mut points[i];
        point.ms = point.ms.min(next.ms);
        point.low_ms = point.low_ms.min(next.low_ms).min(point.ms);
        point.high_ms = point.high_ms.min(next.high_ms).max(point.ms);
    }
}

/// Timings of every size in interleaved rounds: `rounds[r][i]` is round `r`'s time for
/// `sizes[i]`, whose first entry must be one token.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub sizes: Vec<usize>,
    pub rounds: Vec<Vec<f64>>,
    /// Of the time the decodes took, the share the process ran on all its threads (1 when it
    /// had the cores to itself); `None` where that says nothing (work on a GPU).
    pub cpu_share: Option<f64>,
}

/// Below this share of its threads' time, the process was waiting for cores.
pub const BUSY_CPU_SHARE: f64 = 0.8;

impl Calibration {
    /// The figures: one token's median time, and each size's median and quartile ratios to one
    /// token's time in the same round, times that median. With the reason the machine looked
    /// busy, if it did: such figures serve this run but are not kept.
    pub fn into_model(self) -> CostModel {
        let points = self.points();
        let busy = self.busy_reason(&points);
        CostModel::with_bands(points, CostSource::Measured, busy)
    }

    fn points(&self) -> Vec<CostPoint> {
        let rounds: Vec<&Vec<f64>> = self
            .rounds
            .iter()
            .filter(|r| r.len() == self.sizes.len() && r.iter().all(|ms| *ms > 0.0))
            .collect();
        if rounds.is_empty() || self.sizes.first() != Some(&1) {
            return Vec::new();
        }
        let mut ones: Vec<f64> = rounds.iter().map(|r| r[0]).collect();
        ones.sort_by(f64::total_cmp);
        let (one_low, one_ms, one_high) = quartiles(&ones);
        self.sizes
            .iter()
            .enumerate()
            .map(|(i, &tokens)| {
                if i == 0 {
                    return CostPoint {
                        tokens,
                        ms: one_ms,
                        low_ms: one_low,
                        high_ms: one_high,
                    };
                }
                let mut ratios: Vec<f64> = rounds.iter().map(|r| r[i] / r[0]).collect();
                ratios.sort_by(f64::total_cmp);
                let (low, mid, high) = quartiles(&ratios);
                CostPoint {
                    tokens,
                    ms: one_ms * mid,
                    low_ms: one_ms * low,
                    high_ms: one_ms * high,
                }
            })
            .collect()
    }

    fn busy_reason(&self, points: &[CostPoint]) -> Option<String> {
        if let Some(share) = self.cpu_share.filter(|s| *s < BUSY_CPU_SHARE) {
            return Some(format!(
                "the decodes got {:.0}% of their threads' time: other work shared the cores",
                share * 100.0
            ));
        }
        let widest = points
            .iter()
            .max_by(|a, b| a.relative_spread().total_cmp(&b.relative_spread()))?;
        (widest.relative_spread() > BUSY_SPREAD).then(|| {
            format!(
                "{} tokens took {:.1} to {:.1} ms across rounds: too unsteady to keep",
                widest.tokens, widest.low_ms, widest.high_ms
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(tokens: usize, low_ms: f64, ms: f64, high_ms: f64) -> CostPoint {
        CostPoint {
            tokens,
            ms,
            low_ms,
            high_ms,
        }
    }

    #[test]
    fn given_figures_interpolate_and_extrapolate() {
        let model = CostModel::new(vec![(4, 20.0), (1, 8.0), (2, 12.0)]);
        assert_eq!(model.cost(1), 8.0);
        assert_eq!(model.cost(3), 16.0);
        assert_eq!(model.cost(6), 28.0);
        assert_eq!(model.cautious_cost(3), 16.0, "no band, no caution");
        assert_eq!(model.source(), CostSource::Given);
    }

    #[test]
    fn figures_and_bands_are_kept_monotone() {
        // A 100 ms reading for one token (the machine was busy) cannot exceed two tokens' 11 ms.
        let model = CostModel::with_bands(
            vec![point(1, 90.0, 100.0, 120.0), point(2, 10.0, 11.0, 13.0)],
            CostSource::Measured,
            None,
        );
        assert_eq!(model.points()[0], point(1, 10.0, 11.0, 13.0));
        // A band that does not hold its figure is no reading at all.
        let model = CostModel::with_bands(
            vec![point(1, 9.0, 8.0, 10.0), point(2, 10.0, 11.0, 13.0)],
            CostSource::Measured,
            None,
        );
        assert_eq!(model.points().len(), 1);
    }

    #[test]
    fn drafting_is_priced_at_the_top_of_the_band() {
        let model = CostModel::with_bands(
            vec![point(1, 9.0, 10.0, 11.0), point(3, 14.0, 18.0, 26.0)],
            CostSource::Measured,
            None,
        );
        assert_eq!(model.cost(2), 14.0);
        assert_eq!(model.cautious_cost(2), 18.5);
        assert_eq!(model.hopeful_cost(2), 11.5);
    }

    /// Rounds of sizes 1, 2, 4 where each round runs at `load` times the quiet speed.
    fn rounds(loads: &[f64]) -> Vec<Vec<f64>> {
        loads
            .iter()
            .map(|load| vec![10.0 * load, 17.0 * load, 25.0 * load])
            .collect()
    }

    #[test]
    fn interleaved_rounds_cancel_load_that_comes_and_goes() {
        // Load that changes between rounds slows every size of a round alike: the ratios stay
        // those of a quiet machine, and the band around them stays narrow.
        let calibration = Calibration {
            sizes: vec![1, 2, 4],
            rounds: rounds(&[1.0, 1.0, 1.1, 1.0, 1.05, 1.0, 1.0]),
            cpu_share: Some(0.97),
        };
        let model = calibration.into_model();
        let costs = model.report();
        assert_eq!(costs.busy, None);
        assert_eq!(costs.source, CostSource::Measured);
        let two = costs.points[1];
        assert!((two.ms - 17.0).abs() < 1e-9, "{two:?}");
        assert!((two.low_ms - 17.0).abs() < 1e-9 && (two.high_ms - 17.0).abs() < 1e-9);
        assert!(costs.points[0].relative_spread() < 0.06, "{costs:?}");
    }

    #[test]
    fn a_busy_calibration_says_so() {
        // Every decode as slow as the next whatever its size, from one round to the next: the
        // pattern of a core taken by another process.
        let unsteady = Calibration {
            sizes: vec![1, 2, 4],
            rounds: vec![
                vec![130.0, 20.0, 131.0],
                vec![12.0, 129.0, 30.0],
                vec![129.0, 130.0, 129.5],
                vec![10.0, 18.0, 140.0],
                vec![131.0, 17.0, 26.0],
            ],
            cpu_share: None,
        };
        let busy = unsteady.into_model().report().busy.expect("busy");
        assert!(busy.contains("too unsteady"), "{busy}");
        // Steady figures, but the threads waited for the cores half the time.
        let starved = Calibration {
            sizes: vec![1, 2, 4],
            rounds: rounds(&[1.0; 5]),
            cpu_share: Some(0.5),
        };
        let busy = starved.into_model().report().busy.expect("busy");
        assert!(busy.contains("50%"), "{busy}");
    }

    fn measured(points: &[(usize, f64)]) -> CostModel {
        let points = points
            .iter()
            .map(|&(tokens, ms)| CostPoint::without_spread(tokens, ms))
            .collect();
        CostModel::with_bands(points, CostSource::Measured, None)
    }

    #[test]
    fn given_figures_stay_as_given() {
        let mut model = CostModel::new(vec![(1, 10.0), (2, 18.0)]);
        for _ in 0..RECENT_STEPS {
            model.observe(2, 12.0);
        }
        assert_eq!(model.cost(2), 18.0);
        assert!(model.updated_by_steps().is_empty() && !model.drifted());
    }

    #[test]
    fn real_steps_replace_a_size_once_enough_were_seen() {
        let mut model = measured(&[(1, 10.0), (2, 18.0), (4, 26.0)]);
        for _ in 0..STEPS_FOR_A_FIGURE - 1 {
            model.observe(2, 12.0);
        }
        assert_eq!(model.cost(2), 18.0, "not yet");
        assert!(!model.drifted());
        model.observe(2, 12.0);
        assert_eq!(model.cost(2), 12.0);
        assert_eq!(model.updated_by_steps(), vec![2]);
        assert!(model.drifted(), "12 ms is clearly not 18");
        // Sizes never calibrated join the curve.
        for _ in 0..STEPS_FOR_A_FIGURE {
            model.observe(3, 20.0);
        }
        assert_eq!(model.cost(3), 20.0);
        // Invalid readings are ignored.
        model.observe(0, 5.0);
        model.observe(2, f64::NAN);
        assert_eq!(model.updated_by_steps(), vec![2, 3]);
    }

    #[test]
    fn steps_as_unsteady_as_a_busy_machine_do_not_count_as_drift() {
        let mut model = measured(&[(1, 10.0), (2, 18.0)]);
        for i in 0..RECENT_STEPS {
            model.observe(1, if i % 2 == 0 { 5.0 } else { 60.0 });
        }
        assert!(!model.drifted());
        // Close to the starting figure is no drift either.
        let mut model = measured(&[(1, 10.0), (2, 18.0)]);
        for _ in 0..RECENT_STEPS {
            model.observe(1, 10.5);
        }
        assert!(!model.drifted());
    }

    #[test]
    fn settling_keeps_the_steady_sizes_and_not_the_unsteady_ones() {
        let mut model = measured(&[(1, 10.0), (2, 18.0), (4, 26.0)]);
        for i in 0..RECENT_STEPS {
            model.observe(1, 7.0);
            model.observe(2, if i % 2 == 0 { 9.0 } else { 60.0 });
        }
        assert!(model.drifted(), "one token clearly got faster");
        assert!(model.cost(2) > 18.0, "the busy figure serves until settled");
        model.settle();
        let kept: Vec<(usize, f64, f64, f64)> = model
            .points()
            .iter()
            .map(|p| (p.tokens, p.ms, p.low_ms, p.high_ms))
            .collect();
        assert_eq!(
            kept,
            vec![
                (1, 7.0, 7.0, 7.0),
                (2, 18.0, 18.0, 18.0),
                (4, 26.0, 26.0, 26.0)
            ]
        );
        assert!(model.updated_by_steps().is_empty() && !model.drifted());
    }

    #[test]
    fn the_band_holds_the_central_figure_past_the_last_point() {
        // A wide band at 16 tokens and a narrow one at 32: extended with their own slopes, the
        // top would fall below the centre at 64.
        let points = vec![
            CostPoint {
                tokens: 16,
                ms: 100.0,
                low_ms: 70.0,
                high_ms: 130.0,
            },
            CostPoint {
                tokens: 32,
                ms: 200.0,
                low_ms: 195.0,
                high_ms: 205.0,
            },
        ];
        let model = CostModel::with_bands(points, CostSource::Measured, None);
        assert_eq!(model.cost(64), 400.0);
        assert_eq!(model.cautious_cost(64), 400.0);
        assert_eq!(model.hopeful_cost(64), 400.0);
        assert_eq!(model.cautious_cost(24), 167.5);
        assert_eq!(model.hopeful_cost(24), 132.5);
    }

    #[test]
    fn quartiles_interpolate() {
        assert_eq!(quartiles(&[1.0, 2.0, 3.0, 4.0, 5.0]), (2.0, 3.0, 4.0));
        assert_eq!(quartiles(&[7.0]), (7.0, 7.0, 7.0));
        assert_eq!(quartiles(&[0.0, 4.0]), (1.0, 2.0, 3.0));
    }
}
