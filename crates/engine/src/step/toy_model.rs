//! A tiny deterministic model behind [`Decoder`], for testing the batcher, verification and
//! the KV bookkeeping in milliseconds without llama.cpp. It keeps cells as llama.cpp does (a
//! position, a token and the sequences holding it) and refuses what llama.cpp would get wrong
//! silently: a sequence given a second cell at one position, or a token whose context has a
//! gap. Each token's logits are computed from the cells it sees, so a cell missing, stale or in
//! the wrong sequence changes the text.
//!
//! The model copies: after token t it writes what followed the latest earlier t it sees (the
//! next letter when there is none), except at every eleventh position, where it writes the
//! letter after that. Text settles into repeats that prompt lookup guesses, and the twist makes
//! some of those guesses wrong.

use crate::error::EngineError;
use crate::request::Prompt;
use crate::speculative::costs::{CostModel, CostPoint, CostSource};
use crate::step::decoder::{DecodeTimes, Decoder, KvCells};
use crate::token::TokenId;
use crate::token::Vocabulary;

/// Tokens 1..=26 are the letters a..z; 0 ends a generation (the model never writes it).
const LETTERS: TokenId = 26;
const VOCAB: usize = LETTERS as usize + 1;

#[derive(Debug, Clone)]
struct Cell {
    pos: usize,
    token: TokenId,
    seqs: Vec<i32>,
}

#[derive(Debug, Clone)]
struct Entry {
    token: TokenId,
    pos: usize,
    seqs: Vec<i32>,
    logits: bool,
}

pub(crate) struct ToyModel {
    cells: Vec<Cell>,
    /// Most cells the cache holds.
    capacity: usize,
    n_ctx_seq: usize,
    n_batch: usize,
    batch: Vec<Entry>,
    /// Per entry of the last decode: its logits, when it asked for them.
    outputs: Vec<Option<Vec<f32>>>,
    costs: CostModel,
    /// Decodes so far.
    pub(crate) decodes: usize,
}

pub(crate) struct ToyVocabulary;

impl Vocabulary for ToyVocabulary {
    fn ends_generation(&self, token: TokenId) -> bool {
        token == 0
    }

    fn piece_into(&self, token: TokenId, _special: bool, out: &mut Vec<u8>) {
        if (1..=LETTERS).contains(&token) {
            out.push(b'a' + (token - 1) as u8);
        }
    }
}

impl ToyModel {
    /// A cache of `capacity` cells, `n_ctx_seq` of them for each request, batches of up to
    /// `n_batch` tokens; a decode of n tokens costs what a memory-bound model's would, so that
    /// drafting pays.
    pub(crate) fn new(capacity: usize, n_ctx_seq: usize, n_batch: usize) -> Self {
        let costs = [
            (1, 10.0),
            (2, 10.5),
            (4, 11.0),
            (8, 12.0),
            (16, 14.0),
            (32, 18.0),
        ]
        .into_iter()
        .map(|(tokens, ms)| CostPoint::without_spread(tokens, ms))
        .collect();
        Self {
            cells: Vec::new(),
            capacity,
            n_ctx_seq,
            n_batch,
            batch: Vec::new(),
            outputs: Vec::new(),
            costs: CostModel::with_bands(costs, CostSource::Given, None),
            decodes: 0,
        }
    }

    /// The text the model writes after `prompt`, `n` tokens of it, by the same rule.
    pub(crate) fn continuation(prompt: &str, n: usize) -> String {
        let mut tokens = tokenize(prompt);
        for _ in 0..n {
            tokens.push(next_token(&tokens));
        }
        detokenize(&tokens[tokens.len() - n..])
    }

    /// Cells held by any sequence.
    pub(crate) fn cells_held(&self) -> usize {
        self.cells.len()
    }

