//! What a line typed in `medusa chat` asks for: a message to the model, or a slash command.

use std::path::PathBuf;

use engine::GenerationMode;

#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// Text for the model.
    Message(String),
    Help,
    Quit,
    /// Forget the conversation, keep the system message.
    Reset,
    /// Show the system message (`None`) or replace it (an empty text removes it).
    System(Option<String>),
    Mode(GenerationMode),
    /// A tree name, rank paths or a tree file, as `--tree` takes them.
    Tree(String),
    Save(PathBuf),
}

pub const HELP: &str = "\
/help          these commands
/system TEXT   replace the system message (/system alone shows it, /system - removes it)
/mode NAME     normal, medusa, lookup, auto, draft or eagle
/tree NAME     the Medusa tree: auto, tuned, mc_sim_7b_63, chain-N or a JSON file of paths
/reset         start the conversation over (the system message stays)
/save FILE     write the conversation as JSON (or Markdown for a .md file)
/quit          leave (so do Ctrl-D, and Ctrl-C twice on an empty line)
//TEXT         send TEXT starting with one slash
Ctrl-C while an answer streams stops it and keeps what it said.";

/// Reads one typed line; `None` for a blank one. Slash commands are never sent to the model.
pub fn parse(line: &str) -> Option<Result<Line, String>> {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return None;
    }
    if let Some(text) = trimmed.strip_prefix("//") {
        return Some(Ok(Line::Message(format!("/{text}"))));
    }
    let Some(command) = trimmed.strip_prefix('/') else {
        return Some(Ok(Line::Message(line.trim_end().to_owned())));
    };
    let (name, argument) = match command.split_once(char::is_whitespace) {
        Some((name, rest)) => (name, rest.trim()),
        None => (command, ""),
    };
    let needs = |what: &str| Err(format!("/{name} needs {what}"));
    Some(match (name, argument) {
        ("help" | "?", _) => Ok(Line::Help),
        ("quit" | "exit", _) => Ok(Line::Quit),
        ("reset" | "clear", _) => Ok(Line::Reset),
        ("system", "") => Ok(Line::System(None)),
        ("system", "-") => Ok(Line::System(Some(String::new()))),
        ("system", text) => Ok(Line::System(Some(text.to_owned()))),
        ("mode", "") => needs("a mode: normal, medusa, lookup, auto, draft or eagle"),
        ("mode", mode) => mode
            .parse::<GenerationMode>()
            .map(Line::Mode)
            .map_err(|e| e.to_string()),
        ("tree", "") => needs("a tree: auto, tuned, mc_sim_7b_63, chain-N or a file"),
        ("tree", tree) => Ok(Line::Tree(tree.to_owned())),
        ("save", "") => needs("a file name"),
        ("save", file) => Ok(Line::Save(PathBuf::from(file))),
        _ => Err(format!("unknown command /{name}; /help lists them")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Line {
        parse(line).unwrap().unwrap()
    }

    fn err(line: &str) -> String {
        parse(line).unwrap().unwrap_err()
    }

    #[test]
    fn text_goes_to_the_model_and_commands_do_not() {
        assert_eq!(ok("Hello there  "), Line::Message("Hello there".into()));
        assert_eq!(
            ok("//etc is a folder"),
            Line::Message("/etc is a folder".into())
        );
        assert_eq!(parse("   "), None);
        assert_eq!(ok("/help"), Line::Help);
        assert_eq!(ok(" /quit "), Line::Quit);
        assert_eq!(ok("/reset"), Line::Reset);
    }

    #[test]
    fn commands_take_their_arguments() {
        assert_eq!(ok("/system"), Line::System(None));
        assert_eq!(ok("/system -"), Line::System(Some(String::new())));
        assert_eq!(
            ok("/system  Answer in French. "),
            Line::System(Some("Answer in French.".into()))
        );
        assert_eq!(ok("/mode lookup"), Line::Mode(GenerationMode::Lookup));
        assert_eq!(ok("/mode Medusa"), Line::Mode(GenerationMode::Medusa));
        assert_eq!(ok("/tree chain-2"), Line::Tree("chain-2".into()));
        assert_eq!(ok("/save talk.md"), Line::Save(PathBuf::from("talk.md")));
    }

    #[test]
    fn bad_commands_are_explained() {
        assert_eq!(
            err("/mode"),
            "/mode needs a mode: normal, medusa, lookup, auto, draft or eagle"
        );
        assert!(err("/mode fast").contains("unknown mode 'fast'"));
        assert_eq!(err("/save"), "/save needs a file name");
        assert_eq!(
            err("/frobnicate now"),
            "unknown command /frobnicate; /help lists them"
        );
    }
}
