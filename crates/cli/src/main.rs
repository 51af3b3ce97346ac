//! `medusa`: generate, chat, serve, benchmark, tune, train heads and quantize from the command line.

mod bench;
mod bench_args;
mod bench_report;
mod bench_totals;
mod chat;
mod convert_heads;
mod figures;
mod generate;
mod load_progress;
mod make_prompts;
mod model_args;
mod models_cmd;
mod progress;
mod quantize;
mod remote_bench;
mod sampling_args;
mod scale_model;
mod serve;
mod train_drafter;
mod train_heads;
mod tune;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "medusa",
    version,
    about = "Medusa Playground: local LLM generation with llama.cpp"
)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Generate text from one prompt, streamed to the terminal.
    Generate(generate::GenerateArgs),
    /// Chat with the model in the terminal (multi-turn).
    Chat(chat::ChatArgs),
    /// Measure generation speed against a bare llama.cpp decode loop.
    Bench(bench_args::BenchArgs),
    /// Requantize a GGUF model (e.g. Q4_1 to Q4_0) with llama.cpp's quantizer.
    Quantize(quantize::QuantizeArgs),
    /// Widen a model with zeros: the same tokens at a bigger model's cost (2-16x), with its heads.
    ScaleModel(scale_model::ScaleModelArgs),
    /// Import FasterDecoding/Medusa heads (safetensors) as a heads file for a GGUF model.
    ConvertHeads(convert_heads::ConvertHeadsArgs),
    /// Download the default model into the cache (if needed) and print its path.
    FetchModel,
    /// The models directory and a model hub: list, search, files, download, delete.
    Models(models_cmd::ModelsArgs),
    /// Print what a model is: architecture, size, weight format, context.
    Info(model_args::InfoArgs),
    /// Serve the HTTP API (OpenAI-compatible and the playground's own) with a run history.
    Serve(serve::ServeArgs),
    /// Measure the heads and this machine's decode costs, and pick the fastest Medusa tree.
    Tune(tune::TuneArgs),
    /// Train Medusa heads for a model on its own answers (self-distillation).
    TrainHeads(train_heads::TrainHeadsArgs),
    /// Train a feature-level drafter (one decoder layer, EAGLE-style) on collected answers.
    TrainDrafter(train_drafter::TrainDrafterArgs),
    /// Write training prompts made from templates (no network needed), one per line.
    MakePrompts(make_prompts::MakePromptsArgs),
}

fn main() -> std::process::ExitCode {
    // A grammar check started by this program runs here and exits; otherwise grammars are
    // checked in such children, which can be stopped.
    engine::serve_grammar_checks();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEDUSA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Commands::Generate(args) => generate::run(args),
        Commands::Chat(args) => chat::run(args),
        Commands::Bench(args) => match &args.endpoint {
            Some(endpoint) => remote_bench::run(endpoint, &args),
            None => bench::run(args),
        },
        Commands::Quantize(args) => quantize::run(args),
        Commands::ScaleModel(args) => scale_model::run(args),
        Commands::ConvertHeads(args) => convert_heads::run(args),
        Commands::FetchModel => {
            model_args::fetch_default().map(|path| println!("{}", path.display()))
        }
        Commands::Models(args) => models_cmd::run(args),
        Commands::Info(args) => model_args::info(args),
        Commands::Serve(args) => serve::run(args),
        Commands::Tune(args) => tune::run(args),
        Commands::TrainHeads(args) => train_heads::run(args),
        Commands::TrainDrafter(args) => train_drafter::run(args),
        Commands::MakePrompts(args) => make_prompts::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
