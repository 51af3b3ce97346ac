//! Heads training jobs in the history: a job ends, is deleted as a whole, and a running one
//! stays.

use serde_json::json;
use store::{training_job_name, NewTrainingJob, StoreError, TrainingProgress, TrainingStatus};

use crate::common::*;

fn new_job(name: &str) -> NewTrainingJob {
    NewTrainingJob {
        model_name: name.into(),
        model_path: format!("/models/{name}.gguf"),
        heads_path: None,
        settings: json!({"samples": 40}),
        figures: json!({"answered": 0}),
    }
}

#[tokio::test]
async fn a_job_that_ended_is_deleted_and_a_running_one_is_refused() {
    let (_dir, store) = temp_store().await;
    let kept = store.begin_training_job(&new_job("kept")).await.unwrap();
    let job = store.begin_training_job(&new_job("tiny")).await.unwrap();

    let refused = store.delete_training_job(job.id).await.unwrap_err();
    assert!(matches!(refused, StoreError::InvalidInput(_)), "{refused}");
    assert!(refused.to_string().contains("running"), "{refused}");

    let ended = TrainingProgress {
        status: TrainingStatus::Cancelled,
        phase: "collecting".into(),
        figures: json!({"answered": 12}),
        data_path: Some("/data/job.data".into()),
        heads_path: None,
        report: None,
        error: None,
    };
    store.update_training_job(job.id, &ended).await.unwrap();
    let deleted = store.delete_training_job(job.id).await.unwrap();
    assert_eq!(deleted.id, job.id);
    assert_eq!(deleted.status, TrainingStatus::Cancelled);
    assert_eq!(deleted.data_path.as_deref(), Some("/data/job.data"));

    assert!(matches!(
        store.get_training_job(job.id).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
    assert!(matches!(
        store.delete_training_job(job.id).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
    let left: Vec<i64> = store
        .list_training_jobs()
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(left, [kept.id]);
}

#[tokio::test]
async fn a_job_is_named_by_its_heads_file_and_keeps_it_from_other_jobs() {
    let (_dir, store) = temp_store().await;
    let first = store
        .begin_training_job(&NewTrainingJob {
            heads_path: Some("/models/tiny.medusa.gguf".into()),
            ..new_job("tiny")
        })
        .await
        .unwrap();
    let second = store
        .begin_training_job(&NewTrainingJob {
            heads_path: Some("/models/tiny-2.medusa.gguf".into()),
            ..new_job("tiny")
        })
        .await
        .unwrap();
    let unplanned = store.begin_training_job(&new_job("tiny")).await.unwrap();
    assert_eq!(first.name, "tiny.medusa.gguf");
    assert_eq!(second.name, "tiny-2.medusa.gguf");
    assert_eq!(unplanned.name, format!("tiny (job {})", unplanned.id));
    let listed: Vec<String> = store
        .list_training_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.name)
        .collect();
    assert_eq!(
        listed,
        [
            unplanned.name.clone(),
            "tiny-2.medusa.gguf".into(),
            "tiny.medusa.gguf".into()
        ]
    );

    let mut taken = store.training_heads_paths(None).await.unwrap();
    taken.sort();
    assert_eq!(
        taken,
        ["/models/tiny-2.medusa.gguf", "/models/tiny.medusa.gguf"]
    );
    assert_eq!(
        store.training_heads_paths(Some(first.id)).await.unwrap(),
        ["/models/tiny-2.medusa.gguf"]
    );

    let mut renamed = unplanned.clone();
    renamed.set_heads_path(Some("/models/tiny-3.medusa.gguf".into()));
    assert_eq!(renamed.name, "tiny-3.medusa.gguf");
    assert_eq!(training_job_name(None, "m.Q4_0", 7), "m.Q4_0 (job 7)");
}
