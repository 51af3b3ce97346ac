use super::*;

fn vocab(texts: &[&str]) -> VocabSummary {
    VocabSummary {
        kind: "BPE".into(),
        bos: 1,
        eos: 2,
        texts: texts.iter().map(|t| t.as_bytes().to_vec()).collect(),
    }
}

#[test]
fn the_same_vocabulary_drafts_and_padding_at_the_end_is_allowed() {
    let model = vocab(&["<unk>", "<s>", "</s>", "a", "b"]);
    assert_eq!(model.difference(&model.clone()), None);
    let padded = vocab(&["<unk>", "<s>", "</s>", "a", "b", "<pad0>", "<pad1>"]);
    assert_eq!(model.difference(&padded), None);
}

#[test]
fn another_tokenizer_special_tokens_size_or_text_is_refused() {
    let model = vocab(&["<unk>", "<s>", "</s>", "a", "b"]);
    let mut spm = model.clone();
    spm.kind = "SPM".into();
    assert_eq!(
        model.difference(&spm).as_deref(),
        Some("its tokenizer is SPM, the model's is BPE")
    );
    let mut eos = model.clone();
    eos.eos = 0;
    assert_eq!(
        model.difference(&eos).as_deref(),
        Some("its start and end tokens are 1 and 0, the model's 1 and 2")
    );
    let mut big = model.clone();
    big.texts
        .resize(5 + MAX_VOCAB_SIZE_DIFFERENCE + 1, b"x".to_vec());
    assert_eq!(
        model.difference(&big).as_deref(),
        Some("its vocabulary has 134 tokens, the model's 5")
    );
    let other = vocab(&["<unk>", "<s>", "</s>", "a", "c"]);
    assert_eq!(
        model.difference(&other).as_deref(),
        Some("its token 4 is \"c\", the model's is \"b\"")
    );
}

#[test]
fn only_a_confident_guess_the_model_knows_is_proposed() {
    // Softmax of [4, 0, 0]: the top token has about 0.96.
    assert_eq!(confident_top(&[4.0, 0.0, 0.0], 3), Some(0));
    // Of [1, 0, 0]: about 0.58, below the threshold.
    assert_eq!(confident_top(&[1.0, 0.0, 0.0], 3), None);
    // A confident guess beyond the served model's vocabulary.
    assert_eq!(confident_top(&[0.0, 0.0, 6.0], 2), None);
    assert_eq!(confident_top(&[], 2), None);
}

#[test]
fn a_torn_guess_branches_into_the_few_tokens_that_together_are_likely() {
    // Softmax of [ln 4, ln 3, ln 2, ln 1]: 0.4, 0.3, 0.2, 0.1.
    let logits = [4f32.ln(), 3f32.ln(), 2f32.ln(), 0.0];
    assert_eq!(next_guess(&logits, 4, 3), NextGuess::Torn(vec![0, 1, 2]));
    // Two branches hold only 0.7.
    assert_eq!(next_guess(&logits, 4, 2), NextGuess::Unsure);
    // The likeliest first, wherever they are.
    let shuffled = [4f32.ln(), 0.0, 3f32.ln(), 2f32.ln()];
    assert_eq!(next_guess(&shuffled, 4, 3), NextGuess::Torn(vec![0, 2, 3]));
    // Token 3 (0.3) is beyond the served model's vocabulary: 0 and 2 hold only 0.6.
    let beyond = [4f32.ln(), 0.0, 2f32.ln(), 3f32.ln()];
    assert_eq!(next_guess(&beyond, 3, 3), NextGuess::Unsure);
    // Two tokens at 0.45 each.
    let pair = [0.0, 0.0, -2.0, -30.0];
    assert_eq!(next_guess(&pair, 4, 3), NextGuess::Torn(vec![0, 1]));
    assert_eq!(next_guess(&[4.0, 0.0, 0.0], 3, 3), NextGuess::Sure(0));
}

#[test]
fn the_top_tokens_come_highest_first_and_ties_by_the_lower_id() {
    assert_eq!(top_tokens(&[0.5, 2.0, 1.0, 2.0, -1.0], 3), vec![1, 3, 2]);
    assert_eq!(top_tokens(&[1.0], 3), vec![0]);
}

#[test]
fn guesses_grow_a_chain_until_torn_or_full() {
    let sure = [4.0, 0.0, 0.0];
    let torn = [0.0, 0.0, -2.0];
    let mut guesses = Guesses::default();
    assert!(guess_at(&mut guesses, &sure, 3, 4));
    assert!(
        !guess_at(&mut guesses, &torn, 3, 4),
        "branches end the chain"
    );
    assert_eq!(guesses.tokens, vec![0]);
    assert_eq!(guesses.branches, vec![0, 1]);
    assert_eq!(guesses.len(), 3);
    let mut full = Guesses::default();
    assert!(guess_at(&mut full, &sure, 3, 2));
    assert!(!guess_at(&mut full, &sure, 3, 2));
    assert_eq!(full.tokens, vec![0, 0]);
    // One place left: a torn guess cannot branch.
    let mut one = Guesses::default();
    assert!(!guess_at(&mut one, &torn, 3, 1));
    assert!(one.branches.is_empty());
}