    /// The tokens sequence `seq` sees at positions `0..=pos`, in order; an error where a
    /// position is missing or held twice.
    fn context(&self, seqs: &[i32], pos: usize) -> Result<Vec<TokenId>, EngineError> {
        let mut seen: Vec<Option<TokenId>> = vec![None; pos + 1];
        for cell in &self.cells {
            if cell.pos > pos || !cell.seqs.iter().any(|s| seqs.contains(s)) {
                continue;
            }
            if seen[cell.pos].replace(cell.token).is_some() {
                return Err(toy_error(format!(
                    "sequences {seqs:?} see two cells at position {}",
                    cell.pos
                )));
            }
        }
        seen.into_iter()
            .enumerate()
            .map(|(p, token)| {
                token.ok_or_else(|| {
                    toy_error(format!("sequences {seqs:?} see no cell at position {p}"))
                })
            })
            .collect()
    }
}

fn toy_error(message: String) -> EngineError {
    EngineError::Decode(format!("toy model: {message}"))
}

fn tokenize(text: &str) -> Vec<TokenId> {
    text.bytes()
        .filter(u8::is_ascii_lowercase)
        .map(|b| TokenId::from(b - b'a') + 1)
        .collect()
}

fn detokenize(tokens: &[TokenId]) -> String {
    let mut bytes = Vec::new();
    for &token in tokens {
        ToyVocabulary.piece_into(token, false, &mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) fn next_letter(token: TokenId) -> TokenId {
    token % LETTERS + 1
}

/// What the model copies after `context`, its twist aside: what followed the latest earlier
/// occurrence of the last token, else the next letter.
pub(crate) fn copied(context: &[TokenId]) -> TokenId {
    let Some((&last, before)) = context.split_last() else {
        return 1;
    };
    before
        .iter()
        .rposition(|&t| t == last)
        .map_or_else(|| next_letter(last), |i| context[i + 1])
}

/// What the model writes after `context` (see the module's comment).
fn next_token(context: &[TokenId]) -> TokenId {
    let copied = copied(context);
    if context.len() % 11 == 10 {
        next_letter(copied)
    } else {
        copied
    }
}

impl Decoder for ToyModel {
    fn n_batch(&self) -> usize {
        self.n_batch
    }

    fn n_ctx_seq(&self) -> usize {
        self.n_ctx_seq
    }

    fn returns_hidden_states(&self) -> bool {
        false
    }

    fn prompt_tokens(
        &self,
        prompt: &Prompt,
        _continues: bool,
    ) -> Result<Vec<TokenId>, EngineError> {
        let text = match prompt {
            Prompt::Text(text) => text.clone(),
            Prompt::Chat(messages) => messages.iter().map(|m| m.content.as_str()).collect(),
        };
        let tokens = tokenize(&text);
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if tokens.len() >= self.n_ctx_seq {
            return Err(EngineError::PromptTooLong {
                tokens: tokens.len(),
                limit: self.n_ctx_seq - 1,
            });
        }
        Ok(tokens)
    }

    fn clear_batch(&mut self) {
        self.batch.clear();
    }

    fn add_to_batch(
        &mut self,
        token: TokenId,
        pos: usize,
        seqs: &[i32],
        logits: bool,
    ) -> Result<(), EngineError> {
        if self.batch.len() == self.n_batch {
            return Err(toy_error("the batch is full".into()));
        }
        self.batch.push(Entry {
            token,
            pos,
            seqs: seqs.to_vec(),
            logits,
        });
        Ok(())
    }

    fn decode(&mut self) -> Result<DecodeTimes, EngineError> {
        if self.cells.len() + self.batch.len() > self.capacity {
            return Err(toy_error(format!(
                "no room in the cache for {} tokens",
                self.batch.len()
            )));
        }
        for (i, entry) in self.batch.iter().enumerate() {
            let holds = |pos: usize, seqs: &[i32]| {
                pos == entry.pos && seqs.iter().any(|s| entry.seqs.contains(s))
            };
            let taken = self.cells.iter().any(|c| holds(c.pos, &c.seqs))
                || self.batch[..i].iter().any(|e| holds(e.pos, &e.seqs));
            if taken {
                return Err(toy_error(format!(
                    "a sequence of {:?} already holds position {}",
                    entry.seqs, entry.pos
                )));
            }
        }
        // A decode that fails leaves the cells as they were.
        let before = self.cells.len();
        self.cells.extend(self.batch.iter().map(|e| Cell {
            pos: e.pos,
            token: e.token,
            seqs: e.seqs.clone(),
        }));
        let outputs = self
            .batch
            .iter()
            .map(|entry| {
                if !entry.logits {
                    return Ok(None);
                }
                let next = next_token(&self.context(&entry.seqs, entry.pos)?);
                let mut logits = vec![0.0; VOCAB];
                logits[next as usize] = 4.0;
                logits[next_letter(next) as usize] = 2.0;
                Ok(Some(logits))
            })
            .collect::<Result<_, EngineError>>();
        match outputs {
            Ok(outputs) => self.outputs = outputs,
            Err(err) => {
                self.cells.truncate(before);
                return Err(err);
            }
        }
        self.decodes += 1;
        Ok(DecodeTimes {
            submit_ms: 0.0,
            wait_ms: 0.0,
        })
    }

    fn logits(&self, index: i32) -> Result<&[f32], EngineError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.outputs.get(i)?.as_deref())
            .ok_or_else(|| toy_error(format!("no logits at batch index {index}")))
    }

    fn hidden_state(&self, _index: i32) -> Result<&[f32], EngineError> {
        Err(toy_error("no hidden states".into()))
    }

    fn cost_model(&self) -> Option<&CostModel> {
        Some(&self.costs)
    }

    fn cost_version(&self) -> u64 {
        1
    }

    fn observe_decode(&mut self, _tokens: usize, _ms: f64) {}

    fn ensure_cost_model(&mut self) -> Result<&CostModel, EngineError> {
        Ok(&self.costs)
    }
}

