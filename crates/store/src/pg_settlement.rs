//! Settlement's rows in the PostgreSQL store: windows, their frozen
//! content, settlements with their accounts, settlement's posted entries.
//! The same rows as `sqlite_settlement.rs`.

use ledger::{
    AccountKind, ContentAccountRow, ContentPairRow, ContentRow, EntryKind, EntryRow, Record,
    SettlementAccountRow, SettlementModelRow, SettlementRow, SettlementState, Snapshot, WindowRow,
    WindowState,
};
use postgres::{Statement, Transaction};

use crate::pg_rows::{account, amount, col, currency, id, narrow, narrow_opt, parsed, participant};
use crate::StoreError;

/// The statements settlement's records are written with (prepared with the
/// store's others).
pub(crate) struct Statements<'s> {
    pub(crate) window: &'s Statement,
    pub(crate) content: &'s Statement,
    pub(crate) content_accounts: &'s Statement,
    pub(crate) content_pairs: &'s Statement,
    pub(crate) settlement: &'s Statement,
    pub(crate) settlement_accounts: &'s Statement,
}

/// Writes one of settlement's records (entries go by [`write_entries`]).
pub(crate) fn write(
    transaction: &mut Transaction<'_>,
    statements: Statements<'_>,
    record: &Record,
) -> Result<(), StoreError> {
    match record {
        Record::Window(row) => {
            transaction.execute(
                statements.window,
                &[
                    &i64::from(row.id),
                    &row.state.as_str(),
                    &row.reason,
                    &row.created_at_ms,
                    &row.changed_at_ms,
                ],
            )?;
        }
        Record::Content(row) => {
            transaction.execute(
                statements.content,
                &[
                    &i64::from(row.id),
                    &i64::from(row.window),
                    &row.ledger_account_type.as_str(),
                    &row.currency.as_str(),
                    &i64::from(row.model),
                    &row.state.as_str(),
                    &row.settlement.map(i64::from),
                    &row.created_at_ms,
                    &row.changed_at_ms,
                ],
            )?;
        }
        Record::ContentAccounts(rows) if !rows.is_empty() => {
            let content: Vec<i64> = rows.iter().map(|r| i64::from(r.content)).collect();
            let account: Vec<i64> = rows.iter().map(|r| i64::from(r.account.0)).collect();
            let sent: Vec<String> = rows.iter().map(|r| r.sent.to_string()).collect();
            let sent_count: Vec<i64> = rows.iter().map(|r| i64::from(r.sent_count)).collect();
            let received: Vec<String> = rows.iter().map(|r| r.received.to_string()).collect();
            let received_count: Vec<i64> =
                rows.iter().map(|r| i64::from(r.received_count)).collect();
            transaction.execute(
                statements.content_accounts,
                &[
                    &content,
                    &account,
                    &sent,
                    &sent_count,
                    &received,
                    &received_count,
                ],
            )?;
        }
        Record::ContentPairs(rows) if !rows.is_empty() => {
            let content: Vec<i64> = rows.iter().map(|r| i64::from(r.content)).collect();
            let payer: Vec<i64> = rows.iter().map(|r| i64::from(r.payer.0)).collect();
            let payee: Vec<i64> = rows.iter().map(|r| i64::from(r.payee.0)).collect();
            let amount: Vec<String> = rows.iter().map(|r| r.amount.to_string()).collect();
            let count: Vec<i64> = rows.iter().map(|r| i64::from(r.count)).collect();
            transaction.execute(
                statements.content_pairs,
                &[&content, &payer, &payee, &amount, &count],
            )?;
        }
        Record::ContentAccounts(_) | Record::ContentPairs(_) => {}
        Record::Settlement(row) => {
            let windows: Vec<String> = row.windows.iter().map(u32::to_string).collect();
            transaction.execute(
                statements.settlement,
                &[
                    &i64::from(row.id),
                    &i64::from(row.model),
                    &row.state.as_str(),
                    &row.reason,
                    &row.external_reference,
                    &row.created_at_ms,
                    &row.changed_at_ms,
                    &windows.join(","),
                ],
            )?;
            let accounts = &row.accounts;
            if !accounts.is_empty() {
                let settlement: Vec<i64> = accounts.iter().map(|_| i64::from(row.id)).collect();
                let account: Vec<i64> = accounts.iter().map(|a| i64::from(a.account.0)).collect();
                let participant: Vec<i64> = accounts
                    .iter()
                    .map(|a| i64::from(a.participant.0))
                    .collect();
                let currency: Vec<&str> = accounts.iter().map(|a| a.currency.as_str()).collect();
                let net: Vec<String> = accounts.iter().map(|a| a.net.to_string()).collect();
                let state: Vec<&str> = accounts.iter().map(|a| a.state.as_str()).collect();
                let reason: Vec<&str> = accounts.iter().map(|a| a.reason.as_str()).collect();
                let external: Vec<Option<&str>> = accounts
                    .iter()
                    .map(|a| a.external_reference.as_deref())
                    .collect();
                let changed: Vec<i64> = accounts.iter().map(|a| a.changed_at_ms).collect();
                transaction.execute(
                    statements.settlement_accounts,
                    &[
                        &settlement,
                        &account,
                        &participant,
                        &currency,
                        &net,
                        &state,
                        &reason,
                        &external,
                        &changed,
                    ],
                )?;
            }
        }
        other => {
            return Err(StoreError::fatal(format!(
                "not a settlement record: {other:?}"
            )))
        }
    }
    Ok(())
}

