//! Point reads of the PostgreSQL store beside the pipeline: transfers and
//! quotes that left the ledger's memory, and the transfers whose callbacks
//! are derived again after a restart. A connection of its own, opened
//! again on the next read when it is lost.

use ledger::{Condition, FspName, Lookup, PrefetchIds, Prefetched, QuoteRow, TransferId};
use postgres::Client;

use crate::pg::{connect, redact_url};
use crate::pg_rows::{
    col, conversion_fulfil_row, finish_row, fixed, joined_columns, joined_from, parsed, quote_row,
    transfer_row, FINISH_AT, FULFIL_AT, QUOTE_COLUMNS,
};
use crate::pg_schema::SCHEMA_VERSION;
use crate::pg_worker::PgWorker;
use crate::{Prefetch, StoreError, StoreReader, StoredTransfer, Touched};

/// [`StoreReader`] on PostgreSQL.
pub struct PgReader {
    url: String,
    /// Connections, each on its thread, taken in turn: lookups from many
    /// requests at once run side by side.
    workers: Vec<PgWorker>,
    next: std::sync::atomic::AtomicUsize,
}

/// Connections a reader keeps.
const READER_CONNECTIONS: usize = 4;

impl std::fmt::Debug for PgReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgReader({})", redact_url(&self.url))
    }
}

/// A transfer with its finish and FX rows and the names and currency its
/// view needs (a dependent transfer's FSPIOP payer's too), a `WHERE` to
/// follow; the reader's reads are of a store a hub opened, which migrated
/// it. Outer joins: a transfer whose account or participant row is missing
/// is an error, never "not found" (which would let its id be used again)
/// nor silently left out.
fn view_select() -> String {
    format!(
        "SELECT {}, pd.name, pc.name, ad.currency, pp.name
         FROM {}
         LEFT JOIN accounts ad ON ad.id = t.debit_account_id
         LEFT JOIN participants pd ON pd.id = ad.participant_id
         LEFT JOIN accounts ac ON ac.id = t.credit_account_id
         LEFT JOIN participants pc ON pc.id = ac.participant_id
         LEFT JOIN participants pp ON pp.id = x.payer_id",
        joined_columns(SCHEMA_VERSION),
        joined_from(SCHEMA_VERSION)
    )
}

/// Where the names and currency are in a row of [`view_select`]: after
/// the acceptance's four columns.
const NAMES_AT: usize = FULFIL_AT + 4;

/// Where a conversion's determining transfer id is in a row of
/// [`view_select`]: its FX row's second column, after the transfer's 15.
const DETERMINING_AT: usize = 16;

