//! The callback dispatcher's state in the PostgreSQL store (the SQLite
//! store keeps it in `callbacks.db`, see [`crate::delivery`]): beside the
//! ledger's rows, so that a standby taking over knows what is owed. Writes
//! are fenced like commits: a deposed active cannot move the watermark.

use crate::delivery::{CallbackOrigin, DeadLetterRow, Delivery};
use crate::pg::describe_error;
use crate::pg_worker::PgWorker;
use crate::StoreError;

/// Its connection lives on a thread of its own (see [`PgWorker`]): the
/// dispatcher writes from the hub's async tasks.
pub struct PgDelivery {
    worker: PgWorker,
    fencing: Option<i64>,
}

impl PgDelivery {
    /// Connects to the store at `url` (open the writable store first: it
    /// creates the tables); with `fencing`, every write checks the lease.
    pub fn open(url: &str, fencing: Option<i64>) -> Result<PgDelivery, StoreError> {
        Ok(PgDelivery {
            worker: PgWorker::start(url, "kasi-pg-delivery")?,
            fencing,
        })
    }
}

impl Delivery for PgDelivery {
    fn watermark(&mut self) -> Result<Option<i64>, StoreError> {
        self.worker.run(|client| {
            Ok(client
                .query_opt("SELECT at_ms FROM callback_watermark WHERE id = 1", &[])?
                .map(|row| row.get(0)))
        })
    }

    fn dead_letters(&mut self) -> Result<Vec<DeadLetterRow>, StoreError> {
        self.worker.run(read_dead_letters)
    }

    fn apply(
        &mut self,
        watermark: Option<i64>,
        keep: &[DeadLetterRow],
        forget: &[u64],
    ) -> Result<(), StoreError> {
        let (fencing, keep, forget) = (self.fencing, keep.to_vec(), forget.to_vec());
        self.worker
            .run(move |client| write(client, fencing, watermark, &keep, &forget))
    }
}

fn read_dead_letters(client: &mut postgres::Client) -> Result<Vec<DeadLetterRow>, StoreError> {
    {
        let rows = client.query(
            "SELECT id, destination, transfer_id, method, url, headers, body, failed_at_ms, attempts, reason, origin
             FROM dead_letters ORDER BY id",
            &[],
        )?;
        rows.iter()
            .map(|row| {
                let headers: String = row.get(5);
                Ok(DeadLetterRow {
                    id: row.get::<_, i64>(0) as u64,
                    destination: row.get(1),
                    transfer_id: row.get(2),
                    method: row.get(3),
                    url: row.get(4),
                    headers: crate::delivery::parse_headers(&headers),
                    body: row.get(6),
                    failed_at_ms: row.get(7),
                    attempts: u32::try_from(row.get::<_, i64>(8)).unwrap_or(u32::MAX),
                    reason: row.get(9),
                    origin: CallbackOrigin::parse(row.get::<_, Option<String>>(10).as_deref()),
                })
            })
            .collect()
    }
}

fn write(
    client: &mut postgres::Client,
    fencing: Option<i64>,
    watermark: Option<i64>,
    keep: &[DeadLetterRow],
    forget: &[u64],
) -> Result<(), StoreError> {
    {
        let mut transaction = client.transaction()?;
        if let Some(fencing) = fencing {
            let held = transaction.query_opt(
                "SELECT 1 FROM kasi_lease WHERE id = 1 AND fencing = $1 FOR SHARE",
                &[&fencing],
            )?;
            if held.is_none() {
                return Err(StoreError::fatal(
                    "deposed: another kasi holds the lease; the delivery state is not ours to write",
                ));
            }
        }
        if let Some(at_ms) = watermark {
            transaction.execute(
                "INSERT INTO callback_watermark (id, at_ms) VALUES (1, $1)
                 ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms",
                &[&at_ms],
            )?;
        }
        for letter in keep {
            transaction.execute(
                "INSERT INTO dead_letters
                    (id, destination, transfer_id, method, url, headers, body, failed_at_ms, attempts, reason, origin)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (id) DO UPDATE SET destination = excluded.destination,
                    transfer_id = excluded.transfer_id, method = excluded.method, url = excluded.url,
                    headers = excluded.headers, body = excluded.body, failed_at_ms = excluded.failed_at_ms,
                    attempts = excluded.attempts, reason = excluded.reason, origin = excluded.origin",
                &[
                    &(letter.id as i64),
                    &letter.destination,
                    &letter.transfer_id,
                    &letter.method,
                    &letter.url,
                    &crate::delivery::format_headers(&letter.headers),
                    &letter.body,
                    &letter.failed_at_ms,
                    &i64::from(letter.attempts),
                    &letter.reason,
                    &letter.origin.as_str(),
                ],
            )?;
        }
        if !forget.is_empty() {
            let ids: Vec<i64> = forget.iter().map(|&id| id as i64).collect();
            transaction.execute("DELETE FROM dead_letters WHERE id = ANY($1)", &[&ids])?;
        }
        transaction
            .commit()
            .map_err(|e| StoreError::fatal(describe_error(&e)))
    }
}
