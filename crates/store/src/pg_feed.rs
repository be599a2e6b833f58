//! The change feed on PostgreSQL (`feed.rs`): the writer's part of a
//! commit (the rows as one `INSERT … SELECT FROM UNNEST`, inside the
//! transfer path's one statement or the commit's transaction), and
//! [`PgFeed`], the hub's connection for pages, retention and cursors.
//! The tables are migration 12 (`pg_schema.rs`).

use ledger::{AccountId, ParticipantId, Record};
use postgres::{GenericClient, Row};

use crate::commit_index::{self, Filed};
use crate::feed::{FeedLog, FeedPage, FeedRow, FeedState, FEED_COLUMNS};
use crate::party_index;
use crate::pg::redact_url;
use crate::pg_worker::PgWorker;
use crate::rollup::{self, Fold, PairCounts, PairKey, Rollup};
use crate::StoreError;

/// `INSERT INTO changes`, the arrays' types in column order.
pub(crate) const CHANGES_INSERT: &str =
    "INSERT INTO changes (feed_seq, at_ms, kind, participant, counterparty, key, body)";
pub(crate) const CHANGES_TYPES: &[&str] =
    &["bigint", "bigint", "text", "text", "text", "text", "text"];

/// The writer's state, read from the tables (see `feed.rs`).
fn load_state(client: &mut impl GenericClient) -> Result<FeedState, StoreError> {
    let newest = client
        .query_opt(
            "SELECT feed_seq, at_ms FROM changes ORDER BY feed_seq DESC LIMIT 1",
            &[],
        )?
        .map(|row| (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1)));
    let mut state = FeedState::after(newest);
    for row in client.query("SELECT id, name, is_hub FROM participants", &[])? {
        let id: i64 = row.get(0);
        let name: String = row.get(1);
        state.note_participant(ParticipantId(id as u32), &name, row.get(2));
    }
    for row in client.query(
        "SELECT id, participant_id, currency, is_active, net_debit_cap FROM accounts",
        &[],
    )? {
        let id: i64 = row.get(0);
        let participant: i64 = row.get(1);
        let currency: String = row.get(2);
        let cap: Option<String> = row.get(4);
        state.note_account(
            AccountId(id as u32),
            ParticipantId(participant as u32),
            ledger::Currency::parse(&currency).ok_or_else(|| {
                StoreError::fatal(format!("account currency {currency:?} is not ISO 4217"))
            })?,
            row.get(3),
            cap.map(|cap| {
                ledger::Amount::parse_signed(&cap)
                    .map_err(|_| StoreError::fatal(format!("bad amount {cap:?} in the store")))
            })
            .transpose()?,
        );
    }
    Ok(state)
}

/// The rows of `batches`, the state read first if the writer has none and
/// the transfers it does not remember read back (one round trip, only
/// after a restart or for a transfer open very long). The caller writes
/// them in its commit and keeps the state only once that succeeded.
pub(crate) fn rows(
    client: &mut impl GenericClient,
    state: &mut Option<FeedState>,
    batches: &[&[Record]],
) -> Result<Vec<FeedRow>, StoreError> {
    let feed = match state {
        Some(feed) => feed,
        None => state.insert(load_state(client)?),
    };
    let unknown: Vec<i64> = feed
        .unknown_transfers(batches)
        .into_iter()
        .map(|seq| seq as i64)
        .collect();
    if !unknown.is_empty() {
        for row in client.query(
            "SELECT seq, transfer_id, kind, debit_account_id, credit_account_id, amount, prepared_at_ms
             FROM transfers WHERE seq = ANY($1)",
            &[&unknown],
        )? {
            let seq: i64 = row.get(0);
            let id: Vec<u8> = row.get(1);
            let kind: String = row.get(2);
            let debit: i64 = row.get(3);
            let credit: i64 = row.get(4);
            let amount: String = row.get(5);
            let prepared_at_ms: i64 = row.get(6);
            feed.note_transfer(
                seq as u64,
                crate::sqlite_feed::summary_of(
                    &id,
                    &kind,
                    (debit as u32, credit as u32),
                    &amount,
                    prepared_at_ms,
                )?,
            );
        }
    }
    feed.rows(batches)
}

