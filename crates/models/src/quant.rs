//! The quantization a GGUF file holds: what its header says (`general.file_type`), or what its
//! name says (`qwen2.5-0.5b-instruct-q4_k_m.gguf`: `Q4_K_M`), as model hubs name their files.

use crate::gguf_header::HeaderFacts;

/// llama.cpp's weight formats, longest first so that `Q4_K_M` is not read as `Q4_K`.
const FORMATS: &[&str] = &[
    "IQ2_XXS", "IQ3_XXS", "IQ1_S", "IQ1_M", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XS", "IQ3_S", "IQ3_M",
    "IQ4_XS", "IQ4_NL", "Q2_K_S", "Q2_K_L", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
    "Q4_K_L", "Q5_K_S", "Q5_K_M", "Q5_K_L", "Q6_K_L", "TQ1_0", "TQ2_0", "Q2_K", "Q3_K", "Q4_K",
    "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16", "F32",
];

/// llama.cpp's `llama_ftype` values and their formats' names.
const FILE_TYPES: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// The weight format of the GGUF file `file_name` whose header is `header`: the header's, else
/// the name's (a download that has not brought the header yet, a file that does not say).
pub(crate) fn quantization_of(header: &HeaderFacts, file_name: &str) -> Option<&'static str> {
    header
        .file_type
        .and_then(|ftype| FILE_TYPES.iter().find(|(id, _)| *id == ftype))
        .map(|(_, name)| *name)
        .or_else(|| quantization_in_name(file_name))
}

/// The weight format in a file name, upper-cased (`Q4_K_M`), if it names one between
/// separators.
pub fn quantization_in_name(file_name: &str) -> Option<&'static str> {
    let stem = file_name
        .rsplit('/')
        .next()
        .unwrap_or(file_name)
        .to_ascii_uppercase()
        .replace('-', "_");
    let stem = stem.strip_suffix(".GGUF").unwrap_or(&stem);
    let bytes = stem.as_bytes();
    let separator = |i: usize| matches!(bytes.get(i), Some(b'_' | b'.'));
    let ends_there = |i: usize| i == bytes.len() || separator(i);
    (0..bytes.len())
        .filter(|&i| i == 0 || separator(i - 1))
        .find_map(|i| {
            FORMATS
                .iter()
                .find(|f| stem[i..].starts_with(**f) && ends_there(i + f.len()))
        })
        .copied()
}

#[cfg(test)]
mod tests {
    use super::{quantization_in_name, quantization_of};
    use crate::gguf_header::header_facts;

    #[test]
    fn the_header_says_the_format_before_the_name_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("widened-Q4_1.gguf");
        let key = "general.file_type";
        let mut header = b"GGUF".to_vec();
        header.extend(3u32.to_le_bytes());
        header.extend(0u64.to_le_bytes());
        header.extend(1u64.to_le_bytes());
        header.extend((key.len() as u64).to_le_bytes());
        header.extend(key.as_bytes());
        header.extend(4u32.to_le_bytes());
        header.extend(2u32.to_le_bytes());
        std::fs::write(&path, &header).unwrap();
        assert_eq!(
            quantization_of(&header_facts(&path), "widened-Q4_1.gguf"),
            Some("Q4_0")
        );
        // A header without it, or no header yet: the name's.
        std::fs::write(&path, b"GGUF").unwrap();
        assert_eq!(
            quantization_of(&header_facts(&path), "widened-Q4_1.gguf"),
            Some("Q4_1")
        );
    }

    #[test]
    fn reads_the_format_hubs_put_in_file_names() {
        let cases = [
            ("qwen2.5-0.5b-instruct-q4_k_m.gguf", Some("Q4_K_M")),
            ("SmolLM2-135M-Instruct.Q4_1.gguf", Some("Q4_1")),
            ("Llama-3.2-1B-Instruct-IQ2_XXS.gguf", Some("IQ2_XXS")),
            ("phi-4-mini-instruct-bf16.gguf", Some("BF16")),
            ("model-Q8_0-00001-of-00002.gguf", Some("Q8_0")),
            ("tinyllama-1.1b-chat-v1.0.Q2_K.gguf", Some("Q2_K")),
            ("gemma-3-1b-it-f16.gguf", Some("F16")),
            ("mistral-7b.gguf", None),
            // Not a format: letters around it.
            ("sq4_0x.gguf", None),
        ];
        for (name, format) in cases {
            assert_eq!(quantization_in_name(name), format, "{name}");
        }
    }
}
