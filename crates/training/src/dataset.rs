//! Self-distilled training data: the model's final hidden state at each position of its own
//! answers, with the tokens that followed, one per head (head `k` predicts the token `k + 2`
//! ahead).

use engine::TokenId;

/// One answer the model wrote and, for each of its tokens, the final hidden state whose
/// logits produced it (row 0 is the prompt's last position).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub tokens: Vec<TokenId>,
    /// `tokens.len()` rows of `n_embd` values.
    pub states: Vec<f32>,
}

/// Marks a head with no token that far ahead.
pub const NO_TARGET: TokenId = -1;

#[derive(Debug, Clone)]
pub struct Dataset {
    pub n_embd: usize,
    pub heads: usize,
    hidden: Vec<f32>,
    /// The token the base model chose from each hidden state: the tree's root at inference.
    roots: Vec<TokenId>,
    targets: Vec<TokenId>,
    sequence: Vec<u32>,
    sequences: usize,
    answer_tokens: usize,
}

impl Dataset {
    pub fn new(n_embd: usize, heads: usize) -> Self {
        Self {
            n_embd,
            heads,
            hidden: Vec::new(),
            roots: Vec::new(),
            targets: Vec::new(),
            sequence: Vec::new(),
            sequences: 0,
            answer_tokens: 0,
        }
    }

    /// Adds every position of one answer that has at least the first head's target: the
    /// state behind token `i` feeds heads guessing tokens `i + 1 + k`.
    pub fn push_answer(&mut self, answer: &Answer) {
        let id = self.sequences as u32;
        self.sequences += 1;
        self.answer_tokens += answer.tokens.len();
        let rows = answer.states.len() / self.n_embd;
        for row in 0..rows.min(answer.tokens.len().saturating_sub(1)) {
            self.hidden
                .extend_from_slice(&answer.states[row * self.n_embd..(row + 1) * self.n_embd]);
            self.roots.push(answer.tokens[row]);
            self.targets.extend(
                (0..self.heads)
                    .map(|k| answer.tokens.get(row + 1 + k).copied().unwrap_or(NO_TARGET)),
            );
            self.sequence.push(id);
        }
    }

    pub fn len(&self) -> usize {
        self.sequence.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sequence.is_empty()
    }

    pub fn sequences(&self) -> usize {
        self.sequences
    }

    /// Tokens of all answers added.
    pub fn answer_tokens(&self) -> usize {
        self.answer_tokens
    }

    pub fn hidden(&self, position: usize) -> &[f32] {
        &self.hidden[position * self.n_embd..(position + 1) * self.n_embd]
    }

    pub fn root(&self, position: usize) -> TokenId {
        self.roots[position]
    }

    pub fn target(&self, position: usize, head: usize) -> TokenId {
        self.targets[position * self.heads + head]
    }

    /// Positions for training and for held-out evaluation: every `heldout_every`-th text is
    /// held out whole, so no held-out position shares a text with a trained one.
    pub fn split(&self, heldout_every: usize) -> (Vec<usize>, Vec<usize>) {
        (0..self.len())
            .partition(|&p| !(self.sequence[p] as usize + 1).is_multiple_of(heldout_every.max(1)))
    }

    /// How often each token is a target among `positions`, by token id.
    pub fn target_counts(&self, positions: &[usize], n_vocab: usize) -> Vec<u64> {
        let mut counts = vec![0u64; n_vocab];
        for &p in positions {
            for k in 0..self.heads {
                if let Some(c) = usize::try_from(self.target(p, k))
                    .ok()
                    .and_then(|t| counts.get_mut(t))
                {
                    *c += 1;
                }
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(tokens: Vec<TokenId>) -> Answer {
        Answer {
            states: (0..tokens.len() * 2).map(|i| i as f32).collect(),
            tokens,
        }
    }

    #[test]
    fn targets_look_two_and_more_tokens_ahead() {
        let mut data = Dataset::new(2, 2);
        // Answer [3, 4, 5]: the state behind 3 (the prompt's last position) feeds guesses of
        // 4 and 5, the one behind 4 guesses 5 and nothing.
        data.push_answer(&answer(vec![3, 4, 5]));
        assert_eq!(data.len(), 2);
        assert_eq!(data.hidden(0), &[0.0, 1.0]);
        assert_eq!(data.root(0), 3);
        assert_eq!((data.target(0, 0), data.target(0, 1)), (4, 5));
        assert_eq!(data.hidden(1), &[2.0, 3.0]);
        assert_eq!(data.root(1), 4);
        assert_eq!((data.target(1, 0), data.target(1, 1)), (5, NO_TARGET));
    }

    #[test]
    fn held_out_texts_are_whole() {
        let mut data = Dataset::new(2, 1);
        for _ in 0..4 {
            data.push_answer(&answer(vec![1, 2, 3, 4, 5]));
        }
        let (train, heldout) = data.split(2);
        assert_eq!(heldout, vec![4, 5, 6, 7, 12, 13, 14, 15]);
        assert_eq!(train, vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(data.target_counts(&train, 6), vec![0, 0, 2, 2, 2, 2]);
    }
}
