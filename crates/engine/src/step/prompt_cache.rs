//! Finished requests' KV cells, kept so that a later request starting with the same tokens (the
//! next turn of a conversation, the same prompt again) decodes only what differs.
//!
//! This module only keeps the books: which cache sequence holds which tokens and which was used
//! last. The scheduler copies cells in and out and decides how many entries the KV cache can
//! spare (every active request may need its whole share of cells).

use crate::token::{common_prefix, TokenId};

#[derive(Debug)]
struct Entry {
    seq: i32,
    /// Tokens whose cells the sequence holds, position by position from 0.
    tokens: Vec<TokenId>,
    last_used: u64,
}

#[derive(Debug)]
pub(crate) struct PromptCache {
    entries: Vec<Entry>,
    free: Vec<i32>,
    clock: u64,
}

/// A cached sequence to copy a request's first cells from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheHit {
    pub(crate) seq: i32,
    /// Leading tokens whose cells can be reused.
    pub(crate) tokens: usize,
}

impl PromptCache {
    /// A cache keeping its entries in sequences `seqs`.
    pub(crate) fn new(seqs: impl IntoIterator<Item = i32>) -> Self {
        let mut free: Vec<i32> = seqs.into_iter().collect();
        free.reverse();
        Self {
            entries: Vec::new(),
            free,
            clock: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Tokens whose cells the entries hold, all together.
    pub(crate) fn tokens_held(&self) -> usize {
        self.entries.iter().map(|e| e.tokens.len()).sum()
    }

    pub(crate) fn holds(&self, seq: i32) -> bool {
        self.entries.iter().any(|e| e.seq == seq)
    }

    /// The entry sharing the longest leading run of tokens with `prompt`, at most `limit` of
    /// them; it counts as used now.
    pub(crate) fn lookup(&mut self, prompt: &[TokenId], limit: usize) -> Option<CacheHit> {
        let (index, tokens) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt).min(limit)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, self.entries[i].last_used))?;
        self.clock += 1;
        self.entries[index].last_used = self.clock;
        Some(CacheHit {
            seq: self.entries[index].seq,
            tokens,
        })
    }

    /// Where to keep cells holding `tokens`: a sequence id to copy them into, and the sequences
    /// to forget first (entries made redundant because `tokens` extends them, or the least
    /// recently used one when no id is free). `None` when an entry already holds them all, or
    /// when the cache has no room at all.
    pub(crate) fn store(&mut self, tokens: Vec<TokenId>) -> Option<(i32, Vec<i32>)> {
        if tokens.is_empty() || self.entries.iter().any(|e| e.tokens.starts_with(&tokens)) {
            return None;
        }
        let mut forgotten = Vec::new();
        self.entries.retain(|e| {
            let redundant = tokens.starts_with(&e.tokens);
            if redundant {
                forgotten.push(e.seq);
            }
            !redundant
        });
        self.free.extend(&forgotten);
        if self.free.is_empty() {
            forgotten.extend(self.evict_to(self.entries.len().saturating_sub(1)));
        }
        let seq = self.free.pop()?;
        self.clock += 1;
        self.entries.push(Entry {
            seq,
            tokens,
            last_used: self.clock,
        });
        Some((seq, forgotten))
    }

    /// Drops least recently used entries until at most `max` remain; returns their sequences.
    pub(crate) fn evict_to(&mut self, max: usize) -> Vec<i32> {
        let mut evicted = Vec::new();
        while self.entries.len() > max {
            let oldest = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].last_used)
                .unwrap_or(0);
            let entry = self.entries.swap_remove(oldest);
            self.free.push(entry.seq);
            evicted.push(entry.seq);
        }
        evicted
    }

    /// Forgets the entry in `seq` (its cells could not be kept).
    pub(crate) fn remove(&mut self, seq: i32) {
        if let Some(i) = self.entries.iter().position(|e| e.seq == seq) {
            self.entries.swap_remove(i);
            self.free.push(seq);
        }
    }

    /// Forgets every entry (the KV cache was cleared); returns their sequences.
    pub(crate) fn clear(&mut self) -> Vec<i32> {
        self.evict_to(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_shared_start_wins_up_to_the_limit() {
        let mut cache = PromptCache::new([10, 11]);
        assert_eq!(cache.store(vec![1, 2, 3, 4]), Some((10, vec![])));
        assert_eq!(cache.store(vec![1, 2, 9]), Some((11, vec![])));
        assert_eq!(
            cache.lookup(&[1, 2, 3, 4, 5], 99),
            Some(CacheHit { seq: 10, tokens: 4 })
        );
        assert_eq!(
            cache.lookup(&[1, 2, 9, 9], 99),
            Some(CacheHit { seq: 11, tokens: 3 })
        );
        // The last prompt token is always decoded: its logits start the answer.
        assert_eq!(
            cache.lookup(&[1, 2, 3, 4], 3),
            Some(CacheHit { seq: 10, tokens: 3 })
        );
        assert_eq!(cache.lookup(&[7, 1, 2], 99), None);
    }

    #[test]
    fn a_longer_conversation_replaces_the_entry_it_extends() {
        let mut cache = PromptCache::new([10, 11]);
        cache.store(vec![1, 2, 3]);
        // The next turn: the same start and more. The first entry is redundant.
        assert_eq!(cache.store(vec![1, 2, 3, 4, 5]), Some((10, vec![10])));
        assert_eq!(cache.len(), 1);
        // Nothing new: no entry.
        assert_eq!(cache.store(vec![1, 2]), None);
        assert_eq!(cache.store(vec![]), None);
        assert!(cache.holds(10) && !cache.holds(11));
    }

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let mut cache = PromptCache::new([10, 11]);
        cache.store(vec![1]);
        cache.store(vec![2]);
        cache.lookup(&[1, 5], 9); // 1 is now the most recently used
        assert_eq!(cache.store(vec![3]), Some((11, vec![11])));
        assert_eq!(cache.lookup(&[2], 9), None);
        assert_eq!(cache.evict_to(1), vec![10]);
        assert_eq!(cache.len(), 1);
        let mut cleared = cache.clear();
        cleared.sort();
        assert_eq!(cleared, vec![11]);
        assert_eq!(cache.len(), 0);
        // Every id is free again.
        assert!(cache.store(vec![4]).is_some() && cache.store(vec![5]).is_some());
    }

    #[test]
    fn a_cache_without_sequences_keeps_nothing() {
        let mut cache = PromptCache::new([]);
        assert_eq!(cache.store(vec![1, 2]), None);
        assert_eq!(cache.lookup(&[1, 2], 9), None);
    }
}
