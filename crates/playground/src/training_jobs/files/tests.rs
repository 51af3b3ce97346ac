use super::*;

#[test]
fn new_heads_never_replace_existing_ones_nor_take_another_jobs_name() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.Q4_0.gguf");
    let none = HashSet::new();
    assert_eq!(
        heads_path_for(&model, &none),
        dir.path().join("tiny.Q4_0.medusa.gguf")
    );
    std::fs::write(dir.path().join("tiny.Q4_0.medusa.gguf"), b"x").unwrap();
    assert_eq!(
        heads_path_for(&model, &none),
        dir.path().join("tiny.Q4_0-2.medusa.gguf")
    );
    std::fs::write(dir.path().join("tiny.Q4_0-2.medusa.gguf"), b"x").unwrap();
    assert_eq!(
        heads_path_for(&model, &none),
        dir.path().join("tiny.Q4_0-3.medusa.gguf")
    );
    // A job that has not written its heads yet keeps its name from later jobs.
    let taken = HashSet::from([dir.path().join("tiny.Q4_0-3.medusa.gguf")]);
    assert_eq!(
        heads_path_for(&model, &taken),
        dir.path().join("tiny.Q4_0-4.medusa.gguf")
    );
    // A dangling link is a name taken too.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(
            dir.path().join("gone"),
            dir.path().join("tiny.Q4_0-4.medusa.gguf"),
        )
        .unwrap();
        assert_eq!(
            heads_path_for(&model, &taken),
            dir.path().join("tiny.Q4_0-5.medusa.gguf")
        );
    }
}

#[test]
fn finished_heads_go_beside_a_file_that_took_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    let planned = dir.path().join("tiny.medusa.gguf");
    let staged = dir.path().join("tiny.medusa.gguf.training");
    std::fs::write(&staged, b"new heads").unwrap();
    assert_eq!(
        place_heads(&staged, &planned, &model, &HashSet::new()).unwrap(),
        planned
    );
    assert_eq!(std::fs::read(&planned).unwrap(), b"new heads");
    assert!(!staged.exists());

    // Planned as -2, but a file took that name meanwhile and -3 is another job's.
    let planned = dir.path().join("tiny-2.medusa.gguf");
    std::fs::write(&planned, b"somebody's heads").unwrap();
    std::fs::write(&staged, b"newer heads").unwrap();
    let taken = HashSet::from([dir.path().join("tiny-3.medusa.gguf")]);
    let placed = place_heads(&staged, &planned, &model, &taken).unwrap();
    assert_eq!(placed, dir.path().join("tiny-4.medusa.gguf"));
    assert_eq!(std::fs::read(&placed).unwrap(), b"newer heads");
    assert_eq!(std::fs::read(&planned).unwrap(), b"somebody's heads");
    assert_eq!(
        std::fs::read(dir.path().join("tiny.medusa.gguf")).unwrap(),
        b"new heads"
    );
}