impl PgReader {
    /// Connects to the store at `url` (it must exist: open the writable
    /// store first).
    pub fn open(url: &str) -> Result<PgReader, StoreError> {
        let workers = (0..READER_CONNECTIONS)
            .map(|_| PgWorker::start(url, "kasi-pg-reader"))
            .collect::<Result<_, _>>()?;
        Ok(PgReader {
            url: url.to_string(),
            workers,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn with_client<T: Send + 'static>(
        &self,
        read: impl FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.workers[turn % self.workers.len()].run(read)
    }

    fn stored(row: &postgres::Row) -> Result<StoredTransfer, StoreError> {
        let transfer = transfer_row(row)?;
        let finish = finish_row(row, FINISH_AT)?;
        let accepted = conversion_fulfil_row(row, FULFIL_AT)?;
        let name = |at: usize| parsed(row, at, "participant name", FspName::new);
        let fx_payer = match transfer.fx {
            Some(ledger::FxLink::Dependent { .. }) => Some(name(NAMES_AT + 3)?),
            _ => None,
        };
        Ok(StoredTransfer::from_rows(
            &transfer,
            finish.as_ref(),
            ledger::StoredParties {
                debit_owner: name(NAMES_AT)?,
                credit_owner: name(NAMES_AT + 1)?,
                fx_payer,
            },
            parsed(row, NAMES_AT + 2, "currency", ledger::Currency::parse)?,
            accepted.as_ref(),
        ))
    }
}

impl StoreReader for PgReader {
    fn is_remote(&self) -> bool {
        true
    }

    fn search_transfers(
        &self,
        query: &crate::search::TransferQuery,
    ) -> Result<crate::search::SearchPage, StoreError> {
        let query = query.clone();
        self.with_client(move |client| crate::search::search(&mut PgSearch(client), &query))
    }

    fn statement(
        &self,
        query: &crate::statement::StatementQuery,
    ) -> Result<Option<crate::statement::StatementPage>, StoreError> {
        let query = query.clone();
        self.with_client(move |client| {
            crate::statement::statement(&mut PgStatement(client), &query)
        })
    }

    fn find_transfer(&self, transfer_id: TransferId) -> Result<Option<StoredTransfer>, StoreError> {
        self.with_client(move |client| {
            let id = transfer_id.to_blob();
            let row = client.query_opt(
                &format!("{} WHERE t.transfer_id = $1", view_select()),
                &[&id.as_slice()],
            )?;
            let Some(row) = row else {
                return Ok(None);
            };
            PgReader::stored(&row).map(Some)
        })
    }

    fn find_quote(&self, quote_id: TransferId) -> Result<Option<QuoteRow>, StoreError> {
        self.with_client(move |client| {
            let id = quote_id.to_blob();
            match client.query_opt(
                &format!("SELECT {QUOTE_COLUMNS} FROM quotes WHERE quote_id = $1"),
                &[&id.as_slice()],
            )? {
                Some(row) => Ok(Some(quote_row(&row)?)),
                None => Ok(None),
            }
        })
    }

    fn transfers_touched_since(&self, since_ms: i64) -> Result<Vec<Touched>, StoreError> {
        self.with_client(move |client| {
            // Transfers are prepared in seq order at the ledger's clock,
            // which never goes back: those prepared since are the seqs
            // from the first one (found by bisection on the primary key);
            // finishes are found by their time's index.
            let first_seq = first_seq_prepared_since(client, since_ms)?;
            // The seqs first, then the rows by primary key: one query
            // joining the two lets the planner scan the whole table
            // (~1 s at 1 M transfers, measured).
            let seqs: Vec<i64> = client
                .query(
                    "SELECT seq FROM transfers WHERE seq >= $2
                     UNION SELECT seq FROM transfer_finishes WHERE finished_at_ms >= $1
                     UNION SELECT seq FROM conversion_fulfils WHERE at_ms >= $1",
                    &[&since_ms, &first_seq],
                )?
                .iter()
                .map(|row| row.get(0))
                .collect();
            let rows = client.query(
                &format!(
                    "{} WHERE t.seq = ANY($2) AND t.kind IN ('TRANSFER', 'FX_CONVERSION')
                        AND (t.prepared_at_ms >= $1 OR f.finished_at_ms >= $1 OR c.at_ms >= $1)",
                    view_select()
                ),
                &[&since_ms, &seqs],
            )?;
            let mut found = Vec::with_capacity(rows.len());
            for row in &rows {
                let stored = PgReader::stored(row)?;
                let condition = Condition(fixed(row, 6)?);
                found.push((stored.view, condition, stored.finish.map(|f| f.0)));
            }
            Ok(found)
        })
    }
}

/// The first seq prepared at or after `since_ms`, one past the last if
/// none: ~30 primary-key reads however long the table.
fn first_seq_prepared_since(client: &mut Client, since_ms: i64) -> Result<i64, StoreError> {
    let last: Option<i64> = col(&client.query_one("SELECT max(seq) FROM transfers", &[])?, 0)?;
    let statement = client
        .prepare("SELECT prepared_at_ms FROM transfers WHERE seq >= $1 ORDER BY seq LIMIT 1")?;
    let (mut low, mut high) = (0i64, last.unwrap_or(0) + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let at_ms: Option<i64> = client
            .query_opt(&statement, &[&middle])?
            .map(|row| col(&row, 0))
            .transpose()?;
        match at_ms {
            Some(at_ms) if at_ms >= since_ms => high = middle,
            _ => low = middle + 1,
        }
    }
    Ok(low)
}

/// The store's answers for `ids` (see [`Prefetch::prefetch`]): one
/// statement per kind of id (`= ANY($1)` over the primary key), so a batch
/// of prepares costs one round trip however many it holds. A row that
/// cannot be read refuses only the command naming it.
pub(crate) fn prefetch(
    client: &mut Client,
    statements: &mut Option<PrefetchStatements>,
    ids: &PrefetchIds,
) -> Result<Prefetched, StoreError> {
    let statements = match statements {
        Some(statements) => statements,
        None => statements.insert(PrefetchStatements::prepare(client)?),
    };
    let mut prefetched = Prefetched::default();
    if !ids.transfers.is_empty() {
        let blobs: Vec<Vec<u8>> = ids
            .transfers
            .iter()
            .map(|id| id.to_blob().as_slice().to_vec())
            .collect();
        let rows = client.query(&statements.transfers, &[&blobs])?;
        prefetched.transfers = ids
            .transfers
            .iter()
            .map(|&id| (id, Lookup::Absent))
            .collect();
        for row in &rows {
            let id = row_id(row, 1)?;
            let lookup = match PgReader::stored(row) {
                Ok(stored) => Lookup::Found(stored),
                Err(error) => {
                    prefetched.unreadable.push(format!("{id}: {error}"));
                    Lookup::Failed
                }
            };
            prefetched.transfers.insert(id, lookup);
        }
    }
    if !ids.conversions.is_empty() {
        let blobs: Vec<Vec<u8>> = ids
            .conversions
            .iter()
            .map(|id| id.to_blob().as_slice().to_vec())
            .collect();
        let rows = client.query(&statements.conversions, &[&blobs])?;
        prefetched.conversions = ids
            .conversions
            .iter()
            .map(|&id| (id, Lookup::Absent))
            .collect();
        for row in &rows {
            let id = row_id(row, DETERMINING_AT)?;
            let lookup = match PgReader::stored(row) {
                Ok(stored) => Lookup::Found(stored),
                Err(error) => {
                    let what = format!("the conversion for transfer {id}");
                    prefetched.unreadable.push(format!("{what}: {error}"));
                    Lookup::Failed
                }
            };
            prefetched.conversions.insert(id, lookup);
        }
    }
    if !ids.quotes.is_empty() {
        let blobs: Vec<Vec<u8>> = ids
            .quotes
            .iter()
            .map(|id| id.to_blob().as_slice().to_vec())
            .collect();
        let rows = client.query(&statements.quotes, &[&blobs])?;
        prefetched.quotes = ids.quotes.iter().map(|&id| (id, Lookup::Absent)).collect();
        for row in &rows {
            let id = row_id(row, 0)?;
            let lookup = match quote_row(row) {
                Ok(quote) => Lookup::Found(quote),
                Err(error) => {
                    prefetched.unreadable.push(format!("quote {id}: {error}"));
                    Lookup::Failed
                }
            };
            prefetched.quotes.insert(id, lookup);
        }
    }
    Ok(prefetched)
}

/// The prefetch's statements, prepared once per connection (a statement
/// prepared per read would cost a round trip of its own).
pub(crate) struct PrefetchStatements {
    transfers: postgres::Statement,
    quotes: postgres::Statement,
    /// By determining transfer id: the latest conversion naming each.
    conversions: postgres::Statement,
}

impl PrefetchStatements {
    fn prepare(client: &mut Client) -> Result<PrefetchStatements, StoreError> {
        Ok(PrefetchStatements {
            transfers: client
                .prepare(&format!("{} WHERE t.transfer_id = ANY($1)", view_select()))?,
            quotes: client.prepare(&format!(
                "SELECT {QUOTE_COLUMNS} FROM quotes WHERE quote_id = ANY($1)"
            ))?,
            conversions: client.prepare(&format!(
                "{} WHERE t.seq IN (SELECT max(seq) FROM transfer_fx
                    WHERE determining_transfer_id = ANY($1) GROUP BY determining_transfer_id)",
                view_select()
            ))?,
        })
    }
}

/// The id in column `at` of a row: a row whose id cannot be read cannot be
/// told apart from the others, so the read as a whole fails.
fn row_id(row: &postgres::Row, at: usize) -> Result<TransferId, StoreError> {
    let blob: &[u8] = col(row, at)?;
    TransferId::from_blob(blob)
        .ok_or_else(|| StoreError::fatal(format!("a stored id of {} bytes", blob.len())))
}

/// [`Prefetch`] on a connection of its own, for the ledger thread of a
/// two-thread pipeline; opened again on the next read when it is lost.
pub(crate) struct PgPrefetcher {
    url: String,
    client: Option<Client>,
    statements: Option<PrefetchStatements>,
}

impl PgPrefetcher {
    /// Connects on the first read (and again after a lost connection), so
    /// that a database unreachable when the pipeline starts fails only the
    /// reads made while it is, not the pipeline's whole life.
    pub(crate) fn open(url: &str) -> PgPrefetcher {
        PgPrefetcher {
            url: url.to_string(),
            client: None,
            statements: None,
        }
    }
}

impl Prefetch for PgPrefetcher {
    fn prefetch(&mut self, ids: &PrefetchIds) -> Result<Prefetched, StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.statements = None;
            self.client = Some(connect(&self.url)?);
        }
        let client = self.client.as_mut().expect("connected above");
        prefetch(client, &mut self.statements, ids)
    }
}

