//! Saves collected self-distillation data, so that heads of other shapes or settings can be
//! trained on it without the model answering every prompt again. Layout (little endian): a
//! magic, the model's embedding size and tokenizer hash, then per answer: its token count, the
//! tokens (i32) and the hidden state behind each (f16).

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use engine::medusa::heads::BaseIdentity;
use half::f16;

use crate::dataset::Answer;
use crate::TrainError;

const MAGIC: &[u8; 8] = b"MDSDATA1";

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::Data {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Writes answers as they are collected; the file only appears under its name once complete.
/// Until then it is kept beside it (`*.partial`), flushed after every answer, so that collection
/// stopped by a cancel or a crash continues from the answers it holds.
pub struct DataWriter {
    out: BufWriter<File>,
    staged: PathBuf,
    path: PathBuf,
}

/// Where collection stopped before: the answers already written, in prompt order.
pub struct Resumed {
    pub writer: DataWriter,
    pub answers: usize,
}

impl DataWriter {
    /// Continues the unfinished collection for `path` when there is one (every whole answer it
    /// holds goes to `each`; a torn last answer is dropped), or starts a new one.
    pub fn open(
        path: &Path,
        base: &BaseIdentity,
        mut each: impl FnMut(Answer),
    ) -> Result<Resumed, TrainError> {
        let staged = path.with_extension("partial");
        if !staged.exists() {
            return Ok(Resumed {
                writer: Self::create(path, base)?,
                answers: 0,
            });
        }
        let mut answers = 0;
        let whole = read_answers(&staged, base, true, |answer| {
            answers += 1;
            each(answer);
        })?;
        let file = OpenOptions::new()
            .write(true)
            .open(&staged)
            .map_err(io_error(path))?;
        file.set_len(whole).map_err(io_error(path))?;
        let mut out = BufWriter::new(file);
        out.seek(SeekFrom::End(0)).map_err(io_error(path))?;
        Ok(Resumed {
            writer: Self {
                out,
                staged,
                path: path.to_path_buf(),
            },
            answers,
        })
    }

    fn create(path: &Path, base: &BaseIdentity) -> Result<Self, TrainError> {
        let staged = path.with_extension("partial");
        let file = File::create(&staged).map_err(io_error(path))?;
        let mut out = BufWriter::new(file);
        let header = [
            &MAGIC[..],
            &base.n_embd.to_le_bytes(),
            base.tokenizer_sha256.as_bytes(),
        ]
        .concat();
        out.write_all(&header).map_err(io_error(path))?;
        Ok(Self {
            out,
            staged,
            path: path.to_path_buf(),
        })
    }

    pub fn push(&mut self, answer: &Answer) -> Result<(), TrainError> {
        let mut bytes = Vec::with_capacity(4 + answer.tokens.len() * 4 + answer.states.len() * 2);
        bytes.extend((answer.tokens.len() as u32).to_le_bytes());
        bytes.extend(answer.tokens.iter().flat_map(|t| t.to_le_bytes()));
        bytes.extend(
            answer
                .states
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes()),
        );
        self.out
            .write_all(&bytes)
            .and_then(|()| self.out.flush())
            .map_err(io_error(&self.path))
    }

    pub fn finish(mut self) -> Result<(), TrainError> {
        self.out.flush().map_err(io_error(&self.path))?;
        std::fs::rename(&self.staged, &self.path).map_err(io_error(&self.path))
    }
}

/// Reads every answer of a data file collected from the model `base` describes.
pub fn read_data(
    path: &Path,
    base: &BaseIdentity,
    each: impl FnMut(Answer),
) -> Result<(), TrainError> {
    read_answers(path, base, false, each).map(|_| ())
}

