//! Training the feature drafter from collected answers (a data file of `medusa train-heads
//! --data`): AdamW over the layer with the base model frozen, unrolled on its own predictions
//! (training-time test), then measured the way it drafts: trees grown by its confidence along
//! held-out answers, counting the tokens each would have had accepted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{Device, D};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use serde::Serialize;

use engine::feature_drafter::{
    accepted_along, write_feature_drafter, FeatureAsk, FeatureDrafterModel, FeatureShape,
    FeatureTrainingRecord,
};
use engine::medusa::convert::base_identity;
use engine::medusa::heads::BaseIdentity;

use crate::data_file::read_data;
use crate::dataset::Answer;
use crate::error::invalid;
use crate::feature_model::{answer_len, FeatureBatch, TrainableFeatureDrafter};
use crate::schedule::{learning_rate, Shuffler};
use crate::stop::StopFlag;
use crate::vocab::{unit_rms_embedding, HeadVocabulary};
use crate::TrainError;

#[derive(Debug, Clone)]
pub struct FeatureTrainOptions {
    pub model_path: PathBuf,
    pub out: PathBuf,
    /// Collected answers to train on (`medusa train-heads --data`).
    pub data: PathBuf,
    /// Answers measured besides the held-out ones (e.g. of prompts no training saw).
    pub eval_data: Option<PathBuf>,
    pub window: usize,
    /// Levels unrolled in training.
    pub levels: usize,
    pub epochs: usize,
    /// Answers per optimizer step.
    pub batch_answers: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    /// Keep the N most frequent tokens of the answers as the drafter's vocabulary.
    pub vocab_subset: Option<usize>,
    pub heldout_every: usize,
    /// Tree sizes measured along held-out answers.
    pub tree_sizes: Vec<usize>,
    /// Held-out answers the trees are grown along (the first ones): each position grows a
    /// whole tree, so all of them would take longer than training.
    pub measured_answers: usize,
    pub threads: usize,
    pub seed: u64,
    pub command: String,
    pub stop: StopFlag,
}

impl FeatureTrainOptions {
    pub fn validate(&self) -> Result<(), TrainError> {
        if !(1..=64).contains(&self.window) {
            return Err(invalid("window", "use 1 to 64 positions"));
        }
        if !(1..=8).contains(&self.levels) {
            return Err(invalid("levels", "use 1 to 8"));
        }
        if self.epochs == 0 || self.batch_answers == 0 {
            return Err(invalid(
                "epochs",
                "train at least one epoch of at least one answer",
            ));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(invalid("learning_rate", "must be a positive number"));
        }
        if self.heldout_every < 2 {
            return Err(invalid(
                "heldout_every",
                "hold out at most every second answer",
            ));
        }
        if self.tree_sizes.iter().any(|&n| !(1..=256).contains(&n)) {
            return Err(invalid("tree_sizes", "trees of 1 to 256 nodes"));
        }
        Ok(())
    }
}

/// Held-out loss and, per level, how often its best guess was right (over positions with a
/// token that deep, whether the drafter's vocabulary holds it or not).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FeatureEvaluation {
    pub loss: f64,
    pub top1: Vec<f64>,
    pub positions: Vec<usize>,
}

/// Trees of one size grown along answers.
#[derive(Debug, Clone, Serialize)]
pub struct TreeMeasure {
    pub max_nodes: usize,
    pub positions: usize,
    /// One plus the mean tokens accepted.
    pub tokens_per_step: f64,
    /// The share of positions where at least d tokens were accepted, d = 1, 2, ...
    pub accepted_at_depth: Vec<f64>,
}