/// The rows as the arrays of [`CHANGES_TYPES`].
pub(crate) struct ChangeArrays<'a> {
    feed_seq: Vec<i64>,
    at_ms: Vec<i64>,
    kind: Vec<&'a str>,
    participant: Vec<&'a str>,
    counterparty: Vec<Option<&'a str>>,
    key: Vec<&'a str>,
    body: Vec<&'a str>,
}

impl<'a> ChangeArrays<'a> {
    pub(crate) fn of(rows: &'a [FeedRow]) -> ChangeArrays<'a> {
        ChangeArrays {
            feed_seq: rows.iter().map(|r| r.feed_seq as i64).collect(),
            at_ms: rows.iter().map(|r| r.at_ms).collect(),
            kind: rows.iter().map(|r| r.kind.as_str()).collect(),
            participant: rows.iter().map(|r| r.participant.as_str()).collect(),
            counterparty: rows.iter().map(|r| r.counterparty.as_deref()).collect(),
            key: rows.iter().map(|r| r.key.as_str()).collect(),
            body: rows.iter().map(|r| r.body.as_str()).collect(),
        }
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.feed_seq.last().map(|&seq| seq as u64)
    }

    pub(crate) fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 7] {
        [
            &self.feed_seq,
            &self.at_ms,
            &self.kind,
            &self.participant,
            &self.counterparty,
            &self.key,
            &self.body,
        ]
    }
}

fn feed_row(row: &Row) -> FeedRow {
    FeedRow {
        feed_seq: row.get::<_, i64>(0) as u64,
        at_ms: row.get(1),
        kind: row.get(2),
        participant: row.get(3),
        counterparty: row.get(4),
        key: row.get(5),
        body: row.get(6),
    }
}

/// [`FeedLog`] on PostgreSQL: a connection on a thread of its own.
pub struct PgFeed {
    url: String,
    worker: PgWorker,
}

impl std::fmt::Debug for PgFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgFeed({})", redact_url(&self.url))
    }
}

impl PgFeed {
    pub fn open(url: &str) -> Result<PgFeed, StoreError> {
        Ok(PgFeed {
            url: url.to_string(),
            worker: PgWorker::start(url, "kasi-pg-feed")?,
        })
    }
}

/// A read-only transaction that sees one snapshot throughout (the feed's
/// bounds and its rows, the index's fence and its blocks agree).
fn snapshot(client: &mut postgres::Client) -> Result<postgres::Transaction<'_>, postgres::Error> {
    client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
}

/// A page of nothing yet after `after`, with the feed's bounds as
/// `transaction` sees them (the rows are read in the same snapshot).
fn bounds(
    transaction: &mut postgres::Transaction<'_>,
    after: u64,
) -> Result<FeedPage, postgres::Error> {
    let bounds = transaction.query_one(
        "SELECT (SELECT MIN(feed_seq) FROM changes), (SELECT MAX(feed_seq) FROM changes)",
        &[],
    )?;
    Ok(FeedPage {
        rows: Vec::new(),
        next_after: after,
        oldest: bounds.get::<_, Option<i64>>(0).map(|seq| seq as u64),
        newest: bounds.get::<_, Option<i64>>(1).unwrap_or(0) as u64,
    })
}

