use super::*;

#[test]
fn display_text_is_the_last_user_message() {
    let chat = PromptRecord::Chat(vec![
        MessageRecord::new("system", "be brief"),
        MessageRecord::new("user", "first"),
        MessageRecord::new("assistant", "ok"),
        MessageRecord::new("user", "second"),
        MessageRecord::new("assistant", "fine"),
    ]);
    assert_eq!(chat.display_text(), "second");
    let no_user = PromptRecord::Chat(vec![MessageRecord::new("system", "only")]);
    assert_eq!(no_user.display_text(), "only");
    assert_eq!(PromptRecord::Chat(Vec::new()).display_text(), "");
    assert_eq!(PromptRecord::Text("plain".into()).display_text(), "plain");
}

#[test]
fn prompt_serialises_with_kind_and_content() {
    let text = serde_json::to_value(PromptRecord::Text("hi".into())).unwrap();
    assert_eq!(text, serde_json::json!({"kind": "text", "content": "hi"}));
    let chat =
        serde_json::to_value(PromptRecord::Chat(vec![MessageRecord::new("user", "hi")])).unwrap();
    assert_eq!(
        chat,
        serde_json::json!({"kind": "chat", "content": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn status_round_trips_through_text_and_serde() {
    for status in RunStatus::ALL {
        assert_eq!(status.as_str().parse::<RunStatus>().unwrap(), status);
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(json, format!("\"{}\"", status.as_str()));
    }
    assert!(matches!(
        "done".parse::<RunStatus>(),
        Err(StoreError::InvalidInput(_))
    ));
}
