//! The training loop (AdamW over the heads' blocks, base model frozen) and the held-out
//! evaluation: loss `sum_k 0.8^k * CE(head k)` and how often each head ranks the right token
//! first, in its top 5, and at each of its top ranks.

use candle_core::{DType, Tensor, D};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};

use engine::medusa::accuracy::HeadAccuracy;
use engine::speculative::tree_builder::{best_trees, AccuracyTable};

use crate::dataset::Dataset;
use crate::heads_model::{Batch, TrainableHeads};
use crate::schedule::{evaluation_steps, learning_rate, Shuffler};
use crate::stop::StopFlag;
use crate::vocab::HeadVocabulary;
use crate::TrainError;

/// How much each later head's loss counts, relative to the one before (the Medusa paper's).
const HEAD_DECAY: f64 = 0.8;
/// Ranks counted per head: what the tree builder uses.
pub const RANKS: usize = 10;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub warmup_steps: usize,
    pub seed: u64,
    /// Held-out evaluations per epoch (the last at its end), for plots of training as it goes.
    pub evaluations_per_epoch: usize,
}

/// Held-out results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Evaluation {
    pub loss: f64,
    pub top1: Vec<f64>,
    pub top5: Vec<f64>,
    /// Per head, the share of positions where the right token was at each rank.
    pub by_rank: Vec<Vec<f64>>,
    pub positions: Vec<usize>,
    /// Tokens per step a tree of [`PLOTTED_TREE_NODES`] nodes built from `by_rank` would give.
    pub tree_tokens_per_step: f64,
}

/// The tree size whose expected tokens per step evaluations report.
pub const PLOTTED_TREE_NODES: usize = 64;

/// What the loop reports as it goes.
#[derive(Debug, Clone)]
pub enum TrainEvent {
    Step {
        epoch: usize,
        step: usize,
        steps: usize,
        loss: f64,
        /// Each head's own cross-entropy on the batch (unweighted); `None` for a head with no
        /// target in the batch.
        head_losses: Vec<Option<f64>>,
        learning_rate: f64,
    },
    Evaluated {
        epoch: usize,
        /// Optimizer steps done when evaluated.
        step: usize,
        evaluation: Evaluation,
    },
}

/// The training loss and each head's own cross-entropy.
fn weighted_loss(
    logits: &[Tensor],
    batch: &Batch,
) -> candle_core::Result<(Tensor, Vec<Option<f64>>)> {
    let mut total: Option<Tensor> = None;
    let mut head_losses = Vec::with_capacity(logits.len());
    for (k, head_logits) in logits.iter().enumerate() {
        let log_probs = candle_nn::ops::log_softmax(head_logits, D::Minus1)?;
        let picked = log_probs.gather(&batch.rows[k], 1)?;
        let count = batch.mask[k].sum_all()?.to_scalar::<f32>()?;
        if count == 0.0 {
            head_losses.push(None);
            continue;
        }
        let nll = (picked * &batch.mask[k])?
            .sum_all()?
            .affine(-1.0 / count as f64, 0.0)?;
        head_losses.push(Some(nll.to_scalar::<f32>()? as f64));
        let weighted = nll.affine(HEAD_DECAY.powi(k as i32), 0.0)?;
        total = Some(match total {
            Some(t) => (t + weighted)?,
            None => weighted,
        });
    }
    let total = match total {
        Some(t) => t,
        None => Tensor::new(0f32, batch.hidden.device())?,
    };
    Ok((total, head_losses))
}

/// Loss and rank statistics of `heads` over `positions`.
pub fn evaluate(
    heads: &TrainableHeads,
    data: &Dataset,
    positions: &[usize],
    vocab: &HeadVocabulary,
    batch_size: usize,
) -> Result<Evaluation, TrainError> {
    let mut accuracy = HeadAccuracy::new(data.heads, RANKS);
    let (mut loss_sum, mut batches) = (0.0, 0usize);
    for chunk in positions.chunks(batch_size.max(1)) {
        let batch = heads.batch(data, chunk, vocab)?;
        let logits = heads.forward(&batch)?;
        loss_sum +=
            weighted_loss(&logits, &batch)?.0.to_scalar::<f32>()? as f64 * chunk.len() as f64;
        batches += chunk.len();
        for (k, head_logits) in logits.iter().enumerate() {
            accuracy.positions[k] += batch.with_target[k] as u64;
            let target_logit = head_logits.gather(&batch.rows[k], 1)?;
            // Rank of the target: how many tokens score higher.
            let ranks = head_logits
                .broadcast_gt(&target_logit)?
                .to_dtype(DType::F32)?
                .sum(1)?
                .to_vec1::<f32>()?;
            let proposable = batch.mask[k].flatten_all()?.to_vec1::<f32>()?;
            for (rank, ok) in ranks.into_iter().zip(proposable) {
                if ok > 0.0 && (rank as usize) < RANKS {
                    accuracy.hits[k][rank as usize] += 1;
                }
            }
        }
    }
    let by_rank = accuracy.rates();
    let tree_tokens_per_step = AccuracyTable::new(by_rank.clone())
        .ok()
        .and_then(|table| best_trees(&table, PLOTTED_TREE_NODES).pop())
        .map_or(1.0, |tree| tree.expected_tokens);
    Ok(Evaluation {
        tree_tokens_per_step,
        loss: if batches == 0 {
            0.0
        } else {
            loss_sum / batches as f64
        },
        top1: accuracy.top1(),
        top5: by_rank.iter().map(|r| r[..5].iter().sum()).collect(),
        by_rank,
        positions: accuracy.positions.iter().map(|&n| n as usize).collect(),
    })
}

