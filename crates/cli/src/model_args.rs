//! The options that pick and load a model (context, threads, GPU layers, Medusa heads and tree,
//! draft model), shared by the commands that load one, and `medusa info`, which prints what was
//! loaded.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::medusa::heads::HeadsPlacement;
use engine::speculative::tree_builder::Verdict;
use engine::{DraftPolicy, Engine, EngineConfig, GenerateRequest, TreeSpec};

/// Which model to load and how to size its context.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file (default: the default model, fetched on first use).
    #[arg(long, short = 'm', env = "MEDUSA_MODEL")]
    pub model: Option<PathBuf>,
    /// Decode threads (default: one per core).
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Context length per request in tokens (default: min(4096, the model's training context)).
    #[arg(long)]
    pub ctx_size: Option<u32>,
    /// Requests decoded together in one batch; the KV cache holds --ctx-size for each.
    #[arg(long, default_value_t = engine::DEFAULT_PARALLEL)]
    pub parallel: usize,
    /// Requests that may wait for a free slot before new ones are refused.
    #[arg(long, default_value_t = engine::DEFAULT_MAX_QUEUED)]
    pub max_queued: usize,
    /// Most tokens one embedding call may take (default: as many as the KV cache holds for
    /// all requests, --ctx-size times --parallel); larger calls are refused.
    #[arg(long, value_name = "TOKENS")]
    pub max_embedding_tokens: Option<usize>,
    /// Most prompt tokens decoded at once.
    #[arg(long, default_value_t = engine::DEFAULT_BATCH_SIZE)]
    pub batch_size: u32,
    /// Layers to put on the GPU, in a GPU build (default: all of them; 0 keeps the model on
    /// the CPU).
    #[arg(long, value_name = "N")]
    pub gpu_layers: Option<u32>,
    /// Medusa heads for this model (`*.medusa.gguf`), enabling --mode medusa (default: the
    /// heads shipped for the default model, when no --model is given).
    #[arg(long, env = "MEDUSA_HEADS")]
    pub heads: Option<PathBuf>,
    /// Load no Medusa heads, not even the default model's.
    #[arg(long, conflicts_with = "heads")]
    pub no_heads: bool,
    /// A smaller GGUF with this model's vocabulary that drafts for it (`--mode draft`, and part
    /// of auto), e.g. a lower-precision copy made with `medusa quantize`.
    #[arg(long, value_name = "FILE", env = "MEDUSA_DRAFT_MODEL")]
    pub draft_model: Option<PathBuf>,
    /// A feature drafter for this model (`medusa train-drafter`), enabling `--mode eagle` and
    /// drafting in auto.
    #[arg(long, value_name = "FILE", env = "MEDUSA_DRAFTER")]
    pub drafter: Option<PathBuf>,
    /// Where the heads run: `fastest` (both places timed when they load), `threads` (the
    /// engine's thread pool) or `ggml` (a ggml backend: the GPU the model went to, else ggml's
    /// CPU backend).
    #[arg(long, value_name = "PLACE", default_value = "fastest")]
    pub heads_on: HeadsPlacement,
    /// Token tree for Medusa mode. `auto` (the default): a tree sized for this machine from the
    /// heads' held-out accuracy (or stored with heads that record none), drafted as far as it
    /// pays. `tuned`, `mc_sim_7b_63`, `chain-N` or a JSON file of paths: that tree, drafted in
    /// full at every step whatever it costs, to watch what the heads guess (`tuned`: the fastest
    /// tree the tuner found for this machine, even when plain decoding is faster still). In auto
    /// mode a named tree is drafted in full beside lookup's continuation.
    #[arg(long, value_name = "TREE", default_value = "auto")]
    pub tree: String,
    /// Let llama.cpp pick its kernels by batch shape (faster prompts; greedy speculative and
    /// batched output may then part from plain decoding at near-ties). By default every
    /// decode sums in the same order, so that they are identical bit for bit.
    #[arg(long)]
    pub no_exact: bool,
    /// CPU kernels for decodes of several tokens (a drafted tree, several requests): `batched`
    /// unpacks each Q4_1 and Q8_0 weight block once for up to 4 tokens, with AVX-512 VNNI where
    /// the CPU has it; `batched-avx2` holds them to AVX2; `stock` is ggml's own, for
    /// comparison. All compute the same bits.
    #[arg(long, value_name = "KIND", default_value = "batched")]
    pub kernels: engine::CpuKernels,
    /// How sure auto drafting must be that a draft pays, in standard deviations below the
    /// acceptance seen so far: higher drafts later and less, 0 trusts the rate seen.
    #[arg(long, value_name = "Z", default_value_t = engine::DEFAULT_DRAFT_CONFIDENCE)]
    pub draft_confidence: f64,
    /// Contexts of each length lookup remembers from finished requests' text, for drafting in
    /// later ones (40 bytes each, bounded whatever is served); 0 remembers nothing.
    #[arg(long, value_name = "N", default_value_t = engine::DEFAULT_LOOKUP_MEMORY)]
    pub lookup_memory: usize,
    /// Load the model widened K times with zeros (as `medusa scale-model` makes it, beside the
    /// model on first use): the same tokens at a bigger model's cost, with its heads widened too.
    #[arg(long, value_name = "K")]
    pub wide: Option<u32>,
    /// With --wide, the widened model requantized to this format (e.g. q4_0).
    #[arg(long, value_name = "TYPE", requires = "wide")]
    pub wide_type: Option<String>,
}

impl ModelArgs {
    /// The model to load and its heads: the ones asked for (the default model's own heads
    /// when no model is given), widened when --wide asks.
    fn model_and_heads(&self) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
        let model = match &self.model {
            Some(path) => path.clone(),
            None => fetch_default()?,
        };
        let heads = self.heads_to_load()?;
        let Some(width) = self.wide else {
            return Ok((model, heads));
        };
        let kind = self
            .wide_type
            .as_deref()
            .map(str::parse::<engine::QuantType>)
            .transpose()?;
        let wide = crate::scale_model::ensure(&model, heads.as_deref(), width, kind, None, false)?;
        Ok((wide.model, wide.heads))
    }

    pub fn load(&self) -> anyhow::Result<Engine> {
        Ok(Engine::load(self.config()?)?)
    }

    /// The heads asked for, else the default model's own when no model is given.
    fn heads_to_load(&self) -> anyhow::Result<Option<PathBuf>> {
        Ok(match (&self.heads, &self.model) {
            _ if self.no_heads => None,
            (Some(heads), _) => Some(heads.clone()),
            (None, None) => {
                Some(models::default_heads_path().context("installing the default model's heads")?)
            }
            (None, Some(_)) => None,
        })
    }

    /// The engine configuration these options describe (fetching the default model if needed).
    pub fn config(&self) -> anyhow::Result<EngineConfig> {
        let (model, heads) = self.model_and_heads()?;
        self.config_for(model, heads)
    }

    /// The model these options name, where it is known without fetching it (the default model
    /// is fetched when it is loaded: `None`), its heads and the configuration to load it with.
    /// A widened model is made now.
    pub fn config_to_fetch(&self) -> anyhow::Result<(Option<PathBuf>, EngineConfig)> {
        if self.model.is_some() || self.wide.is_some() {
            let config = self.config()?;
            return Ok((Some(config.model_path.clone()), config));
        }
        Ok((
            None,
            self.config_for(PathBuf::new(), self.heads_to_load()?)?,
        ))
    }

    fn config_for(&self, model: PathBuf, heads: Option<PathBuf>) -> anyhow::Result<EngineConfig> {
        let mut config = EngineConfig::new(model);
        config.threads = self.threads;
        config.ctx_size = self.ctx_size;
        config.parallel = self.parallel;
        config.max_queued = self.max_queued;
        config.max_embedding_tokens = self.max_embedding_tokens;
        config.batch_size = self.batch_size;
        config.heads_placement = self.heads_on;
        config.exact = !self.no_exact;
        config.cpu_kernels = self.kernels;
        config.draft_confidence = self.draft_confidence;
        config.lookup_memory = self.lookup_memory;
        if let Some(layers) = self.gpu_layers {
            config.gpu_layers = layers;
        }
        config.heads_path = heads;
        config.draft_model_path = self.draft_model.clone();
        config.feature_drafter_path = self.drafter.clone();
        config.tree = match self.tree.trim() {
            // Known only once the heads are loaded and the costs measured: given per request.
            "auto" | TUNED => None,
            name => {
                Some(TreeSpec::from_name_or_file(name).with_context(|| format!("--tree {name}"))?)
            }
        };
        config.decode_costs_dir = models::decode_costs_dir().ok();
        Ok(config)
    }
}

