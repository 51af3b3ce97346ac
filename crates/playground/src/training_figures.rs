//! What a heads training job is asked for, what it settles on, and the figures it shows as it
//! goes: answers collected, loss per head, held-out accuracy and the tokens per step a tree of
//! the heads would give, and the time each phase took.

use serde::{Deserialize, Serialize};
use training::{Evaluation, TrainEvent, TrainProgress};
use ts_rs::TS;

/// Train Medusa heads for a model on its own answers.
#[derive(Debug, Clone, Default, Deserialize, TS)]
#[ts(optional_fields)]
pub struct TrainingRequest {
    /// The GGUF model (a path the playground may load).
    pub model: String,
    /// A prompt file, one prompt per line; the project's prompt set when absent.
    #[serde(default)]
    pub prompts: Option<String>,
    /// Answer only the first N prompts.
    #[serde(default)]
    pub samples: Option<usize>,
    /// Tokens the model writes per answer.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub epochs: Option<usize>,
    #[serde(default)]
    pub heads: Option<usize>,
    /// Let the heads propose only the N most frequent answer tokens.
    #[serde(default)]
    pub vocab_subset: Option<usize>,
    /// Heads that also read the drafted path (the shipped heads' kind; default true).
    #[serde(default)]
    pub path_input: Option<bool>,
    /// Prompts the tune after training answers to measure the heads.
    #[serde(default)]
    pub tune_prompts: Option<usize>,
    #[serde(default)]
    pub tune_max_tokens: Option<u32>,
}

/// Where a job started now for a model would write its heads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct PlannedHeads {
    pub model: String,
    /// `<model>.medusa.gguf` beside the model, or `<model>-2.medusa.gguf` and so on when that
    /// name is taken by a file or by another job.
    pub heads_path: String,
}

/// What deleting a training job removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
pub struct DeletedTrainingJob {
    pub id: i64,
    /// Bytes of collected answers removed from disk (the heads it wrote stay).
    pub freed_bytes: u64,
}

/// What a job runs with: the request with every default filled in. Stored with the job, so that
/// a resume does exactly what the start did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TrainingSettings {
    /// The prompt file; `null` for the project's prompt set.
    pub prompts_file: Option<String>,
    /// Prompts answered.
    pub samples: usize,
    pub max_tokens: u32,
    pub epochs: usize,
    pub heads: usize,
    pub vocab_subset: Option<usize>,
    pub path_input: bool,
    /// Every this-many-th answer is held out for evaluation.
    pub heldout_every: usize,
    pub evaluations_per_epoch: usize,
    pub tune_prompts: usize,
    pub tune_max_tokens: u32,
}

/// The shipped heads' recipe: answers of 192 tokens, 2 epochs, the 8192 most frequent answer
/// tokens, heads that read the drafted path.
pub const DEFAULT_MAX_TOKENS: u32 = 192;
pub const DEFAULT_EPOCHS: usize = 2;
pub const DEFAULT_VOCAB_SUBSET: usize = 8192;
/// Held-out evaluations per epoch: enough points for the accuracy plots, at about 4% of the
/// training time each.
pub const EVALUATIONS_PER_EPOCH: usize = 4;
/// Answer length of the tune after training.
pub const DEFAULT_TUNE_MAX_TOKENS: u32 = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum TrainingPhase {
    Starting,
    LoadingModel,
    Collecting,
    Training,
    Writing,
    Tuning,
    Done,
}

impl TrainingPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::LoadingModel => "loading_model",
            Self::Collecting => "collecting",
            Self::Training => "training",
            Self::Writing => "writing",
            Self::Tuning => "tuning",
            Self::Done => "done",
        }
    }
}

/// Time spent in one phase (over every attempt of a resumed job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct PhaseTime {
    pub phase: TrainingPhase,
    pub seconds: f64,
}

/// Training loss, averaged over the optimizer steps since the point before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct LossPoint {
    pub step: usize,
    pub loss: f64,
    /// Each head's own cross-entropy; `null` where a head had no target.
    pub head_losses: Vec<Option<f64>>,
}

/// The heads on the held-out answers after `step` optimizer steps (step 0: untrained).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct EvaluationPoint {
    pub step: usize,
    pub epoch: usize,
    pub loss: f64,
    pub top1: Vec<f64>,
    pub top5: Vec<f64>,
    /// Tokens per step a 64-node tree built from this accuracy would give.
    pub tree_tokens_per_step: f64,
}

