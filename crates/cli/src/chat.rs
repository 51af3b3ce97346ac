use std::io::{BufRead, IsTerminal, Write};

use clap::Args;
use engine::{ChatMessage, GenerateRequest, Prompt};

use crate::generate::{stream_to_terminal, SpeculativeArgs};
use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// System message for the whole conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens per answer.
    #[arg(long, short = 'n', default_value_t = 512)]
    pub max_tokens: u32,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub speculative: SpeculativeArgs,
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    let engine = args.model.load()?;
    let info = engine.info();
    eprintln!(
        "{} ({}, {} threads). Type a message; /reset starts over, /quit or Ctrl-D leaves.",
        info.name, info.file_type, info.threads
    );
    let mut history: Vec<ChatMessage> = args
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s))
        .collect();
    let interactive = std::io::stdin().is_terminal();
    let mut lines = std::io::stdin().lock().lines();
    loop {
        if interactive {
            eprint!("\n> ");
            std::io::stderr().flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        match line.trim() {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                history.retain(|m| m.role == "system");
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let request = args.model.with_default_draft(
            args.speculative.apply(
                GenerateRequest::new(Prompt::Chat(history.clone()), args.max_tokens)
                    .with_sampling(args.sampling.params()),
            ),
        );
        let answer = engine
            .generate(request)
            .map_err(anyhow::Error::from)
            .and_then(|stream| stream_to_terminal(stream, false));
        match answer {
            Ok(summary) => history.push(ChatMessage::new("assistant", summary.text)),
            Err(err) => {
                // Keep the conversation usable: drop the turn that failed.
                history.pop();
                eprintln!("error: {err:#}");
            }
        }
    }
    Ok(())
}
