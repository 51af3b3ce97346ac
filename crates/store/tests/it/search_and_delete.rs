//! Finding runs by words and by part of the model's name, and deleting them.

use store::{ExportFormat, RunFilter, RunStatus, StoreError};

use crate::common::*;

async fn ids(store: &store::Store, filter: RunFilter) -> Vec<i64> {
    let mut ids: Vec<i64> = store
        .list_runs(&filter)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn runs_are_found_by_the_words_of_their_prompt_or_answer() {
    let (_dir, store) = temp_store().await;
    let giraffe = finished_run(
        &store,
        &new_run(
            "normal",
            "SmolLM2-135M-Instruct",
            chat("Tell me about giraffes"),
            0,
        ),
        &outcome("Giraffes have long necks.", 10.0, 1),
        0,
    )
    .await;
    let volcano = finished_run(
        &store,
        &new_run("medusa", "Llama-3-8B", chat("What is a volcano?"), 2),
        &outcome("A volcano is a mountain with a \"vent\" of lava.", 10.0, 3),
        0,
    )
    .await;
    // Still running: found by its prompt; its answer is indexed once written.
    let running = store
        .begin_run(&new_run("normal", "smollm2", chat("Lava lamps"), 4))
        .await
        .unwrap();
    let search = |words: &str| RunFilter {
        search: Some(words.into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, search("giraffes")).await, [giraffe]);
    // Words start words; every word must match; any case.
    assert_eq!(ids(&store, search("GIRAF")).await, [giraffe]);
    assert_eq!(ids(&store, search("lava")).await, [volcano, running]);
    assert_eq!(ids(&store, search("lava mountain")).await, [volcano]);
    assert_eq!(
        ids(&store, search("long necks volcano")).await,
        Vec::<i64>::new()
    );
    // FTS5 syntax in what the user typed is just text, never an error.
    for odd in ["\"vent", "NEAR(lava", "a OR", "*", "-giraffe", "col:umn"] {
        store
            .list_runs(&search(odd))
            .await
            .unwrap_or_else(|e| panic!("{odd}: {e}"));
    }
    assert_eq!(ids(&store, search("   ")).await.len(), 3);
    // The model filter: any part of the name, any case.
    let model = |text: &str| RunFilter {
        model: Some(text.into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(&store, model("smollm")).await, [giraffe, running]);
    assert_eq!(ids(&store, model("8b")).await, [volcano]);
    assert_eq!(ids(&store, model("%")).await, Vec::<i64>::new());
    // A finished answer is found by its words.
    store
        .finish_run(running, &outcome("Wax rises in warm oil.", 10.0, 5))
        .await
        .unwrap();
    assert_eq!(ids(&store, search("wax")).await, [running]);
}

#[tokio::test]
async fn control_characters_in_any_search_field_are_refused_not_matched() {
    let (_dir, store) = temp_store().await;
    finished_run(
        &store,
        &new_run("normal", "smol", chat("Tell me about giraffes"), 0),
        &outcome("Giraffes have long necks.", 10.0, 1),
        0,
    )
    .await;
    for bad in [
        "\0",
        "gir\0affe",
        "\u{1}",
        "two\nlines",
        "tab\there",
        "\u{7f}",
    ] {
        let filters = [
            RunFilter {
                search: Some(bad.into()),
                ..RunFilter::default()
            },
            RunFilter {
                model: Some(bad.into()),
                ..RunFilter::default()
            },
            RunFilter {
                mode: Some(bad.into()),
                ..RunFilter::default()
            },
            RunFilter {
                engine: Some(bad.into()),
                ..RunFilter::default()
            },
        ];
        for filter in filters {
            let err = store.list_runs(&filter).await.unwrap_err();
            assert!(matches!(err, StoreError::InvalidInput(_)), "{bad:?}: {err}");
            for format in [ExportFormat::Csv, ExportFormat::Json, ExportFormat::Jsonl] {
                let mut out = Vec::new();
                let err = store.export(&filter, format, &mut out).await.unwrap_err();
                assert!(matches!(err, StoreError::InvalidInput(_)), "{bad:?}: {err}");
                assert!(out.is_empty());
            }
        }
        let err = store.list_conversations(Some(bad), None).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidInput(_)), "{bad:?}: {err}");
    }
}

#[tokio::test]
async fn deleting_runs_takes_their_steps_and_remeasures_their_comparison() {
    let (_dir, store) = temp_store().await;
    let prompt = chat("Count to three");
    let normal = finished_run(
        &store,
        &new_run("normal", "m", prompt.clone(), 0),
        &outcome("1 2 3", 10.0, 1),
        2,
    )
    .await;
    let medusa = finished_run(
        &store,
        &new_run("medusa", "m", prompt.clone(), 2),
        &outcome("1 2 3", 20.0, 3),
        3,
    )
    .await;
    let lookup = finished_run(
        &store,
        &new_run("lookup", "m", prompt.clone(), 4),
        &outcome("1 2 3", 30.0, 5),
        1,
    )
    .await;
    let comparison = store
        .create_comparison(&prompt, &[normal, medusa, lookup])
        .await
        .unwrap();
    assert_eq!(comparison.speedup, Some(3.0));

    let report = store.delete_runs(&[lookup]).await.unwrap();
    assert_eq!(report.deleted, 1);
    assert_eq!(report.comparisons_changed, [comparison.id]);
    assert!(report.comparisons_removed.is_empty());
    assert!(matches!(
        store.get_run(lookup).await,
        Err(StoreError::NotFound { .. })
    ));
    let remeasured = store.get_comparison(comparison.id).await.unwrap();
    assert_eq!(remeasured.run_ids(), [normal, medusa]);
    assert_eq!(remeasured.speedup, Some(2.0));
    let mut raw = raw_connection(&store).await;
    let steps: i64 = sqlx::query_scalar("SELECT count(*) FROM steps WHERE run_id = ?")
        .bind(lookup)
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert_eq!(steps, 0);

    // A running run is refused, and nothing is deleted with it.
    let running = store
        .begin_run(&new_run("normal", "m", prompt.clone(), 6))
        .await
        .unwrap();
    let refused = store.delete_runs(&[normal, running]).await.unwrap_err();
    assert!(refused.to_string().contains("still running"), "{refused}");
    assert_eq!(
        store.get_run(normal).await.unwrap().run.status,
        RunStatus::Finished
    );
    assert!(matches!(
        store.delete_runs(&[999]).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.delete_runs(&[]).await.is_err());

    // The last runs of a comparison take it with them.
    let report = store.delete_runs(&[normal, medusa, normal]).await.unwrap();
    assert_eq!(report.deleted, 2);
    assert_eq!(report.comparisons_removed, [comparison.id]);
    assert!(store.get_comparison(comparison.id).await.is_err());
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap().len(),
        1
    );
}
