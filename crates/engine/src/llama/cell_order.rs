//! Keeps every sequence's KV cells in position order, so that attention sums a token's past in
//! the order plain decoding does.
//!
//! With batch-invariant kernels (see `exact_kernels`), attention walks a query's cells in their
//! physical order. llama.cpp puts new tokens into the first free cells, so a cell freed below a
//! sequence's last one (a rejected tree node, a finished request) would later take one of its
//! newer tokens, and that token would be summed out of turn. Here freed cells are retired
//! instead: they stay taken, held by one sequence id no request attends to, so new tokens always
//! land after every older one. When retired cells crowd the cache, it is compacted: each live
//! sequence is saved and put back, in order, at the front.

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;

use crate::error::EngineError;

/// Where the free tail of the cache starts, and when to compact.
#[derive(Debug, Clone)]
pub(crate) struct CellOrder {
    /// The sequence id that holds retired cells.
    pub(crate) retired_seq: i32,
    /// Cells in the cache.
    size: usize,
    /// Cells handed out since the cache was last emptied or compacted: every cell below this
    /// is taken, by a live sequence or retired.
    used_end: usize,
}

/// Retired cells may outnumber live ones by this much before a compaction pays for itself.
const RETIRED_SLACK: usize = 1024;

impl CellOrder {
    pub(crate) fn new(retired_seq: i32, size: usize) -> Self {
        Self {
            retired_seq,
            size,
            used_end: 0,
        }
    }

    /// A decode of `tokens` took that many cells from the free tail.
    pub(crate) fn took(&mut self, tokens: usize) {
        self.used_end += tokens;
    }

    /// The cache was emptied.
    pub(crate) fn reset(&mut self) {
        self.used_end = 0;
    }

    /// Whether the next decodes need a compaction first: `incoming` tokens would not fit in the
    /// free tail, or retired cells (beyond the `live` ones) make attention walk far more cells
    /// than it uses.
    pub(crate) fn needs_compaction(&self, live: usize, incoming: usize) -> bool {
        self.used_end + incoming > self.size || self.used_end > 2 * live + RETIRED_SLACK
    }

    /// Whether a sequence of `cells` fits back, with room left for `incoming` tokens.
    pub(crate) fn fits(&self, cells: usize, incoming: usize) -> bool {
        self.used_end + cells + incoming <= self.size
    }

    /// Makes room in `ctx` for a decode of up to `incoming` tokens after every taken cell,
    /// compacting when [`Self::needs_compaction`] says so: every live sequence (ids below
    /// `n_seq_max`) is saved, the cache emptied, and each put back in id order, so contiguous
    /// and in position order. Requests' sequences (ids below `requests`) always come back;
    /// others (the prompt cache's) only while they leave room for `incoming`, and those left
    /// out are returned.
    pub(crate) fn keep_room(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        n_seq_max: usize,
        incoming: usize,
        requests: usize,
    ) -> Result<Vec<i32>, EngineError> {
        let live: Vec<(i32, usize)> = (0..n_seq_max as i32)
            .filter(|&seq| seq != self.retired_seq)
            .filter_map(|seq| cells_of(ctx, seq).map(|cells| (seq, cells)))
            .collect();
        let live_cells = live.iter().map(|&(_, cells)| cells).sum();
        if !self.needs_compaction(live_cells, incoming) {
            return Ok(Vec::new());
        }
        let _span = tracing::debug_span!("compact_cells", live_cells).entered();
        let mut saved = Vec::with_capacity(live.len());
        for (seq, cells) in live {
            let state = ctx
                .state_seq_get(seq, LlamaStateSeqFlags::empty())
                .map_err(|e| EngineError::Decode(format!("saving sequence {seq}: {e}")))?;
            saved.push((seq, cells, state));
        }
        ctx.clear_kv_cache();
        self.reset();
        let mut dropped = Vec::new();
        for (seq, cells, state) in saved {
            if seq as usize >= requests && !self.fits(cells, incoming) {
                dropped.push(seq);
                continue;
            }
            self.took(cells);
            ctx.state_seq_set(&state, seq)
                .map_err(|e| EngineError::Decode(format!("restoring sequence {seq}: {e}")))?;
        }
        Ok(dropped)
    }
}

/// Cells sequence `seq` holds (its positions run without gaps); `None` for none.
fn cells_of(ctx: &LlamaContext<'_>, seq: i32) -> Option<usize> {
    let last = ctx.kv_cache_seq_pos_max(seq);
    (last >= 0).then(|| (last - ctx.kv_cache_seq_pos_min(seq) + 1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacts_when_the_free_tail_is_too_short() {
        let mut order = CellOrder::new(9, 4096);
        order.took(4000);
        assert!(!order.needs_compaction(3000, 96));
        assert!(order.needs_compaction(3000, 97));
    }

    #[test]
    fn compacts_when_retired_cells_crowd_the_live_ones() {
        let mut order = CellOrder::new(9, 1 << 16);
        order.took(2 * 500 + RETIRED_SLACK);
        assert!(!order.needs_compaction(500, 1));
        order.took(1);
        assert!(order.needs_compaction(500, 1));
    }

    #[test]
    fn a_compaction_starts_the_tail_after_the_live_cells() {
        let mut order = CellOrder::new(9, 4096);
        order.took(4000);
        order.reset();
        assert!(order.fits(4000, 96));
        order.took(100);
        assert!(order.fits(3900, 96));
        assert!(!order.fits(3901, 96));
    }
}
