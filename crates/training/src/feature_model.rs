//! The feature drafter as trainable candle tensors, unrolled on its own predictions
//! (training-time test). Its arithmetic is the engine's (`engine::feature_drafter`, layer.rs).
//!
//! One batch is a few whole answers. Level 0 reads the model's own features: at position `s` the
//! input is (the feature behind token `s`, token `s`), and its attention reads positions
//! `(s - window, s]`. Level `j` reads level `j - 1`'s predicted feature with the true token
//! `s + j` (a tree only goes deeper where the tokens above were right), and its attention reads
//! the same window plus the entries of levels `1..=j` at `s`: the path drafted so far. Level `j`
//! predicts token `s + j + 1`.

use candle_core::{Device, Tensor, Var, D};

use engine::feature_drafter::{FeatureShape, FeatureWeights};

use crate::dataset::Answer;
use crate::schedule::Shuffler;
use crate::vocab::HeadVocabulary;

/// `rmsnorm`'s epsilon, as the engine's.
const RMS_EPSILON: f64 = 1e-6;
/// How much each deeper level's loss counts, relative to the one above.
const LEVEL_DECAY: f64 = 0.8;

pub struct TrainableFeatureDrafter {
    shape: FeatureShape,
    /// `FC, Q, K, V, O, GATE, UP, DOWN`, each `[rows, cols]` as the engine's.
    matrices: Vec<Var>,
    /// `attn_norm, ffn_norm, out_norm`.
    norms: Vec<Var>,
    /// Token embeddings at unit RMS, `[n_vocab, n_embd]`, frozen.
    embedding: Tensor,
    /// The projection's rows transposed, `[n_embd, rows]`, frozen.
    projection_t: Tensor,
    device: Device,
}

/// A few answers as tensors, `B` answers padded to `T` positions.
pub struct FeatureBatch {
    /// `[B, T, n_embd]`.
    features: Tensor,
    /// Per level j, the token read at each position (`s + j`), `[B * T]` u32.
    tokens: Vec<Tensor>,
    /// Per level j, the projection row of token `s + j + 1` (0 where none), `[B * T, 1]` u32.
    rows: Vec<Tensor>,
    /// Per level j, 1 where that token is in the drafter's vocabulary, `[B * T, 1]`.
    mask: Vec<Tensor>,
    /// Per level j, positions that have a token `s + j + 1` at all (in the vocabulary or not).
    pub with_target: Vec<usize>,
    /// Per level j, the true row per position (`None`: no target or outside the vocabulary).
    pub targets: Vec<Vec<Option<u32>>>,
    /// `[T, T]`: 0 where position `s` reads position `t`, a large negative number elsewhere.
    window_mask: Tensor,
    size: (usize, usize),
}

