//! Lookup's memory of earlier requests: how often each token followed a short run of tokens in
//! the text that finished requests read and wrote. One table of fixed size per context length,
//! shared by every request, so memory stays bounded however long the engine serves: a new
//! context that lands on a taken bucket displaces the old one (as llama.cpp's `ngram-mod` does),
//! and counts are halved before they overflow.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::tree::{DraftTree, TokenSource};
use crate::token::TokenId;

/// Context lengths remembered, longest first: a long context predicts better where it was
/// seen, a short one is seen more often.
const ORDERS: [usize; 2] = [4, 2];

/// Followers kept per context; the least counted gives way to a new one.
const FOLLOWERS: usize = 4;

#[derive(Debug, Clone, Copy, Default)]
struct Follower {
    token: TokenId,
    count: u16,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The context's hash with its low bit set; 0 marks an empty bucket.
    tag: u64,
    followers: [Follower; FOLLOWERS],
}

impl Bucket {
    fn count(&mut self, token: TokenId) {
        let followers = &mut self.followers;
        if let Some(f) = followers
            .iter_mut()
            .find(|f| f.count > 0 && f.token == token)
        {
            if f.count == u16::MAX {
                for f in followers.iter_mut() {
                    f.count /= 2;
                }
                // The one counted now stays above nothing.
                let f = followers
                    .iter_mut()
                    .find(|f| f.token == token)
                    .expect("still kept");
                f.count += 1;
            } else {
                f.count += 1;
            }
            return;
        }
        let least = followers
            .iter_mut()
            .min_by_key(|f| f.count)
            .expect("FOLLOWERS > 0");
        *least = Follower { token, count: 1 };
    }
}

struct NgramTable {
    order: usize,
    buckets: Vec<Bucket>,
}

impl NgramTable {
    fn new(order: usize, buckets: usize) -> Self {
        Self {
            order,
            buckets: vec![Bucket::default(); buckets.next_power_of_two()],
        }
    }

    fn slot(&self, context: &[TokenId]) -> (usize, u64) {
        let hash = mix(context.iter().fold(0_u64, |h, &t| {
            (h.rotate_left(5) ^ u64::from(t as u32)).wrapping_mul(0x517c_c1b7_2722_0a95)
        }));
        ((hash as usize) & (self.buckets.len() - 1), hash | 1)
    }

    fn add(&mut self, tokens: &[TokenId]) {
        for end in self.order..tokens.len() {
            let (index, tag) = self.slot(&tokens[end - self.order..end]);
            let bucket = &mut self.buckets[index];
            if bucket.tag != tag {
                *bucket = Bucket {
                    tag,
                    ..Bucket::default()
                };
            }
            bucket.count(tokens[end]);
        }
    }

    fn followers(&self, context: &[TokenId]) -> Option<&Bucket> {
        let context = &context[context.len().checked_sub(self.order)?..];
        let (index, tag) = self.slot(context);
        let bucket = &self.buckets[index];
        (bucket.tag == tag).then_some(bucket)
    }
}

/// MurmurHash3's finalizer: every bit of the input moves every bit of the output, so that
/// contexts of neighbouring token ids land far apart.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// What followed a context in remembered text: each token with its share of the times the
/// context was seen, most frequent first, and the evidence behind them.
#[derive(Debug, Clone, PartialEq)]
pub struct Remembered {
    pub next: Vec<(TokenId, f64)>,
    pub evidence: Evidence,
}

/// How much lies behind a remembered guess: the length of the context it was found after, and
/// how often that context was seen (counts halved at their cap aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evidence {
    pub context_len: usize,
    pub seen: u32,
}

impl Evidence {
    /// Seen after the longest context remembered.
    pub fn long_context(self) -> bool {
        self.context_len == ORDERS[0]
    }
}

pub struct LookupMemory {
    tables: Vec<NgramTable>,
}

impl std::fmt::Debug for LookupMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookupMemory")
            .field("buckets", &self.buckets())
            .finish()
    }
}

impl LookupMemory {
    /// A memory of about `buckets` contexts of each length (rounded up to a power of two).
    pub fn new(buckets: usize) -> Self {
        Self {
            tables: ORDERS
                .iter()
                .map(|&order| NgramTable::new(order, buckets.max(1)))
                .collect(),
        }
    }