/// [`crate::search::search`] on a PostgreSQL connection.
struct PgSearch<'c>(&'c mut Client);

impl crate::search::SearchSql for PgSearch<'_> {
    fn dialect(&self) -> crate::search::Dialect {
        crate::search::Dialect::Postgres
    }

    fn integers(
        &mut self,
        sql: &str,
        params: &[crate::search::Param],
    ) -> Result<Vec<i64>, StoreError> {
        let values = pg_values(params);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            values.iter().map(|value| value.as_ref()).collect();
        self.0
            .query(sql, &refs)?
            .iter()
            .map(|row| col::<i64>(row, 0))
            .collect()
    }

    fn keyed_blobs(
        &mut self,
        sql: &str,
        params: &[crate::search::Param],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let values = pg_values(params);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            values.iter().map(|value| value.as_ref()).collect();
        self.0
            .query(sql, &refs)?
            .iter()
            .map(|row| Ok((col::<i64>(row, 0)?, col::<Vec<u8>>(row, 1)?)))
            .collect()
    }

    fn views(&mut self, seqs: &[u64]) -> Result<Vec<(u64, StoredTransfer)>, StoreError> {
        let seqs: Vec<i64> = seqs.iter().map(|&seq| seq as i64).collect();
        self.0
            .query(
                &format!("{} WHERE t.seq = ANY($1)", view_select()),
                &[&seqs],
            )?
            .iter()
            // The transfer's seq is the first column.
            .map(|row| Ok((col::<i64>(row, 0)? as u64, PgReader::stored(row)?)))
            .collect()
    }
}