/// Reads the answers of `path`; returns the length of its whole answers. A torn last answer is an
/// error unless `torn_tail` allows it (an unfinished collection).
fn read_answers(
    path: &Path,
    base: &BaseIdentity,
    torn_tail: bool,
    mut each: impl FnMut(Answer),
) -> Result<u64, TrainError> {
    let file = File::open(path).map_err(io_error(path))?;
    let mut input = BufReader::new(file);
    let corrupt = |what: &str| TrainError::Data {
        path: path.to_path_buf(),
        message: what.to_owned(),
    };
    let mut header = vec![0u8; 8 + 4 + base.tokenizer_sha256.len()];
    input
        .read_exact(&mut header)
        .map_err(|_| corrupt("not a training data file (too short)"))?;
    if &header[..8] != MAGIC {
        return Err(corrupt("not a training data file"));
    }
    let n_embd = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    if n_embd != base.n_embd || &header[12..] != base.tokenizer_sha256.as_bytes() {
        return Err(corrupt("collected from another model"));
    }
    let n_embd = n_embd as usize;
    let mut whole = header.len() as u64;
    loop {
        let mut count = [0u8; 4];
        match input.read_exact(&mut count) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(whole),
            Err(e) => return Err(io_error(path)(e)),
        }
        let n_tokens = u32::from_le_bytes(count) as usize;
        if n_tokens > 1 << 24 {
            return Err(corrupt("an answer's length is out of range"));
        }
        let mut tokens = vec![0u8; n_tokens * 4];
        let mut states = vec![0u8; n_tokens * n_embd * 2];
        if input
            .read_exact(&mut tokens)
            .and_then(|()| input.read_exact(&mut states))
            .is_err()
        {
            return if torn_tail {
                Ok(whole)
            } else {
                Err(corrupt("the file ends in the middle of an answer"))
            };
        }
        whole += (4 + tokens.len() + states.len()) as u64;
        each(Answer {
            tokens: tokens
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            states: states
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(sha: &str) -> BaseIdentity {
        BaseIdentity {
            n_embd: 2,
            n_vocab: 10,
            tokenizer_sha256: sha.repeat(64),
        }
    }

    #[test]
    fn round_trips_and_refuses_other_models_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        let text = Answer {
            tokens: vec![7, 8],
            states: vec![0.5, -1.0, 2.0, 0.25],
        };
        let mut writer = DataWriter::open(&path, &base("a"), |_| {}).unwrap().writer;
        assert!(!path.exists());
        writer.push(&text).unwrap();
        writer.push(&text).unwrap();
        writer.finish().unwrap();
        let mut read = Vec::new();
        read_data(&path, &base("a"), |t| read.push(t)).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1], text);

        let err = read_data(&path, &base("b"), |_| {}).unwrap_err();
        assert!(err.to_string().contains("another model"), "{err}");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let err = read_data(&path, &base("a"), |_| {}).unwrap_err();
        assert!(err.to_string().contains("middle of an answer"), "{err}");
    }

    #[test]
    fn an_unfinished_collection_continues_after_its_last_whole_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        let first = Answer {
            tokens: vec![1, 2],
            states: vec![0.5; 4],
        };
        let second = Answer {
            tokens: vec![3],
            states: vec![1.5; 2],
        };
        let mut writer = DataWriter::open(&path, &base("a"), |_| {}).unwrap().writer;
        writer.push(&first).unwrap();
        writer.push(&second).unwrap();
        drop(writer);
        // A crash in the middle of the second answer.
        let staged = path.with_extension("partial");
        let bytes = std::fs::read(&staged).unwrap();
        std::fs::write(&staged, &bytes[..bytes.len() - 1]).unwrap();

        let mut seen = Vec::new();
        let resumed = DataWriter::open(&path, &base("a"), |a| seen.push(a)).unwrap();
        assert_eq!((resumed.answers, seen), (1, vec![first.clone()]));
        let mut writer = resumed.writer;
        writer.push(&second).unwrap();
        writer.finish().unwrap();
        let mut read = Vec::new();
        read_data(&path, &base("a"), |t| read.push(t)).unwrap();
        assert_eq!(read, vec![first, second]);
        assert!(!staged.exists());

        std::fs::write(&staged, b"MDSDATA1").unwrap();
        let err = DataWriter::open(&path, &base("a"), |_| {}).err().unwrap();
        assert!(err.to_string().contains("too short"), "{err}");
    }
}
