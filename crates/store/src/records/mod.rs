//! Plain record types, free of SQL: runs, their steps and comparisons as they go into the store
//! and come out, and a run's place in a conversation. They mirror the engine's results without
//! depending on the engine, so the caller maps one onto the other.

mod comparison;
mod run;
mod step;

pub use comparison::*;
pub use run::*;
pub use step::*;
