//! Conversations on a real SQLite file: kept in step with the runs that answer them, searched
//! with FTS5, renamed, deleted, and recovered after a crash.

use store::{ConversationPatch, ConversationTurn, MessageRecord, PromptRecord, Store, StoreError};

use crate::common::{new_run, outcome, temp_store};

fn message(role: &str, content: &str) -> MessageRecord {
    MessageRecord {
        role: role.into(),
        content: content.into(),
    }
}

async fn new_conversation(store: &Store) -> i64 {
    store
        .create_conversation(&ConversationPatch::default())
        .await
        .expect("conversation created")
        .id
}

/// Starts a run answering `messages` in `conversation`.
async fn answer(
    store: &Store,
    conversation: i64,
    messages: &[MessageRecord],
    continues: bool,
) -> i64 {
    let mut run = new_run("normal", "smol", PromptRecord::Chat(messages.to_vec()), 0);
    run.conversation = Some(ConversationTurn {
        conversation_id: conversation,
        continues,
    });
    store.begin_run(&run).await.expect("begin run")
}

fn roles_and_contents(conversation: &store::Conversation) -> Vec<(String, String)> {
    conversation
        .messages
        .iter()
        .map(|m| (m.role.clone(), m.content.clone()))
        .collect()
}

#[tokio::test]
async fn a_conversation_follows_its_runs_turn_by_turn() {
    let (_dir, store) = temp_store().await;
    let created = store
        .create_conversation(&ConversationPatch::default())
        .await
        .unwrap();
    assert_eq!((created.title.as_str(), created.messages.len()), ("", 0));

    let turn1 = [
        message("system", "Be brief."),
        message("user", "Name a colour\nplease"),
    ];
    let run1 = answer(&store, created.id, &turn1, false).await;
    store.save_partial_output(run1, "Blu", 1).await.unwrap();
    let going = store.get_conversation(created.id).await.unwrap();
    assert_eq!(going.title, "Name a colour");
    assert_eq!(going.system_prompt, "Be brief.");
    let answer1 = &going.messages[1];
    assert_eq!((answer1.content.as_str(), answer1.answering), ("Blu", true));
    assert_eq!(answer1.run_id, Some(run1));
    store
        .finish_run(run1, &outcome("Blue.", 10.0, 0))
        .await
        .unwrap();
    let done = store.get_conversation(created.id).await.unwrap();
    assert!(!done.messages[1].answering);
    assert_eq!(done.messages[1].content, "Blue.");

    // A follow-up keeps the earlier messages' rows and links.
    let turn2 = [
        message("system", "Be brief."),
        message("user", "Name a colour\nplease"),
        message("assistant", "Blue."),
        message("user", "Another?"),
    ];
    let run2 = answer(&store, created.id, &turn2, false).await;
    store
        .finish_run(run2, &outcome("Red.", 10.0, 1))
        .await
        .unwrap();
    let after2 = store.get_conversation(created.id).await.unwrap();
    assert_eq!(after2.messages[..2], done.messages[..2]);
    assert_eq!(
        roles_and_contents(&after2)[2..],
        [
            ("user".into(), "Another?".into()),
            ("assistant".into(), "Red.".into())
        ]
    );

    // Regenerating the last answer replaces it; earlier ones stay.
    let run3 = answer(&store, created.id, &turn2, false).await;
    store
        .finish_run(run3, &outcome("Green.", 10.0, 2))
        .await
        .unwrap();
    let after3 = store.get_conversation(created.id).await.unwrap();
    assert_eq!(after3.messages.len(), 4);
    assert_eq!(after3.messages[3].content, "Green.");
    assert_eq!(after3.messages[3].run_id, Some(run3));
    assert_eq!(after3.messages[1].run_id, Some(run1));

    // Continuing the last answer extends it, and the message now links to the latest run.
    let mut turn4 = turn2.to_vec();
    turn4.push(message("assistant", "Green."));
    let run4 = answer(&store, created.id, &turn4, true).await;
    store.save_partial_output(run4, " And", 1).await.unwrap();
    let going = store.get_conversation(created.id).await.unwrap();
    assert_eq!(going.messages[3].content, "Green. And");
    store
        .finish_run(run4, &outcome(" and gold.", 10.0, 3))
        .await
        .unwrap();
    let after4 = store.get_conversation(created.id).await.unwrap();
    assert_eq!(after4.messages.len(), 4);
    assert_eq!(after4.messages[3].content, "Green. and gold.");
    assert_eq!(after4.messages[3].run_id, Some(run4));

    // Editing the first prompt drops everything after it.
    let edited = [message("user", "Name a fruit")];
    let run5 = answer(&store, created.id, &edited, false).await;
    store.cancel_run(run5, None).await.unwrap();
    let after5 = store.get_conversation(created.id).await.unwrap();
    assert_eq!(
        roles_and_contents(&after5),
        [
            ("user".into(), "Name a fruit".into()),
            ("assistant".into(), String::new())
        ]
    );
    assert_eq!(
        after5.system_prompt, "",
        "the system prompt follows the request"
    );
    assert_eq!(
        after5.title, "Name a fruit",
        "a title taken from the first question follows it"
    );
    // A title chosen by hand stays when the first question changes.
    store
        .update_conversation(
            created.id,
            &ConversationPatch {
                title: Some("Fruit".into()),
                ..ConversationPatch::default()
            },
        )
        .await
        .unwrap();
    let run6 = answer(&store, created.id, &[message("user", "Name a tree")], false).await;
    store.cancel_run(run6, None).await.unwrap();
    assert_eq!(
        store.get_conversation(created.id).await.unwrap().title,
        "Fruit"
    );

    // Deleting a run keeps its message.
    store.delete_runs(&[run1, run5, run6]).await.unwrap();
    let after_delete = store.get_conversation(created.id).await.unwrap();
    assert_eq!(after_delete.messages[1].run_id, None);
}

