//! Checks a model path before llama.cpp sees it, so that the usual mistakes get clear errors.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use llama_cpp_2::gguf::GgufContext;

use crate::error::EngineError;

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Facts read from the GGUF header alone.
#[derive(Debug, Clone, Default)]
pub struct GgufHeader {
    pub architecture: String,
    /// `general.name`: often a long machine-made name ("Smollm2 135M 8k Lc100K Mix1 Ep2").
    pub name: Option<String>,
    pub basename: Option<String>,
    pub size_label: Option<String>,
    pub finetune: Option<String>,
}

impl GgufHeader {
    /// The name people know the model by: the file's name without its weight format when it
    /// names the same model as `general.basename` (publishers name files with care, e.g.
    /// "SmolLM2-135M-Instruct"), else basename, size and finetune ("llama-8B-instruct"), else
    /// `general.name`, else the file's name.
    pub fn display_name(&self, file_name: &str) -> String {
        let stem = without_weight_format(file_name.strip_suffix(".gguf").unwrap_or(file_name));
        let squash = |s: &str| {
            s.chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_lowercase()
        };
        let parts: Vec<&str> = [&self.basename, &self.size_label, &self.finetune]
            .into_iter()
            .filter_map(|p| p.as_deref().map(str::trim).filter(|p| !p.is_empty()))
            .collect();
        match self.basename.as_deref().map(squash) {
            Some(base) if !stem.is_empty() && squash(stem).contains(&base) => stem.to_owned(),
            Some(_) if !parts.is_empty() => parts.join("-"),
            _ => self
                .name
                .clone()
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| stem.to_owned()),
        }
    }
}

/// A file stem without its trailing weight format: `.Q4_1`, `-q4_k_m`, `.f16`, `-IQ3_XS`, `-BF16`.
fn without_weight_format(stem: &str) -> &str {
    let lower = stem.to_ascii_lowercase();
    let is_format = |tail: &str| {
        let digits_after = |prefix: &str| {
            tail.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        };
        digits_after("q") || digits_after("iq") || ["f16", "f32", "bf16"].contains(&tail)
    };
    lower
        .char_indices()
        .rev()
        .find(|&(i, c)| (c == '.' || c == '-') && i > 0 && is_format(&lower[i + 1..]))
        .map(|(i, _)| i)
        .map_or(stem, |i| &stem[..i])
}

/// Where a model file is written until it is complete (`m.gguf` -> `m.gguf.partial`), so that
/// a file at `output` is never a half-written one.
pub(crate) fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}

/// `general.architecture` of a Medusa heads file: heads, not a model llama.cpp can load.
const HEADS_ARCHITECTURE: &str = "medusa";

const HEADS_SUFFIX: &str = ".medusa.gguf";

/// The names heads for a model of file stem `model_stem` may take, in order of preference:
/// `<stem>.medusa.gguf`, then `<stem>-2.medusa.gguf` and so on when one is taken.
pub fn heads_file_names(model_stem: &str) -> impl Iterator<Item = String> + '_ {
    std::iter::once(format!("{model_stem}{HEADS_SUFFIX}"))
        .chain((2..).map(move |n| format!("{model_stem}-{n}{HEADS_SUFFIX}")))
}

/// Whether `heads` is one of the names [`heads_file_names`] gives heads of `model`, in the
/// model's own folder: the only place a heads file for it is written.
pub fn is_heads_file_of(model: &Path, heads: &Path) -> bool {
    let (Some(stem), Some(name)) = (
        model.file_stem().and_then(|s| s.to_str()),
        heads.file_name().and_then(|n| n.to_str()),
    ) else {
        return false;
    };
    let Some(tail) = name
        .strip_prefix(stem)
        .and_then(|rest| rest.strip_suffix(HEADS_SUFFIX))
    else {
        return false;
    };
    let numbered = |n: &str| {
        !n.starts_with('0')
            && n.bytes().all(|b| b.is_ascii_digit())
            && n.parse::<u64>().is_ok_and(|n| n >= 2)
    };
    heads.parent() == model.parent()
        && (tail.is_empty() || tail.strip_prefix('-').is_some_and(numbered))
}

