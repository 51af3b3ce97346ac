//! `medusa chat`: a conversation in the terminal. Lines are edited and recalled with rustyline;
//! Ctrl-C stops an answer and keeps what it said; slash commands change the conversation's
//! settings and are never sent to the model.

mod backend;
mod commands;
mod terminal;

use std::io::{BufRead, IsTerminal};
use std::path::Path;

use anyhow::Context;
use backend::ChatBackend;
use clap::Args;
use engine::{
    ChatMessage, DraftPolicy, GenerateRequest, GenerationMode, Prompt, SamplingParams, StopReason,
    TreeSpec,
};
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::generate::{stream_to_terminal, SpeculativeArgs};
use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;
use commands::{Line, HELP};
use terminal::{Interrupts, QuietInput};

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
    /// Chat with a remote OpenAI-compatible engine's model instead of loading one here, e.g.
    /// `lab=http://gpu-box:8000` or `lab=http://gpu-box:8000,KEY`.
    #[arg(long, value_name = "NAME=URL[,KEY]")]
    pub remote: Option<remote::RemoteSpec>,
    /// The remote engine's model (default: the first it lists).
    #[arg(long, value_name = "MODEL", requires = "remote")]
    pub remote_model: Option<String>,
    /// Let the remote engine have a link-local or cloud metadata address (refused by default).
    #[arg(long, requires = "remote")]
    pub allow_link_local_remotes: bool,
}

/// The conversation and what `/mode` and `/tree` changed.
struct Conversation {
    system: Option<String>,
    turns: Vec<ChatMessage>,
    mode: GenerationMode,
    tree: DraftPolicy,
}

impl Conversation {
    fn messages(&self) -> Vec<ChatMessage> {
        let system = self.system.iter().map(|s| ChatMessage::new("system", s));
        system.chain(self.turns.iter().cloned()).collect()
    }
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    // Refuse out-of-range settings before the model loads (a flag is checked against the
    // playground's chat default here, against the model's own defaults once it is loaded).
    args.sampling
        .params(&SamplingParams::chat_default())
        .validate()?;
    let backend = match args.remote.clone() {
        Some(spec) => ChatBackend::remote(
            spec,
            args.remote_model.clone(),
            remote::RemoteAccess {
                allow_link_local: args.allow_link_local_remotes,
            },
        )?,
        None => ChatBackend::Local(Box::new(args.model.load()?)),
    };
    args.sampling
        .params(&backend.sampling_defaults())
        .validate()?;
    eprintln!(
        "{}. Type a message; /help lists the commands, /quit or Ctrl-D leaves.",
        backend.describe()
    );
    // A remote engine of unknown kind decodes plainly unless asked for a mode.
    let default_mode = if backend.is_remote() {
        GenerationMode::Normal
    } else {
        GenerationMode::Auto
    };
    let mut conversation = Conversation {
        system: args.system.clone(),
        turns: Vec::new(),
        mode: args.speculative.mode.unwrap_or(default_mode),
        tree: args.model.default_draft(),
    };
    let interrupts = Interrupts::install()?;
    let mut input = Input::new()?;
    while let Some(line) = input.next_line()? {
        let line = match commands::parse(&line) {
            None => continue,
            Some(Ok(line)) => line,
            Some(Err(message)) => {
                eprintln!("{message}");
                continue;
            }
        };
        match line {
            Line::Message(text) => {
                conversation.turns.push(ChatMessage::new("user", text));
                answer(&backend, &args, &mut conversation, &interrupts);
            }
            Line::Help => eprintln!("{HELP}"),
            Line::Quit => break,
            Line::Reset => {
                conversation.turns.clear();
                eprintln!("(conversation cleared)");
            }
            Line::System(None) => match &conversation.system {
                Some(system) => eprintln!("system: {system}"),
                None => eprintln!("(no system message)"),
            },
            Line::System(Some(text)) => {
                conversation.system = (!text.is_empty()).then_some(text);
                eprintln!(
                    "(system message {})",
                    if conversation.system.is_some() {
                        "set"
                    } else {
                        "removed"
                    }
                );
            }
            Line::Mode(mode) => match backend.mode_problem(mode) {
                Some(problem) => eprintln!("{problem}"),
                None => {
                    conversation.mode = mode;
                    eprintln!("(mode: {mode})");
                }
            },
            Line::Tree(_) if backend.is_remote() => {
                eprintln!(
                    "trees are for a model loaded here; the remote engine drafts as it was started"
                );
            }
            Line::Tree(name) => match tree_policy(&name) {
                Ok(policy) => {
                    conversation.tree = policy;
                    eprintln!("(tree for medusa and auto modes: {name})");
                }
                Err(err) => eprintln!("{err:#}"),
            },
            Line::Save(path) => match save(&path, &backend.name(), &conversation.messages()) {
                Ok(()) => eprintln!("(saved to {})", path.display()),
                Err(err) => eprintln!("error: {err:#}"),
            },
        }
    }
    Ok(())
}