impl KvCells for ToyModel {
    fn clear_cells(&mut self) {
        self.cells.clear();
    }

    fn copy_cells(
        &mut self,
        from: i32,
        to: i32,
        first: Option<u32>,
        end: Option<u32>,
    ) -> Result<(), EngineError> {
        let range = first.unwrap_or(0) as usize..end.map_or(usize::MAX, |e| e as usize);
        for cell in &mut self.cells {
            if cell.seqs.contains(&from) && range.contains(&cell.pos) && !cell.seqs.contains(&to) {
                cell.seqs.push(to);
            }
        }
        Ok(())
    }

    fn remove_cells(&mut self, seq: i32) -> Result<(), EngineError> {
        for cell in &mut self.cells {
            cell.seqs.retain(|&s| s != seq);
        }
        self.cells.retain(|cell| !cell.seqs.is_empty());
        Ok(())
    }

    fn holds_cells(&self, seq: i32) -> bool {
        self.cells.iter().any(|cell| cell.seqs.contains(&seq))
    }

    fn keep_cell_order(
        &mut self,
        _incoming: usize,
        _requests: usize,
    ) -> Result<Vec<i32>, EngineError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toy_model_copies_what_followed_and_twists_every_eleventh_place() {
        // After "abcab": b was followed by c, c by a, and so on; at the eleventh place (after
        // "abcabcabca") the copy b becomes c.
        assert_eq!(ToyModel::continuation("abcab", 8), "cabcacac");
        assert_eq!(next_token(&tokenize("z")), 1, "z wraps to a");
    }

    #[test]
    fn a_sequence_sees_its_own_cells_and_no_gap() {
        let mut model = ToyModel::new(16, 16, 8);
        for (pos, token) in tokenize("abc").into_iter().enumerate() {
            model.add_to_batch(token, pos, &[0], pos == 2).unwrap();
        }
        model.decode().unwrap();
        assert!(model.logits(2).is_ok());
        assert!(model.logits(1).is_err(), "no logits were asked there");
        // ActiveRequest 1 has no cells before position 3: a gap.
        model.clear_batch();
        model.add_to_batch(1, 3, &[1], true).unwrap();
        assert!(model.decode().is_err());
        // Copied, it sees the prompt; a second cell at a held position is refused.
        model.copy_cells(0, 1, None, None).unwrap();
        model.decode().unwrap();
        model.clear_batch();
        model.add_to_batch(2, 3, &[1], true).unwrap();
        assert!(model.decode().is_err());
        model.remove_cells(1).unwrap();
        assert!(!model.holds_cells(1));
        assert_eq!(model.cells_held(), 3);
    }
}
