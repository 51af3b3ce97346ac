//! Which drafter: one name per drafter, for the budget's memory of each, the step events and
//! the inspector's colours.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrafterKind {
    /// Prompt lookup, with what earlier requests' text remembers.
    Lookup,
    /// The Medusa heads.
    Medusa,
    /// A smaller model of the same family, in its own context.
    DraftModel,
    /// The feature-level drafter: one decoder layer on the model's hidden states (EAGLE-style).
    Eagle,
}

impl DrafterKind {
    /// Its name in events and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lookup => "lookup",
            Self::Medusa => "medusa",
            Self::DraftModel => "draft_model",
            Self::Eagle => "eagle",
        }
    }
}

impl fmt::Display for DrafterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
