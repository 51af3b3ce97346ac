//! A request's most recent final hidden states, one per emitted token (the state whose logits
//! chose it), oldest first: the last feeds the Medusa heads, the last few the feature drafter's
//! attention window.

/// Rows kept: the widest window a drafter reads.
pub(crate) const RECENT_STATES: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct RecentStates {
    /// Row-major, at most [`RECENT_STATES`] rows.
    rows: Vec<f32>,
    width: usize,
}

impl RecentStates {
    /// Adds the state behind the newest token, dropping the oldest beyond the limit.
    pub(crate) fn push(&mut self, state: &[f32]) {
        if state.len() != self.width {
            self.rows.clear();
            self.width = state.len();
        }
        self.rows.extend_from_slice(state);
        let excess = self.rows.len().saturating_sub(RECENT_STATES * self.width);
        self.rows.drain(..excess);
    }

    /// The state behind the newest token.
    pub(crate) fn last(&self) -> Option<&[f32]> {
        self.rows
            .len()
            .checked_sub(self.width)
            .filter(|_| self.width > 0)
            .map(|start| &self.rows[start..])
    }

    /// Every row kept, oldest first.
    pub(crate) fn all(&self) -> &[f32] {
        &self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_rows_are_kept_oldest_first() {
        let mut recent = RecentStates::default();
        assert_eq!(recent.last(), None);
        for i in 0..RECENT_STATES + 2 {
            recent.push(&[i as f32, -(i as f32)]);
        }
        assert_eq!(recent.all().len(), RECENT_STATES * 2);
        assert_eq!(&recent.all()[..2], &[2.0, -2.0]);
        let newest = (RECENT_STATES + 1) as f32;
        assert_eq!(recent.last(), Some(&[newest, -newest][..]));
    }
}