/// How far a job got, and what it measured on the way.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct TrainingFigures {
    /// Prompts answered, of `prompts`.
    pub answered: usize,
    pub prompts: usize,
    pub answer_tokens: usize,
    pub epoch: usize,
    pub epochs: usize,
    /// Optimizer steps done, of `steps`.
    pub step: usize,
    pub steps: usize,
    /// Tune prompts measured, of `tune_prompts`.
    pub tuned: usize,
    pub tune_prompts: usize,
    /// What the phase under way still needs, from its pace so far.
    pub seconds_left: Option<f64>,
    pub phase_seconds: Vec<PhaseTime>,
    pub losses: Vec<LossPoint>,
    pub evaluations: Vec<EvaluationPoint>,
    /// Losses of the steps since the last point.
    #[serde(skip)]
    #[ts(skip)]
    pending: Vec<(f64, Vec<Option<f64>>)>,
}

impl TrainingFigures {
    /// Nothing done yet of `prompts` answers, `epochs` epochs and `tune_prompts` tune prompts.
    pub fn planned(prompts: usize, epochs: usize, tune_prompts: usize) -> Self {
        Self {
            prompts,
            epochs,
            tune_prompts,
            ..Self::default()
        }
    }
}

/// Loss points a job keeps at most (steps are averaged in blocks to stay under it).
pub const MAX_LOSS_POINTS: usize = 240;

impl TrainingFigures {
    /// Folds one report of the trainer in; returns the phase it shows, if it shows one.
    pub fn absorb(&mut self, event: &TrainProgress) -> Option<TrainingPhase> {
        match event {
            TrainProgress::LoadingModel => Some(TrainingPhase::LoadingModel),
            TrainProgress::LoadedData { texts, .. } => {
                self.answered = *texts;
                None
            }
            TrainProgress::Collect(collected) => {
                self.answered = collected.done;
                self.prompts = collected.total;
                self.answer_tokens = collected.tokens;
                Some(TrainingPhase::Collecting)
            }
            TrainProgress::Baseline(evaluation) => {
                // Training starts over on a resume: the plots do too.
                self.losses.clear();
                self.pending.clear();
                self.evaluations = vec![point(0, 0, evaluation)];
                (self.step, self.epoch) = (0, 0);
                Some(TrainingPhase::Training)
            }
            TrainProgress::Train(TrainEvent::Step {
                epoch,
                step,
                steps,
                loss,
                head_losses,
                ..
            }) => {
                (self.epoch, self.step, self.steps) = (*epoch, *step, *steps);
                self.pending.push((*loss, head_losses.clone()));
                let block = steps.div_ceil(MAX_LOSS_POINTS).max(1);
                if self.pending.len() >= block || step == steps {
                    self.flush_losses();
                }
                Some(TrainingPhase::Training)
            }
            TrainProgress::Train(TrainEvent::Evaluated {
                epoch,
                step,
                evaluation,
            }) => {
                self.evaluations.push(point(*step, *epoch, evaluation));
                Some(TrainingPhase::Training)
            }
            TrainProgress::Writing => Some(TrainingPhase::Writing),
        }
    }

    fn flush_losses(&mut self) {
        let n = self.pending.len();
        if n == 0 {
            return;
        }
        let heads = self.pending[0].1.len();
        let head_losses = (0..heads)
            .map(|k| {
                let seen: Vec<f64> = self.pending.iter().filter_map(|(_, h)| h[k]).collect();
                (!seen.is_empty()).then(|| seen.iter().sum::<f64>() / seen.len() as f64)
            })
            .collect();
        let loss = self.pending.iter().map(|(l, _)| l).sum::<f64>() / n as f64;
        self.losses.push(LossPoint {
            step: self.step,
            loss,
            head_losses,
        });
        self.pending.clear();
    }

    /// Adds `seconds` to the time spent in `phase`.
    pub fn add_phase_time(&mut self, phase: TrainingPhase, seconds: f64) {
        match self.phase_seconds.iter_mut().find(|p| p.phase == phase) {
            Some(time) => time.seconds += seconds,
            None => self.phase_seconds.push(PhaseTime { phase, seconds }),
        }
    }