const TUNED: &str = "tuned";

impl ModelArgs {
    /// What Medusa requests that name no tree draft: the tuned tree for `--tree tuned`, else
    /// what the engine was loaded with.
    pub fn default_draft(&self) -> DraftPolicy {
        if self.tree.trim() == TUNED {
            DraftPolicy::Tuned
        } else {
            DraftPolicy::Auto
        }
    }

    /// `request` with [`ModelArgs::default_draft`] where it is a Medusa or auto request drafting
    /// `auto`.
    pub fn with_default_draft(&self, mut request: GenerateRequest) -> GenerateRequest {
        if request.mode.drafts_trees() && request.draft == DraftPolicy::Auto {
            request.draft = self.default_draft();
        }
        request
    }
}

pub fn fetch_default() -> anyhow::Result<PathBuf> {
    models::default_model_path().context("fetching the default model")
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn info(args: InfoArgs) -> anyhow::Result<()> {
    let engine = args.model.load()?;
    let mut info = engine.info().clone();
    // Measured now if no earlier load kept this machine's decode costs for the model.
    info.drafting_outlook = engine.drafting_outlook()?;
    let info = &info;
    if args.json {
        println!("{}", serde_json::to_string_pretty(info)?);
    } else {
        println!("model        {}", info.name);
        println!("path         {}", info.path.display());
        println!("architecture {}", info.architecture);
        println!(
            "weights      {} ({:.1} MB)",
            info.file_type,
            info.file_size_bytes as f64 / 1e6
        );
        println!("parameters   {:.1} M", info.n_params as f64 / 1e6);
        println!(
            "layers       {}  embedding {}  vocabulary {}",
            info.n_layer, info.n_embd, info.n_vocab
        );
        println!(
            "context      {} per request (trained {})",
            info.n_ctx, info.n_ctx_train
        );
        println!(
            "threads      {}  parallel requests {}",
            info.threads, info.parallel
        );
        println!("compute      {}", info.compute.summary);
        println!(
            "sums         {}",
            if info.exact {
                "exact: greedy speculative and batched output is normal decoding's, bit for bit"
            } else {
                "by batch shape (--no-exact): outputs may part from normal decoding at near-ties"
            }
        );
        println!(
            "kernels      {} ({})",
            info.cpu_kernels.describe(),
            info.cpu_instruction_set
        );
        println!(
            "chat template {}",
            if info.has_chat_template { "yes" } else { "no" }
        );
        if let Some(draft) = &info.draft_model {
            println!(
                "draft model  {} ({}, {:.1} M parameters)",
                draft.name,
                draft.file_type,
                draft.n_params as f64 / 1e6
            );
            if let (Some(agreement), Some(ms)) = (draft.agreement, draft.ms_per_token) {
                println!(
                    "             agreed with the model on {:.0}% of its confident guesses at load; {ms:.1} ms per drafted token",
                    agreement * 100.0
                );
            }
        }
        if let Some(eagle) = &info.eagle {
            let measured: Vec<String> = eagle
                .heldout_tokens_per_step
                .iter()
                .map(|(nodes, tokens)| {
                    format!(
                        "{tokens:.2} with {nodes} node{}",
                        if *nodes == 1 { "" } else { "s" }
                    )
                })
                .collect();
            println!(
                "drafter      {} (a window of {}, {}); {:.2} ms per tree of 8 here",
                eagle.path.display(),
                eagle.window,
                eagle.vocab_subset.map_or_else(
                    || "all tokens".to_owned(),
                    |n| format!("{n} most frequent tokens")
                ),
                eagle.draft_ms
            );
            if !measured.is_empty() {
                println!(
                    "             tokens per step along held-out answers: {}",
                    measured.join(", ")
                );
            }
        }
        if let Some(heads) = &info.heads {
            let vocabulary = heads.vocab_subset.map_or_else(
                || "all tokens".to_owned(),
                |n| format!("{n} most frequent tokens"),
            );
            let projection = if heads.shared_projection {
                "shared with the model"
            } else {
                "own"
            };
            let input = match (heads.root_token_input, heads.path_input) {
                (_, true) => "hidden state, root token and drafted path",
                (true, false) => "hidden state and root token",
                (false, false) => "hidden state",
            };
            println!(
                "medusa heads {} x {} blocks reading the {input}, projection {} {projection}, {vocabulary}",
                heads.head_count, heads.layers_per_head, heads.projection_type
            );
            println!("heads run on {}", heads.compute.summary);
            if let Some(training) = &heads.training {
                use crate::figures::percents;
                println!(
                    "heads trained {} answers, {} positions, {} epochs; held-out top-1 % {}, top-5 % {}",
                    training.prompts,
                    training.train_positions,
                    training.epochs,
                    percents(&training.heldout_top1),
                    percents(&training.heldout_top5)
                );
            }
        }
        if let Some(outlook) = &info.drafting_outlook {
            println!("drafting     {}", outlook.explanation);
            println!("model size   {}", outlook.model_size);
            if let Some(note) = &outlook.format_note {
                println!("weights      {note}");
            }
        }
        if let Some(tree) = &info.medusa_tree {
            println!("medusa tree  {} nodes, depth {}", tree.len(), tree.depth());
        }
        if let Some(plan) = &info.medusa_plan {
            println!("medusa mode  {}", plan.decision);
            if let Some(costs) = &plan.decode_costs {
                println!("decode costs {}", costs.summary());
            }
            for f in &plan.forecasts {
                println!(
                    "  --tree {:<13} in full: about {:.2}x here ({:.2}x to {:.2}x, {}), {:.2} tokens per step, {:.1} ms per extra token",
                    f.name,
                    f.predicted_speedup,
                    f.speedup_low,
                    f.speedup_high,
                    verdict_words(f.verdict),
                    f.expected_tokens,
                    f.extra_token_ms
                );
            }
        }
    }
    Ok(())
}

fn verdict_words(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Faster => "faster",
        Verdict::Slower => "slower",
        Verdict::Uncertain => "uncertain: not drafted on",
    }
}