/// Streams the model's answer to the last user turn and keeps it, even when Ctrl-C stopped it.
fn answer(
    backend: &ChatBackend,
    args: &ChatArgs,
    conversation: &mut Conversation,
    interrupts: &Interrupts,
) {
    let request = GenerateRequest::new(Prompt::Chat(conversation.messages()), args.max_tokens)
        .with_sampling(args.sampling.params(&backend.sampling_defaults()));
    let request = if backend.is_remote() {
        // Draft settings are the remote engine's own.
        request.with_mode(conversation.mode)
    } else {
        let mut request = args.speculative.apply(request, conversation.mode);
        if request.mode.drafts_trees() && request.draft == DraftPolicy::Auto {
            request.draft = conversation.tree.clone();
        }
        request
    };
    let streamed = backend.generate(request).and_then(|stream| {
        let _quiet = QuietInput::new();
        interrupts.during(stream.canceller(), || stream_to_terminal(stream, false))
    });
    match streamed {
        Ok(summary) => {
            if summary.stop_reason == StopReason::Cancelled {
                eprintln!("(stopped: the answer so far stays in the conversation)");
            }
            conversation
                .turns
                .push(ChatMessage::new("assistant", summary.text));
        }
        Err(err) => {
            // Keep the conversation usable: drop the turn that failed.
            conversation.turns.pop();
            eprintln!("error: {err:#}");
        }
    }
}

/// `/tree`'s argument as a request's draft policy.
fn tree_policy(name: &str) -> anyhow::Result<DraftPolicy> {
    Ok(match name {
        "auto" => DraftPolicy::Auto,
        "tuned" => DraftPolicy::Tuned,
        name => DraftPolicy::Tree(TreeSpec::from_name_or_file(name)?),
    })
}

/// Writes the conversation: Markdown for a `.md` file, JSON otherwise.
fn save(path: &Path, model: &str, messages: &[ChatMessage]) -> anyhow::Result<()> {
    let text = if path.extension().is_some_and(|e| e == "md") {
        let mut text = format!("# Conversation with {model}\n");
        for m in messages {
            text.push_str(&format!("\n**{}**\n\n{}\n", m.role, m.content));
        }
        text
    } else {
        serde_json::to_string_pretty(&serde_json::json!({"model": model, "messages": messages}))?
    };
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Typed lines: edited with history on a terminal, read plainly from a pipe.
enum Input {
    Editor {
        /// Boxed: with the typed-ahead input it keeps, it is far larger than a pipe's reader.
        editor: Box<DefaultEditor>,
        /// Ctrl-C on the line before: a second one leaves.
        interrupted: bool,
    },
    Piped(std::io::Lines<std::io::StdinLock<'static>>),
}

impl Input {
    fn new() -> anyhow::Result<Self> {
        if std::io::stdin().is_terminal() {
            Ok(Self::Editor {
                editor: Box::new(DefaultEditor::new().context("starting the line editor")?),
                interrupted: false,
            })
        } else {
            Ok(Self::Piped(std::io::stdin().lock().lines()))
        }
    }

    /// The next line, `None` at the end of input.
    fn next_line(&mut self) -> anyhow::Result<Option<String>> {
        match self {
            Self::Piped(lines) => Ok(lines.next().transpose()?),
            Self::Editor {
                editor,
                interrupted,
            } => loop {
                eprintln!();
                match editor.readline("> ") {
                    Ok(line) => {
                        *interrupted = false;
                        if !line.trim().is_empty() {
                            let _ = editor.add_history_entry(line.as_str());
                        }
                        return Ok(Some(line));
                    }
                    Err(ReadlineError::Interrupted) if !*interrupted => {
                        *interrupted = true;
                        eprintln!("(Ctrl-C again to leave, or /quit)");
                    }
                    Err(ReadlineError::Interrupted | ReadlineError::Eof) => return Ok(None),
                    Err(err) => return Err(err).context("reading the terminal"),
                }
            },
        }
    }
}
