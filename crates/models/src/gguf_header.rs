//! What a GGUF file says of itself near its start: `general.architecture`, to tell Medusa heads
//! from models whatever their file is called, and `general.file_type`, the weight format, which
//! a file's name may not tell truly (a model requantized under its old name). Reading the whole
//! header would cost a large model's vocabulary; these keys come before it in files written by
//! llama.cpp and by this project.

use std::io::{BufReader, Read};
use std::path::Path;

/// Bytes read at most before giving up on finding the keys.
const READ_LIMIT: u64 = 64 << 10;
/// Key-value pairs looked at at most.
const KEYS_LOOKED_AT: u64 = 64;

/// The keys of a GGUF file's header that were found near its start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderFacts {
    pub architecture: Option<String>,
    /// llama.cpp's `llama_ftype`.
    pub file_type: Option<u32>,
}

/// What the file says near its start; nothing for a file that is not GGUF.
pub fn header_facts(path: &Path) -> HeaderFacts {
    let mut facts = HeaderFacts::default();
    let _ = read_facts(path, &mut facts);
    facts
}

fn read_facts(path: &Path, facts: &mut HeaderFacts) -> Option<()> {
    let file = std::fs::File::open(path).ok()?;
    let mut r = BufReader::new(file.take(READ_LIMIT));
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic).ok()?;
    if &magic != b"GGUF" || read_u32(&mut r)? < 2 {
        return None;
    }
    let _tensors = read_u64(&mut r)?;
    let pairs = read_u64(&mut r)?;
    for _ in 0..pairs.min(KEYS_LOOKED_AT) {
        let key = read_string(&mut r)?;
        let kind = read_u32(&mut r)?;
        match (key.as_str(), kind) {
            ("general.architecture", STRING) => facts.architecture = Some(read_string(&mut r)?),
            ("general.file_type", U32) => facts.file_type = Some(read_u32(&mut r)?),
            _ => skip_value(&mut r, kind)?,
        }
        if facts.architecture.is_some() && facts.file_type.is_some() {
            break;
        }
    }
    Some(())
}

const U32: u32 = 4;
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// Bytes of a scalar of GGUF type `kind` (None for strings, arrays and unknown types).
fn scalar_size(kind: u32) -> Option<u64> {
    Some(match kind {
        0 | 1 | 7 => 1, // u8, i8, bool
        2 | 3 => 2,     // u16, i16
        4..=6 => 4,     // u32, i32, f32
        10..=12 => 8,   // u64, i64, f64
        _ => return None,
    })
}

fn skip_value(r: &mut impl Read, kind: u32) -> Option<()> {
    match kind {
        STRING => {
            let len = read_u64(r)?;
            skip(r, len)
        }
        ARRAY => {
            let element = read_u32(r)?;
            let count = read_u64(r)?;
            match element {
                STRING => (0..count).try_for_each(|_| {
                    let len = read_u64(r)?;
                    skip(r, len)
                }),
                other => skip(r, scalar_size(other)?.checked_mul(count)?),
            }
        }
        other => {
            let size = scalar_size(other)?;
            skip(r, size)
        }
    }
}

fn skip(r: &mut impl Read, n: u64) -> Option<()> {
    let skipped = std::io::copy(&mut r.take(n), &mut std::io::sink()).ok()?;
    (skipped == n).then_some(())
}

fn read_u32(r: &mut impl Read) -> Option<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b).ok()?;
    Some(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> Option<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

fn read_string(r: &mut impl Read) -> Option<String> {
    let len = read_u64(r)?;
    if len > READ_LIMIT {
        return None;
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes).ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 header with the given key-value pairs (already encoded) and no tensors.
    fn gguf(pairs: &[Vec<u8>]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((pairs.len() as u64).to_le_bytes());
        for pair in pairs {
            out.extend(pair);
        }
        out
    }

    fn text(s: &str) -> Vec<u8> {
        let mut out = (s.len() as u64).to_le_bytes().to_vec();
        out.extend(s.as_bytes());
        out
    }

    fn string_pair(key: &str, value: &str) -> Vec<u8> {
        let mut out = text(key);
        out.extend(STRING.to_le_bytes());
        out.extend(text(value));
        out
    }

    #[test]
    fn reads_the_architecture_and_the_file_type_past_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let mut file_type = text("general.file_type");
        file_type.extend(U32.to_le_bytes());
        file_type.extend(7u32.to_le_bytes());
        let mut tokens = text("tokenizer.ggml.tokens");
        tokens.extend(ARRAY.to_le_bytes());
        tokens.extend(STRING.to_le_bytes());
        tokens.extend(2u64.to_le_bytes());
        tokens.extend(text("a"));
        tokens.extend(text("bc"));
        let mut scores = text("tokenizer.ggml.scores");
        scores.extend(ARRAY.to_le_bytes());
        scores.extend(6u32.to_le_bytes());
        scores.extend(2u64.to_le_bytes());
        scores.extend([0u8; 8]);
        std::fs::write(
            &path,
            gguf(&[
                file_type,
                tokens,
                scores,
                string_pair("general.architecture", "medusa"),
            ]),
        )
        .unwrap();
        assert_eq!(
            header_facts(&path),
            HeaderFacts {
                architecture: Some("medusa".into()),
                file_type: Some(7)
            }
        );

        std::fs::write(&path, gguf(&[string_pair("general.name", "m")])).unwrap();
        assert_eq!(header_facts(&path).architecture, None);
        std::fs::write(&path, b"GGUF\x03\x00").unwrap();
        assert_eq!(header_facts(&path).architecture, None);
        std::fs::write(&path, b"not a gguf file at all").unwrap();
        assert_eq!(header_facts(&path).architecture, None);
        assert_eq!(
            header_facts(&dir.path().join("missing.gguf")).architecture,
            None
        );
    }
}