    /// Work done and to do in `phase`, for a time-left estimate.
    pub fn work(&self, phase: TrainingPhase) -> Option<(usize, usize)> {
        match phase {
            TrainingPhase::Collecting => Some((self.answered, self.prompts)),
            TrainingPhase::Training => Some((self.step, self.steps)),
            TrainingPhase::Tuning => Some((self.tuned, self.tune_prompts)),
            _ => None,
        }
    }
}

fn point(step: usize, epoch: usize, evaluation: &Evaluation) -> EvaluationPoint {
    EvaluationPoint {
        step,
        epoch,
        loss: evaluation.loss,
        top1: evaluation.top1.clone(),
        top5: evaluation.top5.clone(),
        tree_tokens_per_step: evaluation.tree_tokens_per_step,
    }
}

/// What the tune after training found for the new heads on this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TuneSummary {
    /// Tokens per step the tuned tree's nodes were measured to accept along the tune prompts'
    /// answers (the tree counted on prompts it was not built from), if it could be counted.
    pub measured_tokens_per_step: Option<f64>,
    pub chosen_nodes: Option<usize>,
    pub chosen_expected_tokens_per_step: Option<f64>,
    pub predicted_speedup: Option<f64>,
    pub decision: String,
}

/// What a finished job made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TrainingReport {
    pub heads_path: String,
    pub file_bytes: u64,
    pub prompts: usize,
    pub generated_tokens: usize,
    pub train_positions: usize,
    pub heldout_positions: usize,
    pub untrained_top1: Vec<f64>,
    pub heldout_top1: Vec<f64>,
    pub heldout_top5: Vec<f64>,
    /// The tree stored with the heads, and the tokens per step it should give.
    pub tree_nodes: usize,
    pub expected_tokens_per_step: f64,
    /// Tokens per step of a 64-node tree from the held-out accuracy.
    pub tree_tokens_per_step: f64,
    pub tune: Option<TuneSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use training::CollectEvent;

    fn step(step: usize, steps: usize, loss: f64, heads: [Option<f64>; 2]) -> TrainProgress {
        TrainProgress::Train(TrainEvent::Step {
            epoch: 1,
            step,
            steps,
            loss,
            head_losses: heads.to_vec(),
            learning_rate: 1e-3,
        })
    }

    #[test]
    fn losses_are_averaged_in_blocks_that_keep_the_plot_small() {
        let mut figures = TrainingFigures::default();
        let steps = MAX_LOSS_POINTS * 2 + 1;
        for s in 1..=steps {
            let head = if s % 2 == 0 { None } else { Some(s as f64) };
            figures.absorb(&step(s, steps, s as f64, [Some(1.0), head]));
        }
        // Blocks of 3 steps, the last one alone.
        assert_eq!(figures.losses.len(), steps.div_ceil(3));
        assert_eq!(figures.losses[0].step, 3);
        assert_eq!(figures.losses[0].loss, 2.0);
        // Steps 1 and 3 had the second head's target, step 2 did not.
        assert_eq!(figures.losses[0].head_losses, vec![Some(1.0), Some(2.0)]);
        assert_eq!(figures.losses.last().unwrap().step, steps);
        assert_eq!(figures.work(TrainingPhase::Training), Some((steps, steps)));
    }

    #[test]
    fn collection_and_a_restart_of_training_show_in_the_figures() {
        let mut figures = TrainingFigures::default();
        let collected = TrainProgress::Collect(CollectEvent {
            done: 3,
            total: 12,
            tokens: 90,
        });
        assert_eq!(figures.absorb(&collected), Some(TrainingPhase::Collecting));
        assert_eq!(figures.work(TrainingPhase::Collecting), Some((3, 12)));
        figures.absorb(&step(1, 1, 2.0, [Some(1.0), Some(3.0)]));
        assert_eq!(figures.losses.len(), 1);
        let baseline = Evaluation {
            tree_tokens_per_step: 1.5,
            ..Evaluation::default()
        };
        let phase = figures.absorb(&TrainProgress::Baseline(baseline));
        assert_eq!(phase, Some(TrainingPhase::Training));
        assert!(figures.losses.is_empty());
        assert_eq!(figures.evaluations.len(), 1);
        assert_eq!(figures.evaluations[0].tree_tokens_per_step, 1.5);

        figures.add_phase_time(TrainingPhase::Collecting, 2.0);
        figures.add_phase_time(TrainingPhase::Collecting, 0.5);
        assert_eq!(
            figures.phase_seconds,
            vec![PhaseTime {
                phase: TrainingPhase::Collecting,
                seconds: 2.5
            }]
        );
    }
}
