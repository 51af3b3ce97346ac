//! Medusa heads on the real model: FasterDecoding checkpoints in both layouts are imported,
//! loaded and run losslessly; heads made for another model are refused.

use std::path::Path;

use engine::matrix::{GGML_TYPE_F16, GGML_TYPE_F32, GGML_TYPE_Q8_0};
use engine::medusa::convert::{base_identity, convert_checkpoint, frequent_tokens};
use engine::medusa::heads::{
    widen_heads, write_heads, HeadsEncoding, HeadsPlacement, HeadsWeights,
};
use engine::medusa::plan::TreeOrigin;
use engine::speculative::costs::{CostPoint, CostSource};
use engine::speculative::outlook::CostRegime;
use engine::speculative::tree_builder::Verdict;
use engine::{
    DraftPolicy, DrafterKind, Engine, EngineConfig, EngineError, GenerationEvent, GenerationMode,
    StepEvent, TokenSource, TreeSpec,
};
use safetensors::tensor::{serialize_to_file, Dtype, TensorView};

use crate::common::{self, assert_lossless, chat, greedy, model_path, run};

/// Deterministic pseudo-random values in [-scale, scale).
fn noise(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn bf16_bytes(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect()
}

/// A checkpoint in FasterDecoding/Medusa's layout, with random weights.
fn write_checkpoint(
    path: &Path,
    heads: usize,
    blocks: usize,
    n_embd: usize,
    own_vocab: Option<usize>,
) {
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for h in 0..heads {
        for l in 0..blocks {
            let seed = (h * 10 + l) as u64;
            tensors.push((
                format!("{h}.{l}.linear.weight"),
                vec![n_embd, n_embd],
                bf16_bytes(&noise(n_embd * n_embd, seed, 0.05)),
            ));
            tensors.push((
                format!("{h}.{l}.linear.bias"),
                vec![n_embd],
                bf16_bytes(&noise(n_embd, seed + 1000, 0.05)),
            ));
        }
        if let Some(vocab) = own_vocab {
            tensors.push((
                format!("{h}.{blocks}.weight"),
                vec![vocab, n_embd],
                bf16_bytes(&noise(vocab * n_embd, h as u64 + 77, 0.1)),
            ));
        }
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            (
                name.clone(),
                TensorView::new(Dtype::BF16, shape.clone(), data).unwrap(),
            )
        })
        .collect();
    serialize_to_file(views, None, path).unwrap();
}

const ENCODING: HeadsEncoding = HeadsEncoding {
    block_type: GGML_TYPE_F32,
    projection_type: GGML_TYPE_Q8_0,
};

fn engine_with_heads(heads: &Path, tree: Option<TreeSpec>) -> Result<Engine, EngineError> {
    let mut config = EngineConfig::new(model_path());
    config.heads_path = Some(heads.to_path_buf());
    config.tree = tree;
    config.decode_costs = Some(common::cpu_decode_costs());
    Engine::load(config)
}

#[test]
fn blocks_only_checkpoint_runs_losslessly_with_the_reference_tree() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_identity(&model_path()).unwrap();
    let checkpoint = dir.path().join("medusa_lm_head.safetensors");
    write_checkpoint(&checkpoint, 4, 1, base.n_embd as usize, None);
    let heads = dir.path().join("smol.medusa.gguf");
    let report = convert_checkpoint(&checkpoint, &base, &heads, None, ENCODING, None).unwrap();
    assert_eq!(
        (
            report.heads,
            report.layers_per_head,
            report.shared_projection
        ),
        (4, 1, true)
    );

    let engine = engine_with_heads(&heads, None).unwrap();
    let info = engine.info().heads.clone().expect("heads loaded");
    assert_eq!(info.head_count, 4);
    assert!(info.shared_projection);
    assert_eq!(
        info.projection_type, "q8_0",
        "the shared projection is the model's own Q8_0 embedding"
    );
    assert_eq!(
        engine.info().medusa_tree.as_ref().unwrap(),
        &TreeSpec::mc_sim_7b_63()
    );

    for prompt in [
        "Write a haiku about autumn.",
        "Repeat: one two three, one two three, one two three.",
    ] {
        let summary = assert_lossless(&engine, chat(prompt), GenerationMode::Medusa, 48);
        assert_eq!(summary.mode, GenerationMode::Medusa);
        assert!(summary.steps >= 1);
    }
}