impl FeedLog for PgFeed {
    fn read_feed(
        &self,
        after: u64,
        limit: usize,
        participant: Option<&str>,
    ) -> Result<FeedPage, StoreError> {
        let limit = limit.clamp(1, crate::feed::MAX_PAGE) as i64;
        let participant = participant.map(str::to_string);
        self.worker.run(move |client| {
            let mut transaction = snapshot(client)?;
            let mut page = bounds(&mut transaction, after)?;
            match &participant {
                None => {
                    page.rows = transaction
                        .query(
                            &format!(
                                "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > $1 ORDER BY feed_seq LIMIT $2"
                            ),
                            &[&(after as i64), &limit],
                        )?
                        .iter()
                        .map(feed_row)
                        .collect();
                    if let Some(last) = page.rows.last() {
                        page.next_after = last.feed_seq;
                    }
                }
                Some(participant) => {
                    let through = after.saturating_add(crate::feed::SCAN_BUDGET as u64);
                    page.rows = transaction
                        .query(
                            &format!(
                                "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > $1 AND feed_seq <= $2
                                   AND (participant = $3 OR counterparty = $3) ORDER BY feed_seq LIMIT $4"
                            ),
                            &[&(after as i64), &(through as i64), participant, &limit],
                        )?
                        .iter()
                        .map(feed_row)
                        .collect();
                    page.next_after = crate::feed::next_after(
                        &page.rows,
                        limit as usize,
                        after,
                        through,
                        page.newest,
                    );
                }
            }
            transaction.commit()?;
            Ok(page)
        })
    }

