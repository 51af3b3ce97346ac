//! Training on the real model with a tiny budget: the heads learn, the file they are written
//! to loads with the model and records how they were trained.

use engine::{Engine, EngineConfig};
use training::{load_prompts, train_heads, TrainHeadsOptions, TrainProgress};

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
    let record = heads.training.expect("training record");
    assert_eq!(record.heldout_top1, report.trained.top1);
    assert_eq!(record.command, "medusa train-heads (test)");
    assert_eq!(heads.default_tree.paths(), &report.tree[..]);
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
    assert!(err.to_string().contains("hold out"), "{err}");
    options.prompts = (0..20).map(|i| format!("prompt {i}")).collect();
    let err = train_heads(&options, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("missing.gguf"), "{err}");
    assert!(!dir.path().join("h.gguf").exists());
}
