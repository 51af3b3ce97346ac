//! A drafted tree: candidate tokens below a root, each with the drafter that proposed it, and
//! how trees are merged and cut to a budget.

use serde::{Deserialize, Serialize};

use super::layout::TreeLayout;
use crate::speculative::drafter_kind::DrafterKind;
use crate::token::TokenId;

/// Who proposed a token. On the wire (events, the run history) it is one name: `model`,
/// `medusa_head_K`, `lookup`, `draft_model` or `eagle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ts_rs::TS)]
#[ts(type = "'model' | 'lookup' | 'draft_model' | 'eagle' | `medusa_head_${number}`")]
pub enum TokenSource {
    /// The base model's own choice (the token every step yields).
    Base,
    /// Medusa head k (0-based): guessed k+2 tokens ahead of the last accepted one.
    Head(u8),
    /// A prompt-lookup match.
    Lookup,
    /// The draft model's guess.
    DraftModel,
    /// The feature drafter's guess.
    Eagle,
}

impl TokenSource {
    /// The drafter that proposes tokens from this source.
    pub fn drafter(self) -> Option<DrafterKind> {
        match self {
            Self::Base => None,
            Self::Head(_) => Some(DrafterKind::Medusa),
            Self::Lookup => Some(DrafterKind::Lookup),
            Self::DraftModel => Some(DrafterKind::DraftModel),
            Self::Eagle => Some(DrafterKind::Eagle),
        }
    }
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Base => f.write_str("model"),
            Self::Head(k) => write!(f, "medusa_head_{k}"),
            Self::Lookup => f.write_str(DrafterKind::Lookup.name()),
            Self::DraftModel => f.write_str(DrafterKind::DraftModel.name()),
            Self::Eagle => f.write_str(DrafterKind::Eagle.name()),
        }
    }
}

impl std::str::FromStr for TokenSource {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "model" => Ok(Self::Base),
            "lookup" => Ok(Self::Lookup),
            "draft_model" => Ok(Self::DraftModel),
            "eagle" => Ok(Self::Eagle),
            _ => name
                .strip_prefix("medusa_head_")
                .and_then(|k| k.parse().ok())
                .map(Self::Head)
                .ok_or_else(|| format!("unknown token source '{name}'")),
        }
    }
}

impl Serialize for TokenSource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TokenSource {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// Candidate tokens hanging below a root token. Nodes are ordered so that a parent always
/// comes before its children.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraftTree {
    pub tokens: Vec<TokenId>,
    /// Parent node of each node; `None` is the root.
    pub parents: Vec<Option<usize>>,
    pub sources: Vec<TokenSource>,
    /// Rank of each node among its proposer's guesses: 0 is a head's top-1 guess; for lookup,
    /// which earlier match (0 the most recent) first proposed it.
    pub ranks: Vec<usize>,
    /// A second drafter that proposed the same token at the same place, where two drafters'
    /// trees were merged into one.
    pub also: Vec<Option<TokenSource>>,
}

impl DraftTree {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn push(
        &mut self,
        token: TokenId,
        parent: Option<usize>,
        source: TokenSource,
        rank: usize,
    ) -> usize {
        debug_assert!(parent.is_none_or(|p| p < self.tokens.len()));
        self.tokens.push(token);
        self.parents.push(parent);
        self.sources.push(source);
        self.ranks.push(rank);
        self.also.push(None);
        self.tokens.len() - 1
    }

    /// The node holding `token` below `parent` (`None`: the root), if there is one.
    pub fn child(&self, parent: Option<usize>, token: TokenId) -> Option<usize> {
        (0..self.len()).find(|&i| self.parents[i] == parent && self.tokens[i] == token)
    }

    /// Adds `other`'s nodes below the same root, at most `max_nodes` in all. A node whose token
    /// already hangs from the same place is shared (it records `other`'s drafter as `also`), so
    /// one verification serves both drafters' guesses.
    pub fn merge(&mut self, other: &DraftTree, max_nodes: usize) {
        // Where each of `other`'s nodes went; `None` when it did not fit.
        let mut placed: Vec<Option<usize>> = Vec::with_capacity(other.len());
        for n in 0..other.len() {
            let parent = match other.parents[n] {
                None => None,
                Some(p) => match placed[p] {
                    Some(merged) => Some(merged),
                    None => {
                        placed.push(None);
                        continue;
                    }
                },
            };
            let token = other.tokens[n];
            placed.push(match self.child(parent, token) {
                Some(i) => {
                    if self.also[i].is_none() && self.sources[i] != other.sources[n] {
                        self.also[i] = Some(other.sources[n]);
                    }
                    Some(i)
                }
                None if self.len() < max_nodes => {
                    Some(self.push(token, parent, other.sources[n], other.ranks[n]))
                }
                None => None,
            });
        }
    }

    /// The tokens from the root down through each first child: the proposer's first guess.
    pub fn first_path(&self) -> Vec<TokenId> {
        let mut path = Vec::new();
        let mut parent = None;
        while let Some(node) = (0..self.len()).find(|&i| self.parents[i] == parent) {
            path.push(self.tokens[node]);
            parent = Some(node);
        }
        path
    }

    /// Keeps the first `n` nodes (their parents come first, so the result is still a tree).
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.parents.truncate(n);
        self.sources.truncate(n);
        self.ranks.truncate(n);
        self.also.truncate(n);
    }

    pub fn layout(&self) -> TreeLayout {
        TreeLayout::new(&self.parents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_sources_are_one_name_on_the_wire() {
        let sources = [TokenSource::Base, TokenSource::Head(2), TokenSource::Lookup];
        let json = serde_json::to_string(&sources).unwrap();
        assert_eq!(json, r#"["model","medusa_head_2","lookup"]"#);
        let back: Vec<TokenSource> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, sources);
        assert!("medusa_head_x".parse::<TokenSource>().is_err());
        assert!("head".parse::<TokenSource>().is_err());
    }

    #[test]
    fn merged_trees_share_equal_guesses_and_keep_within_the_budget() {
        // Lookup: 5 -> 6 -> 7. Medusa: 5 -> {6, 9}, 8.
        let mut merged = DraftTree::default();
        merged.push(5, None, TokenSource::Lookup, 0);
        merged.push(6, Some(0), TokenSource::Lookup, 0);
        merged.push(7, Some(1), TokenSource::Lookup, 0);
        let mut medusa = DraftTree::default();
        medusa.push(5, None, TokenSource::Head(0), 0);
        medusa.push(8, None, TokenSource::Head(0), 1);
        medusa.push(6, Some(0), TokenSource::Head(1), 0);
        medusa.push(9, Some(0), TokenSource::Head(1), 1);
        medusa.push(4, Some(1), TokenSource::Head(1), 0);
        let mut small = merged.clone();
        merged.merge(&medusa, 16);
        assert_eq!(merged.tokens, vec![5, 6, 7, 8, 9, 4]);
        assert_eq!(
            merged.parents,
            vec![None, Some(0), Some(1), None, Some(0), Some(3)]
        );
        assert_eq!(
            merged.also,
            vec![
                Some(TokenSource::Head(0)),
                Some(TokenSource::Head(1)),
                None,
                None,
                None,
                None
            ]
        );
        assert_eq!(merged.ranks, vec![0, 0, 0, 1, 1, 0]);
        // One node of room: 8 takes it; 9 and 4 are left out.
        small.merge(&medusa, 4);
        assert_eq!(small.tokens, vec![5, 6, 7, 8]);
        assert_eq!(small.layout().depths, vec![1, 2, 3, 1]);
    }
}