#[test]
fn per_head_projection_checkpoint_drafts_from_its_heads() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_identity(&model_path()).unwrap();
    let checkpoint = dir.path().join("medusa_v1.safetensors");
    write_checkpoint(
        &checkpoint,
        2,
        1,
        base.n_embd as usize,
        Some(base.n_vocab as usize),
    );
    let heads = dir.path().join("own.medusa.gguf");
    let report = convert_checkpoint(
        &checkpoint,
        &base,
        &heads,
        Some(TreeSpec::chain(2)),
        ENCODING,
        None,
    )
    .unwrap();
    assert!(!report.shared_projection);

    let engine = engine_with_heads(&heads, None).unwrap();
    assert!(!engine.info().heads.as_ref().unwrap().shared_projection);

    // Drafts are made and tagged with the head that made them (heads that record no accuracy
    // draft their stored tree in full).
    let mut stream = engine
        .generate(greedy(chat("Count to ten."), 16, GenerationMode::Medusa))
        .unwrap();
    let mut drafted = 0;
    while let Some(event) = stream.blocking_next() {
        match event {
            GenerationEvent::Step(step) => {
                drafted += step.tree_size;
                assert!(step.tree_depth <= 2);
                assert!(step
                    .sources
                    .iter()
                    .all(|s| matches!(s, TokenSource::Base | TokenSource::Head(0 | 1))));
            }
            GenerationEvent::Finished(_) => break,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    }
    assert!(drafted > 0, "no step drafted anything");
    // Random heads guess wrong: still lossless.
    assert_lossless(
        &engine,
        chat("Name three rivers."),
        GenerationMode::Medusa,
        32,
    );
}

#[test]
fn heads_made_for_another_model_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut other = base_identity(&model_path()).unwrap();
    other.tokenizer_sha256 = "0".repeat(64);
    let n = other.n_embd as usize;
    let weights = HeadsWeights {
        blocks: vec![vec![(vec![0.0; n * n], vec![0.0; n])]],
        root: None,
        path: None,
        projections: None,
        vocab_subset: None,
        training: None,
    };
    let heads = dir.path().join("other.medusa.gguf");
    write_heads(
        &heads,
        &other,
        &weights,
        &TreeSpec::chain(1),
        HeadsEncoding {
            block_type: GGML_TYPE_F16,
            ..ENCODING
        },
    )
    .unwrap();
    match engine_with_heads(&heads, None) {
        Err(EngineError::HeadsMismatch {
            what: "tokenizer", ..
        }) => {}
        other => panic!("expected a tokenizer mismatch, got {:?}", other.err()),
    }

    // A checkpoint whose hidden size is not the model's is refused at conversion.
    let checkpoint = dir.path().join("small.safetensors");
    write_checkpoint(&checkpoint, 1, 1, 64, None);
    let base = base_identity(&model_path()).unwrap();
    let err = convert_checkpoint(
        &checkpoint,
        &base,
        &dir.path().join("x.gguf"),
        None,
        ENCODING,
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("shape [64, 64]"), "{err}");
}

/// Two small random heads of one block that read the root token, for a model of width `n`.
fn heads_reading_the_root(n: usize) -> HeadsWeights {
    let head = |seed: u64| vec![(noise(n * n, seed, 0.02), noise(n, seed + 1, 0.02))];
    HeadsWeights {
        blocks: vec![head(1), head(3)],
        root: Some(vec![noise(n * n, 5, 0.2), noise(n * n, 6, 0.2)]),
        path: None,
        projections: None,
        vocab_subset: None,
        training: None,
    }
}

#[test]
fn heads_that_read_the_root_token_draft_losslessly() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_identity(&model_path()).unwrap();
    let n = base.n_embd as usize;
    let mut weights = heads_reading_the_root(n);
    let complete = weights.root.replace(vec![noise(n * n, 5, 0.2)]);
    let heads = dir.path().join("root.medusa.gguf");
    let err = write_heads(&heads, &base, &weights, &TreeSpec::chain(2), ENCODING).unwrap_err();
    assert!(err.to_string().contains("one matrix per head"), "{err}");
    assert!(!heads.exists());

    weights.root = complete;
    write_heads(&heads, &base, &weights, &TreeSpec::chain(2), ENCODING).unwrap();
    let engine = engine_with_heads(&heads, Some(TreeSpec::chain(2))).unwrap();
    assert!(engine.info().heads.as_ref().unwrap().root_token_input);
    let summary = assert_lossless(
        &engine,
        chat("List three colours."),
        GenerationMode::Medusa,
        32,
    );
    assert_eq!(summary.mode, GenerationMode::Medusa);
}

