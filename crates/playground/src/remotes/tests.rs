use super::*;

fn spec(name: &str, key: Option<&str>) -> RemoteSpec {
    RemoteSpec::new(name, "http://127.0.0.1:9", key.map(str::to_owned)).unwrap()
}

#[tokio::test]
async fn saved_engines_come_back_with_their_keys_from_a_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = remotes_file_for(&dir.path().join("history.sqlite")).unwrap();
    let remotes = Remotes::load(Some(file.clone()));
    // Port 9 answers nothing: added anyway, with the reason.
    let added = remotes
        .add(spec("lab", Some("sk-secret")), true)
        .await
        .unwrap();
    assert!(added.has_key && added.saved);
    assert_eq!(added.error.unwrap().code, "remote_unreachable");
    remotes.add(spec("session", None), false).await.unwrap();
    let err = remotes.add(spec("lab", None), true).await.unwrap_err();
    assert_eq!(err.code, "remote_exists");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = Remotes::load(Some(file.clone()));
    let names: Vec<String> = again.list().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["lab"]);
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("sk-secret"));

    again.remove("lab").unwrap();
    assert_eq!(again.remove("lab").unwrap_err().code, "remote_not_found");
    assert!(Remotes::load(Some(file)).list().is_empty());
}

#[test]
fn an_unreadable_file_is_set_aside_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = remotes_file_for(&dir.path().join("history.sqlite")).unwrap();
    std::fs::write(&file, "{not json").unwrap();
    assert!(Remotes::load(Some(file.clone())).list().is_empty());
    assert!(!file.exists());
    let aside = dir.path().join("history.sqlite.remotes.json.unreadable");
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "{not json");
}

/// A file that starts as a SQLite database does, which is all the folder's scan reads.
fn database(path: &Path) -> PathBuf {
    std::fs::write(path, [&SQLITE_HEADER[..], &[0u8; 84]].concat()).unwrap();
    path.to_path_buf()
}

fn names(remotes: &Remotes) -> Vec<String> {
    remotes.list().into_iter().map(|r| r.name).collect()
}

#[test]
fn each_database_keeps_its_own_file() {
    assert_eq!(
        remotes_file_for(Path::new("/data/history.sqlite")),
        Some(PathBuf::from("/data/history.sqlite.remotes.json"))
    );
    assert_eq!(
        remotes_file_for(Path::new("h.db")),
        Some(PathBuf::from("h.db.remotes.json"))
    );
    assert_eq!(remotes_file_for(Path::new("/")), None);
}

#[tokio::test]
async fn two_databases_in_one_folder_keep_two_lists() {
    let dir = tempfile::tempdir().unwrap();
    let first = database(&dir.path().join("first.sqlite"));
    let second = database(&dir.path().join("second.sqlite"));
    Remotes::for_database(&first)
        .add(spec("lab", Some("sk-first")), true)
        .await
        .unwrap();
    assert!(names(&Remotes::for_database(&second)).is_empty());
    assert_eq!(names(&Remotes::for_database(&first)), ["lab"]);
    assert!(dir.path().join("first.sqlite.remotes.json").is_file());
    assert!(!dir.path().join(SHARED_REMOTES_FILE).exists());
}

#[tokio::test]
async fn the_shared_file_of_a_lone_database_becomes_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir.path().join("history.sqlite"));
    // Its companions are no other databases.
    std::fs::write(dir.path().join("history.sqlite-wal"), b"").unwrap();
    let shared = dir.path().join(SHARED_REMOTES_FILE);
    let earlier = Remotes::load(Some(shared.clone()));
    earlier
        .add(spec("lab", Some("sk-lab")), true)
        .await
        .unwrap();

    let remotes = Remotes::for_database(&db);
    assert_eq!(names(&remotes), ["lab"]);
    assert!(!shared.exists());
    let own = dir.path().join("history.sqlite.remotes.json");
    assert!(std::fs::read_to_string(&own).unwrap().contains("sk-lab"));
    // A shared file that shows up later is not taken over the database's own.
    std::fs::write(&shared, r#"{"remotes": []}"#).unwrap();
    assert_eq!(names(&Remotes::for_database(&db)), ["lab"]);
    assert!(shared.exists());
}

#[tokio::test]
async fn a_shared_file_two_databases_could_own_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let first = database(&dir.path().join("first.sqlite"));
    database(&dir.path().join("second.db"));
    let shared = dir.path().join(SHARED_REMOTES_FILE);
    Remotes::load(Some(shared.clone()))
        .add(spec("lab", None), true)
        .await
        .unwrap();
    let before = std::fs::read_to_string(&shared).unwrap();
    assert!(names(&Remotes::for_database(&first)).is_empty());
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), before);
    assert!(!dir.path().join("first.sqlite.remotes.json").exists());
}

#[tokio::test]
async fn a_named_model_needs_no_answer_and_an_unknown_engine_is_named() {
    let remotes = Remotes::load(None);
    remotes.add(spec("lab", None), true).await.unwrap();
    // The engine does not answer: with a model named the run goes on, as to a plain OpenAI
    // server (sent OpenAI's fields only).
    let (engine, model, kind) = remotes.target("lab", Some("big".into())).await.unwrap();
    assert_eq!((engine.name(), model.as_str()), ("lab", "big"));
    assert_eq!(kind, RemoteKind::OpenAi);
    // Nothing answers on port 9, so the default model cannot be known.
    let err = remotes.target("lab", None).await.unwrap_err();
    assert_eq!(err.code, "remote_unreachable");
    assert_eq!(err.kind, ErrorKind::Upstream);
    let err = remotes.target("nope", None).await.unwrap_err();
    assert_eq!(err.code, "remote_not_found");
}
