//! A few instruct models to start from, larger than the default one, each a repository of GGUF
//! files on Hugging Face; their files, sizes and licences are read from the hub when shown.

use serde::Serialize;
use ts_rs::TS;

#[derive(Debug, Clone, Copy, Serialize, TS)]
pub struct Suggested {
    pub repo: &'static str,
    /// Parameter count as its makers state it.
    pub parameters: &'static str,
    /// Why it is here, in a few words.
    pub why: &'static str,
}

pub const SUGGESTED: &[Suggested] = &[
    Suggested {
        repo: "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF",
        parameters: "360M",
        why: "the default model's larger sibling: same tokenizer, still fast on two cores",
    },
    Suggested {
        repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        parameters: "0.5B",
        why: "small, multilingual, follows instructions well for its size",
    },
    Suggested {
        repo: "bartowski/Llama-3.2-1B-Instruct-GGUF",
        parameters: "1B",
        why: "a common baseline chat model",
    },
    Suggested {
        repo: "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        parameters: "1.5B",
        why: "good answers on a laptop CPU",
    },
    Suggested {
        repo: "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF",
        parameters: "1.7B",
        why: "the largest SmolLM2, with the default model's tokenizer",
    },
];
