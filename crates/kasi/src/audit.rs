//! `kasi audit`: recompute every account from the recorded transfers.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use store::sqlite::SqliteStore;

pub fn run(data_dir: &Path) -> anyhow::Result<ExitCode> {
    let store = SqliteStore::open_read_only(data_dir).context("cannot open the store")?;
    audit(store)
}

/// `kasi audit --store postgres://…`: the history snapshot against the
/// whole history in one REPEATABLE READ transaction, then every account
/// against its transfers in another.
pub fn run_postgres(url: &str) -> anyhow::Result<ExitCode> {
    let mut store = store::pg::PgStore::open_read_only(url).context("cannot open the store")?;
    let history = store
        .check_history_snapshot()
        .context("cannot check the history snapshot")?;
    report(&mut store, history)
}

/// `kasi audit --file`: a backup, or a store file on read-only media.
pub fn run_file(file: &Path) -> anyhow::Result<ExitCode> {
    let store = SqliteStore::open_file_read_only(file).context("cannot open the store")?;
    audit(store)
}

/// `kasi backup`: copy, then audit the copy.
pub fn backup(data_dir: &Path, to: &Path) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let summary = SqliteStore::backup(data_dir, to)
        .with_context(|| format!("cannot back up {} to {}", data_dir.display(), to.display()))?;
    println!(
        "kasi backup: {} -> {} ({} pages, {} bytes, schema version {}) in {} ms",
        data_dir.display(),
        to.display(),
        summary.pages,
        summary.bytes,
        summary.schema_version,
        started.elapsed().as_millis()
    );
    run_file(to)
}

fn audit(mut store: SqliteStore) -> anyhow::Result<ExitCode> {
    let history = store
        .check_history_snapshot()
        .context("cannot check the history snapshot")?;
    report(&mut store, history)
}

/// Loads every row, audits, prints what it found; exit 1 on any problem.
fn report(
    store: &mut dyn store::Store,
    history: Option<store::history::HistoryCheck>,
) -> anyhow::Result<ExitCode> {
    let snapshot = store.load().context("cannot read the store")?;
    let problems = snapshot.audit();
    let summary = format!(
        "{} participants, {} accounts, {} transfers, {} finished",
        snapshot.participants.len(),
        snapshot.accounts.len(),
        snapshot.transfers.len(),
        snapshot.finishes.len()
    );
    match &history {
        None => {}
        Some((through, Ok(()))) => println!(
            "kasi audit: the history snapshot (through seq {through}) agrees with the whole history"
        ),
        Some((through, Err(difference))) => println!(
            "kasi audit: the history snapshot (through seq {through}) does not agree with the whole history: {difference} (a restart drops it and reads the whole history)"
        ),
    }
    let history_agrees = !matches!(history, Some((_, Err(_))));
    if problems.is_empty() && history_agrees {
        println!(
            "kasi audit: {} ({summary}): every account matches its transfers",
            store.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if problems.is_empty() {
        println!(
            "kasi audit: {} ({summary}): every account matches its transfers, but the history snapshot does not",
            store.describe()
        );
        return Ok(ExitCode::from(1));
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