/// The model a heads file goes with by its name (see [`heads_file_names`]), if that model is
/// beside it.
pub fn model_beside_heads(heads: &Path) -> Option<PathBuf> {
    let name = heads.file_name()?.to_str()?;
    let cut = name.len().checked_sub(HEADS_SUFFIX.len())?;
    if !name.get(cut..)?.eq_ignore_ascii_case(HEADS_SUFFIX) {
        return None;
    }
    let stem = &name[..cut];
    // `m-2` is first tried as a model of its own name, then as the second heads of `m`.
    let unnumbered = stem
        .rsplit_once('-')
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|(base, _)| base);
    [Some(stem), unnumbered]
        .into_iter()
        .flatten()
        .filter(|stem| !stem.is_empty())
        .map(|stem| heads.with_file_name(format!("{stem}.gguf")))
        .find(|model| model.is_file())
}

/// Verifies that `path` is a readable GGUF file and returns what its header says.
pub fn inspect(path: &Path) -> Result<GgufHeader, EngineError> {
    if !path.is_file() {
        return Err(EngineError::ModelNotFound {
            path: path.to_path_buf(),
        });
    }
    let mut magic = [0u8; 4];
    let read = File::open(path).and_then(|mut f| f.read_exact(&mut magic));
    if read.is_err() || &magic != GGUF_MAGIC {
        return Err(EngineError::NotGguf {
            path: path.to_path_buf(),
        });
    }
    let corrupt = || EngineError::CorruptModel {
        path: path.to_path_buf(),
    };
    let gguf = GgufContext::from_file(path).ok_or_else(corrupt)?;
    let string_value = |key: &str| {
        let index = gguf.find_key(key);
        // Reading a value as the wrong type aborts inside ggml, so check the type first.
        (index >= 0 && gguf.kv_type(index) == llama_cpp_sys_2::GGUF_TYPE_STRING)
            .then(|| gguf.val_str(index).map(str::to_owned))
            .flatten()
    };
    let architecture = string_value("general.architecture").ok_or_else(corrupt)?;
    if architecture == HEADS_ARCHITECTURE {
        return Err(EngineError::HeadsNotModel {
            path: path.to_path_buf(),
            model: model_beside_heads(path),
        });
    }
    Ok(GgufHeader {
        architecture,
        name: string_value("general.name"),
        basename: string_value("general.basename"),
        size_label: string_value("general.size_label"),
        finetune: string_value("general.finetune"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn header(name: &str, basename: &str, size_label: &str, finetune: &str) -> GgufHeader {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        GgufHeader {
            architecture: "llama".into(),
            name: some(name),
            basename: some(basename),
            size_label: some(size_label),
            finetune: some(finetune),
        }
    }

    #[test]
    fn models_are_named_as_people_know_them() {
        let smollm = header(
            "Smollm2 135M 8k Lc100K Mix1 Ep2",
            "smollm2",
            "135M",
            "8k-lc100k-mix1-ep2",
        );
        assert_eq!(
            smollm.display_name("SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct"
        );
        assert_eq!(
            smollm.display_name("SmolLM2-135M-Instruct.q4_0.gguf"),
            "SmolLM2-135M-Instruct"
        );
        // A file name that says nothing of the model: the metadata's parts.
        assert_eq!(
            smollm.display_name("model.gguf"),
            "smollm2-135M-8k-lc100k-mix1-ep2"
        );
        let llama = header("Meta Llama 3 8B Instruct", "Meta-Llama-3", "8B", "Instruct");
        assert_eq!(
            llama.display_name("Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"),
            "Meta-Llama-3-8B-Instruct"
        );
        assert_eq!(
            llama.display_name("meta-llama-3-8b-instruct.IQ3_XS.gguf"),
            "meta-llama-3-8b-instruct"
        );
        assert_eq!(
            llama.display_name("x-BF16.gguf"),
            "Meta-Llama-3-8B-Instruct"
        );
        // No basename: general.name, then the file.
        assert_eq!(
            header("Tiny Model", "", "", "").display_name("t.f16.gguf"),
            "Tiny Model"
        );
        assert_eq!(
            header("", "", "", "").display_name("tiny-q8_0.gguf"),
            "tiny"
        );
        // Names that only look like formats stay.
        assert_eq!(header("", "", "", "").display_name("qwen-2.gguf"), "qwen-2");
    }

    #[test]
    fn missing_file() {
        let err = inspect(Path::new("/nonexistent/model.gguf")).unwrap_err();
        assert_eq!(err.code(), "model_not_found");
    }

    #[test]
    fn not_gguf() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"PK\x03\x04 this is a zip, not a model")
            .unwrap();
        assert_eq!(inspect(f.path()).unwrap_err().code(), "not_gguf");
    }

    #[test]
    fn heads_are_named_after_their_model_and_numbered_after_the_first() {
        let names: Vec<String> = heads_file_names("m.Q4_0").take(3).collect();
        assert_eq!(
            names,
            [
                "m.Q4_0.medusa.gguf",
                "m.Q4_0-2.medusa.gguf",
                "m.Q4_0-3.medusa.gguf"
            ]
        );
    }

    #[test]
    fn heads_are_paired_with_the_model_their_name_comes_from() {
        let dir = tempfile::tempdir().unwrap();
        let touch = |name: &str| std::fs::write(dir.path().join(name), b"x").unwrap();
        let beside = |name: &str| model_beside_heads(&dir.path().join(name));
        assert_eq!(beside("m.Q4_0.medusa.gguf"), None);
        touch("m.Q4_0.gguf");
        let model = Some(dir.path().join("m.Q4_0.gguf"));
        assert_eq!(beside("m.Q4_0.medusa.gguf"), model);
        assert_eq!(beside("m.Q4_0-2.medusa.gguf"), model);
        assert_eq!(beside("m.Q4_0-13.MEDUSA.GGUF"), model);
        // A model whose own name ends in a number is its heads' model first.
        touch("m.Q4_0-2.gguf");
        assert_eq!(
            beside("m.Q4_0-2.medusa.gguf"),
            Some(dir.path().join("m.Q4_0-2.gguf"))
        );
        // Not a heads file's name, or a suffix that is not a number.
        assert_eq!(beside("m.Q4_0.gguf"), None);
        assert_eq!(beside("m.Q4_0-x.medusa.gguf"), None);
        assert_eq!(beside(".medusa.gguf"), None);
        assert_eq!(beside("-2.medusa.gguf"), None);
    }

    #[test]
    fn only_heads_names_of_the_model_in_its_folder_are_its_heads_files() {
        let model = Path::new("/models/m.Q4_0.gguf");
        let is_heads = |heads: &str| is_heads_file_of(model, Path::new(heads));
        assert!(is_heads("/models/m.Q4_0.medusa.gguf"));
        assert!(is_heads("/models/./m.Q4_0-2.medusa.gguf"));
        assert!(is_heads("/models/m.Q4_0-13.medusa.gguf"));
        // Another folder, another model, or a name heads are never given.
        assert!(!is_heads("/tmp/m.Q4_0.medusa.gguf"));
        assert!(!is_heads("/models/sub/m.Q4_0.medusa.gguf"));
        assert!(!is_heads("/models/n.Q4_0.medusa.gguf"));
        assert!(!is_heads("/models/m.Q4_0.gguf"));
        assert!(!is_heads("/models/m.Q4_0-1.medusa.gguf"));
        assert!(!is_heads("/models/m.Q4_0-02.medusa.gguf"));
        assert!(!is_heads("/models/m.Q4_0-+2.medusa.gguf"));
        assert!(!is_heads("/models/m.Q4_0-x.medusa.gguf"));
        assert!(!is_heads("/models/m.Q4_0.medusa.gguf.sh"));
    }

    #[test]
    fn truncated_gguf() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"GGUF\x03\x00\x00\x00\x10").unwrap();
        assert_eq!(inspect(f.path()).unwrap_err().code(), "corrupt_model");
    }
}
