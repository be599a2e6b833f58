//! Settlement's rows in the SQLite store: windows, their frozen content,
//! settlements with their accounts, and settlement's posted entries.

use ledger::{
    AccountId, AccountKind, Amount, ContentAccountRow, ContentPairRow, ContentRow, Currency,
    EntryKind, EntryRow, ModelRules, ParticipantId, Record, SettlementAccountRow,
    SettlementModelRow, SettlementRow, SettlementState, Snapshot, WindowRow, WindowState,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, CachedStatement, Row, Transaction};

use crate::sqlite::{id_blob, parse};
use crate::StoreError;

/// The statements one commit writes settlement's records with.
pub(crate) struct SettlementStatements<'t> {
    window: CachedStatement<'t>,
    content: CachedStatement<'t>,
    content_account: CachedStatement<'t>,
    content_pair: CachedStatement<'t>,
    settlement: CachedStatement<'t>,
    settlement_account: CachedStatement<'t>,
    entry: CachedStatement<'t>,
}

impl<'t> SettlementStatements<'t> {
    pub(crate) fn prepare(transaction: &'t Transaction<'_>) -> Result<Self, StoreError> {
        Ok(SettlementStatements {
            window: transaction.prepare_cached(
                "INSERT INTO settlement_windows (id, state, reason, created_at_ms, changed_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, reason = excluded.reason,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            content: transaction.prepare_cached(
                "INSERT INTO settlement_content (id, window_id, ledger_account_type, currency, model_id, state,
                    settlement_id, created_at_ms, changed_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, settlement_id = excluded.settlement_id,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            content_account: transaction.prepare_cached(
                "INSERT INTO settlement_content_accounts (content_id, account_id, sent, sent_count, received,
                    received_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?,
            content_pair: transaction.prepare_cached(
                "INSERT INTO settlement_content_pairs (content_id, payer_id, payee_id, amount, count)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?,
            settlement: transaction.prepare_cached(
                "INSERT INTO settlements (id, model_id, state, reason, external_reference, created_at_ms,
                    changed_at_ms, windows) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (id) DO UPDATE SET state = excluded.state, reason = excluded.reason,
                    external_reference = excluded.external_reference, changed_at_ms = excluded.changed_at_ms",
            )?,
            settlement_account: transaction.prepare_cached(
                "INSERT INTO settlement_accounts (settlement_id, account_id, participant_id, currency, net, state,
                    reason, external_reference, changed_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (settlement_id, account_id) DO UPDATE SET state = excluded.state,
                    reason = excluded.reason, external_reference = excluded.external_reference,
                    changed_at_ms = excluded.changed_at_ms",
            )?,
            entry: transaction.prepare_cached(
                "INSERT INTO settlement_entries (seq, kind, debit_account_id, credit_account_id, amount, at_ms,
                    settlement_id, transfer_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?,
        })
    }

    /// Writes one of settlement's records; any other record is not ours.
    pub(crate) fn write(&mut self, record: &Record) -> Result<(), StoreError> {
        match record {
            Record::Window(row) => {
                self.window.execute(params![
                    row.id,
                    row.state.as_str(),
                    row.reason,
                    row.created_at_ms,
                    row.changed_at_ms
                ])?;
            }
            Record::Content(row) => {
                self.content.execute(params![
                    row.id,
                    row.window,
                    row.ledger_account_type.as_str(),
                    row.currency.as_str(),
                    row.model,
                    row.state.as_str(),
                    row.settlement,
                    row.created_at_ms,
                    row.changed_at_ms
                ])?;
            }
            Record::ContentAccounts(rows) => {
                for row in rows {
                    self.content_account.execute(params![
                        row.content,
                        row.account.0,
                        row.sent.to_string(),
                        row.sent_count,
                        row.received.to_string(),
                        row.received_count
                    ])?;
                }
            }
            Record::ContentPairs(rows) => {
                for row in rows {
                    self.content_pair.execute(params![
                        row.content,
                        row.payer.0,
                        row.payee.0,
                        row.amount.to_string(),
                        row.count
                    ])?;
                }
            }
            Record::Settlement(row) => {
                let windows: Vec<String> = row.windows.iter().map(u32::to_string).collect();
                self.settlement.execute(params![
                    row.id,
                    row.model,
                    row.state.as_str(),
                    row.reason,
                    row.external_reference,
                    row.created_at_ms,
                    row.changed_at_ms,
                    windows.join(",")
                ])?;
                for account in &row.accounts {
                    self.settlement_account.execute(params![
                        row.id,
                        account.account.0,
                        account.participant.0,
                        account.currency.as_str(),
                        account.net.to_string(),
                        account.state.as_str(),
                        account.reason,
                        account.external_reference,
                        account.changed_at_ms
                    ])?;
                }
            }
            Record::Entry(row) => {
                self.entry.execute(params![
                    row.seq as i64,
                    row.kind.as_str(),
                    row.debit.0,
                    row.credit.0,
                    row.amount.to_string(),
                    row.at_ms,
                    row.settlement,
                    row.transfer.map(|id| id.to_blob().as_slice().to_vec())
                ])?;
            }
            other => {
                return Err(StoreError::fatal(format!(
                    "not a settlement record: {other:?}"
                )))
            }
        }
        Ok(())
    }
}

fn amount(row: &Row<'_>, column: usize, what: &str) -> Result<Amount, StoreError> {
    parse(row, column, what, |t| Amount::parse_signed(t).ok())
}

fn currency(row: &Row<'_>, column: usize) -> Result<Currency, StoreError> {
    parse(row, column, "currency", Currency::parse)
}

/// The models' rules, from their columns (granularity to
/// require_liquidity_check, at 3 to 10).
fn rules(row: &Row<'_>) -> Result<Option<ModelRules>, StoreError> {
    let text = |column: usize| -> Result<Option<String>, StoreError> { Ok(row.get(column)?) };
    let flag = |column: usize| row.get::<_, Option<bool>>(column).ok().flatten();
    Ok(crate::model_rules(
        [text(3)?, text(4)?, text(5)?, text(6)?, text(7)?, text(8)?],
        flag(9),
        flag(10),
    ))
}

/// Reads models and settlement's tables (a version 2 store) into `snapshot`.
pub(crate) fn load(
    transaction: &Transaction<'_>,
    snapshot: &mut Snapshot,
) -> Result<(), StoreError> {
    let mut statement = transaction.prepare(
        "SELECT id, name, definition, granularity, interchange, delay, currency, ledger_account_type,
            settlement_account_type, auto_position_reset, require_liquidity_check
         FROM settlement_models ORDER BY id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.settlement_models.push(SettlementModelRow {
            id: row.get(0)?,
            name: row.get(1)?,
            definition: row.get(2)?,
            rules: rules(row)?,
        });
    }
    let mut statement = transaction.prepare(
        "SELECT id, state, reason, created_at_ms, changed_at_ms FROM settlement_windows ORDER BY id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.windows.push(WindowRow {
            id: row.get(0)?,
            state: parse(row, 1, "window state", WindowState::parse)?,
            reason: row.get(2)?,
            created_at_ms: row.get(3)?,
            changed_at_ms: row.get(4)?,
        });
    }
    let mut statement = transaction.prepare(
        "SELECT id, window_id, ledger_account_type, currency, model_id, state, settlement_id, created_at_ms,
            changed_at_ms FROM settlement_content ORDER BY id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.content.push(ContentRow {
            id: row.get(0)?,
            window: row.get(1)?,
            ledger_account_type: parse(row, 2, "ledger account type", AccountKind::parse)?,
            currency: currency(row, 3)?,
            model: row.get(4)?,
            state: parse(row, 5, "content state", WindowState::parse)?,
            settlement: row.get(6)?,
            created_at_ms: row.get(7)?,
            changed_at_ms: row.get(8)?,
        });
    }
    let mut statement = transaction.prepare(
        "SELECT content_id, account_id, sent, sent_count, received, received_count
         FROM settlement_content_accounts ORDER BY content_id, account_id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.content_accounts.push(ContentAccountRow {
            content: row.get(0)?,
            account: AccountId(row.get(1)?),
            sent: amount(row, 2, "sent")?,
            sent_count: row.get(3)?,
            received: amount(row, 4, "received")?,
            received_count: row.get(5)?,
        });
    }
    let mut statement = transaction.prepare(
        "SELECT content_id, payer_id, payee_id, amount, count FROM settlement_content_pairs
         ORDER BY content_id, payer_id, payee_id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.content_pairs.push(ContentPairRow {
            content: row.get(0)?,
            payer: AccountId(row.get(1)?),
            payee: AccountId(row.get(2)?),
            amount: amount(row, 3, "pair amount")?,
            count: row.get(4)?,
        });
    }
    let mut statement = transaction.prepare(
        "SELECT id, model_id, state, reason, external_reference, created_at_ms, changed_at_ms, windows
         FROM settlements ORDER BY id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let windows: String = row.get(7)?;
        snapshot.settlements.push(SettlementRow {
            id: row.get(0)?,
            model: row.get(1)?,
            state: parse(row, 2, "settlement state", SettlementState::parse)?,
            reason: row.get(3)?,
            external_reference: row.get(4)?,
            created_at_ms: row.get(5)?,
            changed_at_ms: row.get(6)?,
            windows: crate::window_list(&windows)?,
            accounts: Vec::new(),
        });
    }
    let mut statement = transaction.prepare(
        "SELECT settlement_id, account_id, participant_id, currency, net, state, reason, external_reference,
            changed_at_ms FROM settlement_accounts ORDER BY settlement_id, account_id",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let settlement: u32 = row.get(0)?;
        let account = SettlementAccountRow {
            account: AccountId(row.get(1)?),
            participant: ParticipantId(row.get(2)?),
            currency: currency(row, 3)?,
            net: amount(row, 4, "net")?,
            state: parse(row, 5, "settlement account state", SettlementState::parse)?,
            reason: row.get(6)?,
            external_reference: row.get(7)?,
            changed_at_ms: row.get(8)?,
        };
        crate::settlement_of(snapshot, settlement)?
            .accounts
            .push(account);
    }
    let mut statement = transaction.prepare(
        "SELECT seq, kind, debit_account_id, credit_account_id, amount, at_ms, settlement_id, transfer_id
         FROM settlement_entries ORDER BY seq",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        snapshot.entries.push(EntryRow {
            seq: row.get::<_, i64>(0)? as u64,
            kind: parse(row, 1, "entry kind", EntryKind::parse)?,
            debit: AccountId(row.get(2)?),
            credit: AccountId(row.get(3)?),
            amount: amount(row, 4, "entry amount")?,
            at_ms: row.get(5)?,
            settlement: row.get(6)?,
            transfer: match row.get_ref(7)? {
                ValueRef::Null => None,
                _ => Some(id_blob(row, 7)?),
            },
        });
    }
    Ok(())
}
