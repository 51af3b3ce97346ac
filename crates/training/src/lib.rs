//! Trains Medusa heads for any GGUF model by self-distillation (Medusa-1): the model answers a
//! prompt set, its final hidden states along those answers are recorded, and the heads (base
//! model frozen) learn to guess the tokens 2, 3, ... ahead with candle on the CPU. The result is
//! a heads file holding its held-out accuracy and a token tree built from it.

mod collect;
mod data_file;
mod dataset;
mod error;
mod feature_model;
mod feature_training;
mod heads_model;
mod prompt_templates;
mod schedule;
mod stop;
mod train;
mod vocab;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use engine::matrix::GGML_TYPE_F16;
use engine::medusa::convert::base_identity;
use engine::medusa::heads::{write_heads, HeadsEncoding, HeadsWeights, TrainingRecord};
use engine::speculative::tree_builder::{best_trees, AccuracyTable};
use engine::{Engine, EngineConfig};
use serde::Serialize;

pub use collect::CollectEvent;
use collect::Collection;
use data_file::DataWriter;
pub use dataset::Dataset;
pub use error::TrainError;
pub use feature_training::{
    train_feature_drafter, FeatureEvaluation, FeatureProgress, FeatureReport, FeatureTrainOptions,
    TreeMeasure,
};
pub use prompt_templates::{template_capacity, template_prompts};
pub use stop::StopFlag;
pub use train::{Evaluation, TrainEvent, PLOTTED_TREE_NODES};

use error::invalid;
use heads_model::TrainableHeads;
use train::{evaluate, train, TrainOptions};
use vocab::{unit_rms_embedding, HeadVocabulary};

/// The project's self-distillation prompts: chat, explanations, instructions, code, lists,
/// stories, rewriting, advice and more, one per line.
pub const DEFAULT_PROMPTS: &str = include_str!("../prompts/distill.txt");

/// The largest prompt file read: far more prompts than a job answers, and a bound on what a
/// path from somebody else's input can make the process hold.
pub const MAX_PROMPTS_FILE_BYTES: u64 = 16 << 20;

/// Prompts from a file (one per line, blank lines skipped), or the project's set. Only a regular
/// file of at most [`MAX_PROMPTS_FILE_BYTES`] is read: a device or a FIFO would never end or
/// never answer.
pub fn load_prompts(path: Option<&Path>) -> Result<Vec<String>, TrainError> {
    let text = match path {
        Some(path) => read_prompts_file(path).map_err(|message| TrainError::Prompts {
            path: path.display().to_string(),
            message,
        })?,
        None => DEFAULT_PROMPTS.to_owned(),
    };
    Ok(engine::tuning::prompt_lines(&text))
}