#[test]
fn heads_that_read_the_drafted_path_guess_per_node_and_draft_losslessly() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_identity(&model_path()).unwrap();
    let n = base.n_embd as usize;
    let mut weights = HeadsWeights {
        // Head 1 reads the token drafted at depth 1, strongly.
        path: Some(vec![vec![], vec![noise(n * n, 7, 1.0)]]),
        ..heads_reading_the_root(n)
    };
    let heads = dir.path().join("path.medusa.gguf");
    let tree = TreeSpec::new(vec![vec![0], vec![1], vec![0, 0], vec![1, 0]]).unwrap();
    write_heads(&heads, &base, &weights, &tree, ENCODING).unwrap();
    let engine = engine_with_heads(&heads, Some(tree.clone())).unwrap();
    assert!(engine.info().heads.as_ref().unwrap().path_input);
    let prompt = chat("List three colours.");
    let mut stream = engine
        .generate(greedy(prompt.clone(), 32, GenerationMode::Medusa))
        .unwrap();
    let mut below_each = Vec::new();
    let summary = loop {
        match stream.blocking_next().unwrap() {
            GenerationEvent::Step(step) if step.tree.nodes.len() == tree.len() => {
                let nodes = &step.tree.nodes;
                below_each.push((nodes[2].token, nodes[3].token));
            }
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    };
    // Path-blind heads would put the same rank-0 guess below both depth-1 nodes; these read
    // the node's token, so the guesses below the two differ at some step.
    assert!(!below_each.is_empty());
    assert!(
        below_each.iter().any(|(a, b)| a != b),
        "the same guess below every node: {below_each:?}"
    );
    common::assert_like_normal(
        &engine,
        &prompt,
        &summary.token_ids,
        32,
        "path-reading heads",
    );

    // A path matrix too many, or path matrices without the root's, are refused.
    weights.path = Some(vec![vec![noise(n * n, 8, 0.1)], vec![noise(n * n, 7, 1.0)]]);
    let err = write_heads(&heads, &base, &weights, &tree, ENCODING).unwrap_err();
    assert!(err.to_string().contains("k matrices for head k"), "{err}");
}

