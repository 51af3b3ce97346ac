//! Turns a stream of token bytes into text without ever splitting a UTF-8 character.

/// Buffers the bytes of an incomplete character until the rest arrives.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `bytes` and returns the text that is complete so far. Bytes that can never
    /// become valid UTF-8 come out as U+FFFD, so a broken token cannot stall the stream.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    // SAFETY-free: the prefix was just validated.
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match err.error_len() {
                        // Incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Ends the stream. Bytes of a character the run stopped in the middle of are dropped:
    /// they have no glyph, and a trailing U+FFFD would only look like corruption.
    pub fn finish(&mut self) -> String {
        let out = match std::str::from_utf8(&self.pending) {
            Ok(text) => text.to_owned(),
            Err(err) => String::from_utf8_lossy(&self.pending[..err.valid_up_to()]).into_owned(),
        };
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_passes_through() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"hello"), "hello");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn split_multibyte_character_waits_for_its_tail() {
        let euro = "€".as_bytes(); // e2 82 ac
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(&euro[..1]), "");
        assert_eq!(s.push(&euro[1..2]), "");
        assert_eq!(s.push(&[euro[2], b'!']), "€!");
    }

    #[test]
    fn emoji_split_across_three_tokens() {
        let bytes = "a😀b".as_bytes();
        let mut s = Utf8Stream::new();
        let mut out = String::new();
        for chunk in bytes.chunks(2) {
            out.push_str(&s.push(chunk));
        }
        out.push_str(&s.finish());
        assert_eq!(out, "a😀b");
    }

    #[test]
    fn invalid_byte_becomes_replacement_and_stream_continues() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(&[b'a', 0xff, b'b']), "a\u{FFFD}b");
    }

    #[test]
    fn unfinished_character_at_end_is_dropped() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(&[b'a', 0xe2, 0x82]), "a");
        assert_eq!(s.finish(), "");
    }
}