/// Trains `heads` on `train` for `options.epochs`, evaluating on `heldout` as it goes (at the end
/// of each epoch at least). Returns the last evaluation; [`TrainError::Cancelled`] once `stop` is
/// raised.
#[allow(clippy::too_many_arguments)]
pub fn train(
    heads: &TrainableHeads,
    data: &Dataset,
    train: &[usize],
    heldout: &[usize],
    vocab: &HeadVocabulary,
    options: &TrainOptions,
    stop: &StopFlag,
    report: &mut dyn FnMut(TrainEvent),
) -> Result<Evaluation, TrainError> {
    let mut optimizer = AdamW::new(
        heads.vars(),
        ParamsAdamW {
            lr: options.learning_rate,
            weight_decay: options.weight_decay,
            ..ParamsAdamW::default()
        },
    )?;
    let steps_per_epoch = train.len().div_ceil(options.batch_size);
    let steps = steps_per_epoch * options.epochs;
    let evaluate_after = evaluation_steps(steps_per_epoch, options.evaluations_per_epoch);
    let mut order = train.to_vec();
    let mut shuffler = Shuffler::new(options.seed);
    let mut step = 0;
    let mut last = Evaluation::default();
    for epoch in 1..=options.epochs {
        let _span = tracing::info_span!("epoch", epoch).entered();
        shuffler.shuffle(&mut order);
        for (in_epoch, chunk) in order.chunks(options.batch_size).enumerate() {
            if stop.is_raised() {
                return Err(TrainError::Cancelled);
            }
            let lr = learning_rate(step, steps, options.warmup_steps, options.learning_rate);
            optimizer.set_learning_rate(lr);
            let batch = heads.batch(data, chunk, vocab)?;
            let (loss, head_losses) = weighted_loss(&heads.forward(&batch)?, &batch)?;
            optimizer.backward_step(&loss)?;
            step += 1;
            report(TrainEvent::Step {
                epoch,
                step,
                steps,
                loss: loss.to_scalar::<f32>()? as f64,
                head_losses,
                learning_rate: lr,
            });
            if evaluate_after.contains(&(in_epoch + 1)) {
                last = evaluate(heads, data, heldout, vocab, options.batch_size)?;
                report(TrainEvent::Evaluated {
                    epoch,
                    step,
                    evaluation: last.clone(),
                });
            }
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Answer;
    use candle_core::Device;

    /// Four tokens whose projection rows are the unit vectors; each text is a token pattern
    /// with hidden states that point at the token one ahead, so untrained heads (which repeat
    /// the base guess) are wrong and the right answer is learnable.
    fn toy() -> (TrainableHeads, Dataset, HeadVocabulary) {
        let n = 4;
        let mut projection = vec![0.0f32; n * n];
        for i in 0..n {
            projection[i * n + i] = 4.0;
        }
        let heads = TrainableHeads::new(1, 1, n, projection, None, false, &Device::Cpu).unwrap();
        let mut data = Dataset::new(n, 1);
        for start in 0..40 {
            let tokens: Vec<i32> = (0..12).map(|i| ((start + i) % n) as i32).collect();
            // The state behind token i points at token i itself (what the base model guessed).
            let mut states = vec![0.0f32; tokens.len() * n];
            for (row, &token) in tokens.iter().enumerate() {
                states[row * n + token as usize] = 1.0;
            }
            data.push_answer(&Answer { tokens, states });
        }
        (heads, data, HeadVocabulary::full(n))
    }

    #[test]
    fn untrained_heads_repeat_the_base_guess_and_miss() {
        let (heads, data, vocab) = toy();
        let all: Vec<usize> = (0..data.len()).collect();
        let evaluation = evaluate(&heads, &data, &all, &vocab, 7).unwrap();
        // The hidden state points at token t+1, the target is t+2: always rank 1 of 4.
        assert_eq!(evaluation.top1, vec![0.0]);
        assert_eq!(evaluation.by_rank[0][1], 1.0);
        assert_eq!(evaluation.top5, vec![1.0]);
        assert_eq!(evaluation.positions, vec![data.len()]);
    }

    fn options(epochs: usize) -> TrainOptions {
        TrainOptions {
            epochs,
            batch_size: 32,
            learning_rate: 0.05,
            weight_decay: 0.0,
            warmup_steps: 2,
            seed: 5,
            evaluations_per_epoch: 1,
        }
    }

    #[test]
    fn training_lowers_the_loss_and_learns_the_pattern() {
        let (heads, data, vocab) = toy();
        let (train_set, heldout) = data.split(4);
        let before = evaluate(&heads, &data, &heldout, &vocab, 64).unwrap();
        let options = options(30);
        let mut steps = 0;
        let after = train(
            &heads,
            &data,
            &train_set,
            &heldout,
            &vocab,
            &options,
            &StopFlag::default(),
            &mut |e| {
                if let TrainEvent::Step { .. } = e {
                    steps += 1
                }
            },
        )
        .unwrap();
        assert_eq!(steps, 30 * train_set.len().div_ceil(32));
        assert!(
            after.loss < before.loss / 4.0,
            "{} -> {}",
            before.loss,
            after.loss
        );
        assert_eq!(after.top1, vec![1.0]);
        assert_eq!(after.top5, vec![1.0]);
    }

    /// `n` tokens whose projection rows (and input embeddings) are scaled unit vectors, and
    /// texts of them under one constant hidden state: only the tokens themselves tell what
    /// comes next.
    struct TokenProblem {
        n: usize,
        projection: Vec<f32>,
        data: Dataset,
    }

    impl TokenProblem {
        fn new(n: usize, heads: usize, texts: impl IntoIterator<Item = Vec<i32>>) -> Self {
            let projection = (0..n * n)
                .map(|i| if i % (n + 1) == 0 { 4.0 } else { 0.0 })
                .collect();
            let mut data = Dataset::new(n, heads);
            for tokens in texts {
                let states = vec![0.5f32; tokens.len() * n];
                data.push_answer(&Answer { tokens, states });
            }
            Self {
                n,
                projection,
                data,
            }
        }

        /// Held-out top-1 per head of heads trained on the texts, reading the root token
        /// and the drafted path as asked.
        fn top1(&self, root_input: bool, path_input: bool) -> Vec<f64> {
            let mut embedding = self.projection.clone();
            embedding
                .chunks_mut(self.n)
                .for_each(engine::medusa::heads::scale_to_unit_rms);
            let heads = TrainableHeads::new(
                self.data.heads,
                1,
                self.n,
                self.projection.clone(),
                root_input.then_some(embedding),
                path_input,
                &Device::Cpu,
            )
            .unwrap();
            let (train_set, heldout) = self.data.split(4);
            let vocab = HeadVocabulary::full(self.n);
            train(
                &heads,
                &self.data,
                &train_set,
                &heldout,
                &vocab,
                &options(30),
                &StopFlag::default(),
                &mut |_| {},
            )
            .unwrap()
            .top1
        }
    }

    /// Every hidden state is the same, so only the root token (which cycles 0, 1, 2, 3) tells
    /// what comes after it: heads that read the root learn it, heads that do not cannot.
    #[test]
    fn reading_the_root_token_learns_what_the_hidden_state_does_not_say() {
        let cycles = (0..40).map(|start| (0..12).map(|i| (start + i) % 4).collect());
        let problem = TokenProblem::new(4, 1, cycles);
        assert_eq!(problem.top1(true, false), vec![1.0]);
        let blind = problem.top1(false, false)[0];
        assert!(blind < 0.4, "without the root, top-1 {blind}");
    }

    /// Texts of doubled random tokens (x1 x1 x2 x2 ...): where the root is the second of a
    /// pair, the token two ahead repeats the one between, which only heads that read the
    /// drafted path can know.
    #[test]
    fn reading_the_drafted_path_beats_path_blind_heads() {
        let n = 6;
        let mut state = 12345u64;
        let mut random_token = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            1 + (state >> 33) as i32 % (n as i32 - 1)
        };
        let texts: Vec<Vec<i32>> = (0..60)
            .map(|_| (0..8).flat_map(|_| [random_token(); 2]).collect())
            .collect();
        let problem = TokenProblem::new(n, 2, texts);
        let (path, blind) = (problem.top1(true, true)[1], problem.top1(true, false)[1]);
        // Half the positions are copies (always right with the path), the rest one of five.
        assert!(path > 0.5, "with the path, top-1 {path}");
        assert!(blind < 0.35, "without it, top-1 {blind}");
    }

    #[test]
    fn path_input_needs_the_root_embedding() {
        let refused = TrainableHeads::new(2, 1, 4, vec![0.0; 16], None, true, &Device::Cpu);
        assert!(refused.is_err());
    }
}
