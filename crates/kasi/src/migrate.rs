//! `kasi migrate-store`: copies a hub's whole state from its SQLite data
//! directory into an empty PostgreSQL database, then checks that both
//! sides hold the same state.
//!
//! The copy reads the source in one read transaction, holding the data
//! directory's lock (no hub may serve from it meanwhile), and writes the
//! target through [`store::pg::PgStore`]'s own commits, a chunk of rows per
//! transaction. Transfers, their finishes, parties, quotes and audit events
//! are streamed; the check at the end loads both stores whole.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _};
use ledger::{Record, Snapshot};
use store::delivery::{Delivery, DeliveryDb, DELIVERY_FILE};
use store::pg::{PgStore, TABLES};
use store::pg_delivery::PgDelivery;
use store::sqlite::SqliteStore;
use store::{Store, StoreLocation};

/// Audit events compared per page once copied.
const AUDIT_PAGE: usize = 10_000;

#[derive(clap::Args)]
pub struct MigrateStoreArgs {
    /// The hub's store now: `sqlite:DIR`, its data directory (the hub must
    /// be stopped).
    #[arg(long, value_name = "STORE")]
    from: StoreLocation,

    /// The new store: `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`, an
    /// empty database (kasi creates its schema there).
    #[arg(long, value_name = "STORE")]
    to: StoreLocation,

    /// Transfers (or other rows) per transaction on the target.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    chunk: u32,
}

pub fn run(args: MigrateStoreArgs) -> anyhow::Result<ExitCode> {
    let StoreLocation::Sqlite(dir) = &args.from else {
        bail!(
            "--from {}: migrate-store copies from a SQLite data directory (sqlite:DIR)",
            args.from
        );
    };
    let StoreLocation::Postgres(url) = &args.to else {
        bail!(
            "--to {}: migrate-store copies into a PostgreSQL database (postgres://USER@HOST/DATABASE)",
            args.to
        );
    };
    let (from, to) = (args.from.to_string(), args.to.to_string());
    let started = Instant::now();
    let mut source =
        SqliteStore::open_stopped(dir).with_context(|| format!("cannot read --from {from}"))?;
    let mut target = PgStore::open(url).with_context(|| format!("cannot open --to {to}"))?;
    let held: Vec<String> = target
        .all_row_counts()
        .with_context(|| format!("cannot count the rows of --to {to}"))?
        .into_iter()
        .filter(|(_, rows)| *rows > 0)
        .map(|(table, rows)| format!("{table}: {rows}"))
        .collect();
    if !held.is_empty() {
        bail!(
            "--to {to} already holds a hub's rows ({}): migrate-store copies only into an empty \
             database; create a new one (after a failed migration: drop this one and create it again)",
            held.join(", ")
        );
    }

    // The copy.
    let mut copied: BTreeMap<&'static str, u64> = TABLES.iter().map(|&t| (t, 0)).collect();
    let mut commits = 0u64;
    source
        .export(args.chunk as usize, &mut |records| {
            for record in &records {
                count(&mut copied, record);
            }
            target.commit(&[&records])?;
            commits += 1;
            Ok(())
        })
        .with_context(|| format!("copying {from} to {to} failed after {commits} commits"))?;
    let (watermark, letters) = if dir.join(DELIVERY_FILE).exists() {
        let mut delivery =
            DeliveryDb::open(dir).context("cannot open the source's callbacks.db")?;
        (delivery.watermark()?, delivery.dead_letters()?)
    } else {
        (None, Vec::new())
    };
    let mut target_delivery =
        PgDelivery::open(url, None).with_context(|| format!("cannot open --to {to}"))?;
    if watermark.is_some() || !letters.is_empty() {
        target_delivery
            .apply(watermark, &letters, &[])
            .context("cannot copy the callback delivery state")?;
        commits += 1;
    }
    *copied.entry("callback_watermark").or_default() += u64::from(watermark.is_some());
    *copied.entry("dead_letters").or_default() += letters.len() as u64;
    let copy_ms = started.elapsed().as_millis();

    // The check.
    let checking = Instant::now();
    let difference = check(
        &mut source,
        &mut target,
        &mut target_delivery,
        (watermark, &letters),
        &copied,
    )?;
    let check_ms = checking.elapsed().as_millis();
    if let Some(difference) = difference {
        println!(
            "kasi migrate-store: {from} -> {to}: the copy differs from the source: {difference}"
        );
        println!(
            "kasi migrate-store: do not serve from {to}; drop that database, create it again and \
             run migrate-store again (the source is unchanged)"
        );
        return Ok(ExitCode::from(1));
    }
    println!(
        "kasi migrate-store: {from} -> {to}: copied in {copy_ms} ms ({commits} commits), checked in {check_ms} ms"
    );
    for (table, rows) in target.all_row_counts()? {
        println!("  {table:<28} {rows:>12}");
    }
    println!(
        "kasi migrate-store: both stores hold the same state and the target passes the audit; \
         serve from it with: kasi serve --store {to}"
    );
    Ok(ExitCode::SUCCESS)
}