    /// Contexts it can hold, all lengths together: its memory is this many times 40 bytes,
    /// whatever it reads.
    pub fn buckets(&self) -> usize {
        self.tables.iter().map(|t| t.buckets.len()).sum()
    }

    /// Counts every token of `tokens` after the runs before it.
    pub fn add(&mut self, tokens: &[TokenId]) {
        for table in &mut self.tables {
            table.add(tokens);
        }
    }

    /// What followed the end of `context`, by the longest remembered run it ends with.
    pub fn next(&self, context: &[TokenId]) -> Option<Remembered> {
        let (order, bucket) = self
            .tables
            .iter()
            .find_map(|t| Some((t.order, t.followers(context)?)))?;
        let seen: u32 = bucket.followers.iter().map(|f| u32::from(f.count)).sum();
        let mut next: Vec<(TokenId, f64)> = bucket
            .followers
            .iter()
            .filter(|f| f.count > 0)
            .map(|f| (f.token, f64::from(f.count) / f64::from(seen)))
            .collect();
        next.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        (!next.is_empty()).then_some(Remembered {
            next,
            evidence: Evidence {
                context_len: order,
                seen,
            },
        })
    }

    /// A tree of what followed `history` in remembered text, grown most frequent path first
    /// while a node's share (its path's shares multiplied: where the text went on in several
    /// ways) is at least `min_share`, at most `max_nodes` nodes. Returns the tree and the
    /// evidence behind its first token. How often such guesses are right is for the draft
    /// budget to learn, by that evidence.
    pub fn draft(
        &self,
        history: &[TokenId],
        max_nodes: usize,
        min_share: f64,
    ) -> (DraftTree, Option<Evidence>) {
        let mut tree = DraftTree::default();
        // Each node's share, by node.
        let mut shares: Vec<f64> = Vec::new();
        let mut frontier = BinaryHeap::new();
        let push_children = |frontier: &mut BinaryHeap<Candidate>,
                             tree: &DraftTree,
                             shares: &[f64],
                             parent: Option<usize>| {
            let context = context_at(history, tree, parent, ORDERS[0]);
            let remembered = self.next(&context)?;
            for &(token, share) in &remembered.next {
                let share = share * parent.map_or(1.0, |p| shares[p]);
                if share >= min_share {
                    frontier.push(Candidate {
                        share,
                        parent,
                        token,
                    });
                }
            }
            Some(remembered.evidence)
        };
        let evidence = push_children(&mut frontier, &tree, &shares, None);
        while tree.len() < max_nodes {
            let Some(best) = frontier.pop() else { break };
            let node = tree.push(best.token, best.parent, TokenSource::Lookup, 0);
            shares.push(best.share);
            push_children(&mut frontier, &tree, &shares, Some(node));
        }
        (tree, evidence)
    }
}

/// The last `n` tokens of `history` followed by the path down to `node`.
fn context_at(
    history: &[TokenId],
    tree: &DraftTree,
    node: Option<usize>,
    n: usize,
) -> Vec<TokenId> {
    let mut path = Vec::new();
    let mut at = node;
    while let Some(i) = at {
        if path.len() == n {
            break;
        }
        path.push(tree.tokens[i]);
        at = tree.parents[i];
    }
    let from_history = n - path.len();
    let mut context = history[history.len().saturating_sub(from_history)..].to_vec();
    context.extend(path.iter().rev());
    context
}

