//! Training the feature drafter on the real model's answers with a tiny budget: it learns, its
//! file loads beside the model and records what its trees reached, and a stop is a clean stop.

use engine::{Engine, EngineConfig};
use training::{
    load_prompts, train_feature_drafter, train_heads, FeatureProgress, FeatureTrainOptions,
    StopFlag, TrainError, TrainHeadsOptions,
};

/// The model's answers to a few prompts, with the hidden states behind them, in `dir`.
fn collected(dir: &std::path::Path) -> std::path::PathBuf {
    let model = models::default_model_path().expect("default model");
    let data = dir.join("answers.data");
    let mut options = TrainHeadsOptions::new(&model, dir.join("unused.medusa.gguf"));
    options.prompts = load_prompts(None).unwrap();
    options.samples = Some(24);
    options.heads = 1;
    options.max_tokens = 48;
    options.epochs = 1;
    options.vocab_subset = Some(512);
    options.parallel = 6;
    options.data = Some(data.clone());
    train_heads(&options, &mut |_| {}).unwrap();
    data
}

fn options(dir: &std::path::Path, data: std::path::PathBuf) -> FeatureTrainOptions {
    FeatureTrainOptions {
        model_path: models::default_model_path().expect("default model"),
        out: dir.join("tiny.eagle.gguf"),
        data,
        eval_data: None,
        window: 4,
        levels: 2,
        epochs: 4,
        batch_answers: 3,
        learning_rate: 3e-3,
        weight_decay: 0.0,
        vocab_subset: Some(1024),
        heldout_every: 4,
        tree_sizes: vec![1, 4],
        measured_answers: 3,
        threads: 2,
        seed: 1,
        command: "medusa train-drafter (test)".into(),
        stop: StopFlag::default(),
    }
}

#[test]
fn a_tiny_training_run_beats_the_untrained_drafter_and_writes_a_loadable_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = collected(dir.path());
    let options = options(dir.path(), data);
    let mut evaluated = 0;
    let report = train_feature_drafter(&options, &mut |event| {
        evaluated += usize::from(matches!(event, FeatureProgress::Evaluated { .. }))
    })
    .unwrap();
    assert_eq!(evaluated, 5, "untrained, then each epoch");
    assert_eq!(report.answers, 24);
    assert!(
        report.trained.loss < report.untrained.loss,
        "held-out loss {} -> {}",
        report.untrained.loss,
        report.trained.loss
    );
    let top1 = |e: &training::FeatureEvaluation| e.top1.iter().sum::<f64>();
    assert!(
        top1(&report.trained) > top1(&report.untrained),
        "top-1 {:?} -> {:?}",
        report.untrained.top1,
        report.trained.top1
    );
    let sizes: Vec<usize> = report.heldout_trees.iter().map(|m| m.max_nodes).collect();
    assert_eq!(sizes, vec![1, 4]);
    for measured in &report.heldout_trees {
        assert!(measured.positions > 50, "{measured:?}");
        assert!(
            (1.0..=2.0).contains(&measured.tokens_per_step),
            "{measured:?}"
        );
    }
    assert!(report.heldout_trees[1].tokens_per_step >= report.heldout_trees[0].tokens_per_step);

    let mut config = EngineConfig::new(&options.model_path);
    config.feature_drafter_path = Some(options.out.clone());
    let engine = Engine::load(config).unwrap();
    let info = engine.info().eagle.clone().expect("the drafter loaded");
    assert_eq!(info.window, 4);
    assert_eq!(info.vocab_subset, Some(1024));
    let recorded: Vec<(usize, f64)> = report
        .heldout_trees
        .iter()
        .map(|m| (m.max_nodes, m.tokens_per_step))
        .collect();
    assert_eq!(info.heldout_tokens_per_step, recorded);
}

#[test]
fn a_stopped_run_writes_nothing_and_bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = options(dir.path(), dir.path().join("missing.data"));
    bad.window = 0;
    let refused = train_feature_drafter(&bad, &mut |_| {}).unwrap_err();
    assert!(refused.to_string().contains("window"), "{refused}");
    bad.window = 4;
    let missing = train_feature_drafter(&bad, &mut |_| {}).unwrap_err();
    assert!(missing.to_string().contains("missing.data"), "{missing}");

    let data = collected(dir.path());
    let options = options(dir.path(), data);
    let stop = options.stop.clone();
    let stopped = train_feature_drafter(&options, &mut |event| {
        if let FeatureProgress::Step { step: 2, .. } = event {
            stop.raise();
        }
    });
    assert!(matches!(stopped, Err(TrainError::Cancelled)), "{stopped:?}");
    assert!(!options.out.exists());
}
