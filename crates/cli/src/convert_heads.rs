//! `medusa convert-heads`: imports a FasterDecoding/Medusa heads checkpoint (safetensors) as a
//! heads file for a GGUF model, optionally restricted to a corpus's most frequent tokens.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::matrix::{GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0};
use engine::medusa::convert::{base_identity, convert_checkpoint, frequent_tokens};
use engine::medusa::heads::HeadsEncoding;
use engine::TreeSpec;

#[derive(Args, Debug)]
pub struct ConvertHeadsArgs {
    /// FasterDecoding/Medusa heads checkpoint (safetensors).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The base GGUF model the heads were trained for (default: the default model).
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// Output heads file (conventionally `*.medusa.gguf`).
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Default token tree stored with the heads (default: mc_sim_7b_63 for 4+ heads, else a chain).
    #[arg(long)]
    pub tree: Option<String>,
    /// Encoding of each head's own vocabulary projection: q8_0, q4_k, f16 or f32.
    #[arg(long, default_value = "q8_0")]
    pub projection_type: String,
    /// Encoding of the residual blocks: f32, f16 or q8_0.
    #[arg(long, default_value = "f32")]
    pub block_type: String,
    /// Restrict the heads to the N tokens most frequent in --corpus (FR-Spec): the vocabulary
    /// projection then costs N/vocab of its full price.
    #[arg(long, requires = "corpus")]
    pub vocab_subset: Option<usize>,
    /// Text whose token frequencies pick the --vocab-subset tokens.
    #[arg(long, requires = "vocab_subset")]
    pub corpus: Option<PathBuf>,
}

fn ggml_type(name: &str) -> anyhow::Result<u32> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "f32" => GGML_TYPE_F32,
        "f16" => GGML_TYPE_F16,
        "q8_0" => GGML_TYPE_Q8_0,
        "q4_k" => GGML_TYPE_Q4_K,
        other => anyhow::bail!("unknown weight type '{other}'; use f32, f16, q8_0 or q4_k"),
    })
}

pub fn run(args: ConvertHeadsArgs) -> anyhow::Result<()> {
    let encoding = HeadsEncoding {
        block_type: ggml_type(&args.block_type)?,
        projection_type: ggml_type(&args.projection_type)?,
    };
    let tree = args
        .tree
        .as_deref()
        .map(TreeSpec::from_name_or_file)
        .transpose()?;
    let model = match args.model {
        Some(path) => path,
        None => crate::model_args::fetch_default()?,
    };
    let base = base_identity(&model)?;
    let vocab_subset = match (args.vocab_subset, &args.corpus) {
        (Some(n), Some(corpus)) => {
            let text = std::fs::read_to_string(corpus)
                .with_context(|| format!("reading {}", corpus.display()))?;
            Some(frequent_tokens(&model, &text, n)?)
        }
        _ => None,
    };
    let report = convert_checkpoint(
        &args.checkpoint,
        &base,
        &args.out,
        tree,
        encoding,
        vocab_subset,
    )?;
    println!(
        "{} -> {}: {} heads x {} blocks, projection {}{}, {:.1} MB",
        args.checkpoint.display(),
        args.out.display(),
        report.heads,
        report.layers_per_head,
        if report.shared_projection {
            "shared with the model"
        } else {
            "own"
        },
        report.vocab_subset.map_or_else(String::new, |n| format!(
            " over the {n} most frequent tokens"
        )),
        report.output_bytes as f64 / 1e6
    );
    Ok(())
}
