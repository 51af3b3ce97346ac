//! The drafter's one decoder layer, as arithmetic. For an input (feature `f`, token embedding
//! `e` at unit RMS):
//!
//! ```text
//! u  = FC [f; e]                      h = rmsnorm(u) * attn_norm
//! q, k, v = Q h, K h, V h             x = u + O attention(q; the keys read)
//! m  = rmsnorm(x) * ffn_norm          y = x + DOWN (silu(GATE m) * UP m)
//! f' = rmsnorm(y) * out_norm          the predicted feature; the base model's projection of it
//!                                     gives the next token's logits
//! ```
//!
//! The training crate's candle model computes the same, in the same order.

use super::format::FeatureShape;
use crate::error::EngineError;
use crate::weights::matrix::QuantMatrix;

/// `rmsnorm`'s epsilon, in training and here.
pub const RMS_EPSILON: f32 = 1e-6;

const FC: usize = 0;
const Q: usize = 1;
const K: usize = 2;
const V: usize = 3;
const O: usize = 4;
const GATE: usize = 5;
const UP: usize = 6;
const DOWN: usize = 7;

/// The layer's weights in f32, row-major, in the order of the file's tensor names: `FC`, `Q`,
/// `K`, `V`, `O`, `GATE`, `UP`, `DOWN`, then the norms' gains `attn_norm`, `ffn_norm`,
/// `out_norm`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureWeights {
    pub matrices: [Vec<f32>; 8],
    pub norms: [Vec<f32>; 3],
}

/// One position's entry in the layer: its residual input and its query, key and value.
#[derive(Debug, Clone)]
pub struct Entry {
    u: Vec<f32>,
    q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
}

/// The layer, loaded for evaluation.
pub struct FeatureLayer {
    shape: FeatureShape,
    matrices: Vec<QuantMatrix>,
    norms: [Vec<f32>; 3],
}

impl FeatureLayer {
    /// The layer from f32 weights, its matrices stored as `ty` (F32 or F16).
    pub fn new(
        shape: FeatureShape,
        weights: &FeatureWeights,
        ty: llama_cpp_sys_2::ggml_type,
    ) -> Result<Self, EngineError> {
        shape.check()?;
        let matrices = shape
            .matrix_dims()
            .iter()
            .zip(&weights.matrices)
            .map(|(&(rows, cols), values)| QuantMatrix::quantize(ty, rows, cols, values))
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_matrices(shape, matrices, weights.norms.clone())
    }

    pub(super) fn from_matrices(
        shape: FeatureShape,
        matrices: Vec<QuantMatrix>,
        norms: [Vec<f32>; 3],
    ) -> Result<Self, EngineError> {
        shape.check()?;
        let dims_match = matrices.len() == 8
            && matrices
                .iter()
                .zip(shape.matrix_dims())
                .all(|(m, (rows, cols))| m.rows == rows && m.cols == cols);
        if !dims_match || norms.iter().any(|n| n.len() != shape.n_embd) {
            return Err(EngineError::FeatureDrafter(format!(
                "its weights do not have the sizes of {shape:?}"
            )));
        }
        Ok(Self {
            shape,
            matrices,
            norms,
        })
    }

    pub fn shape(&self) -> FeatureShape {
        self.shape
    }

    /// The entries of `inputs` (feature, token embedding at unit RMS), every matrix read once
    /// for all of them. Runs on the current rayon pool.
    pub fn entries(&self, inputs: &[(&[f32], &[f32])]) -> Vec<Entry> {
        if inputs.is_empty() {
            return Vec::new();
        }
        let joined: Vec<Vec<f32>> = inputs
            .iter()
            .map(|(f, e)| f.iter().chain(e.iter()).copied().collect())
            .collect();
        let us = self.matrices[FC].matmul(&slices(&joined));
        let hs: Vec<Vec<f32>> = us.iter().map(|u| rms_normed(u, &self.norms[0])).collect();
        let hs = slices(&hs);
        let mut qs = self.matrices[Q].matmul(&hs).into_iter();
        let mut ks = self.matrices[K].matmul(&hs).into_iter();
        let mut vs = self.matrices[V].matmul(&hs).into_iter();
        us.into_iter()
            .map(|u| Entry {
                u,
                q: qs.next().unwrap_or_default(),
                k: ks.next().unwrap_or_default(),
                v: vs.next().unwrap_or_default(),
            })
            .collect()
    }