#[derive(Debug, Clone)]
pub enum FeatureProgress {
    Loaded {
        answers: usize,
        positions: usize,
    },
    Step {
        epoch: usize,
        step: usize,
        steps: usize,
        loss: f64,
    },
    Evaluated {
        epoch: usize,
        evaluation: FeatureEvaluation,
    },
    Measuring {
        max_nodes: usize,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct FeatureReport {
    pub out: PathBuf,
    pub answers: usize,
    pub train_positions: usize,
    pub heldout_positions: usize,
    pub vocabulary_rows: usize,
    pub untrained: FeatureEvaluation,
    pub trained: FeatureEvaluation,
    /// Along the held-out answers.
    pub heldout_trees: Vec<TreeMeasure>,
    /// Along `eval_data`'s answers, when given.
    pub eval_trees: Vec<TreeMeasure>,
    pub train_seconds: f64,
    pub file_bytes: u64,
}

fn read_answers(path: &Path, base: &BaseIdentity) -> Result<Vec<Answer>, TrainError> {
    let mut answers = Vec::new();
    read_data(path, base, |a| answers.push(a))?;
    Ok(answers)
}

pub fn train_feature_drafter(
    options: &FeatureTrainOptions,
    progress: &mut dyn FnMut(FeatureProgress),
) -> Result<FeatureReport, TrainError> {
    options.validate()?;
    let base = base_identity(&options.model_path)?;
    let (n_embd, n_vocab) = (base.n_embd as usize, base.n_vocab as usize);
    let answers = read_answers(&options.data, &base)?;
    let (train_set, heldout): (Vec<&Answer>, Vec<&Answer>) = {
        let (mut t, mut h) = (Vec::new(), Vec::new());
        for (i, a) in answers.iter().enumerate() {
            if (i + 1).is_multiple_of(options.heldout_every) {
                h.push(a);
            } else {
                t.push(a);
            }
        }
        (t, h)
    };
    let positions = |set: &[&Answer]| set.iter().map(|a| answer_len(a, n_embd)).sum::<usize>();
    progress(FeatureProgress::Loaded {
        answers: answers.len(),
        positions: positions(&train_set) + positions(&heldout),
    });
    if train_set.is_empty() || heldout.is_empty() {
        return Err(TrainError::NotEnoughData(format!(
            "{} answers; hold out fewer or collect more",
            answers.len()
        )));
    }
    let mut counts = vec![0u64; n_vocab];
    for a in &train_set {
        for &t in &a.tokens {
            if let Some(c) = usize::try_from(t).ok().and_then(|t| counts.get_mut(t)) {
                *c += 1;
            }
        }
    }
    let vocab = match options.vocab_subset {
        Some(size) => HeadVocabulary::most_frequent(&counts, size),
        None => HeadVocabulary::full(n_vocab),
    };
    let projection = vocab.projection(&options.model_path, n_vocab, n_embd)?;
    let embedding = unit_rms_embedding(&options.model_path, n_vocab, n_embd)?;
    let shape = FeatureShape::for_model(n_embd, options.window);
    let drafter = TrainableFeatureDrafter::new(
        shape,
        projection.to_f32()?,
        embedding,
        feature_rms(&train_set, n_embd),
        options.seed,
        &Device::Cpu,
    )?;

    let started = Instant::now();
    let evaluate = |drafter: &TrainableFeatureDrafter| {
        evaluate(
            drafter,
            &heldout,
            options.levels,
            options.batch_answers,
            &vocab,
        )
    };
    let untrained = evaluate(&drafter)?;
    progress(FeatureProgress::Evaluated {
        epoch: 0,
        evaluation: untrained.clone(),
    });
    let mut optimizer = AdamW::new(
        drafter.vars(),
        ParamsAdamW {
            lr: options.learning_rate,
            weight_decay: options.weight_decay,
            ..ParamsAdamW::default()
        },
    )?;
    let steps_per_epoch = train_set.len().div_ceil(options.batch_answers);
    let steps = steps_per_epoch * options.epochs;
    let warmup = (steps / 20).clamp(1, 100);
    let mut order: Vec<usize> = (0..train_set.len()).collect();
    let mut shuffler = Shuffler::new(options.seed);
    let mut step = 0;
    let mut trained = untrained.clone();
    for epoch in 1..=options.epochs {
        let _span = tracing::info_span!("feature drafter epoch", epoch).entered();
        shuffler.shuffle(&mut order);
        for chunk in order.chunks(options.batch_answers) {
            if options.stop.is_raised() {
                return Err(TrainError::Cancelled);
            }
            let lr = learning_rate(step, steps, warmup, options.learning_rate);
            optimizer.set_learning_rate(lr);
            let batch_answers: Vec<&Answer> = chunk.iter().map(|&i| train_set[i]).collect();
            let batch = drafter.batch(&batch_answers, options.levels, &vocab)?;
            let (loss, _) = drafter.loss(&drafter.forward(&batch)?, &batch)?;
            optimizer.backward_step(&loss)?;
            step += 1;
            progress(FeatureProgress::Step {
                epoch,
                step,
                steps,
                loss: loss.to_scalar::<f32>()? as f64,
            });
        }
        trained = evaluate(&drafter)?;
        progress(FeatureProgress::Evaluated {
            epoch,
            evaluation: trained.clone(),
        });
    }
    let train_seconds = started.elapsed().as_secs_f64();

    let weights = drafter.weights()?;
    let mut record = FeatureTrainingRecord {
        answers: answers.len(),
        train_positions: positions(&train_set),
        heldout_positions: positions(&heldout),
        epochs: options.epochs,
        levels: options.levels,
        heldout_top1: trained.top1.clone(),
        heldout_loss: trained.loss,
        heldout_tokens_per_step: Vec::new(),
        command: options.command.clone(),
    };
    let subset = vocab.subset.as_deref();
    write_feature_drafter(&options.out, &base, shape, &weights, subset, Some(&record))?;
    let loaded =
        FeatureDrafterModel::load(&options.out, &base, &options.model_path, options.threads)?;
    let mut measure = |set: &[&Answer]| -> Result<Vec<TreeMeasure>, TrainError> {
        options
            .tree_sizes
            .iter()
            .map(|&max_nodes| {
                if options.stop.is_raised() {
                    return Err(TrainError::Cancelled);
                }
                progress(FeatureProgress::Measuring { max_nodes });
                Ok(measure_trees(&loaded, set, max_nodes))
            })
            .collect()
    };
    let heldout_trees = measure(&heldout[..heldout.len().min(options.measured_answers)])?;
    let eval_trees = match &options.eval_data {
        Some(path) => {
            let extra = read_answers(path, &base)?;
            measure(&extra.iter().collect::<Vec<_>>())?
        }
        None => Vec::new(),
    };
    record.heldout_tokens_per_step = heldout_trees
        .iter()
        .map(|m| (m.max_nodes, m.tokens_per_step))
        .collect();
    write_feature_drafter(&options.out, &base, shape, &weights, subset, Some(&record))?;
    Ok(FeatureReport {
        out: options.out.clone(),
        answers: answers.len(),
        train_positions: record.train_positions,
        heldout_positions: record.heldout_positions,
        vocabulary_rows: vocab.rows(),
        untrained,
        trained,
        heldout_trees,
        eval_trees,
        train_seconds,
        file_bytes: std::fs::metadata(&options.out).map_or(0, |m| m.len()),
    })
}

/// The features' mean RMS over (up to) the first thousand positions.
fn feature_rms(answers: &[&Answer], n_embd: usize) -> f32 {
    let rows: Vec<&[f32]> = answers
        .iter()
        .flat_map(|a| a.states.chunks(n_embd))
        .take(1000)
        .collect();
    let sum: f32 = rows
        .iter()
        .map(|r| (r.iter().map(|v| v * v).sum::<f32>() / n_embd as f32).sqrt())
        .sum();
    if rows.is_empty() {
        1.0
    } else {
        sum / rows.len() as f32
    }
}

/// Held-out loss and per-level top-1 of `drafter` over `answers`.
pub fn evaluate(
    drafter: &TrainableFeatureDrafter,
    answers: &[&Answer],
    levels: usize,
    batch_answers: usize,
    vocab: &HeadVocabulary,
) -> Result<FeatureEvaluation, TrainError> {
    let mut right = vec![0usize; levels];
    let mut present = vec![0usize; levels];
    let (mut loss_sum, mut weight) = (0.0, 0.0);
    for chunk in answers.chunks(batch_answers.max(1)) {
        let batch: FeatureBatch = drafter.batch(chunk, levels, vocab)?;
        let logits = drafter.forward(&batch)?;
        let (loss, _) = drafter.loss(&logits, &batch)?;
        let n = batch.with_target[0] as f64;
        loss_sum += loss.to_scalar::<f32>()? as f64 * n;
        weight += n;
        for (j, level) in logits.iter().enumerate() {
            let best: Vec<u32> = level.argmax(D::Minus1)?.to_vec1()?;
            present[j] += batch.with_target[j];
            right[j] += best
                .iter()
                .zip(&batch.targets[j])
                .filter(|(b, t)| t.is_some_and(|t| t == **b))
                .count();
        }
    }
    Ok(FeatureEvaluation {
        loss: if weight > 0.0 { loss_sum / weight } else { 0.0 },
        top1: right
            .iter()
            .zip(&present)
            .map(|(&r, &p)| if p == 0 { 0.0 } else { r as f64 / p as f64 })
            .collect(),
        positions: present,
    })
}

/// Trees of `max_nodes` grown at every position of `answers` (but each answer's last) from the
/// model's features there, and what of the answer's continuation each would have drafted.
pub fn measure_trees(
    drafter: &FeatureDrafterModel,
    answers: &[&Answer],
    max_nodes: usize,
) -> TreeMeasure {
    let n_embd = drafter.shape().n_embd;
    let window = drafter.shape().window;
    let places: Vec<(&Answer, usize)> = answers
        .iter()
        .flat_map(|a| (0..answer_len(a, n_embd).saturating_sub(1)).map(move |i| (*a, i)))
        .collect();
    let mut accepted = Vec::with_capacity(places.len());
    for chunk in places.chunks(32) {
        let asks: Vec<FeatureAsk<'_>> = chunk
            .iter()
            .map(|&(a, i)| FeatureAsk {
                window: (i.saturating_sub(window - 1)..=i)
                    .map(|s| (&a.states[s * n_embd..(s + 1) * n_embd], a.tokens[s]))
                    .collect(),
                max_nodes,
            })
            .collect();
        for (tree, &(a, i)) in drafter.grow(&asks).iter().zip(chunk) {
            let end = answer_len(a, n_embd);
            accepted.push(accepted_along(tree, &a.tokens[i + 1..end]));
        }
    }
    let n = accepted.len().max(1) as f64;
    let deepest = accepted.iter().copied().max().unwrap_or(0);
    TreeMeasure {
        max_nodes,
        positions: accepted.len(),
        tokens_per_step: 1.0 + accepted.iter().sum::<usize>() as f64 / n,
        accepted_at_depth: (1..=deepest)
            .map(|d| accepted.iter().filter(|&&a| a >= d).count() as f64 / n)
            .collect(),
    }
}
