//! The KV cache's books: which sequence ids are request slots, kept prompts and tree leaves,
//! which leaves are free, and which cells the prompt cache keeps. Every cell a step frees or
//! moves outside a request's own decode goes through here.

use crate::error::EngineError;
use crate::step::decoder::KvCells;
use crate::step::prompt_cache::{CacheHit, PromptCache};
use crate::token::TokenId;

/// How the sequence ids of the KV cache are shared out.
pub(crate) struct SequenceIds {
    /// Requests decoding at once: sequence ids `0..slots`.
    pub(crate) slots: usize,
    /// Finished requests' prompts kept: the next `cache` ids.
    pub(crate) cache: usize,
    /// Every id up to this one after those is a tree leaf's.
    pub(crate) n_seq_max: usize,
}

pub(crate) struct KvLedger {
    /// Free sequence ids for tree leaves, and all of them.
    leaf_pool: Vec<i32>,
    leaf_seqs: Vec<i32>,
    n_seq_max: usize,
    /// Finished requests' cells, for later requests that start with the same tokens.
    cache: PromptCache,
}

impl KvLedger {
    pub(crate) fn new(ids: &SequenceIds) -> Self {
        let leaves_from = ids.slots + ids.cache;
        let leaves: Vec<i32> = (leaves_from..ids.n_seq_max)
            .map(|s| s as i32)
            .rev()
            .collect();
        Self {
            leaf_pool: leaves.clone(),
            leaf_seqs: leaves,
            n_seq_max: ids.n_seq_max,
            cache: PromptCache::new((ids.slots..leaves_from).map(|s| s as i32)),
        }
    }

    pub(crate) fn free_leaves(&self) -> usize {
        self.leaf_pool.len()
    }

    /// Up to `n` free leaf sequences for a tree.
    pub(crate) fn take_leaves(&mut self, n: usize) -> Vec<i32> {
        (0..n).filter_map(|_| self.leaf_pool.pop()).collect()
    }

    /// Gives a tree's leaf sequences back, with their cells freed: whatever the step did with
    /// them (a verification, or a decode that failed), the next tree finds them empty.
    pub(crate) fn give_back_leaves(&mut self, cells: &mut impl KvCells, leaves: &[i32]) {
        for &leaf in leaves {
            let _ = cells.remove_cells(leaf);
        }
        self.leaf_pool.extend(leaves);
    }

    /// Frees every cell and gives every leaf sequence back: after a panic, nothing the step
    /// left half-done can be trusted.
    pub(crate) fn reset(&mut self, cells: &mut impl KvCells) {
        self.drop_prompt_cache(cells);
        cells.clear_cells();
        self.leaf_pool.clone_from(&self.leaf_seqs);
    }

    pub(crate) fn drop_prompt_cache(&mut self, cells: &mut impl KvCells) {
        let dropped = self.cache.clear();
        remove_all(cells, dropped);
    }

    /// Frees cached cells until at most `room` prompts are kept.
    pub(crate) fn fit_prompt_cache(&mut self, cells: &mut impl KvCells, room: usize) {
        let evicted = self.cache.evict_to(room);
        remove_all(cells, evicted);
    }

    /// Cells of an earlier request starting the same way as `prompt`, at most `limit` tokens
    /// of it, copied into sequence `seq`; how many.
    pub(crate) fn reuse_prompt(
        &mut self,
        cells: &mut impl KvCells,
        prompt: &[TokenId],
        limit: usize,
        seq: i32,
    ) -> Result<Option<usize>, EngineError> {
        let Some(CacheHit { seq: from, tokens }) = self.cache.lookup(prompt, limit) else {
            return Ok(None);
        };
        cells.copy_cells(from, seq, Some(0), Some(tokens as u32))?;
        Ok(Some(tokens))
    }

    /// Keeps a finished request's cells (sequence `seq`, holding `tokens`) in the prompt
    /// cache, evicting older prompts where it is full.
    pub(crate) fn keep_prompt(&mut self, cells: &mut impl KvCells, seq: i32, tokens: Vec<TokenId>) {
        let Some((kept, evicted)) = self.cache.store(tokens) else {
            return;
        };
        remove_all(cells, evicted);
        if cells.copy_cells(seq, kept, None, None).is_err() {
            self.cache.remove(kept);
            let _ = cells.remove_cells(kept);
        }
    }

    /// In exact mode, leaves room for `incoming` tokens after every taken cell; cached prompts
    /// that no longer fit after a compaction are dropped. On an error every cached prompt is
    /// dropped too: its cells can no longer be trusted.
    pub(crate) fn keep_cell_order(
        &mut self,
        cells: &mut impl KvCells,
        incoming: usize,
        requests: usize,
    ) -> Result<(), EngineError> {
        match cells.keep_cell_order(incoming, requests) {
            Ok(dropped) => {
                for seq in dropped {
                    self.cache.remove(seq);
                }
                Ok(())
            }
            Err(err) => {
                self.drop_prompt_cache(cells);
                Err(err)
            }
        }
    }

    /// Sequences other than kept prompts that hold cells: with nothing running, none should.
    pub(crate) fn sequences_holding_cells(&self, cells: &impl KvCells) -> usize {
        (0..self.n_seq_max as i32)
            .filter(|&seq| !self.cache.holds(seq) && cells.holds_cells(seq))
            .count()
    }

    pub(crate) fn cached_prompts(&self) -> usize {
        self.cache.len()
    }

    /// Cells the kept prompts hold.
    pub(crate) fn cached_tokens(&self) -> usize {
        self.cache.tokens_held()
    }
}

fn remove_all(cells: &mut impl KvCells, seqs: Vec<i32>) {
    for seq in seqs {
        let _ = cells.remove_cells(seq);
    }
}