#[tokio::test]
async fn a_failed_run_leaves_no_empty_answer_behind() {
    let (_dir, store) = temp_store().await;
    let id = new_conversation(&store).await;
    let run = answer(&store, id, &[message("user", "Hi")], false).await;
    store.fail_run(run, "engine stopped").await.unwrap();
    let conversation = store.get_conversation(id).await.unwrap();
    assert_eq!(
        roles_and_contents(&conversation),
        [("user".into(), "Hi".into())]
    );
}

#[tokio::test]
async fn bad_turns_are_refused_and_write_nothing() {
    let (_dir, store) = temp_store().await;
    let id = new_conversation(&store).await;
    let missing = answer_result(&store, 999, &[message("user", "Hi")], false).await;
    assert!(matches!(
        missing,
        Err(StoreError::NotFound {
            entity: "conversation",
            id: 999
        })
    ));
    let not_assistant = answer_result(&store, id, &[message("user", "Hi")], true).await;
    assert!(matches!(not_assistant, Err(StoreError::InvalidInput(_))));
    let mut raw = new_run("normal", "smol", PromptRecord::Text("Hi".into()), 0);
    raw.conversation = Some(ConversationTurn {
        conversation_id: id,
        continues: false,
    });
    assert!(matches!(
        store.begin_run(&raw).await,
        Err(StoreError::InvalidInput(_))
    ));
    assert!(store
        .list_runs(&Default::default())
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .get_conversation(id)
        .await
        .unwrap()
        .messages
        .is_empty());
}

async fn answer_result(
    store: &Store,
    conversation: i64,
    messages: &[MessageRecord],
    continues: bool,
) -> Result<i64, StoreError> {
    let mut run = new_run("normal", "smol", PromptRecord::Chat(messages.to_vec()), 0);
    run.conversation = Some(ConversationTurn {
        conversation_id: conversation,
        continues,
    });
    store.begin_run(&run).await
}

#[tokio::test]
async fn search_finds_titles_and_messages_by_word_prefix() {
    let (_dir, store) = temp_store().await;
    let mut ids = Vec::new();
    for (prompt, reply) in [
        ("Plan a trip to Lisbon", "Start at the Alfama district."),
        (
            "Explain Rust lifetimes",
            "A lifetime names how long a borrow lives.",
        ),
        ("100% sure?", "Quite."),
    ] {
        let id = new_conversation(&store).await;
        let run = answer(&store, id, &[message("user", prompt)], false).await;
        store
            .finish_run(run, &outcome(reply, 10.0, 0))
            .await
            .unwrap();
        ids.push(id);
    }
    let found = |search: &'static str| {
        let store = store.clone();
        async move {
            store
                .list_conversations(Some(search), None)
                .await
                .unwrap()
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(found("alfa").await, [ids[0]], "prefix of an answer's word");
    assert_eq!(
        found("LIFETIME borrow").await,
        [ids[1]],
        "both words in one answer"
    );
    assert_eq!(found("lisbon").await, [ids[0]]);
    assert_eq!(
        found("100%").await,
        [ids[2]],
        "wildcards are literal in titles"
    );
    assert!(
        found("\"unbalanced").await.is_empty(),
        "quotes are not syntax"
    );
    assert_eq!(
        found("   ").await,
        [ids[2], ids[1], ids[0]],
        "blank lists all, newest first"
    );
    let hit = store
        .list_conversations(Some("district"), None)
        .await
        .unwrap();
    assert_eq!(
        hit[0].snippet.as_deref(),
        Some("Start at the Alfama district.")
    );
    assert_eq!(hit[0].message_count, 2);
    assert!(store.list_conversations(None, Some(0)).await.is_err());
}

#[tokio::test]
async fn rename_and_delete() {
    let (_dir, store) = temp_store().await;
    let id = store
        .create_conversation(&ConversationPatch {
            title: Some("  Draft ".into()),
            system_prompt: Some("Answer in French.".into()),
        })
        .await
        .unwrap()
        .id;
    let renamed = store
        .update_conversation(
            id,
            &ConversationPatch {
                title: Some("Final".into()),
                system_prompt: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.title, "Final");
    assert_eq!(renamed.system_prompt, "Answer in French.");
    let bad = ConversationPatch {
        title: Some("two\nlines".into()),
        system_prompt: None,
    };
    assert!(store.update_conversation(id, &bad).await.is_err());
    let run = answer(&store, id, &[message("user", "Bonjour")], false).await;
    store
        .finish_run(run, &outcome("Salut.", 10.0, 0))
        .await
        .unwrap();
    store.delete_conversation(id).await.unwrap();
    assert!(matches!(
        store.get_conversation(id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.delete_conversation(id).await.is_err());
    // Its run stays in the history.
    assert_eq!(
        store.get_run(run).await.unwrap().run.output.as_deref(),
        Some("Salut.")
    );
    assert!(store
        .list_conversations(Some("salut"), None)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn an_answer_cut_by_a_crash_keeps_its_output_after_reopening() {
    let (dir, store) = temp_store().await;
    let id = new_conversation(&store).await;
    let run = answer(&store, id, &[message("user", "Count")], false).await;
    store.save_partial_output(run, "1, 2, 3", 5).await.unwrap();
    store.close().await;
    let store = Store::open(dir.path().join("history.sqlite"))
        .await
        .unwrap();
    let conversation = store.get_conversation(id).await.unwrap();
    let answer = &conversation.messages[1];
    assert_eq!(
        (answer.content.as_str(), answer.answering),
        ("1, 2, 3", false)
    );
}
