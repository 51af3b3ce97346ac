//! `medusa scale-model`, and `--wide K` on the commands that load a model: the default model
//! (or another llama model) widened with zeros to a bigger model's cost, writing the same tokens,
//! with its heads widened to match. Files are made once, beside the model, and reused.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use engine::QuantType;

use crate::progress::tensor_bar;

#[derive(Args, Debug)]
pub struct ScaleModelArgs {
    /// How many times wider: 4 costs what a 1.8B model does for the default model, 8 about a
    /// 7B one. 4 and 16 keep every value bit for bit; 2 and 8 round the norms slightly.
    #[arg(long, default_value_t = 4)]
    pub width: u32,
    /// Requantize the widened model to this format (e.g. q4_0, whose CPU kernels batch
    /// better than q4_1's). Its tokens are then its own, no longer the input's.
    #[arg(long = "type", short = 'q')]
    pub kind: Option<String>,
    /// The model to widen (default: the default model).
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// Heads to widen with it (default: the default model's, when no --model is given).
    #[arg(long)]
    pub heads: Option<PathBuf>,
    /// Where to write (default: beside the model).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Write the files again even if they exist.
    #[arg(long)]
    pub force: bool,
}

/// A widened model and its widened heads, if it has heads.
pub struct WideFiles {
    pub model: PathBuf,
    pub heads: Option<PathBuf>,
}

pub fn run(args: ScaleModelArgs) -> anyhow::Result<()> {
    let kind = args
        .kind
        .as_deref()
        .map(str::parse::<QuantType>)
        .transpose()?;
    let (model, heads) = match args.model {
        Some(model) => (model, args.heads),
        None => (
            models::default_model_path().context("fetching the default model")?,
            Some(match args.heads {
                Some(heads) => heads,
                None => models::default_heads_path().context("installing the default heads")?,
            }),
        ),
    };
    let files = ensure(
        &model,
        heads.as_deref(),
        args.width,
        kind,
        args.out_dir.as_deref(),
        args.force,
    )?;
    println!("model {}", files.model.display());
    if let Some(heads) = files.heads {
        println!("heads {}", heads.display());
    }
    Ok(())
}

/// The widened files for `model` (and `heads`), made now unless they exist (or `force`).
pub fn ensure(
    model: &Path,
    heads: Option<&Path>,
    width: u32,
    kind: Option<QuantType>,
    out_dir: Option<&Path>,
    force: bool,
) -> anyhow::Result<WideFiles> {
    let dir = match out_dir {
        Some(dir) => dir.to_path_buf(),
        None => model.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let file_name = model.file_name().unwrap_or_default().to_string_lossy();
    let stem = file_name.strip_suffix(".gguf").unwrap_or(&file_name);
    let wide_stem = match kind {
        Some(kind) => format!("{stem}.wide{width}.{}", kind.name()),
        None => format!("{stem}.wide{width}"),
    };
    let wide_model = dir.join(format!("{wide_stem}.gguf"));
    if force || !wide_model.exists() {
        let widened = match kind {
            Some(_) => dir.join(format!("{stem}.wide{width}.gguf.unquantized")),
            None => wide_model.clone(),
        };
        eprintln!("widening {}", model.display());
        let report = engine::widen_model(model, &widened, width, tensor_bar());
        eprintln!();
        let report = report?;
        eprintln!(
            "{} -> {}: {:.0}M -> {:.0}M parameters, {:.1} GB{}",
            model.display(),
            widened.display(),
            report.parameters_before as f64 / 1e6,
            report.parameters_after as f64 / 1e6,
            report.bytes as f64 / 1e9,
            if report.bit_exact {
                ", the same values bit for bit"
            } else {
                ", the same values up to rounding in the norms"
            }
        );
        if let Some(kind) = kind {
            eprintln!("requantizing to {}", kind.name());
            let quantized = engine::quantize(
                &widened,
                &wide_model,
                kind,
                engine::default_threads(),
                tensor_bar(),
            );
            eprintln!();
            let _ = std::fs::remove_file(&widened);
            quantized?;
        }
    }
    let wide_heads = match heads {
        Some(heads) => {
            let path = dir.join(format!("{wide_stem}.medusa.gguf"));
            if force || !path.exists() {
                engine::medusa::heads::widen_heads(heads, &path, width, |_, _| {})
                    .with_context(|| format!("widening the heads {}", heads.display()))?;
            }
            Some(path)
        }
        None => None,
    };
    Ok(WideFiles {
        model: wide_model,
        heads: wide_heads,
    })
}