    /// Each query's predicted feature: its entry attends to `keys` (the window, the path above
    /// it and itself, oldest first), then the rest of the layer. Runs on the current rayon pool.
    pub fn outputs(&self, queries: &[(&Entry, Vec<&Entry>)]) -> Vec<Vec<f32>> {
        if queries.is_empty() {
            return Vec::new();
        }
        let attended: Vec<Vec<f32>> = queries
            .iter()
            .map(|(entry, keys)| self.attend(entry, keys))
            .collect();
        let projected = self.matrices[O].matmul(&slices(&attended));
        let xs: Vec<Vec<f32>> = queries
            .iter()
            .zip(projected)
            .map(|((entry, _), o)| entry.u.iter().zip(&o).map(|(u, o)| u + o).collect())
            .collect();
        let ms: Vec<Vec<f32>> = xs.iter().map(|x| rms_normed(x, &self.norms[1])).collect();
        let ms = slices(&ms);
        let gates = self.matrices[GATE].matmul(&ms);
        let ups = self.matrices[UP].matmul(&ms);
        let inner: Vec<Vec<f32>> = gates
            .iter()
            .zip(&ups)
            .map(|(g, u)| g.iter().zip(u).map(|(&g, &u)| silu(g) * u).collect())
            .collect();
        let downs = self.matrices[DOWN].matmul(&slices(&inner));
        xs.iter()
            .zip(downs)
            .map(|(x, down)| {
                let y: Vec<f32> = x.iter().zip(&down).map(|(x, d)| x + d).collect();
                rms_normed(&y, &self.norms[2])
            })
            .collect()
    }

    /// Scaled dot-product attention of `entry`'s query over `keys`, head by head.
    fn attend(&self, entry: &Entry, keys: &[&Entry]) -> Vec<f32> {
        let dim = self.shape.head_dim();
        let scale = (dim as f32).sqrt().recip();
        let mut out = vec![0.0; self.shape.n_embd];
        let mut weights = vec![0.0f32; keys.len()];
        for head in 0..self.shape.heads {
            let span = head * dim..(head + 1) * dim;
            let q = &entry.q[span.clone()];
            for (w, key) in weights.iter_mut().zip(keys) {
                *w = dot(q, &key.k[span.clone()]) * scale;
            }
            softmax(&mut weights);
            let slot = &mut out[span.clone()];
            for (w, key) in weights.iter().zip(keys) {
                for (o, v) in slot.iter_mut().zip(&key.v[span.clone()]) {
                    *o += w * v;
                }
            }
        }
        out
    }
}

fn slices(rows: &[Vec<f32>]) -> Vec<&[f32]> {
    rows.iter().map(Vec::as_slice).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `x / sqrt(mean(x^2) + epsilon) * gain`.
pub fn rms_normed(x: &[f32], gain: &[f32]) -> Vec<f32> {
    let mean_square = x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32;
    let scale = (mean_square + RMS_EPSILON).sqrt().recip();
    x.iter().zip(gain).map(|(v, g)| v * scale * g).collect()
}

/// In place, numerically stable.
pub fn softmax(values: &mut [f32]) {
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in values.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    if sum > 0.0 {
        values.iter_mut().for_each(|v| *v /= sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer of width 2 with one head, whose matrices are all zero but `FC`, which passes the
    /// feature through: attention and the feed-forward block add nothing.
    fn pass_through() -> FeatureLayer {
        let shape = FeatureShape {
            n_embd: 2,
            heads: 1,
            ff: 2,
            window: 4,
        };
        let mut matrices: [Vec<f32>; 8] = Default::default();
        for (m, (rows, cols)) in matrices.iter_mut().zip(shape.matrix_dims()) {
            *m = vec![0.0; rows * cols];
        }
        matrices[FC] = vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        let weights = FeatureWeights {
            matrices,
            norms: [vec![1.0; 2], vec![1.0; 2], vec![2.0, 1.0]],
        };
        FeatureLayer::new(shape, &weights, crate::weights::matrix::GGML_TYPE_F32).unwrap()
    }

    #[test]
    fn the_feature_passes_through_and_is_normed_with_the_out_gain() {
        let layer = pass_through();
        let entries = layer.entries(&[(&[3.0, 4.0], &[1.0, 1.0])]);
        let out = layer.outputs(&[(&entries[0], vec![&entries[0]])]);
        // rms of (3, 4) is sqrt(12.5).
        let r = (12.5f32 + RMS_EPSILON).sqrt();
        assert_eq!(out, vec![vec![2.0 * 3.0 / r, 4.0 / r]]);
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut values = [1.0, 3.0, 2.0];
        softmax(&mut values);
        assert!((values.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(values[1] > values[2] && values[2] > values[0]);
    }

    #[test]
    fn attention_weighs_the_values_by_the_keys_match() {
        let layer = pass_through();
        let a = Entry {
            u: vec![0.0; 2],
            q: vec![1.0, 0.0],
            k: vec![1.0, 0.0],
            v: vec![1.0, 0.0],
        };
        let b = Entry {
            k: vec![-1.0, 0.0],
            v: vec![0.0, 1.0],
            ..a.clone()
        };
        let out = layer.attend(&a, &[&a, &b]);
        let scale = 2f32.sqrt().recip();
        let wa = 1.0 / (1.0 + (-2.0 * scale).exp());
        assert!((out[0] - wa).abs() < 1e-6 && (out[1] - (1.0 - wa)).abs() < 1e-6);
    }
}
