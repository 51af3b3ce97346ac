//! A comparison of modes on one prompt, and the figures the store computes for it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::run::{PromptRecord, RunStatus};

/// Runs of one prompt in different modes, measured against the `normal` runs among them.
///
/// The store computes every figure from the stored runs, using only runs with status `finished`
/// (a partial or failed output says nothing about speed or equality). Each mode may be run
/// several times: the k-th run of a mode belongs to round k, and a run's speed-up is its decode
/// speed over the same round's `normal` run. Outputs are checked against the first finished
/// `normal` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Comparison {
    pub id: i64,
    pub created_at: DateTime<Utc>,
    pub prompt: PromptRecord,
    /// Member runs in creation order, each with its figures against its round's baseline.
    pub runs: Vec<ComparisonRun>,
    /// Rounds: the most runs of any one mode.
    #[serde(default)]
    pub repeats: i64,
    /// Per mode, in order of first appearance: medians and ranges over the rounds.
    #[serde(default)]
    pub modes: Vec<ModeFigures>,
    /// The best median speed-up of a non-`normal` mode.
    pub speedup: Option<f64>,
    /// Whether every other run's output equals the baseline's.
    pub outputs_identical: Option<bool>,
    /// The earliest character index at which any other run's output departs from the baseline's.
    pub first_difference: Option<i64>,
}

impl Comparison {
    pub fn run_ids(&self) -> Vec<i64> {
        self.runs.iter().map(|r| r.run_id).collect()
    }
}

/// One member of a comparison. The figures against the baseline are `None` for `normal` runs
/// and for runs that cannot be compared (not finished, or no finished baseline).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
#[ts(rename = "ComparisonMember")]
pub struct ComparisonRun {
    pub run_id: i64,
    pub mode: String,
    pub status: RunStatus,
    pub tokens_per_second: Option<f64>,
    // Exports made before repeats lack these; an import recomputes them.
    #[serde(default)]
    pub decode_tokens_per_second: Option<f64>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    #[serde(default)]
    pub mean_accepted: Option<f64>,
    /// Drafted tokens on its verified paths; `None` when not reported.
    #[serde(default)]
    pub draft_tokens: Option<i64>,
    /// Which repeat of its mode this run is (0-based).
    #[serde(default)]
    pub round: i64,
    /// This run's decode speed over its round's `normal` run's.
    pub speedup: Option<f64>,
    pub output_identical: Option<bool>,
    /// Character index of the first difference from the baseline's output; `None` when equal.
    pub first_difference: Option<i64>,
}

/// The median and range of a figure over a comparison's rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many values.
    pub count: i64,
}

impl Spread {
    /// `None` without values; non-finite values are left out.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: values[0],
            max: values[n - 1],
            count: n as i64,
        })
    }
}

/// What a mode's speed-up over `normal` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SpeedVerdict {
    /// Every run of the mode decoded faster than every `normal` run.
    Faster,
    /// Every run of the mode decoded slower than every `normal` run.
    Slower,
    /// The ranges of the two modes' speeds overlap.
    WithinNoise,
    /// Faster or slower than what the mode drafted can explain (outside
    /// [`ModeFigures::explainable`]): the machine's noise.
    Unexplained,
    /// It drafted so little that drafting cannot have moved its speed as far as measured,
    /// either way: the machine's noise.
    BarelyDrafted,
    /// Its rounds' speed-ups fall on both sides of 1.0 (faster in some, slower in others):
    /// the machine's noise.
    RoundsDisagree,
    /// The mode drafted nothing, so it decoded as `normal` does: any difference, faster or
    /// slower, is the machine's noise.
    DraftedNothing,
    /// One run of a mode: nothing to tell speed from noise.
    SingleRun,
}

/// One mode of a comparison over its rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct ModeFigures {
    pub mode: String,
    /// Finished runs.
    pub runs: i64,
    /// Tokens per second after the first token.
    pub decode_tokens_per_second: Option<Spread>,
    /// Time to the first token.
    pub ttft_ms: Option<Spread>,
    /// Median tokens per step; `None` for `normal`.
    pub mean_accepted: Option<f64>,
    /// Drafted tokens over its finished runs; `None` for `normal` and when not reported.
    pub drafted_tokens: Option<i64>,
    /// Drafted tokens per step, whole trees (every node the model checked), over its finished
    /// runs' recorded steps; `None` for `normal` and for runs that recorded no steps (remote
    /// engines).
    pub drafted_per_step: Option<f64>,
    /// Decode speed over the same round's `normal` run; `None` for `normal`.
    pub speedup: Option<Spread>,
    /// The speed-ups that what the mode drafted can explain; `None` for `normal` and where its
    /// tokens per step are not known.
    pub explainable: Option<SpeedupBounds>,
    /// `None` for `normal` and without a finished pair.
    pub verdict: Option<SpeedVerdict>,
}

/// How far drafting can move a mode's decode speed from normal's, given what it drafted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct SpeedupBounds {
    /// Every drafted token costing a whole extra token and more, with the drafter's own measured
    /// share of each step; `None` where no step was recorded (remote engines).
    pub slowest: Option<f64>,
    /// Every step costing no more than a plain one: its tokens per step.
    pub fastest: f64,
}
