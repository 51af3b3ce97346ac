//! Training on the real model with a tiny budget: the heads learn, the file they are written
//! to loads with the model, records how they were trained, and guesses at inference what they
//! guessed in training.

use engine::medusa::accuracy::HeadAccuracy;
use engine::{ChatMessage, Engine, EngineConfig, GenerateRequest, Prompt, SamplingParams};
use training::{
    load_prompts, train_heads, CollectEvent, TrainError, TrainHeadsOptions, TrainProgress,
};

#[test]
fn a_tiny_training_run_beats_untrained_heads_and_writes_a_loadable_file() {
    let model = models::default_model_path().expect("default model");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.medusa.gguf");
    let mut options = TrainHeadsOptions::new(&model, &out);
    options.prompts = load_prompts(None).unwrap();
    options.samples = Some(24);
    options.heads = 2;
    options.max_tokens = 48;
    options.epochs = 4;
    options.batch_size = 32;
    options.learning_rate = 5e-3;
    options.vocab_subset = Some(2048);
    options.heldout_every = 4;
    options.tree_nodes = 6;
    options.parallel = 6;
    options.command = "medusa train-heads (test)".into();
    let mut epochs = 0;
    let report = train_heads(&options, &mut |event| {
        if let TrainProgress::Train(training::TrainEvent::Evaluated { .. }) = event {
            epochs += 1
        }
    })
    .unwrap();
    assert_eq!(epochs, 4);
    assert_eq!(report.prompts, 24);
    assert!(
        report.heldout_positions > 100 && report.train_positions > 3 * report.heldout_positions / 2
    );
    assert!(
        report.trained.loss < report.untrained.loss,
        "held-out loss {} -> {}",
        report.untrained.loss,
        report.trained.loss
    );
    let top5 = |e: &training::Evaluation| e.top5.iter().sum::<f64>();
    assert!(
        top5(&report.trained) > top5(&report.untrained),
        "top-5 {:?} -> {:?}",
        report.untrained.top5,
        report.trained.top5
    );
    assert_eq!(report.tree.len(), 6);

    let mut config = EngineConfig::new(&model);
    config.heads_path = Some(out.clone());
    let engine = Engine::load(config).unwrap();
    let heads = engine.info().heads.clone().unwrap();
    assert_eq!(heads.head_count, 2);
    assert_eq!(heads.vocab_subset, Some(2048));
    assert!(heads.root_token_input);
    let record = heads.training.clone().expect("training record");
    assert_eq!(record.heldout_top1, report.trained.top1);
    assert_eq!(record.command, "medusa train-heads (test)");
    assert_eq!(heads.default_tree.paths(), &report.tree[..]);

    // The engine's heads (f16 weights, the root read at draft time) guess the held-out answers
    // as the trainer scored them. Answered one at a time here and in a batch there, a few
    // answers may differ in a near-tie, so positions and hits agree closely, not exactly.
    let mut measured = HeadAccuracy::new(2, 1);
    for prompt in options.prompts[..24].iter().skip(3).step_by(4) {
        let chat = Prompt::Chat(vec![ChatMessage::new("user", prompt)]);
        let answer = engine
            .generate(
                GenerateRequest::new(chat.clone(), options.max_tokens)
                    .with_sampling(SamplingParams::greedy()),
            )
            .unwrap()
            .wait()
            .unwrap();
        measured.absorb(&engine.measure_heads(chat, answer.token_ids, 1).unwrap());
    }
    for (engine_positions, trainer_positions) in
        measured.positions.iter().zip(&report.trained.positions)
    {
        let (a, b) = (*engine_positions as f64, *trainer_positions as f64);
        assert!((a - b).abs() <= 0.1 * b, "positions {a} vs {b}");
    }
    for (engine_top1, trainer_top1) in measured.top1().iter().zip(&report.trained.top1) {
        assert!(
            (engine_top1 - trainer_top1).abs() < 0.05,
            "engine top-1 {engine_top1} vs trainer {trainer_top1}"
        );
    }
}

#[test]
fn bad_options_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut options =
        TrainHeadsOptions::new(dir.path().join("missing.gguf"), dir.path().join("h.gguf"));
    options.prompts = vec!["a".into(), "b".into()];
    options.heads = 0;
    let err = train_heads(&options, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("heads"), "{err}");
    options.heads = 2;
    let err = train_heads(&options, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("held out"), "{err}");
    options.prompts = (0..20).map(|i| format!("prompt {i}")).collect();
    let err = train_heads(&options, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("missing.gguf"), "{err}");
    assert!(!dir.path().join("h.gguf").exists());
}

/// A collection stopped part-way keeps its answers and continues from them; heads trained from
/// the finished data file alone (as `medusa train-heads --data` does) are the same heads.
#[test]
fn a_stopped_collection_resumes_and_its_data_trains_the_same_heads() {
    let model = models::default_model_path().expect("default model");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("answers.data");
    let mut options = TrainHeadsOptions::new(&model, dir.path().join("a.medusa.gguf"));
    options.prompts = load_prompts(None).unwrap();
    options.samples = Some(12);
    options.heads = 2;
    options.max_tokens = 24;
    options.epochs = 2;
    options.vocab_subset = Some(512);
    options.heldout_every = 4;
    options.parallel = 2;
    options.data = Some(data.clone());

    let stop = options.stop.clone();
    let stopped = train_heads(&options, &mut |event| {
        if let TrainProgress::Collect(CollectEvent { done: 3, .. }) = event {
            stop.raise();
        }
    });
    assert!(matches!(stopped, Err(TrainError::Cancelled)), "{stopped:?}");
    assert!(!data.exists() && data.with_extension("partial").exists());

    options.stop = Default::default();
    let (mut resumed_from, mut first_collected) = (None, None);
    let resumed = train_heads(&options, &mut |event| match event {
        TrainProgress::LoadedData { texts, .. } => resumed_from = Some(texts),
        TrainProgress::Collect(c) => {
            first_collected.get_or_insert(c.done);
        }
        _ => {}
    })
    .unwrap();
    // Stopped right after the third answer: three are kept, and the fourth is collected next.
    assert_eq!((resumed_from, first_collected), (Some(3), Some(4)));
    assert_eq!(resumed.prompts, 12);
    assert!(data.exists() && !data.with_extension("partial").exists());

    options.out = dir.path().join("b.medusa.gguf");
    let mut collected = false;
    let again = train_heads(&options, &mut |event| {
        collected |= matches!(event, TrainProgress::Collect(_));
    })
    .unwrap();
    assert!(!collected, "trained from the data file");
    assert_eq!(again.generated_tokens, resumed.generated_tokens);
    assert_eq!(again.trained.top1, resumed.trained.top1);
    assert_eq!(again.trained.loss, resumed.trained.loss);
}