impl TrainableFeatureDrafter {
    /// A drafter of `shape` over `projection` (`[rows, n_embd]` row-major) and the token
    /// `embedding` at unit RMS (`[n_vocab, n_embd]`); `feature_rms` is the model's features'
    /// typical RMS, where the output gain starts. `seed` fixes the initial weights.
    pub fn new(
        shape: FeatureShape,
        projection: Vec<f32>,
        embedding: Vec<f32>,
        feature_rms: f32,
        seed: u64,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let d = shape.n_embd;
        let mut rng = Shuffler::new(seed);
        let matrices = shape
            .matrix_dims()
            .iter()
            .enumerate()
            .map(|(i, &(rows, cols))| {
                let values: Vec<f32> = if i == 0 {
                    // FC starts passing the feature through, the token's half at small noise.
                    (0..rows * cols)
                        .map(|n| {
                            let (r, c) = (n / cols, n % cols);
                            if c < d {
                                f32::from(u8::from(r == c))
                            } else {
                                rng.normal() * 0.02
                            }
                        })
                        .collect()
                } else {
                    // The residual branches' outputs (O, DOWN) start smaller.
                    let std = if i == 4 || i == 7 { 0.002 } else { 0.02 };
                    (0..rows * cols).map(|_| rng.normal() * std).collect()
                };
                Var::from_tensor(&Tensor::from_vec(values, (rows, cols), device)?)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norms = (0..3)
            .map(|i| {
                let gain = if i == 2 { feature_rms } else { 1.0 };
                Var::from_tensor(&Tensor::from_vec(vec![gain; d], d, device)?)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let rows = projection.len() / d.max(1);
        let vocab = embedding.len() / d.max(1);
        Ok(Self {
            shape,
            matrices,
            norms,
            embedding: Tensor::from_vec(embedding, (vocab, d), device)?,
            projection_t: Tensor::from_vec(projection, (rows, d), device)?
                .t()?
                .contiguous()?,
            device: device.clone(),
        })
    }

    pub fn vars(&self) -> Vec<Var> {
        self.matrices.iter().chain(&self.norms).cloned().collect()
    }

    /// The weights as the engine's file takes them.
    pub fn weights(&self) -> candle_core::Result<FeatureWeights> {
        let flat = |v: &Var| v.as_tensor().flatten_all()?.to_vec1::<f32>();
        let matrices: Vec<Vec<f32>> = self.matrices.iter().map(flat).collect::<Result<_, _>>()?;
        let norms: Vec<Vec<f32>> = self.norms.iter().map(flat).collect::<Result<_, _>>()?;
        Ok(FeatureWeights {
            matrices: matrices
                .try_into()
                .map_err(|_| candle_core::Error::Msg("eight matrices".into()))?,
            norms: norms
                .try_into()
                .map_err(|_| candle_core::Error::Msg("three norms".into()))?,
        })
    }

    /// `answers` as a batch for `levels` levels.
    pub fn batch(
        &self,
        answers: &[&Answer],
        levels: usize,
        vocab: &HeadVocabulary,
    ) -> candle_core::Result<FeatureBatch> {
        let d = self.shape.n_embd;
        let lens: Vec<usize> = answers.iter().map(|a| answer_len(a, d)).collect();
        let (b, t) = (
            answers.len(),
            lens.iter().copied().max().unwrap_or(0).max(1),
        );
        let mut features = vec![0.0f32; b * t * d];
        for (i, (answer, &len)) in answers.iter().zip(&lens).enumerate() {
            features[i * t * d..(i * t + len) * d].copy_from_slice(&answer.states[..len * d]);
        }
        let mut tokens = Vec::with_capacity(levels);
        let (mut rows, mut mask, mut with_target, mut targets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for j in 0..levels {
            let mut read = Vec::with_capacity(b * t);
            let mut level_targets = Vec::with_capacity(b * t);
            let mut present = 0;
            for (answer, &len) in answers.iter().zip(&lens) {
                // Token `at` of the answer, where it has one (padding reads as none).
                let token_at = |at: usize| (at < len).then(|| answer.tokens[at]);
                for s in 0..t {
                    let inside = s < len;
                    read.push(token_at(s + j).filter(|_| inside).unwrap_or(0).max(0) as u32);
                    let target = token_at(s + j + 1).filter(|_| inside);
                    present += usize::from(target.is_some());
                    level_targets.push(target.and_then(|t| vocab.row(t)));
                }
            }
            tokens.push(Tensor::from_vec(read, b * t, &self.device)?);
            rows.push(Tensor::from_vec(
                level_targets
                    .iter()
                    .map(|r| r.unwrap_or(0))
                    .collect::<Vec<u32>>(),
                (b * t, 1),
                &self.device,
            )?);
            mask.push(Tensor::from_vec(
                level_targets
                    .iter()
                    .map(|r| f32::from(u8::from(r.is_some())))
                    .collect::<Vec<f32>>(),
                (b * t, 1),
                &self.device,
            )?);
            with_target.push(present);
            targets.push(level_targets);
        }
        let w = self.shape.window;
        let window: Vec<f32> = (0..t * t)
            .map(|n| {
                let (s, r) = (n / t, n % t);
                if r <= s && s - r < w {
                    0.0
                } else {
                    -1e9
                }
            })
            .collect();
        Ok(FeatureBatch {
            features: Tensor::from_vec(features, (b, t, d), &self.device)?,
            tokens,
            rows,
            mask,
            with_target,
            targets,
            window_mask: Tensor::from_vec(window, (t, t), &self.device)?,
            size: (b, t),
        })
    }

    /// Logits per level, `[B * T, rows]`.
    pub fn forward(&self, batch: &FeatureBatch) -> candle_core::Result<Vec<Tensor>> {
        let (b, t) = batch.size;
        let (d, heads) = (self.shape.n_embd, self.shape.heads);
        let hd = d / heads;
        let m = |i: usize| self.matrices[i].as_tensor();
        let norm = |i: usize| self.norms[i].as_tensor();
        let linear = |x: &Tensor, i: usize| x.broadcast_matmul(&m(i).t()?);
        let split = |x: Tensor| x.reshape((b, t, heads, hd))?.transpose(1, 2)?.contiguous();
        let scale = 1.0 / (hd as f64).sqrt();
        let mut feature = batch.features.clone();
        // Keys and values of the path levels 1..=j at each position, `[B, H, T, hd]`.
        let mut path: Vec<(Tensor, Tensor)> = Vec::new();
        let mut window_kv: Option<(Tensor, Tensor)> = None;
        let mut logits = Vec::with_capacity(batch.tokens.len());
        for tokens in &batch.tokens {
            let e = self.embedding.index_select(tokens, 0)?.reshape((b, t, d))?;
            let u = linear(&Tensor::cat(&[&feature, &e], 2)?, 0)?;
            let h = rms_norm(&u, norm(0))?;
            let q = split(linear(&h, 1)?)?;
            let k = split(linear(&h, 2)?)?;
            let v = split(linear(&h, 3)?)?;
            let (k0, v0) = match &window_kv {
                None => {
                    window_kv = Some((k.clone(), v.clone()));
                    (k.clone(), v.clone())
                }
                Some((k0, v0)) => {
                    path.push((k.clone(), v.clone()));
                    (k0.clone(), v0.clone())
                }
            };
            let window_scores = (q.matmul(&k0.t()?)? * scale)?.broadcast_add(&batch.window_mask)?;
            let path_scores = path
                .iter()
                .map(|(pk, _)| (&q * pk)?.sum_keepdim(D::Minus1)? * scale)
                .collect::<candle_core::Result<Vec<_>>>()?;
            let mut all = vec![window_scores];
            all.extend(path_scores);
            let weights = candle_nn::ops::softmax_last_dim(&Tensor::cat(&all, 3)?)?;
            let mut attended = weights.narrow(3, 0, t)?.matmul(&v0)?;
            for (i, (_, pv)) in path.iter().enumerate() {
                attended = (attended + weights.narrow(3, t + i, 1)?.broadcast_mul(pv)?)?;
            }
            let attended = attended.transpose(1, 2)?.reshape((b, t, d))?;
            let x = (u + linear(&attended, 4)?)?;
            let mx = rms_norm(&x, norm(1))?;
            let inner = (candle_nn::ops::silu(&linear(&mx, 5)?)? * linear(&mx, 6)?)?;
            let y = (x + linear(&inner, 7)?)?;
            feature = rms_norm(&y, norm(2))?;
            logits.push(feature.reshape((b * t, d))?.matmul(&self.projection_t)?);
        }
        Ok(logits)
    }

    /// The training loss (each level's cross-entropy, deeper ones weighing less) and each
    /// level's own cross-entropy (`None` where the batch has no target).
    pub fn loss(
        &self,
        logits: &[Tensor],
        batch: &FeatureBatch,
    ) -> candle_core::Result<(Tensor, Vec<Option<f64>>)> {
        let mut total = Tensor::new(0f32, &self.device)?;
        let mut levels = Vec::with_capacity(logits.len());
        for (j, level) in logits.iter().enumerate() {
            let count = batch.mask[j].sum_all()?.to_scalar::<f32>()?;
            if count == 0.0 {
                levels.push(None);
                continue;
            }
            let log_probs = candle_nn::ops::log_softmax(level, D::Minus1)?;
            let nll = (log_probs.gather(&batch.rows[j], 1)? * &batch.mask[j])?
                .sum_all()?
                .affine(-1.0 / count as f64, 0.0)?;
            levels.push(Some(nll.to_scalar::<f32>()? as f64));
            total = (total + nll.affine(LEVEL_DECAY.powi(j as i32), 0.0)?)?;
        }
        Ok((total, levels))
    }
}

/// Positions of `answer` with a feature and a token.
pub fn answer_len(answer: &Answer, n_embd: usize) -> usize {
    (answer.states.len() / n_embd.max(1)).min(answer.tokens.len())
}

fn rms_norm(x: &Tensor, gain: &Tensor) -> candle_core::Result<Tensor> {
    let mean_square = x.sqr()?.mean_keepdim(D::Minus1)?;
    let scale = (mean_square + RMS_EPSILON)?.sqrt()?.recip()?;
    x.broadcast_mul(&scale)?.broadcast_mul(gain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
    use engine::feature_drafter::FeatureLayer;
    use engine::matrix::GGML_TYPE_F32;

    const D: usize = 8;
    const VOCAB: usize = 5;

    fn shape() -> FeatureShape {
        FeatureShape {
            n_embd: D,
            heads: 2,
            ff: 12,
            window: 3,
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Shuffler::new(seed);
        (0..n).map(|_| rng.normal()).collect()
    }

    /// Answers whose features say which token was chosen there, over a cycle of the tokens.
    fn answers(count: usize, len: usize) -> Vec<Answer> {
        (0..count)
            .map(|a| {
                let tokens: Vec<i32> = (0..len).map(|s| ((a + s) % VOCAB) as i32).collect();
                let mut states = vec![0.0f32; len * D];
                for (s, &t) in tokens.iter().enumerate() {
                    states[s * D + t as usize] = 2.0;
                }
                Answer { tokens, states }
            })
            .collect()
    }

    fn drafter(seed: u64) -> TrainableFeatureDrafter {
        TrainableFeatureDrafter::new(
            shape(),
            values(VOCAB * D, 11),
            values(VOCAB * D, 12),
            1.0,
            seed,
            &Device::Cpu,
        )
        .unwrap()
    }

    /// The engine's layer gives the logits candle gives, level 0 and level 1 (the second
    /// reading the first's predicted feature and its own entry beside the window).
    #[test]
    fn the_engine_computes_what_training_computes() {
        let drafter = drafter(3);
        let data = answers(1, 6);
        let vocab = HeadVocabulary::full(VOCAB);
        let batch = drafter.batch(&[&data[0]], 2, &vocab).unwrap();
        let logits = drafter.forward(&batch).unwrap();
        let layer = FeatureLayer::new(shape(), &drafter.weights().unwrap(), GGML_TYPE_F32).unwrap();
        let embedding = values(VOCAB * D, 12);
        let projection = values(VOCAB * D, 11);
        let embed = |t: i32| &embedding[t as usize * D..(t as usize + 1) * D];
        let project = |f: &[f32]| -> Vec<f32> {
            projection
                .chunks(D)
                .map(|row| row.iter().zip(f).map(|(a, b)| a * b).sum())
                .collect()
        };
        let s = 4;
        let answer = &data[0];
        let inputs: Vec<(&[f32], &[f32])> = (s + 1 - shape().window..=s)
            .map(|p| (&answer.states[p * D..(p + 1) * D], embed(answer.tokens[p])))
            .collect();
        let window = layer.entries(&inputs);
        let root = window.last().unwrap();
        let feature = layer
            .outputs(&[(root, window.iter().collect())])
            .pop()
            .unwrap();
        let level1 = layer.entries(&[(&feature, embed(answer.tokens[s + 1]))]);
        let mut keys: Vec<_> = window.iter().collect();
        keys.push(&level1[0]);
        let deeper = layer.outputs(&[(&level1[0], keys)]).pop().unwrap();
        for (level, engine_logits) in [project(&feature), project(&deeper)].iter().enumerate() {
            let candle_logits: Vec<f32> = logits[level].get(s).unwrap().to_vec1().unwrap();
            for (a, b) in candle_logits.iter().zip(engine_logits) {
                assert!(
                    (a - b).abs() < 1e-4,
                    "level {level}: {candle_logits:?} against {engine_logits:?}"
                );
            }
        }
    }

    #[test]
    fn training_on_its_own_predictions_learns_a_cycle_two_levels_deep() {
        let drafter = drafter(5);
        let data = answers(20, 12);
        let refs: Vec<&Answer> = data.iter().collect();
        let vocab = HeadVocabulary::full(VOCAB);
        let batch = drafter.batch(&refs, 2, &vocab).unwrap();
        let (before, _) = drafter
            .loss(&drafter.forward(&batch).unwrap(), &batch)
            .unwrap();
        let mut optimizer = AdamW::new(
            drafter.vars(),
            ParamsAdamW {
                lr: 0.02,
                ..ParamsAdamW::default()
            },
        )
        .unwrap();
        for _ in 0..150 {
            let (loss, _) = drafter
                .loss(&drafter.forward(&batch).unwrap(), &batch)
                .unwrap();
            optimizer.backward_step(&loss).unwrap();
        }
        let logits = drafter.forward(&batch).unwrap();
        let (after, levels) = drafter.loss(&logits, &batch).unwrap();
        let (before, after) = (
            before.to_scalar::<f32>().unwrap(),
            after.to_scalar::<f32>().unwrap(),
        );
        assert!(after < before / 10.0, "{before} -> {after}");
        assert!(
            levels.iter().all(|l| l.is_some_and(|l| l < 0.1)),
            "{levels:?}"
        );
    }
}