/// Settlement's posted movements of one commit, in one statement.
pub(crate) fn write_entries(
    transaction: &mut Transaction<'_>,
    statement: &Statement,
    rows: &[&EntryRow],
) -> Result<(), StoreError> {
    let seq: Vec<i64> = rows.iter().map(|r| r.seq as i64).collect();
    let kind: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let debit: Vec<i64> = rows.iter().map(|r| i64::from(r.debit.0)).collect();
    let credit: Vec<i64> = rows.iter().map(|r| i64::from(r.credit.0)).collect();
    let amount: Vec<String> = rows.iter().map(|r| r.amount.to_string()).collect();
    let at: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
    let settlement: Vec<Option<i64>> = rows.iter().map(|r| r.settlement.map(i64::from)).collect();
    let transfer: Vec<Option<Vec<u8>>> = rows
        .iter()
        .map(|r| r.transfer.map(|id| id.to_blob().as_slice().to_vec()))
        .collect();
    transaction.execute(
        statement,
        &[
            &seq,
            &kind,
            &debit,
            &credit,
            &amount,
            &at,
            &settlement,
            &transfer,
        ],
    )?;
    Ok(())
}

/// Reads models and settlement's tables into `snapshot`.
pub(crate) fn load(
    transaction: &mut Transaction<'_>,
    snapshot: &mut Snapshot,
) -> Result<(), StoreError> {
    for row in transaction.query(
        "SELECT id, name, definition, granularity, interchange, delay, currency, ledger_account_type,
            settlement_account_type, auto_position_reset, require_liquidity_check
         FROM settlement_models ORDER BY id",
        &[],
    )? {
        let text = |index: usize| col::<Option<String>>(&row, index);
        snapshot.settlement_models.push(SettlementModelRow {
            id: narrow(&row, 0)?,
            name: col(&row, 1)?,
            definition: col(&row, 2)?,
            rules: crate::model_rules(
                [text(3)?, text(4)?, text(5)?, text(6)?, text(7)?, text(8)?],
                col(&row, 9)?,
                col(&row, 10)?,
            ),
        });
    }
    for row in transaction.query(
        "SELECT id, state, reason, created_at_ms, changed_at_ms FROM settlement_windows ORDER BY id",
        &[],
    )? {
        snapshot.windows.push(WindowRow {
            id: narrow(&row, 0)?,
            state: parsed(&row, 1, "window state", WindowState::parse)?,
            reason: col(&row, 2)?,
            created_at_ms: col(&row, 3)?,
            changed_at_ms: col(&row, 4)?,
        });
    }
    for row in transaction.query(
        "SELECT id, window_id, ledger_account_type, currency, model_id, state, settlement_id, created_at_ms,
            changed_at_ms FROM settlement_content ORDER BY id",
        &[],
    )? {
        snapshot.content.push(ContentRow {
            id: narrow(&row, 0)?,
            window: narrow(&row, 1)?,
            ledger_account_type: parsed(&row, 2, "ledger account type", AccountKind::parse)?,
            currency: currency(&row, 3)?,
            model: narrow(&row, 4)?,
            state: parsed(&row, 5, "content state", WindowState::parse)?,
            settlement: narrow_opt(&row, 6)?,
            created_at_ms: col(&row, 7)?,
            changed_at_ms: col(&row, 8)?,
        });
    }
    for row in transaction.query(
        "SELECT content_id, account_id, sent, sent_count, received, received_count
         FROM settlement_content_accounts ORDER BY content_id, account_id",
        &[],
    )? {
        snapshot.content_accounts.push(ContentAccountRow {
            content: narrow(&row, 0)?,
            account: account(&row, 1)?,
            sent: amount(&row, 2, "sent")?,
            sent_count: narrow(&row, 3)?,
            received: amount(&row, 4, "received")?,
            received_count: narrow(&row, 5)?,
        });
    }
    for row in transaction.query(
        "SELECT content_id, payer_id, payee_id, amount, count FROM settlement_content_pairs
         ORDER BY content_id, payer_id, payee_id",
        &[],
    )? {
        snapshot.content_pairs.push(ContentPairRow {
            content: narrow(&row, 0)?,
            payer: account(&row, 1)?,
            payee: account(&row, 2)?,
            amount: amount(&row, 3, "pair amount")?,
            count: narrow(&row, 4)?,
        });
    }
    for row in transaction.query(
        "SELECT id, model_id, state, reason, external_reference, created_at_ms, changed_at_ms, windows
         FROM settlements ORDER BY id",
        &[],
    )? {
        let windows: String = col(&row, 7)?;
        snapshot.settlements.push(SettlementRow {
            id: narrow(&row, 0)?,
            model: narrow(&row, 1)?,
            state: parsed(&row, 2, "settlement state", SettlementState::parse)?,
            reason: col(&row, 3)?,
            external_reference: col(&row, 4)?,
            created_at_ms: col(&row, 5)?,
            changed_at_ms: col(&row, 6)?,
            windows: crate::window_list(&windows)?,
            accounts: Vec::new(),
        });
    }
    for row in transaction.query(
        "SELECT settlement_id, account_id, participant_id, currency, net, state, reason, external_reference,
            changed_at_ms FROM settlement_accounts ORDER BY settlement_id, account_id",
        &[],
    )? {
        let settlement: u32 = narrow(&row, 0)?;
        let account = SettlementAccountRow {
            account: account(&row, 1)?,
            participant: participant(&row, 2)?,
            currency: currency(&row, 3)?,
            net: amount(&row, 4, "net")?,
            state: parsed(&row, 5, "settlement account state", SettlementState::parse)?,
            reason: col(&row, 6)?,
            external_reference: col(&row, 7)?,
            changed_at_ms: col(&row, 8)?,
        };
        crate::settlement_of(snapshot, settlement)?
            .accounts
            .push(account);
    }
    for row in transaction.query(
        "SELECT seq, kind, debit_account_id, credit_account_id, amount, at_ms, settlement_id, transfer_id
         FROM settlement_entries ORDER BY seq",
        &[],
    )? {
        snapshot.entries.push(EntryRow {
            seq: narrow(&row, 0)?,
            kind: parsed(&row, 1, "entry kind", EntryKind::parse)?,
            debit: account(&row, 2)?,
            credit: account(&row, 3)?,
            amount: amount(&row, 4, "entry amount")?,
            at_ms: col(&row, 5)?,
            settlement: narrow_opt(&row, 6)?,
            transfer: match col::<Option<&[u8]>>(&row, 7)? {
                None => None,
                Some(_) => Some(id(&row, 7)?),
            },
        });
    }
    Ok(())
}
