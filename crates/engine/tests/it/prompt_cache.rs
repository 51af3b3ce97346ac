//! The prompt cache on the real model: a follow-up turn reuses the conversation's cells and
//! answers as a cold start would; under pressure, cached cells make way for running requests.

use engine::{ChatMessage, Engine, EngineConfig, GenerationMode, Prompt};

use crate::common::{self, assert_identical, greedy, model_path, run};

fn conversation(first_answer: &str) -> Prompt {
    Prompt::Chat(vec![
        ChatMessage::new("user", "Name three colours of the rainbow."),
        ChatMessage::new("assistant", first_answer),
        ChatMessage::new("user", "And three animals that live in the sea?"),
    ])
}

#[test]
fn a_follow_up_reuses_the_conversation_and_answers_as_a_cold_start_does() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 1;
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    // The model as its own draft model, so that draft mode follows up from the cache too.
    config.draft_model_path = Some(model_path());
    // And a feature drafter, for eagle mode.
    config.feature_drafter_path = Some(common::random_drafter().clone());
    config.decode_costs = Some(common::cpu_decode_costs());
    let engine = Engine::load(config).expect("model loads");
    let first = Prompt::Chat(vec![ChatMessage::new(
        "user",
        "Name three colours of the rainbow.",
    )]);
    for mode in GenerationMode::ALL {
        let turn = run(&engine, greedy(first.clone(), 24, mode));
        let follow_up = conversation(&turn.text);
        let warm = run(&engine, greedy(follow_up.clone(), 24, mode));
        // At least the first turn's prompt and most of its answer were not decoded again.
        assert!(
            warm.cached_prompt_tokens > turn.prompt_tokens,
            "{mode}: {} cached of {} (first turn: {} prompt tokens)",
            warm.cached_prompt_tokens,
            warm.prompt_tokens,
            turn.prompt_tokens
        );
        assert!(warm.cached_prompt_tokens < warm.prompt_tokens);
        // The same request again: all but its last prompt token come from the cache.
        let again = run(&engine, greedy(follow_up.clone(), 24, mode));
        assert_eq!(
            again.cached_prompt_tokens,
            again.prompt_tokens - 1,
            "{mode}"
        );
        // A cold start decodes everything and answers the same.
        let mut cold = greedy(follow_up.clone(), 24, mode);
        cold.cache_prompt = false;
        let cold = run(&engine, cold);
        assert_eq!(cold.cached_prompt_tokens, 0, "{mode}");
        for (label, cached) in [("cached", &warm), ("cached again", &again)] {
            assert_identical(
                &cold.token_ids,
                &cached.token_ids,
                &format!("{mode} {label}"),
            );
        }
    }
}

#[test]
fn cached_cells_make_way_for_running_requests() {
    let mut config = EngineConfig::new(model_path());
    config.parallel = 2;
    config.ctx_size = Some(256);
    let engine = Engine::load(config).expect("model loads");
    let prompts: Vec<Prompt> = (0..5)
        .map(|i| {
            Prompt::Chat(vec![ChatMessage::new(
                "user",
                format!("Story number {i}: tell a short tale about a lighthouse."),
            )])
        })
        .collect();
    // One at a time: each finished request is kept, the oldest giving way (two slots, so at
    // most two entries while nothing runs).
    for prompt in &prompts {
        run(&engine, greedy(prompt.clone(), 16, GenerationMode::Normal));
        assert!(engine.metrics().cached_sequences <= 2);
    }
    assert_eq!(engine.metrics().cached_sequences, 2);
    let kept = run(
        &engine,
        greedy(prompts[4].clone(), 16, GenerationMode::Normal),
    );
    assert_eq!(kept.cached_prompt_tokens, kept.prompt_tokens - 1);
    // Two long requests together need nearly every cell (2 x 256): the cache empties for them,
    // and both finish, where the cached cells left in place would have filled the KV cache.
    let streams: Vec<_> = (0..2)
        .map(|i| {
            let prompt = Prompt::Chat(vec![ChatMessage::new(
                "user",
                format!("Write a long essay number {i} about the sea."),
            )]);
            engine
                .generate(greedy(prompt, 210, GenerationMode::Normal))
                .expect("accepted")
        })
        .collect();
    for stream in streams {
        let summary = stream.wait().expect("finished");
        assert!(summary.tokens_generated > 0);
    }
    // Nothing leaked: once idle, only the cache holds cells, and the stories are gone from it.
    assert!(engine.metrics().cached_sequences <= 2);
    assert_eq!(engine.metrics().idle_sequences_in_kv, 0);
    let gone = run(
        &engine,
        greedy(prompts[3].clone(), 16, GenerationMode::Normal),
    );
    assert!(
        gone.cached_prompt_tokens < gone.prompt_tokens - 1,
        "{} of {}",
        gone.cached_prompt_tokens,
        gone.prompt_tokens
    );
}
