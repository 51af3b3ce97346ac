//! Which runs a listing or an export covers, and in what order.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::records::RunStatus;
use crate::search::check_search_text;

/// The engine filter's name for the playground's own model (no remote engine may take it).
pub const LOCAL_ENGINE: &str = "local";

/// Selects runs. Every field is optional; the default is every run, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunFilter {
    /// Runs created at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Runs created strictly before this instant.
    pub until: Option<DateTime<Utc>>,
    pub mode: Option<String>,
    /// Text the model name contains, in any case.
    pub model: Option<String>,
    /// Words the prompt or the output contains (full-text search; every word must match, each
    /// as a word or the start of one).
    pub search: Option<String>,
    pub status: Option<RunStatus>,
    /// Runs of the remote engine of this name; [`LOCAL_ENGINE`]: runs of the playground's own
    /// model.
    pub engine: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort: SortKey,
    pub order: SortOrder,
}

impl RunFilter {
    /// Refuses text fields holding control characters (see [`check_search_text`]).
    pub fn check_text(&self) -> Result<(), StoreError> {
        let fields = [
            ("mode", &self.mode),
            ("model", &self.model),
            ("search", &self.search),
            ("engine", &self.engine),
        ];
        for (field, text) in fields {
            if let Some(text) = text {
                check_search_text(field, text)?;
            }
        }
        Ok(())
    }
}

/// The columns runs can be sorted by. A closed set, so no caller text ever reaches the SQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    #[default]
    CreatedAt,
    TokensPerSecond,
    TotalMs,
    TtftMs,
    TokensGenerated,
    MeanAccepted,
}

impl SortKey {
    pub const ALL: [SortKey; 6] = [
        Self::CreatedAt,
        Self::TokensPerSecond,
        Self::TotalMs,
        Self::TtftMs,
        Self::TokensGenerated,
        Self::MeanAccepted,
    ];

    /// The column name, which is also the key's text form.
    pub fn column(self) -> &'static str {
        match self {
            Self::CreatedAt => "created_at",
            Self::TokensPerSecond => "tokens_per_second",
            Self::TotalMs => "total_ms",
            Self::TtftMs => "ttft_ms",
            Self::TokensGenerated => "tokens_generated",
            Self::MeanAccepted => "mean_accepted",
        }
    }
}

impl FromStr for SortKey {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|key| key.column() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.column()).collect();
                StoreError::invalid(format!(
                    "cannot sort by {s:?}; expected one of {}",
                    known.join(", ")
                ))
            })
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum SortOrder {
    Asc,
    #[default]
    Desc,
}

impl SortOrder {
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Self::Asc => "ASC",
            Self::Desc => "DESC",
        }
    }
}

impl FromStr for SortOrder {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "asc" => Ok(Self::Asc),
            "desc" => Ok(Self::Desc),
            _ => Err(StoreError::invalid(format!(
                "unknown sort order {s:?}; expected asc or desc"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_parse_from_their_column_names_only() {
        for key in SortKey::ALL {
            assert_eq!(key.column().parse::<SortKey>().unwrap(), key);
        }
        assert!("id; DROP TABLE runs".parse::<SortKey>().is_err());
        assert_eq!("asc".parse::<SortOrder>().unwrap(), SortOrder::Asc);
        assert!("up".parse::<SortOrder>().is_err());
    }

    #[test]
    fn control_characters_are_refused_in_every_text_field() {
        for bad in ["\0", "a\0b", "x\u{7}", "line\nbreak", "\t", "\u{9b}"] {
            for field in 0..4 {
                let mut filter = RunFilter::default();
                let slot = [
                    &mut filter.mode,
                    &mut filter.model,
                    &mut filter.search,
                    &mut filter.engine,
                ];
                *slot.into_iter().nth(field).unwrap() = Some(bad.to_owned());
                let err = filter.check_text().unwrap_err();
                assert_eq!(err.code(), "invalid_input", "{bad:?}");
            }
        }
        let filter = RunFilter {
            search: Some("héllo wörld \"quoted\" * OR".into()),
            model: Some("SmolLM".into()),
            ..RunFilter::default()
        };
        filter.check_text().unwrap();
    }

    #[test]
    fn default_filter_is_newest_first() {
        let filter = RunFilter::default();
        assert_eq!(filter.sort, SortKey::CreatedAt);
        assert_eq!(filter.order, SortOrder::Desc);
    }
}