    fn read_feed_kinds(
        &self,
        after: u64,
        limit: usize,
        kinds: &'static [&'static str],
    ) -> Result<FeedPage, StoreError> {
        let limit = limit.clamp(1, crate::feed::MAX_PAGE);
        self.worker.run(move |client| {
            let mut transaction = snapshot(client)?;
            let mut page = bounds(&mut transaction, after)?;
            let through = after.saturating_add(crate::feed::SCAN_BUDGET as u64);
            page.rows = transaction
                .query(
                    &format!(
                        "SELECT {FEED_COLUMNS} FROM changes WHERE feed_seq > $1 AND feed_seq <= $2
                           AND kind = ANY($3) ORDER BY feed_seq LIMIT $4"
                    ),
                    &[&(after as i64), &(through as i64), &kinds, &(limit as i64)],
                )?
                .iter()
                .map(feed_row)
                .collect();
            page.next_after =
                crate::feed::next_after(&page.rows, limit, after, through, page.newest);
            transaction.commit()?;
            Ok(page)
        })
    }

    fn prune_feed(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.worker.run(move |client| {
            let deleted = client.execute(
                "DELETE FROM changes WHERE feed_seq IN (
                    SELECT feed_seq FROM changes WHERE at_ms < $1
                      AND feed_seq < (SELECT MAX(feed_seq) FROM changes)
                    ORDER BY feed_seq LIMIT $2)",
                &[&before_ms, &(crate::feed::PRUNE_CHUNK as i64)],
            )?;
            Ok(deleted as usize)
        })
    }

    fn feed_cursor(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let name = name.to_string();
        self.worker.run(move |client| {
            let row = client.query_opt(
                "SELECT feed_seq FROM feed_cursors WHERE name = $1",
                &[&name],
            )?;
            Ok(row.map(|row| row.get::<_, i64>(0) as u64))
        })
    }

    fn set_feed_cursor(&self, name: &str, feed_seq: u64) -> Result<(), StoreError> {
        let name = name.to_string();
        self.worker.run(move |client| {
            client.execute(
                "INSERT INTO feed_cursors (name, feed_seq) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET feed_seq = excluded.feed_seq",
                &[&name, &(feed_seq as i64)],
            )?;
            Ok(())
        })
    }

    fn file_commit_spans(
        &self,
        most_spans: u64,
        most_commits: usize,
        span_ms: i64,
    ) -> Result<commit_index::Filing, StoreError> {
        self.worker.run(move |client| {
            fn filed(
                client: &mut impl GenericClient,
                lock: &str,
            ) -> Result<Option<Filed>, StoreError> {
                client
                    .query_opt(
                        &format!(
                            "SELECT origin_ms, span_ms, next_span FROM commit_index WHERE id = 1{lock}"
                        ),
                        &[],
                    )?
                    .map(|row| Filed::checked(row.get(0), row.get(1), row.get(2)))
                    .transpose()
            }
            let (found, index, newest, spans, to, rows) = {
                let mut reading = snapshot(client)?;
                let found = filed(&mut reading, "")?;
                let times = reading.query_one(
                    "SELECT MIN(finished_at_ms), MAX(finished_at_ms) FROM transfer_finishes",
                    &[],
                )?;
                let (index, spans, newest) =
                    match commit_index::Plan::of(found, (times.get(0), times.get(1)), span_ms, most_spans)? {
                        commit_index::Plan::Done(filing) => return Ok(filing),
                        commit_index::Plan::File {
                            index,
                            spans,
                            newest_ms,
                        } => (index, spans, newest_ms),
                    };
                let select = reading.prepare(
                    "SELECT f.seq, f.finished_at_ms, t.debit_account_id, t.credit_account_id
                     FROM transfer_finishes f JOIN transfers t ON t.seq = f.seq
                     WHERE f.finished_at_ms >= $1 AND f.finished_at_ms < $2
                       AND f.state = 'COMMITTED' AND t.kind IN ('TRANSFER', 'FX_CONVERSION')
                     ORDER BY f.finished_at_ms, f.seq LIMIT $3",
                )?;
                let (to, rows) = commit_index::rows_of_spans(
                    index,
                    spans,
                    most_commits,
                    |from_ms, to_ms, limit| {
                        let limit = limit.map(|limit| limit as i64);
                        reading
                            .query(&select, &[&from_ms, &to_ms, &limit])?
                            .iter()
                            .map(|row| {
                                let account = |at: usize| {
                                    u32::try_from(row.get::<_, i64>(at)).map_err(|_| {
                                        StoreError::fatal("commit index: an account id out of range")
                                    })
                                };
                                Ok(commit_index::Commit {
                                    seq: row.get::<_, i64>(0) as u64,
                                    at_ms: row.get(1),
                                    debit: account(2)?,
                                    credit: account(3)?,
                                })
                            })
                            .collect()
                    },
                )?;
                reading.commit()?;
                (found, index, newest, spans, to, rows)
            };
            let mut transaction = client.transaction()?;
            // The row locked: a second hub's filing waits, then finds it moved.
            transaction.execute(
                "INSERT INTO commit_index (id, origin_ms, span_ms, next_span) VALUES (1, $1, $2, 0)
                 ON CONFLICT (id) DO NOTHING",
                &[&index.origin_ms, &index.span_ms],
            )?;
            let now = filed(&mut transaction, " FOR UPDATE")?;
            // A row inserted just now stands for none found.
            let now = now.filter(|now| found.is_some() || *now != Filed { next_span: 0, ..index });
            if now != found {
                return Err(commit_index::moved(index, now));
            }
            let keys: Vec<i64> = rows.iter().map(|(key, _)| *key).collect();
            let entries: Vec<&[u8]> = rows.iter().map(|(_, entries)| entries.as_slice()).collect();
            transaction.execute(
                "INSERT INTO commit_spans (key, entries) SELECT * FROM UNNEST($1::bigint[], $2::bytea[])",
                &[&keys, &entries],
            )?;
            transaction.execute(
                "UPDATE commit_index SET next_span = $1 WHERE id = 1",
                &[&(to as i64)],
            )?;
            transaction.commit()?;
            Ok(commit_index::Filing::of(index, spans.0, to, newest))
        })
    }

    fn file_party_blocks(
        &self,
        most_blocks: u64,
        block_seqs: u64,
    ) -> Result<party_index::Filing, StoreError> {
        self.worker.run(move |client| {
            // The blocks filed and their size, or none yet at `block_seqs`.
            fn filed(
                client: &mut impl GenericClient,
                block_seqs: u64,
                lock: &str,
            ) -> Result<(u64, u64), StoreError> {
                let row = client.query_opt(
                    &format!("SELECT next_block, block_seqs FROM party_index WHERE id = 1{lock}"),
                    &[],
                )?;
                let (next, seqs): (i64, i64) =
                    row.map_or((0, block_seqs as i64), |row| (row.get(0), row.get(1)));
                Ok((next as u64, party_index::checked_block_seqs(seqs)?))
            }
            let (next, block_seqs, last_seq, to, rows) = {
                let mut reading = snapshot(client)?;
                let (next, block_seqs) = filed(&mut reading, block_seqs, "")?;
                let last_seq = reading
                    .query_one("SELECT COALESCE(MAX(seq), 0) FROM transfers", &[])?
                    .get::<_, i64>(0) as u64;
                let to = party_index::blocks_complete(last_seq, block_seqs)
                    .min(next + most_blocks)
                    .max(next);
                let select = reading.prepare(
                    "SELECT seq, payer_party, payee_party, amount_units FROM transfers
                     WHERE seq >= $1 AND seq < $2",
                )?;
                let rows = party_index::rows_of_blocks(next, to, block_seqs, |from, to| {
                    Ok(reading
                        .query(&select, &[&(from as i64), &(to as i64)])?
                        .iter()
                        .map(|row| (row.get::<_, i64>(0) as u64, row.get(1), row.get(2), row.get(3)))
                        .collect())
                })?;
                reading.commit()?;
                (next, block_seqs, last_seq, to, rows)
            };
            let mut filing = party_index::Filing {
                filed: 0,
                next_block: next,
                block_seqs,
                last_seq,
            };
            if to <= next {
                return Ok(filing);
            }
            let mut transaction = client.transaction()?;
            // The row locked: a second hub's filing waits, then finds it moved.
            transaction.execute(
                "INSERT INTO party_index (id, next_block, block_seqs) VALUES (1, 0, $1)
                 ON CONFLICT (id) DO NOTHING",
                &[&(block_seqs as i64)],
            )?;
            let found = filed(&mut transaction, block_seqs, " FOR UPDATE")?;
            if found != (next, block_seqs) {
                return Err(party_index::moved(next, found.0));
            }
            let keys: Vec<i64> = rows.iter().map(|(key, _)| *key).collect();
            let entries: Vec<&[u8]> = rows.iter().map(|(_, entries)| entries.as_slice()).collect();
            transaction.execute(
                "INSERT INTO party_blocks (key, entries) SELECT * FROM UNNEST($1::bigint[], $2::bytea[])",
                &[&keys, &entries],
            )?;
            transaction.execute(
                "UPDATE party_index SET next_block = $1 WHERE id = 1",
                &[&(to as i64)],
            )?;
            transaction.commit()?;
            filing.filed = to - next;
            filing.next_block = to;
            Ok(filing)
        })
    }

    fn fold_rollup(&self, after: u64, through: u64, fold: &Fold) -> Result<(), StoreError> {
        let fold = fold.clone();
        self.worker.run(move |client| {
            let mut transaction = client.transaction()?;
            // The cursor's row locked: a second hub's fold waits, then
            // finds it moved.
            transaction.execute(
                "INSERT INTO feed_cursors (name, feed_seq) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING",
                &[&rollup::CURSOR],
            )?;
            let found: i64 = transaction
                .query_one(
                    "SELECT feed_seq FROM feed_cursors WHERE name = $1 FOR UPDATE",
                    &[&rollup::CURSOR],
                )?
                .get(0);
            if found as u64 != after {
                return Err(rollup::moved(after, found as u64));
            }
            let select = transaction.prepare(
                "SELECT committed, amount, failed FROM rollup_pairs
                 WHERE hour_ms = $1 AND currency = $2 AND payer = $3 AND payee = $4",
            )?;
            let upsert = transaction.prepare(
                "INSERT INTO rollup_pairs (hour_ms, currency, payer, payee, committed, amount, failed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (hour_ms, currency, payer, payee) DO UPDATE SET
                   committed = excluded.committed, amount = excluded.amount, failed = excluded.failed",
            )?;
            for (key, counts) in &fold.pairs {
                let stored = transaction
                    .query_opt(&select, &[&key.hour_ms, &key.currency, &key.payer, &key.payee])?
                    .map(|row| (row.get(0), row.get(1), row.get(2)));
                let (committed, amount, failed) = rollup::add_counts(stored, counts)?;
                transaction.execute(
                    &upsert,
                    &[
                        &key.hour_ms,
                        &key.currency,
                        &key.payer,
                        &key.payee,
                        &committed,
                        &amount,
                        &failed,
                    ],
                )?;
            }
            let errors = transaction.prepare(
                "INSERT INTO rollup_errors (hour_ms, payer, payee, error_code, failures)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (hour_ms, payer, payee, error_code) DO UPDATE SET
                   failures = rollup_errors.failures + excluded.failures",
            )?;
            for ((hour_ms, payer, payee, code), failures) in &fold.errors {
                transaction.execute(&errors, &[hour_ms, payer, payee, code, &(*failures as i64)])?;
            }
            let latency = transaction.prepare(
                "INSERT INTO rollup_latency (hour_ms, payer, payee, bucket, transfers)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (hour_ms, payer, payee, bucket) DO UPDATE SET
                   transfers = rollup_latency.transfers + excluded.transfers",
            )?;
            for ((hour_ms, payer, payee, bucket), transfers) in &fold.latency {
                transaction.execute(
                    &latency,
                    &[hour_ms, payer, payee, &(*bucket as i64), &(*transfers as i64)],
                )?;
            }
            transaction.execute(
                "UPDATE feed_cursors SET feed_seq = $2 WHERE name = $1",
                &[&rollup::CURSOR, &(through as i64)],
            )?;
            transaction.commit()?;
            Ok(())
        })
    }

    fn read_rollup(
        &self,
        from_ms: i64,
        to_ms: i64,
        participant: Option<&str>,
    ) -> Result<Rollup, StoreError> {
        let participant = participant.map(str::to_string);
        self.worker.run(move |client| {
            let mut transaction = snapshot(client)?;
            // `$3 IS NULL`: the whole scheme's; else the DFSP's own pairs.
            let own = "($3::text IS NULL OR payer = $3 OR payee = $3)";
            let mut rollup = Rollup::default();
            for row in transaction.query(
                &format!(
                    "SELECT hour_ms, currency, payer, payee, committed, amount, failed FROM rollup_pairs
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND {own}
                     ORDER BY hour_ms, currency, payer, payee"
                ),
                &[&from_ms, &to_ms, &participant],
            )? {
                let amount: String = row.get(5);
                rollup.pairs.push((
                    PairKey {
                        hour_ms: row.get(0),
                        currency: row.get(1),
                        payer: row.get(2),
                        payee: row.get(3),
                    },
                    PairCounts {
                        committed: row.get::<_, i64>(4) as u64,
                        amount: ledger::Amount::parse_signed(&amount).map_err(|_| {
                            StoreError::fatal(format!("bad rollup amount {amount:?} in the store"))
                        })?,
                        failed: row.get::<_, i64>(6) as u64,
                    },
                ));
            }
            rollup.errors = transaction
                .query(
                    &format!(
                        "SELECT hour_ms, payer, payee, error_code, failures FROM rollup_errors
                         WHERE hour_ms >= $1 AND hour_ms < $2 AND {own}
                         ORDER BY hour_ms, payer, payee, error_code"
                    ),
                    &[&from_ms, &to_ms, &participant],
                )?
                .iter()
                .map(|row| {
                    (
                        row.get(0),
                        row.get(1),
                        row.get(2),
                        row.get(3),
                        row.get::<_, i64>(4) as u64,
                    )
                })
                .collect();
            for row in transaction.query(
                &format!(
                    "SELECT payer, payee, bucket, SUM(transfers)::bigint FROM rollup_latency
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND {own}
                     GROUP BY payer, payee, bucket"
                ),
                &[&from_ms, &to_ms, &participant],
            )? {
                rollup::add_bucket(
                    &mut rollup.latency,
                    (row.get(0), row.get(1)),
                    row.get(2),
                    row.get(3),
                );
            }
            rollup.through = transaction
                .query_opt(
                    "SELECT feed_seq FROM feed_cursors WHERE name = $1",
                    &[&rollup::CURSOR],
                )?
                .map_or(0, |row| row.get::<_, i64>(0) as u64);
            transaction.commit()?;
            Ok(rollup)
        })
    }

    fn is_remote(&self) -> bool {
        true
    }
}