/// A query's parameters as PostgreSQL binds them.
fn pg_values(params: &[crate::search::Param]) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
    params
        .iter()
        .map(|param| -> Box<dyn postgres::types::ToSql + Sync> {
            match param {
                crate::search::Param::Int(n) => Box::new(*n),
                crate::search::Param::Text(text) => Box::new(text.clone()),
            }
        })
        .collect()
}

/// [`crate::statement::statement`] on a PostgreSQL connection.
pub(crate) struct PgStatement<'c>(pub(crate) &'c mut Client);

impl crate::statement::StatementSql for PgStatement<'_> {
    fn dialect(&self) -> crate::search::Dialect {
        crate::search::Dialect::Postgres
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        // One snapshot of the store for the whole page: the balances and
        // the movements agree.
        Ok(self
            .0
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?)
    }

    fn end(&mut self) -> Result<(), StoreError> {
        Ok(self.0.batch_execute("COMMIT")?)
    }

    fn rows(
        &mut self,
        sql: &str,
        params: &[crate::search::Param],
    ) -> Result<Vec<Vec<crate::statement::Cell>>, StoreError> {
        use crate::statement::Cell;
        use postgres::types::Type;
        let values = pg_values(params);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
            values.iter().map(|value| value.as_ref()).collect();
        let rows = self.0.query(sql, &refs)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut cells = Vec::with_capacity(row.len());
            for (at, column) in row.columns().iter().enumerate() {
                let cell = match *column.type_() {
                    Type::INT8 => row.get::<_, Option<i64>>(at).map(Cell::Int),
                    Type::INT4 => row.get::<_, Option<i32>>(at).map(|n| Cell::Int(n.into())),
                    Type::BYTEA => row.get::<_, Option<Vec<u8>>>(at).map(Cell::Blob),
                    _ => row.get::<_, Option<String>>(at).map(Cell::Text),
                };
                cells.push(cell.unwrap_or(Cell::Null));
            }
            out.push(cells);
        }
        Ok(out)
    }
}
