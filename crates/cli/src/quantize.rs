//! `medusa quantize`: requantizes a GGUF model with llama.cpp's quantizer, showing progress per
//! tensor.

use std::path::PathBuf;

use clap::Args;
use engine::QuantType;

use crate::progress::tensor_bar;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Input GGUF model (default: the default model).
    #[arg(long, short = 'm')]
    pub model: Option<PathBuf>,
    /// Output GGUF file.
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Target format: q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k_s/m/l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs, f16, bf16.
    #[arg(long = "type", short = 'q')]
    pub kind: String,
    /// Threads (default: one per core).
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let kind: QuantType = args.kind.parse()?;
    let input = match args.model {
        Some(path) => path,
        None => crate::model_args::fetch_default()?,
    };
    if args.out.exists() && !args.force {
        anyhow::bail!("{} exists; pass --force to replace it", args.out.display());
    }
    let threads = args.threads.unwrap_or_else(engine::default_threads);
    let report = engine::quantize(&input, &args.out, kind, threads, tensor_bar())?;
    eprintln!();
    println!(
        "{} -> {} ({}): {:.1} MB -> {:.1} MB in {:.1} s",
        report.input.display(),
        report.output.display(),
        report.file_type,
        report.input_bytes as f64 / 1e6,
        report.output_bytes as f64 / 1e6,
        report.seconds
    );
    Ok(())
}
