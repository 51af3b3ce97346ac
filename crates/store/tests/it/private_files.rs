//! The history is the user's alone: its files are 0600 and a directory made for it 0700, when
//! they are created and again whenever the history is opened.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use store::Store;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The database and the WAL and shared-memory files SQLite keeps beside it while it is open.
fn database_files(db: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [with(""), with("-wal"), with("-shm")]
}

/// Writes a little, so that the WAL holds something.
async fn write_something(store: &Store) {
    store
        .create_conversation(&Default::default())
        .await
        .expect("a conversation is created");
}

#[tokio::test]
async fn the_history_is_private_when_created_and_when_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("made/for/it");
    let db = data.join("history.sqlite");

    let store = Store::open(&db).await.unwrap();
    write_something(&store).await;
    assert_eq!(mode(&data), 0o700, "the directory made for the history");
    assert_eq!(
        mode(&dir.path().join("made")),
        0o700,
        "and its parents made with it"
    );
    for file in database_files(&db) {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }

    // Files others could read (an earlier version's, or copied in) are made private on open,
    // while the store holds them open and after it let them go.
    for file in database_files(&db) {
        set_mode(&file, 0o644);
    }
    let again = Store::open(&db).await.unwrap();
    write_something(&again).await;
    for file in database_files(&db) {
        assert_eq!(mode(&file), 0o600, "{} reopened", file.display());
    }
    again.close().await;
    store.close().await;
    for file in database_files(&db).iter().filter(|f| f.exists()) {
        set_mode(file, 0o666);
    }
    let reopened = Store::open(&db).await.unwrap();
    write_something(&reopened).await;
    for file in database_files(&db) {
        assert_eq!(mode(&file), 0o600, "{} after a restart", file.display());
    }
    assert_eq!(mode(&data), 0o700);
    // What was written is all there.
    assert_eq!(
        reopened.list_conversations(None, None).await.unwrap().len(),
        3
    );
}

#[tokio::test]
async fn an_existing_history_file_keeps_its_data_and_loses_others_access() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.sqlite");
    {
        let store = Store::open(&db).await.unwrap();
        write_something(&store).await;
        store.close().await;
    }
    set_mode(&db, 0o644);
    set_mode(dir.path(), 0o755);
    let store = Store::open(&db).await.unwrap();
    assert_eq!(mode(&db), 0o600);
    // A directory the user chose may hold other things: it is left as it is.
    assert_eq!(mode(dir.path()), 0o755);
    assert_eq!(store.list_conversations(None, None).await.unwrap().len(), 1);
}