struct Candidate {
    share: f64,
    parent: Option<usize>,
    token: TokenId,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    /// Most frequent first; ties go to the shallower parent, then the lower token, so that the
    /// tree does not depend on the heap's order.
    fn cmp(&self, other: &Self) -> Ordering {
        self.share
            .total_cmp(&other.share)
            .then_with(|| other.parent.cmp(&self.parent))
            .then_with(|| other.token.cmp(&self.token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(context_len: usize, seen: u32) -> Evidence {
        Evidence { context_len, seen }
    }

    #[test]
    fn followers_come_with_their_shares_and_the_evidence_behind_them() {
        let mut memory = LookupMemory::new(1024);
        memory.add(&[1, 2, 3, 4, 5]);
        // [1, 2, 3, 4] was followed by 5 once.
        assert_eq!(
            memory.next(&[9, 1, 2, 3, 4]),
            Some(Remembered {
                next: vec![(5, 1.0)],
                evidence: evidence(4, 1),
            })
        );
        memory.add(&[1, 2, 3, 4, 5]);
        memory.add(&[7, 7, 3, 4, 6]);
        // The longest context wins over [3, 4].
        assert_eq!(
            memory.next(&[1, 2, 3, 4]),
            Some(Remembered {
                next: vec![(5, 1.0)],
                evidence: evidence(4, 2),
            })
        );
        // Only [3, 4] is known after [8, 8, 3, 4]: 5 twice, 6 once.
        assert_eq!(
            memory.next(&[8, 8, 3, 4]),
            Some(Remembered {
                next: vec![(5, 2.0 / 3.0), (6, 1.0 / 3.0)],
                evidence: evidence(2, 3),
            })
        );
    }

    #[test]
    fn it_drafts_nothing_it_has_not_seen() {
        let mut memory = LookupMemory::new(1024);
        assert_eq!(
            memory.draft(&[1, 2, 3, 4], 8, 0.0),
            (DraftTree::default(), None)
        );
        memory.add(&[10, 11, 12, 13, 14]);
        assert!(memory.next(&[1, 2, 3, 4]).is_none());
        assert!(memory.draft(&[1, 2, 3, 4], 8, 0.0).0.is_empty());
        // A context shorter than the shortest remembered one.
        assert!(memory.next(&[13]).is_none());
    }

    #[test]
    fn the_tree_grows_most_frequent_path_first_while_its_share_holds() {
        let mut memory = LookupMemory::new(1024);
        for _ in 0..3 {
            memory.add(&[1, 2, 3, 4, 5, 6]);
        }
        memory.add(&[1, 2, 3, 4, 9]);
        // After [1, 2, 3, 4]: 5 (3 of 4) or 9 (1 of 4); after [2, 3, 4, 5] always 6.
        let (tree, first) = memory.draft(&[1, 2, 3, 4], 8, 0.1);
        assert_eq!(first, Some(evidence(4, 4)));
        assert_eq!(tree.tokens, vec![5, 6, 9]);
        assert_eq!(tree.parents, vec![None, Some(0), None]);
        // A quarter is below a half: the path that parted is left out.
        let (tree, _) = memory.draft(&[1, 2, 3, 4], 8, 0.5);
        assert_eq!(tree.tokens, vec![5, 6]);
        // At most the nodes asked for.
        assert_eq!(memory.draft(&[1, 2, 3, 4], 1, 0.1).0.len(), 1);
    }

    #[test]
    fn memory_stays_bounded_however_much_it_reads() {
        let mut memory = LookupMemory::new(16);
        let buckets = memory.buckets();
        assert_eq!(buckets, 32);
        // What the docs say a context costs.
        assert_eq!(std::mem::size_of::<Bucket>(), 40);
        // A long run of text: every context past the table's size displaces another.
        let text: Vec<TokenId> = (0..200_000)
            .map(|i| (i * 7919 % 50_021) as TokenId)
            .collect();
        memory.add(&text);
        assert_eq!(memory.buckets(), buckets);
        // The newest text is still there.
        let end = text.len() - 1;
        assert_eq!(memory.next(&text[..end]).unwrap().next[0].0, text[end]);
    }

    #[test]
    fn counts_halve_before_they_overflow_and_keep_their_order() {
        let mut bucket = Bucket::default();
        for _ in 0..u32::from(u16::MAX) + 10 {
            bucket.count(1);
        }
        bucket.count(2);
        let kept: Vec<(TokenId, u16)> = bucket
            .followers
            .iter()
            .filter(|f| f.count > 0)
            .map(|f| (f.token, f.count))
            .collect();
        assert_eq!(kept, vec![(1, u16::MAX / 2 + 10), (2, 1)]);
    }

    #[test]
    fn a_new_follower_takes_the_least_counted_place() {
        let mut bucket = Bucket::default();
        for (token, times) in [(1, 3), (2, 1), (3, 2), (4, 5)] {
            for _ in 0..times {
                bucket.count(token);
            }
        }
        bucket.count(9);
        let tokens: Vec<TokenId> = bucket.followers.iter().map(|f| f.token).collect();
        assert_eq!(tokens, vec![1, 9, 3, 4]);
    }
}
