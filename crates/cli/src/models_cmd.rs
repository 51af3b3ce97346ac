//! `medusa models`: the models directory (list, delete) and a model hub (search, a repository's
//! files, download with progress, resume and checksum).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use models::Hub;

#[derive(Args)]
pub struct ModelsArgs {
    /// The models directory (default: the models cache, where `serve` and the app load from).
    #[arg(long, global = true, value_name = "DIR", env = models::MODELS_DIR_ENV)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<ModelsCommand>,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// The GGUF files in the models directory (the default when no command is given).
    List,
    /// Search the model hub (`HF_ENDPOINT`, else Hugging Face) for repositories with GGUF files;
    /// without a query, the suggested models.
    Search {
        query: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// A repository's GGUF files: size, weight format, checksum.
    Files { repo: String },
    /// Download a repository's file into the models directory, resuming an earlier attempt.
    Download { repo: String, file: String },
    /// Delete a model (or, with --partial, an unfinished download) from the models directory.
    Delete {
        file: String,
        #[arg(long)]
        partial: bool,
    },
}

pub fn run(args: ModelsArgs) -> anyhow::Result<()> {
    let dir = match args.dir {
        Some(dir) => dir,
        None => models::cache_dir()?,
    };
    match args.command.unwrap_or(ModelsCommand::List) {
        ModelsCommand::List => list(&dir),
        ModelsCommand::Delete { file, partial } => {
            models::delete_local_model(&dir, &file, partial)?;
            println!("Deleted {file}{}", if partial { " (partial)" } else { "" });
            Ok(())
        }
        online => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(hub_command(online, &dir))
        }
    }
}

fn list(dir: &std::path::Path) -> anyhow::Result<()> {
    let found = models::local_models(dir)?;
    println!("{}", dir.display());
    if found.is_empty() {
        println!("  no GGUF files yet: `medusa models search QUERY`, then `medusa models download REPO FILE`");
    }
    for m in found {
        let what = match (m.partial, m.heads) {
            (true, _) => "  partial: `medusa models download` resumes it",
            (_, true) => "  Medusa heads",
            _ => "",
        };
        println!(
            "  {:<56} {:>10} {:<8}{what}",
            m.file_name,
            human_bytes(m.size_bytes),
            m.quantization.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

async fn hub_command(command: ModelsCommand, dir: &std::path::Path) -> anyhow::Result<()> {
    let hub = Hub::from_env()?;
    match command {
        ModelsCommand::Search { query, limit } => {
            let repos = match query.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
                Some(query) => hub.search(query, limit).await?,
                None => {
                    println!("Suggested instruct models (sizes with `medusa models files REPO`):");
                    for s in models::SUGGESTED {
                        println!("  {:<48} {:>5} parameters  {}", s.repo, s.parameters, s.why);
                    }
                    return Ok(());
                }
            };
            if repos.is_empty() {
                println!("No GGUF repositories match on {}", hub.endpoint());
            }
            for r in repos {
                println!(
                    "  {:<56} {:>9} downloads {:>6} likes  {}",
                    r.id,
                    r.downloads,
                    r.likes,
                    r.license.as_deref().unwrap_or("licence not stated")
                );
            }
        }
        ModelsCommand::Files { repo } => {
            let listing = hub.files(&repo).await?;
            println!(
                "{} ({})",
                listing.repo,
                listing.license.as_deref().unwrap_or("licence not stated")
            );
            for f in listing.files {
                println!(
                    "  {:<56} {:>10} {:<8} {}{}",
                    f.path,
                    human_bytes(f.size_bytes),
                    f.quantization.as_deref().unwrap_or("-"),
                    f.sha256
                        .as_deref()
                        .map_or("no checksum", |s| &s[..12.min(s.len())]),
                    if f.split {
                        "  one part of a split model"
                    } else {
                        ""
                    }
                );
            }
        }
        ModelsCommand::Download { repo, file } => download(&hub, &repo, &file, dir).await?,
        ModelsCommand::List | ModelsCommand::Delete { .. } => unreachable!("handled offline"),
    }
    Ok(())
}

async fn download(hub: &Hub, repo: &str, path: &str, dir: &std::path::Path) -> anyhow::Result<()> {
    let file = hub.file(repo, path).await?;
    if file.split {
        anyhow::bail!(
            "{path} is one part of a model split over several files, which cannot be loaded here yet; choose a file that is whole"
        );
    }
    let bar = ProgressBar::new(file.size_bytes).with_style(
        ProgressStyle::with_template(
            "{msg} [{bar:32}] {bytes}/{total_bytes} {bytes_per_sec} {eta} left",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(file.file_name().to_owned());
    // Ctrl-C stops the transfer cleanly, keeping what arrived for the next attempt.
    let stop = Arc::new(AtomicBool::new(false));
    let on_ctrl_c = stop.clone();
    ctrlc::set_handler(move || on_ctrl_c.store(true, Ordering::SeqCst))
        .context("listening for Ctrl-C")?;
    let result = hub
        .download(&file, dir, |p| {
            if p.resumed_from > 0 && bar.position() == 0 {
                bar.println(format!("Resuming from {}", human_bytes(p.resumed_from)));
            }
            bar.set_position(p.downloaded);
            if stop.load(Ordering::SeqCst) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await;
    bar.finish_and_clear();
    match result {
        Ok(done) if !done.downloaded => println!("Already there: {}", done.path.display()),
        Ok(done) => println!(
            "Saved {} ({}{})",
            done.path.display(),
            human_bytes(file.size_bytes),
            if done.checksum_verified {
                ", SHA-256 checked"
            } else {
                ", no checksum listed"
            }
        ),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Sizes as people read them: 98.4 MB, 1.07 GB.
fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}
