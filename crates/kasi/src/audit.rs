//! `kasi audit`: recompute every account from the recorded transfers.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use store::sqlite::SqliteStore;
use store::Store as _;

pub fn run(data_dir: &Path) -> anyhow::Result<ExitCode> {
    let mut store = SqliteStore::open_read_only(data_dir).context("cannot open the store")?;
    let snapshot = store.load().context("cannot read the store")?;
    let problems = snapshot.audit();
    let summary = format!(
        "{} participants, {} accounts, {} transfers, {} finished",
        snapshot.participants.len(),
        snapshot.accounts.len(),
        snapshot.transfers.len(),
        snapshot.finishes.len()
    );
    if problems.is_empty() {
        println!(
            "kasi audit: {} ({summary}): every account matches its transfers",
            store.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "kasi audit: {} ({summary}): {} problems",
        store.describe(),
        problems.len()
    );
    for problem in &problems {
        println!("  {problem}");
    }
    Ok(ExitCode::from(1))
}