#[test]
fn bad_heads_files_and_trees_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_heads = dir.path().join("model-as-heads.gguf");
    std::fs::copy(model_path(), &not_heads).unwrap();
    let err = engine_with_heads(&not_heads, None).err().unwrap();
    assert_eq!(err.code(), "invalid_heads", "{err}");
    assert!(err.to_string().contains("not Medusa heads"), "{err}");

    let garbage = dir.path().join("garbage.medusa.gguf");
    std::fs::write(&garbage, b"GGUF\x03\x00\x00\x00").unwrap();
    assert_eq!(
        engine_with_heads(&garbage, None).err().unwrap().code(),
        "invalid_heads"
    );

    let base = base_identity(&model_path()).unwrap();
    let checkpoint = dir.path().join("two.safetensors");
    write_checkpoint(&checkpoint, 2, 1, base.n_embd as usize, None);
    let heads = dir.path().join("two.medusa.gguf");
    convert_checkpoint(&checkpoint, &base, &heads, None, ENCODING, None).unwrap();
    let err = engine_with_heads(&heads, Some(TreeSpec::mc_sim_7b_63()))
        .err()
        .unwrap();
    assert!(
        matches!(err, EngineError::InvalidParameter { name: "tree", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("only 2 heads"), "{err}");
}

#[test]
fn fr_spec_vocabulary_subset_limits_what_heads_propose() {
    let dir = tempfile::tempdir().unwrap();
    let base = base_identity(&model_path()).unwrap();
    let corpus =
        "The quick brown fox jumps over the lazy dog.\nOne, two, three, four, five.\n".repeat(20);
    let subset = frequent_tokens(&model_path(), &corpus, 512).unwrap();
    assert_eq!(subset.len(), 512);
    let the =
        engine::medusa::convert::frequent_tokens(&model_path(), "the the the cat", 1).unwrap();
    assert_eq!(the.len(), 1);

    let checkpoint = dir.path().join("ckpt.safetensors");
    write_checkpoint(
        &checkpoint,
        2,
        1,
        base.n_embd as usize,
        Some(base.n_vocab as usize),
    );
    let heads = dir.path().join("fr.medusa.gguf");
    let report = convert_checkpoint(
        &checkpoint,
        &base,
        &heads,
        Some(TreeSpec::chain(2)),
        ENCODING,
        Some(subset.clone()),
    )
    .unwrap();
    assert_eq!(report.vocab_subset, Some(512));

    let engine = engine_with_heads(&heads, None).unwrap();
    assert_eq!(
        engine.info().heads.as_ref().unwrap().vocab_subset,
        Some(512)
    );
    assert_lossless(
        &engine,
        chat("Count: one, two, three, four, five."),
        GenerationMode::Medusa,
        32,
    );
    let mut stream = engine
        .generate(greedy(
            chat("Say the alphabet."),
            24,
            GenerationMode::Medusa,
        ))
        .unwrap();
    while let Some(event) = stream.blocking_next() {
        match event {
            GenerationEvent::Step(step) => {
                for (token, source) in step.tokens.iter().zip(&step.sources) {
                    if matches!(source, TokenSource::Head(_)) {
                        assert!(
                            subset.contains(token),
                            "head proposed {token}, outside the subset"
                        );
                    }
                }
            }
            GenerationEvent::Finished(_) => break,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    }
    assert!(frequent_tokens(&model_path(), &corpus, 0).is_err());
}

#[test]
fn the_shipped_heads_guess_the_models_own_text_and_draft_losslessly() {
    let heads = models::default_heads_path().expect("default heads installed");
    // A given tree, so that Medusa mode drafts whatever this machine's costs are.
    let engine =
        engine_with_heads(&heads, Some(TreeSpec::mc_sim_7b_63())).expect("shipped heads load");
    let info = engine.info().heads.clone().unwrap();
    assert!(
        info.root_token_input,
        "the shipped heads read the root token"
    );
    assert!(info.training.is_some_and(|t| t.heldout_top1[0] > 0.3));
    // A prompt of the bench set, which training did not see.
    let prompt = chat("Explain how a rainbow forms, in simple terms.");
    let normal = engine
        .generate(greedy(prompt.clone(), 96, GenerationMode::Normal))
        .unwrap()
        .wait()
        .unwrap();
    let accuracy = engine
        .measure_heads(prompt.clone(), normal.token_ids.clone(), 5)
        .unwrap();
    // Untrained heads are right about 2% of the time at the first head.
    assert!(
        accuracy.top1()[0] > 0.1,
        "first head top-1 {:?}",
        accuracy.top1()
    );
    let medusa = assert_lossless(&engine, prompt, GenerationMode::Medusa, 96);
    // A given tree is drafted in full: the heads' guesses show, whatever they cost here.
    assert!(
        medusa.mean_accepted >= 1.5,
        "mean accepted {}",
        medusa.mean_accepted
    );
}

#[test]
fn a_tree_asked_for_is_drafted_in_full_at_every_step_and_losslessly() {
    let heads = models::default_heads_path().expect("default heads installed");
    // Auto: whatever this machine's costs make of the tuned tree.
    let engine = engine_with_heads(&heads, None).expect("shipped heads load");
    let prompt = chat("Explain how a rainbow forms, in three sentences.");
    let tree = TreeSpec::mc_sim_7b_63();
    // Long enough for a score of steps to draft the whole tree (it stops 64 tokens from the end).
    const MAX_TOKENS: usize = 96;
    let request = greedy(prompt.clone(), MAX_TOKENS as u32, GenerationMode::Medusa)
        .with_draft(DraftPolicy::Tree(tree.clone()));
    let mut stream = engine.generate(request).expect("accepted");
    // (drafted, what a full tree may be with the tokens left): no step drafts beyond the end.
    let mut sizes = Vec::new();
    let mut emitted = 1;
    let mut last_token = None;
    let summary = loop {
        match stream.blocking_next().expect("events until the end") {
            GenerationEvent::Step(step) => {
                let left = MAX_TOKENS - emitted;
                sizes.push((step.tree_size, tree.len().min(left - 1)));
                emitted += step.accepted_len;
                assert_step_tree_is_the_drafted_tree(&step, &tree, last_token);
            }
            GenerationEvent::Text { token_ids, .. } => last_token = token_ids.last().copied(),
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    };
    assert!(sizes.iter().filter(|(_, full)| *full == tree.len()).count() > 5);
    assert!(
        sizes.iter().all(|(drafted, full)| drafted == full),
        "tree sizes per step (drafted, expected) {sizes:?}"
    );
    // Outputs may part from normal's, but only where the model's two best tokens are nearly tied:
    // a 64-token decode sums in another order than a 1-token one.
    common::assert_like_normal(
        &engine,
        &prompt,
        &summary.token_ids,
        MAX_TOKENS as u32,
        "mc_sim_7b_63 in full",
    );
    assert!(summary.mean_accepted > 1.5, "{}", summary.mean_accepted);
    // Across the bench prompts too.
    for text in &engine::tuning::DEFAULT_PROMPTS[..3] {
        let prompt = chat(text);
        let full = engine
            .generate(
                greedy(prompt.clone(), 48, GenerationMode::Medusa)
                    .with_draft(DraftPolicy::Tree(tree.clone())),
            )
            .unwrap()
            .wait()
            .unwrap();
        common::assert_like_normal(&engine, &prompt, &full.token_ids, 48, text);
    }

    // Trees the heads cannot fill, and trees in the wrong mode, are refused up front.
    let deep = TreeSpec::chain(8);
    let refused = engine
        .generate(
            greedy(prompt.clone(), 8, GenerationMode::Medusa).with_draft(DraftPolicy::Tree(deep)),
        )
        .err()
        .expect("a chain deeper than the heads is refused");
    assert!(
        matches!(refused, EngineError::InvalidParameter { name: "tree", .. }),
        "{refused}"
    );
    let wrong_mode = engine
        .generate(greedy(prompt, 8, GenerationMode::Lookup).with_draft(DraftPolicy::Tree(tree)))
        .err()
        .expect("a tree in lookup mode is refused");
    assert!(matches!(
        wrong_mode,
        EngineError::InvalidParameter { name: "tree", .. }
    ));
}

#[test]
fn auto_mode_merges_lookup_and_medusa_guesses_into_one_lossless_tree() {
    let heads = models::default_heads_path().expect("default heads installed");
    let engine = engine_with_heads(&heads, None).expect("shipped heads load");
    // Copying text: lookup finds the prompt's words, the heads guess the same tokens or others.
    let prompt = chat(
        "Fix the typos in this paragraph and write it out in full: The sun rose slowley over the \
         quiet vilage. Farmers walked to thier fields while the children ran to school. The baker \
         opend his shop and the smell of fresh bread filed the streets. By noon the market was \
         bussy with people buying fruit, vegtables and cheese.",
    );
    let tree = TreeSpec::mc_sim_7b_63();
    const MAX_TOKENS: u32 = 80;
    let request = greedy(prompt.clone(), MAX_TOKENS, GenerationMode::Auto)
        .with_draft(DraftPolicy::Tree(tree.clone()));
    let mut stream = engine.generate(request).expect("accepted");
    let mut steps = Vec::new();
    let summary = loop {
        match stream.blocking_next().expect("events until the end") {
            GenerationEvent::Step(step) => steps.push(step),
            GenerationEvent::Finished(summary) => break summary,
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    };
    assert_eq!(summary.mode, GenerationMode::Auto);
    let nodes = || steps.iter().flat_map(|s| s.tree.nodes.iter());
    let proposed_by = |drafter: DrafterKind| {
        nodes()
            .filter(|n| {
                n.source.drafter() == Some(drafter)
                    || n.also_proposed_by.and_then(TokenSource::drafter) == Some(drafter)
            })
            .count()
    };
    assert!(
        proposed_by(DrafterKind::Lookup) > 0,
        "lookup proposed nothing"
    );
    assert!(
        proposed_by(DrafterKind::Medusa) > 0,
        "the heads proposed nothing"
    );
    assert!(
        nodes().any(|n| n.source == TokenSource::Lookup
            && matches!(n.also_proposed_by, Some(TokenSource::Head(_)))),
        "no guess was made by both drafters"
    );
    for step in &steps {
        let nodes = &step.tree.nodes;
        assert!(nodes.len() <= tree.len() + 16, "step {}", step.index);
        // Shared guesses are one node: no two siblings carry the same token.
        for (i, a) in nodes.iter().enumerate() {
            assert!(
                !nodes[..i]
                    .iter()
                    .any(|b| b.parent == a.parent && b.token == a.token),
                "step {}: a token drafted twice at one place",
                step.index
            );
        }
        let accepted: Vec<i32> = nodes
            .iter()
            .filter(|n| n.accepted)
            .map(|n| n.token)
            .collect();
        assert_eq!(accepted, step.tokens[..step.tokens.len() - 1]);
    }
    assert!(
        summary.mean_accepted > 1.5,
        "mean accepted {}",
        summary.mean_accepted
    );
    common::assert_like_normal(
        &engine,
        &prompt,
        &summary.token_ids,
        MAX_TOKENS,
        "auto with mc_sim_7b_63",
    );
    // As far as each drafter pays on this machine: lossless too.
    let budgeted = assert_lossless(&engine, prompt, GenerationMode::Auto, 48);
    assert_eq!(budgeted.mode, GenerationMode::Auto);
}

/// The step's tree is `spec` filled in order, its accepted nodes are the path whose tokens the
/// step emitted, and it hangs from the token emitted before it.
fn assert_step_tree_is_the_drafted_tree(step: &StepEvent, spec: &TreeSpec, root: Option<i32>) {
    let tree = &step.tree;
    assert_eq!(tree.nodes.len(), step.tree_size);
    assert_eq!(step.skip, None, "a full tree was drafted");
    assert_eq!(Some(tree.root.token), root, "step {}", step.index);
    for (node, path) in tree.nodes.iter().zip(spec.paths()) {
        assert_eq!(node.source, TokenSource::Head(path.len() as u8 - 1));
        assert_eq!(node.rank, *path.last().unwrap());
        let parent_path = node.parent.map(|p| spec.paths()[p].as_slice());
        assert_eq!(
            parent_path,
            path.split_last()
                .map(|(_, rest)| rest)
                .filter(|r| !r.is_empty())
        );
        assert!(!node.text.is_empty());
    }
    let accepted: Vec<usize> = (0..tree.nodes.len())
        .filter(|&n| tree.nodes[n].accepted)
        .collect();
    let mut parent = None;
    for &n in &accepted {
        assert_eq!(
            tree.nodes[n].parent, parent,
            "the accepted nodes form one path"
        );
        parent = Some(n);
    }
    let path_tokens: Vec<i32> = accepted.iter().map(|&n| tree.nodes[n].token).collect();
    assert_eq!(path_tokens, step.tokens[..step.tokens.len() - 1]);
    assert_eq!(Some(&tree.model_token.token), step.tokens.last());
    // The model's own token is no child of the last accepted node (else it would be accepted).
    assert!(!tree
        .nodes
        .iter()
        .any(|node| node.parent == parent && node.token == tree.model_token.token));
}

/// The entries of the decode-cost cache in `dir`.
fn cached_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

fn given(points: &[(usize, f64)]) -> Option<Vec<CostPoint>> {
    Some(
        points
            .iter()
            .map(|&(tokens, ms)| CostPoint::without_spread(tokens, ms))
            .collect(),
    )
}

#[test]
fn decode_costs_are_kept_only_when_measured_on_a_quiet_machine() {
    let costs_dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(model_path());
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));
    config.decode_costs_dir = Some(costs_dir.path().to_path_buf());

    // First load: costs are measured and the tree is sized from them.
    let engine = Engine::load(config.clone()).unwrap();
    let plan = engine
        .info()
        .medusa_plan
        .clone()
        .expect("heads have a plan");
    assert_eq!(plan.origin, TreeOrigin::Tuned);
    assert_eq!(engine.info().medusa_tree, plan.tree);
    let measured = engine.decode_costs().unwrap();
    assert_eq!(measured.source, CostSource::Measured);
    assert_eq!(measured.points.first().map(|p| p.tokens), Some(1));
    assert_eq!(
        plan.decode_costs.as_ref().map(|c| c.source),
        Some(CostSource::Measured)
    );
    drop(engine);

    // Kept only if the machine was quiet enough; whether it was depends on what else runs, so
    // both outcomes are checked for what must follow from them.
    let kept = cached_entries(costs_dir.path());
    let engine = Engine::load(config).unwrap();
    let read = engine.decode_costs().unwrap();
    match measured.busy {
        None => {
            assert_eq!(kept.len(), 1, "one entry per machine and model: {kept:?}");
            assert_eq!(read.source, CostSource::Cached, "a second load reads them");
            assert_eq!(read.points, measured.points);
        }
        Some(busy) => {
            assert!(kept.is_empty(), "busy figures were kept ({busy}): {kept:?}");
            assert_eq!(read.source, CostSource::Measured, "measured again");
        }
    }
}

#[test]
fn trained_heads_size_their_tree_from_the_given_decode_costs() {
    let mut config = EngineConfig::new(model_path());
    config.heads_path = Some(models::default_heads_path().expect("default heads installed"));

    // A machine where extra tokens are nearly free (like a GPU): a large tree pays, and
    // Medusa mode drafts with it, losslessly. Decodes this slow make the heads' time, which is
    // measured at load and grows when other tests share the cores, count for little.
    config.decode_costs = given(&[(1, 1000.0), (128, 1001.0)]);
    let engine = Engine::load(config.clone()).unwrap();
    assert_eq!(engine.decode_costs().unwrap().source, CostSource::Given);
    let plan = engine.info().medusa_plan.clone().unwrap();
    let tree = plan.tree.clone().expect("a tree pays when tokens are free");
    assert!(tree.len() > 16, "{} nodes", tree.len());
    assert!(plan.predicted_speedup.unwrap() > 1.2, "{}", plan.decision);
    let outlook = engine
        .known_drafting_outlook()
        .expect("costs known at load");
    assert_eq!(outlook.regime, CostRegime::MemoryBound);
    let prompt = chat("Explain how a rainbow forms, in simple terms.");
    // A request whose heads never drafted (its one token came from the prompt's decode) teaches
    // nothing about them: the heads' held-out accuracy stays where later requests start.
    let learnt_nothing = run(&engine, greedy(prompt.clone(), 1, GenerationMode::Auto));
    assert_eq!(learnt_nothing.tokens_generated, 1);
    let summary = assert_lossless(&engine, prompt.clone(), GenerationMode::Medusa, 64);
    // It drafts; how long it keeps drafting depends on the decode times it then observes on
    // this machine, which are not the ones given above.
    assert!(summary.draft_ms > 0.0, "Medusa mode drafted nothing");
    drop(engine);

    // A machine where every extra token costs a whole decode: no tree pays, Medusa mode says
    // so and decodes plainly.
    config.decode_costs = given(&[(1, 10.0), (2, 20.0), (4, 40.0), (128, 1280.0)]);
    let engine = Engine::load(config.clone()).unwrap();
    let outlook = engine
        .known_drafting_outlook()
        .expect("costs known at load");
    assert_eq!(outlook.regime, CostRegime::ComputeBound);
    assert_eq!(
        outlook.better_format, None,
        "the default model is Q4_1, which the batched kernels batch"
    );
    let plan = engine.info().medusa_plan.clone().unwrap();
    assert_eq!((plan.tree, engine.info().medusa_tree.clone()), (None, None));
    assert!(
        plan.decision
            .starts_with("plain decoding: no tree is faster"),
        "{}",
        plan.decision
    );
    let summary = assert_lossless(&engine, prompt, GenerationMode::Medusa, 32);
    assert_eq!(summary.mode, GenerationMode::Medusa);
    assert_eq!(
        (summary.mean_accepted, summary.draft_ms),
        (1.0, 0.0),
        "nothing drafted"
    );
    drop(engine);

    // Figures whose band leaves the sign open: centrally a second token costs little, but
    // it has been seen costing as much as a whole decode. No tree is surely faster.
    config.decode_costs = Some(vec![
        CostPoint::without_spread(1, 1000.0),
        CostPoint {
            tokens: 2,
            ms: 1005.0,
            low_ms: 1002.0,
            high_ms: 2000.0,
        },
        CostPoint {
            tokens: 128,
            ms: 1100.0,
            low_ms: 1050.0,
            high_ms: 128_000.0,
        },
    ]);
    let engine = Engine::load(config).unwrap();
    let plan = engine.info().medusa_plan.clone().unwrap();
    assert_eq!(plan.tree, None, "{}", plan.decision);
    assert!(
        plan.decision
            .starts_with("plain decoding: no tree is surely faster"),
        "{}",
        plan.decision
    );
    assert!(plan.forecasts.iter().all(|f| f.verdict != Verdict::Faster));
}

#[test]
fn heads_on_the_ggml_backend_guess_what_the_thread_pool_guesses() {
    let heads = models::default_heads_path().expect("default heads installed");
    let engine_on = |placement| {
        let mut config = EngineConfig::new(model_path());
        config.heads_path = Some(heads.clone());
        config.heads_placement = placement;
        config.parallel = 1;
        config.decode_costs = Some(common::cpu_decode_costs());
        Engine::load(config).expect("shipped heads load")
    };
    let threads = engine_on(HeadsPlacement::ThreadPool);
    let ggml = engine_on(HeadsPlacement::Ggml);
    let placed = |engine: &Engine| engine.info().heads.clone().unwrap().compute;
    let (on_threads, on_ggml) = (placed(&threads), placed(&ggml));
    assert_eq!(on_threads.runs_on, "thread pool");
    assert!(on_threads.ggml_device.is_none() && on_threads.ggml_ms.is_none());
    // This build runs the model on the CPU, so the backend is ggml's CPU backend.
    assert_eq!(on_ggml.ggml_device.as_deref(), Some("CPU"), "{on_ggml:?}");
    assert_eq!(on_ggml.runs_on, "CPU");
    assert!(on_ggml.ggml_ms.is_some_and(|ms| ms > 0.0) && on_ggml.ggml_error.is_none());

    // One head at a time, on the model's hidden states along its own answer: the same guesses
    // at every rank.
    let prompt = chat("Explain how a rainbow forms, in simple terms.");
    let answer = run(&threads, greedy(prompt.clone(), 96, GenerationMode::Normal)).token_ids;
    let by_threads = threads
        .measure_heads(prompt.clone(), answer.clone(), 10)
        .unwrap();
    let by_ggml = ggml.measure_heads(prompt.clone(), answer, 10).unwrap();
    assert_eq!(by_threads.hits, by_ggml.hits);

    // A whole tree at every step: the nodes of a depth go to the heads together, each asking
    // for its own number of guesses. The same trees, step by step.
    let trees = |engine: &Engine| {
        let request = greedy(prompt.clone(), 128, GenerationMode::Medusa)
            .with_draft(DraftPolicy::Tree(TreeSpec::mc_sim_7b_63()));
        step_trees(engine, request).1
    };
    let (threads_trees, ggml_trees) = (trees(&threads), trees(&ggml));
    let full = threads_trees.iter().filter(|t| t.len() == 63).count();
    assert!(
        full > 5,
        "{full} full trees: {:?}",
        threads_trees.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(threads_trees, ggml_trees);
}

/// The default model widened 4x with zeros (`medusa scale-model`) costs what a 1.8B model does
/// and writes the same tokens; its widened heads draft the same trees, token for token.
#[test]
fn the_widened_model_writes_the_same_tokens_and_its_heads_draft_the_same_trees() {
    let dir = tempfile::tempdir().unwrap();
    let heads = models::default_heads_path().expect("default heads installed");
    let wide_model = dir.path().join("wide4.gguf");
    let wide_heads = dir.path().join("wide4.medusa.gguf");
    let report = engine::widen_model(&model_path(), &wide_model, 4, |_, _| {}).unwrap();
    assert_eq!((report.n_embd_before, report.n_embd_after), (576, 2304));
    assert!(report.bit_exact);
    assert!(report.parameters_after > 13 * report.parameters_before);
    widen_heads(&heads, &wide_heads, 4, |_, _| {}).unwrap();

    // A heads file is not a model to widen, and heads are not widened for a model they
    // were not made for.
    let refused = engine::widen_model(&heads, &dir.path().join("x.gguf"), 4, |_, _| {});
    assert_eq!(refused.unwrap_err().code(), "heads_not_model");
    let refused = widen_heads(&model_path(), &dir.path().join("y.gguf"), 4, |_, _| {});
    assert_eq!(refused.unwrap_err().code(), "invalid_heads");

    let load = |model: &Path, heads: &Path| {
        let mut config = EngineConfig::new(model.to_path_buf());
        config.heads_path = Some(heads.to_path_buf());
        config.parallel = 1;
        config.decode_costs = Some(common::cpu_decode_costs());
        Engine::load(config).expect("loads")
    };
    let narrow = load(&model_path(), &heads);
    let wide = load(&wide_model, &wide_heads);
    assert_eq!(wide.info().n_embd, 2304);
    let steps = |engine: &Engine, prompt: &str| {
        let request = greedy(chat(prompt), 24, GenerationMode::Medusa)
            .with_draft(DraftPolicy::Tree(TreeSpec::chain(4)));
        step_trees(engine, request)
    };
    for prompt in [
        "Explain how a rainbow forms, in simple terms.",
        "List three uses of copper.",
    ] {
        let normal = |engine: &Engine| {
            run(engine, greedy(chat(prompt), 24, GenerationMode::Normal)).token_ids
        };
        assert_eq!(normal(&narrow), normal(&wide), "{prompt}");
        let (narrow_tokens, narrow_trees) = steps(&narrow, prompt);
        let (wide_tokens, wide_trees) = steps(&wide, prompt);
        assert_eq!(narrow_tokens, wide_tokens, "{prompt}");
        assert!(
            narrow_trees.iter().any(|t| t.len() == 4),
            "{narrow_trees:?}"
        );
        assert_eq!(narrow_trees, wide_trees, "{prompt}");
    }
}

/// A drafted tree as (token, parent, rank) per node.
type StepTreeNodes = Vec<(i32, Option<usize>, usize)>;

/// A run's tokens, and each step's drafted tree.
fn step_trees(engine: &Engine, request: engine::GenerateRequest) -> (Vec<i32>, Vec<StepTreeNodes>) {
    let mut stream = engine.generate(request).expect("accepted");
    let mut trees = Vec::new();
    loop {
        match stream.blocking_next().expect("events until the end") {
            GenerationEvent::Step(step) => trees.push(
                step.tree
                    .nodes
                    .iter()
                    .map(|n| (n.token, n.parent, n.rank))
                    .collect(),
            ),
            GenerationEvent::Finished(summary) => break (summary.token_ids, trees),
            GenerationEvent::Failed(err) => panic!("{err}"),
            _ => {}
        }
    }
}
