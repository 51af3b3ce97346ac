//! The UI's TypeScript types are the Rust types: this fails when `contract.ts` is stale.

use std::path::PathBuf;

use playground::contract::{typescript, CONTRACT_PATH};

#[test]
fn the_ui_contract_is_generated_from_the_rust_types() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(CONTRACT_PATH);
    let generated = typescript();
    if std::env::var_os("UPDATE_CONTRACT").is_some() {
        std::fs::write(&path, &generated).expect("writing the contract");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: run `UPDATE_CONTRACT=1 cargo test -p playground --test contract` and commit it",
        path.display()
    );
}