fn read_prompts_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    let not_regular = || "not a regular file".to_string();
    // Looked at before opening, since opening a FIFO waits for a writer; then opened without
    // waiting and looked at again, in case the name was swapped in between.
    if !std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .is_file()
    {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(MAX_PROMPTS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_PROMPTS_FILE_BYTES {
        return Err(format!("larger than {} MiB", MAX_PROMPTS_FILE_BYTES >> 20));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

#[derive(Debug, Clone)]
pub struct TrainHeadsOptions {
    pub model_path: PathBuf,
    pub out: PathBuf,
    pub prompts: Vec<String>,
    /// Prompts answered (the first ones of `prompts`); `None` for all.
    pub samples: Option<usize>,
    pub heads: usize,
    pub layers: usize,
    /// Heads also read the root token (the base model's own next token), not only its hidden
    /// state.
    pub root_input: bool,
    /// Heads also read the tokens drafted between the root and the one they guess (teacher
    /// forcing in training); needs `root_input`.
    pub path_input: bool,
    /// Tokens the model writes per answer.
    pub max_tokens: u32,
    pub epochs: usize,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    /// Restricts the heads to this many most frequent target tokens; `None` for all.
    pub vocab_subset: Option<usize>,
    /// Where collected data is kept: read instead of collecting when the file exists, written
    /// while collecting when it does not (an unfinished collection there continues).
    pub data: Option<PathBuf>,
    /// Every this-many-th answer is held out for evaluation.
    pub heldout_every: usize,
    /// Nodes of the token tree stored with the heads (built from held-out accuracy).
    pub tree_nodes: usize,
    pub threads: Option<usize>,
    /// Requests the engine answers at once while generating the data.
    pub parallel: usize,
    pub seed: u64,
    /// Held-out evaluations per epoch.
    pub evaluations_per_epoch: usize,
    /// How the heads were made, stored with them.
    pub command: String,
    /// Raised to stop (see [`TrainError::Cancelled`]).
    pub stop: StopFlag,
}

impl TrainHeadsOptions {
    pub fn new(model_path: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            out: out.into(),
            prompts: Vec::new(),
            samples: None,
            heads: 4,
            layers: 1,
            root_input: true,
            path_input: false,
            max_tokens: 256,
            epochs: 3,
            batch_size: 256,
            learning_rate: 1e-3,
            weight_decay: 0.0,
            vocab_subset: None,
            data: None,
            heldout_every: 10,
            tree_nodes: 16,
            threads: None,
            parallel: 8,
            seed: 1,
            evaluations_per_epoch: 1,
            command: String::new(),
            stop: StopFlag::default(),
        }
    }

    /// The prompts the model answers: the first `samples` of `prompts`.
    pub fn answered_prompts(&self) -> &[String] {
        &self.prompts[..self.samples.unwrap_or(usize::MAX).min(self.prompts.len())]
    }

    /// Refuses options out of range, naming the option.
    pub fn validate(&self) -> Result<(), TrainError> {
        let range = |name, value: usize, low: usize, high: usize| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(invalid(
                    name,
                    format!("must be between {low} and {high}, got {value}"),
                ))
            }
        };
        range("heads", self.heads, 1, 8)?;
        range("layers", self.layers, 1, 4)?;
        if self.path_input && !self.root_input {
            return Err(invalid(
                "path_input",
                "heads that read the drafted path read the root token too (--root-input true)",
            ));
        }
        range("max_tokens", self.max_tokens as usize, 8, 4096)?;
        range("epochs", self.epochs, 1, 100)?;
        range("batch_size", self.batch_size, 1, 8192)?;
        range("heldout_every", self.heldout_every, 2, 1000)?;
        range("tree_nodes", self.tree_nodes, 1, 256)?;
        range("parallel", self.parallel, 1, 64)?;
        range("evaluations_per_epoch", self.evaluations_per_epoch, 1, 100)?;
        let at_least = |name, value: Option<usize>, low: usize| match value {
            Some(n) if n < low => Err(invalid(name, format!("must be at least {low}, got {n}"))),
            _ => Ok(()),
        };
        at_least("samples", self.samples, 2)?;
        at_least("vocab_subset", self.vocab_subset, 16)?;
        if !(self.learning_rate > 0.0 && self.learning_rate <= 1.0) {
            return Err(invalid("learning_rate", "must be in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.weight_decay) {
            return Err(invalid("weight_decay", "must be between 0 and 1"));
        }
        if self.prompts.len() < 2 {
            return Err(invalid("prompts", "need at least 2 prompts"));
        }
        let answered = self.answered_prompts().len();
        if answered < self.heldout_every {
            return Err(invalid(
                "samples",
                format!(
                    "training needs at least {every} answered prompts, as one in {every} is held \
                     out to measure the heads; {answered} would be answered",
                    every = self.heldout_every
                ),
            ));
        }
        Ok(())
    }
}

/// Everything training reports as it goes.
#[derive(Debug, Clone)]
pub enum TrainProgress {
    LoadingModel,
    /// Texts read from a data file collected earlier.
    LoadedData {
        texts: usize,
        positions: usize,
    },
    Collect(CollectEvent),
    /// Untrained heads on the held-out texts, before the first step.
    Baseline(Evaluation),
    Train(TrainEvent),
    Writing,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    pub out: PathBuf,
    pub prompts: usize,
    pub generated_tokens: usize,
    pub train_positions: usize,
    pub heldout_positions: usize,
    /// Rows of the heads' projection (the vocabulary, or its most frequent part).
    pub vocabulary_rows: usize,
    /// Share of held-out targets the heads can propose at all.
    pub heldout_coverage: f64,
    pub untrained: Evaluation,
    pub trained: Evaluation,
    pub tree: Vec<Vec<usize>>,
    /// Tokens per step the stored tree should give, from held-out accuracy.
    pub expected_tokens_per_step: f64,
    pub collect_seconds: f64,
    pub train_seconds: f64,
    pub file_bytes: u64,
}

/// Generates the data, trains, and writes the heads file.
pub fn train_heads(
    options: &TrainHeadsOptions,
    progress: &mut dyn FnMut(TrainProgress),
) -> Result<TrainReport, TrainError> {
    options.validate()?;
    let prompts = options.answered_prompts();
    let base = base_identity(&options.model_path)?;
    let (n_embd, n_vocab) = (base.n_embd as usize, base.n_vocab as usize);

    let started = Instant::now();
    let mut data = Dataset::new(n_embd, options.heads);
    match &options.data {
        Some(path) if path.exists() => {
            data_file::read_data(path, &base, |answer| data.push_answer(&answer))?;
            progress(TrainProgress::LoadedData {
                texts: data.sequences(),
                positions: data.len(),
            });
        }
        Some(path) => {
            let resumed = DataWriter::open(path, &base, |answer| data.push_answer(&answer))?;
            if resumed.answers > 0 {
                progress(TrainProgress::LoadedData {
                    texts: data.sequences(),
                    positions: data.len(),
                });
            }
            let mut writer = resumed.writer;
            collect_data(options, prompts, &mut data, Some(&mut writer), progress)?;
            writer.finish()?;
        }
        None => collect_data(options, prompts, &mut data, None, progress)?,
    }
    let generated_tokens = data.answer_tokens();
    let collect_seconds = started.elapsed().as_secs_f64();

    let (train_positions, heldout_positions) = data.split(options.heldout_every);
    if train_positions.is_empty() || heldout_positions.is_empty() {
        return Err(TrainError::NotEnoughData(format!(
            "{} positions from {} answers; write longer answers or use more prompts",
            data.len(),
            data.sequences()
        )));
    }
    let vocab = match options.vocab_subset {
        Some(size) => {
            HeadVocabulary::most_frequent(&data.target_counts(&train_positions, n_vocab), size)
        }
        None => HeadVocabulary::full(n_vocab),
    };
    let heldout_coverage = vocab.coverage(&data.target_counts(&heldout_positions, n_vocab));

    let projection = vocab.projection(&options.model_path, n_vocab, n_embd)?;
    let root_embedding = if options.root_input {
        Some(unit_rms_embedding(&options.model_path, n_vocab, n_embd)?)
    } else {
        None
    };
    let device = Device::Cpu;
    let heads = TrainableHeads::new(
        options.heads,
        options.layers,
        n_embd,
        projection.to_f32()?,
        root_embedding,
        options.path_input,
        &device,
    )?;

    let train_started = Instant::now();
    let untrained = evaluate(
        &heads,
        &data,
        &heldout_positions,
        &vocab,
        options.batch_size,
    )?;
    progress(TrainProgress::Baseline(untrained.clone()));
    let train_options = TrainOptions {
        epochs: options.epochs,
        batch_size: options.batch_size,
        learning_rate: options.learning_rate,
        weight_decay: options.weight_decay,
        warmup_steps: (train_positions.len().div_ceil(options.batch_size) / 10).clamp(1, 100),
        seed: options.seed,
        evaluations_per_epoch: options.evaluations_per_epoch,
    };
    let trained = train(
        &heads,
        &data,
        &train_positions,
        &heldout_positions,
        &vocab,
        &train_options,
        &options.stop,
        &mut |event| progress(TrainProgress::Train(event)),
    )?;
    let train_seconds = train_started.elapsed().as_secs_f64();

    progress(TrainProgress::Writing);
    let table = AccuracyTable::new(trained.by_rank.clone())
        .map_err(|e| TrainError::NotEnoughData(format!("held-out accuracy: {e}")))?;
    let built = best_trees(&table, options.tree_nodes)
        .pop()
        .ok_or_else(|| TrainError::NotEnoughData("no tree could be built".into()))?;
    let record = TrainingRecord {
        prompts: data.sequences(),
        train_positions: train_positions.len(),
        heldout_positions: heldout_positions.len(),
        epochs: options.epochs,
        heldout_top1: trained.top1.clone(),
        heldout_top5: trained.top5.clone(),
        heldout_by_rank: trained.by_rank.clone(),
        heldout_loss: trained.loss,
        command: options.command.clone(),
    };
    let weights = HeadsWeights {
        blocks: heads.weights()?,
        root: heads.root_weights()?,
        path: heads.path_weights()?,
        projections: None,
        vocab_subset: vocab.subset.clone(),
        training: Some(record),
    };
    let encoding = HeadsEncoding {
        block_type: GGML_TYPE_F16,
        projection_type: GGML_TYPE_F16,
    };
    write_heads(&options.out, &base, &weights, &built.tree, encoding)?;
    Ok(TrainReport {
        out: options.out.clone(),
        prompts: data.sequences(),
        generated_tokens,
        train_positions: train_positions.len(),
        heldout_positions: heldout_positions.len(),
        vocabulary_rows: vocab.rows(),
        heldout_coverage,
        untrained,
        trained,
        tree: built.tree.paths().to_vec(),
        expected_tokens_per_step: built.expected_tokens,
        collect_seconds,
        train_seconds,
        file_bytes: std::fs::metadata(&options.out).map_or(0, |m| m.len()),
    })
}

/// Has the model answer the prompts `data` holds no answer to yet (answers come in prompt
/// order), adding their hidden states along the answers to `data` and to `save`.
fn collect_data(
    options: &TrainHeadsOptions,
    prompts: &[String],
    data: &mut Dataset,
    save: Option<&mut DataWriter>,
    progress: &mut dyn FnMut(TrainProgress),
) -> Result<(), TrainError> {
    let answered = data.sequences();
    if answered >= prompts.len() {
        return Ok(());
    }
    progress(TrainProgress::LoadingModel);
    let mut config = EngineConfig::new(&options.model_path);
    config.threads = options.threads;
    config.parallel = options.parallel;
    config.hidden_states = true;
    let engine = Engine::load(config)?;
    let collection = Collection {
        prompts,
        answered,
        max_tokens: options.max_tokens,
        in_flight: options.parallel * 2,
    };
    collect::collect(
        &engine,
        &collection,
        data,
        save,
        &options.stop,
        &mut |event| progress(TrainProgress::Collect(event)),
    )
}

#[cfg(test)]
mod prompt_file_tests {
    use super::*;

    fn refusal(path: &Path) -> String {
        match load_prompts(Some(path)) {
            Err(TrainError::Prompts { message, .. }) => message,
            other => panic!("{} was not refused: {other:?}", path.display()),
        }
    }

    #[test]
    fn prompt_files_are_read_one_prompt_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prompts.txt");
        std::fs::write(&file, "first\n\nsecond\n").unwrap();
        assert_eq!(load_prompts(Some(&file)).unwrap(), ["first", "second"]);
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO with no writer: opening it to read would wait for one.
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path in a folder of this test's.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert_eq!(refusal(&fifo), "not a regular file");
        assert_eq!(refusal(Path::new("/dev/zero")), "not a regular file");
        assert_eq!(refusal(dir.path()), "not a regular file");
        let large = dir.path().join("large.txt");
        let file = std::fs::File::create(&large).unwrap();
        file.set_len(MAX_PROMPTS_FILE_BYTES + 1).unwrap();
        assert_eq!(refusal(&large), "larger than 16 MiB");
        file.set_len(MAX_PROMPTS_FILE_BYTES).unwrap();
        assert!(load_prompts(Some(&large)).is_ok());
    }
}