/// What the target has that the source had not, or the other way round:
/// `None` when both hold the same state.
fn check(
    source: &mut SqliteStore,
    target: &mut PgStore,
    target_delivery: &mut PgDelivery,
    (watermark, letters): (Option<i64>, &[store::delivery::DeadLetterRow]),
    copied: &BTreeMap<&'static str, u64>,
) -> anyhow::Result<Option<String>> {
    for (table, rows) in target.all_row_counts()? {
        let sent = copied.get(table).copied().unwrap_or(0);
        if rows != sent {
            return Ok(Some(format!(
                "{table}: {sent} rows copied, {rows} in the target"
            )));
        }
    }
    let expected = source.load().context("cannot load the source")?;
    let found = target.load().context("cannot load the target")?;
    if let Some(difference) = first_difference(&expected, &found) {
        return Ok(Some(difference));
    }
    drop(expected);
    if let Some(problem) = found.audit().first() {
        return Ok(Some(format!("the audit of the target: {problem}")));
    }
    drop(found);
    let mut after = 0;
    loop {
        let expected = source.audit_events_after(after, AUDIT_PAGE)?;
        let found = target.audit_events_after(after, AUDIT_PAGE)?;
        if let Some(difference) = list_difference("audit_events", &expected, &found) {
            return Ok(Some(difference));
        }
        match expected.last() {
            Some(last) => after = last.id,
            None => break,
        }
    }
    let found_watermark = target_delivery.watermark()?;
    if found_watermark != watermark {
        return Ok(Some(format!(
            "callback watermark: source {watermark:?}, target {found_watermark:?}"
        )));
    }
    let found_letters = target_delivery.dead_letters()?;
    Ok(list_difference("dead_letters", letters, &found_letters))
}

/// The first row that differs between two loaded stores, by table.
fn first_difference(source: &Snapshot, target: &Snapshot) -> Option<String> {
    macro_rules! tables {
        ($($field:ident),* $(,)?) => {
            $(
                if let Some(difference) =
                    list_difference(stringify!($field), &source.$field, &target.$field)
                {
                    return Some(difference);
                }
            )*
        };
    }
    tables!(
        participants,
        accounts,
        transfers,
        finishes,
        endpoints,
        settlement_models,
        parties,
        oracles,
        quotes,
        windows,
        content,
        content_accounts,
        content_pairs,
        settlements,
        entries,
        audit_events,
        certificate_pins,
        conversion_fulfils,
        fxps,
    );
    if source.archived != target.archived {
        return Some(format!(
            "archived: source {:?}, target {:?}",
            source.archived, target.archived
        ));
    }
    (source != target).then(|| "the loaded stores differ".to_string())
}

fn list_difference<T: PartialEq + Debug>(
    table: &str,
    source: &[T],
    target: &[T],
) -> Option<String> {
    if let Some((at, (a, b))) = source
        .iter()
        .zip(target)
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        return Some(format!("{table}[{at}]: source {a:?}, target {b:?}"));
    }
    (source.len() != target.len()).then(|| {
        format!(
            "{table}: {} rows in the source, {} in the target",
            source.len(),
            target.len()
        )
    })
}

/// Counts a record's rows under the tables they land in.
fn count(copied: &mut BTreeMap<&'static str, u64>, record: &Record) {
    let mut add = |table: &'static str, rows: usize| {
        *copied.entry(table).or_default() += rows as u64;
    };
    match record {
        Record::Participant(_) => add("participants", 1),
        Record::Account(_) => add("accounts", 1),
        Record::Transfer(row) => {
            add("transfers", 1);
            add("transfer_fx", usize::from(row.fx.is_some()));
        }
        Record::Finish(_) => add("transfer_finishes", 1),
        Record::Endpoint(_) => add("endpoints", 1),
        Record::SettlementModel(_) => add("settlement_models", 1),
        Record::Party(_) => add("parties", 1),
        Record::Oracle(_) => add("oracles", 1),
        Record::ProxyMapping(_) => add("proxy_map", 1),
        Record::Quote(_) => add("quotes", 1),
        Record::Window(_) => add("settlement_windows", 1),
        Record::Content(_) => add("settlement_content", 1),
        Record::ContentAccounts(rows) => add("settlement_content_accounts", rows.len()),
        Record::ContentPairs(rows) => add("settlement_content_pairs", rows.len()),
        Record::Settlement(row) => {
            add("settlements", 1);
            add("settlement_accounts", row.accounts.len());
        }
        Record::Entry(_) => add("settlement_entries", 1),
        Record::AuditEvent(_) => add("audit_events", 1),
        Record::CertificatePin(_) => add("certificate_pins", 1),
        Record::ConversionFulfilled(_) => add("conversion_fulfils", 1),
        // An FXP withdrawn has no row.
        Record::Fxp(row) => add("fxps", usize::from(!row.corridors.is_empty())),
        Record::PendingChange(_) => add("pending_changes", 1),
        // An export writes rows as they are: no deletions. A transfer's
        // parties are search columns of its row, which a load does not
        // read back: an export has none to write.
        Record::PartyDeleted(_)
        | Record::OracleDeleted(_)
        | Record::ProxyUnmapped(_)
        | Record::CertificateUnpinned(_)
        | Record::TransferParties(..) => {}
    }
}
