//! Transfer search (`GET /transfers`) against an independent oracle: for
//! whatever the ledger did, every query, read page by page with its
//! cursor (small rounds and a small scan budget, so that pages end early
//! and go on), yields on both backends exactly the transfers a filter
//! over the loaded snapshot finds, newest first, each once.

mod support;

use std::collections::HashMap;

use ledger::*;
use proptest::prelude::*;
use store::pg::PgStore;
use store::pg_reader::PgReader;
use store::search::{PartyRole, SearchPass, TransferQuery};
use store::{Store, StoreReader};
use support::{op, Harness};

/// A transfer as the oracle sees it.
struct Seen {
    seq: u64,
    payer: FspName,
    payee: FspName,
    currency: Currency,
    state: TransferState,
    reason: Option<u16>,
    window: Option<u32>,
    amount: Amount,
    prepared_at_ms: i64,
    /// What its prepare named (`support::parties_of`).
    parties: Option<PartyIds>,
}

fn seen(snapshot: &Snapshot) -> Vec<Seen> {
    let names: HashMap<ParticipantId, FspName> = snapshot
        .participants
        .iter()
        .map(|p| (p.id, p.name))
        .collect();
    let owner: HashMap<AccountId, (FspName, Currency)> = snapshot
        .accounts
        .iter()
        .map(|a| (a.id, (names[&a.participant], a.currency)))
        .collect();
    let finishes: HashMap<u64, &FinishRow> = snapshot.finishes.iter().map(|f| (f.seq, f)).collect();
    snapshot
        .transfers
        .iter()
        .map(|t| {
            let finish = finishes.get(&t.seq);
            Seen {
                seq: t.seq,
                payer: owner[&t.debit].0,
                payee: owner[&t.credit].0,
                currency: owner[&t.debit].1,
                state: finish.map_or(t.state, |f| f.state),
                reason: finish.map_or(t.reason, |f| f.reason).map(|code| code.0),
                window: finish.and_then(|f| f.settlement_window),
                amount: t.amount,
                prepared_at_ms: t.prepared_at_ms,
                parties: (t.kind == TransferKind::Fspiop)
                    .then(|| support::parties_of(t.amount))
                    .flatten(),
            }
        })
        .collect()
}

/// The seqs `query` should find, newest first.
fn expected(all: &[Seen], query: &TransferQuery) -> Vec<u64> {
    let mut seqs: Vec<u64> = all
        .iter()
        .filter(|t| {
            query.payer.is_none_or(|p| p == t.payer)
                && query.payee.is_none_or(|p| p == t.payee)
                && query.party.as_deref().is_none_or(|party| {
                    t.parties
                        .as_ref()
                        .is_some_and(|named| match query.party_role {
                            None => &*named.payer == party || &*named.payee == party,
                            Some(PartyRole::Payer) => &*named.payer == party,
                            Some(PartyRole::Payee) => &*named.payee == party,
                        })
                })
                && query.currency.is_none_or(|c| c == t.currency)
                && query.state.is_none_or(|s| s == t.state)
                && query.error_code.is_none_or(|c| Some(c) == t.reason)
                && query.settlement_window.is_none_or(|w| Some(w) == t.window)
                && query.min_amount.is_none_or(|m| t.amount >= m)
                && query.max_amount.is_none_or(|m| t.amount <= m)
                && query.from_ms.is_none_or(|from| t.prepared_at_ms >= from)
                && query.to_ms.is_none_or(|to| t.prepared_at_ms <= to)
        })
        .map(|t| t.seq)
        .collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    seqs
}

/// Every page of `query` from `reader`, concatenated, and how many of
/// them the scan budget ended.
fn every_page(
    reader: &dyn StoreReader,
    query: &TransferQuery,
    ids: &HashMap<u64, TransferId>,
) -> (Vec<u64>, u32) {
    let most = ids.len();
    let mut found = Vec::new();
    let mut cut_short = 0;
    let mut query = query.clone();
    for _ in 0..=most + 2 {
        let page = reader.search_transfers(&query).expect("search");
        assert!(page.transfers.len() <= query.limit.max(1));
        assert!(
            page.complete || page.transfers.len() < query.limit,
            "a page cut by the budget is not full"
        );
        cut_short += u32::from(!page.complete);
        found.extend(page.transfers.iter().map(|(seq, stored)| {
            assert_eq!(
                stored.view.transfer_id, ids[seq],
                "the transfer of seq {seq}"
            );
            *seq
        }));
        match page.next {
            Some(next) => query.before_seq = Some(next),
            None => return (found, cut_short),
        }
    }
    panic!("the pages of {query:?} never ended: {found:?}");
}

/// A query's choices: payer, payee, currency, state, error code, window,
/// (amount range, time range, party, party role), limit, round, scan
/// budget.
type Choices = (
    u8,
    u8,
    u8,
    u8,
    u8,
    u8,
    (u8, u8, u8, u8),
    usize,
    usize,
    usize,
);

fn query_strategy() -> impl Strategy<Value = Choices> {
    (
        // Each filter is absent about half the time, so that queries
        // find something.
        0u8..9,  // payer: DFSP n (1 to 4), else none
        0u8..9,  // payee
        0u8..5,  // currency: USD, EUR, else none
        0u8..11, // state: one of five, else none
        0u8..5,  // error code: the first seen, an unknown one, else none
        0u8..5,  // window: 1, 2, else none
        // Amount range, time range (bits, below 4), party (MSISDN/0 to 4,
        // else none), its role (either, payer, payee).
        (0u8..8, 0u8..8, 0u8..12, 0u8..3),
        1usize..6,  // limit
        1usize..8,  // round
        1usize..40, // scan budget
    )
}

#[test]
fn every_search_finds_what_a_filter_over_the_snapshot_finds() {
    let cluster = testpg::Cluster::start();
    let case = std::cell::Cell::new(0u32);
    let non_empty = std::cell::Cell::new(0u32);
    let cut_short = std::cell::Cell::new(0u32);
    // Searches by party that found something.
    let by_party = std::cell::Cell::new(0u32);
    // Cases whose keys were filed up to some seq, and not to the last.
    let lagging = std::cell::Cell::new(0u32);
    // Searches by party that found something in blocks the party index
    // filed, and cases whose index covered some blocks and not all.
    let by_party_index = std::cell::Cell::new(0u32);
    let index_lagging = std::cell::Cell::new(0u32);
    // Searches for one exact amount that found something the index filed.
    let by_amount_index = std::cell::Cell::new(0u32);
    // A fixed seed: the coverage asserted below (matches, pages cut short,
    // keys lagging, party searches) is then the same on every run. With a
    // seed of the moment, 16 cases sometimes held a single lagging case,
    // and CI failed on the count, not on a search.
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig {
            cases: 16,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = (
        prop::collection::vec(op(), 1..80),
        prop::collection::vec(query_strategy(), 12),
        1u64..4,
        // The party index: seqs per block, and filings of up to 3 blocks.
        (1u64..6, 0usize..12),
    );
    runner
        .run(
            &strategy,
            |(ops, queries, pass_most, (block_seqs, filings))| {
                case.set(case.get() + 1);
                let url = cluster.create_database(&format!("case{}", case.get()));
                let dir = tempfile::tempdir().expect("tempdir");
                let pg = PgStore::open(&url).expect("open the PostgreSQL store");
                // A pass at every commit, of a few transfers: the keys lag the
                // transfers by a varying tail, which the searches walk by seq.
                let pass = SearchPass {
                    every: std::time::Duration::ZERO,
                    most_transfers: pass_most,
                };
                let mut harness = Harness::with_search_pass(dir.path(), Some(pg), pass);
                for op in ops {
                    harness.run(op);
                }
                let snapshot = harness.store.load().expect("load");
                let all = seen(&snapshot);
                let through: i64 = rusqlite::Connection::open(dir.path().join("kasi.db"))
                    .and_then(|db| {
                        db.query_row(
                            "SELECT COALESCE(MAX(through_seq), 0) FROM search_index",
                            [],
                            |row| row.get(0),
                        )
                    })
                    .expect("the search pass's seq");
                let last = all.iter().map(|t| t.seq as i64).max().unwrap_or(0);
                if through > 0 && through < last {
                    lagging.set(lagging.get() + 1);
                }
                // The party index, filed as the hub's follower files it (on the
                // feed's connection, beside the open writer), on both backends
                // alike; often only some of the blocks.
                let mut filed_end = [0u64; 2];
                for (at, feed) in support::feeds(dir.path(), &url).iter().enumerate() {
                    for _ in 0..filings {
                        let filing = feed.file_party_blocks(3, block_seqs).expect("file");
                        prop_assert_eq!(filing.last_seq as i64, last);
                        prop_assert_eq!(filing.block_seqs, block_seqs);
                        filed_end[at] = filing.next_block * block_seqs;
                    }
                }
                prop_assert_eq!(filed_end[0], filed_end[1], "both backends filed the same");
                let filed_end = filed_end[0];
                if filed_end > 0 && filed_end <= last as u64 {
                    index_lagging.set(index_lagging.get() + 1);
                }
                let times: Vec<i64> = all.iter().map(|t| t.prepared_at_ms).collect();
                let first_error = all.iter().find_map(|t| t.reason);
                let ids: HashMap<u64, TransferId> = snapshot
                    .transfers
                    .iter()
                    .map(|t| (t.seq, t.transfer_id))
                    .collect();
                let sqlite = harness.lookup();
                let pg = PgReader::open(&url).expect("a PostgreSQL reader");
                let mut searches = Vec::new();
                for (
                    payer,
                    payee,
                    currency,
                    state,
                    error,
                    window,
                    (amounts, span, party, role),
                    limit,
                    round,
                    budget,
                ) in queries
                {
                    let dfsp = |n: u8| {
                        (1..5)
                            .contains(&n)
                            .then(|| harness.dfsps[(n as usize - 1) % harness.dfsps.len()].0)
                    };
                    // 4 and 5: one exact amount, a transfer's (found) or not.
                    let exact = match amounts {
                        4 => Some(
                            all.get(usize::from(party) % all.len().max(1))
                                .map_or(Amount::from_whole(7), |t| t.amount),
                        ),
                        5 => Some(Amount::from_units(3)),
                        _ => None,
                    };
                    let (amounts, span) =
                        (amounts * u8::from(amounts < 4), span * u8::from(span < 4));
                    let at = |n: usize| times.get(n % times.len().max(1)).copied().unwrap_or(0);
                    let query = TransferQuery {
                        payer: dfsp(payer),
                        payee: dfsp(payee),
                        party: (party < 5).then(|| format!("MSISDN/{party}")),
                        party_role: match role {
                            1 => Some(PartyRole::Payer),
                            2 => Some(PartyRole::Payee),
                            _ => None,
                        },
                        currency: match currency {
                            1 => Currency::parse("USD"),
                            2 => Currency::parse("EUR"),
                            _ => None,
                        },
                        state: match state {
                            1 => Some(TransferState::Committed),
                            2 => Some(TransferState::Aborted),
                            3 => Some(TransferState::Reserved),
                            4 => Some(TransferState::Expired),
                            5 => Some(TransferState::Rejected),
                            _ => None,
                        },
                        error_code: match error {
                            1 => first_error,
                            2 => Some(9_999),
                            _ => None,
                        },
                        settlement_window: (1..3).contains(&window).then_some(u32::from(window)),
                        min_amount: exact.or((amounts & 1 == 1).then(|| Amount::from_whole(20))),
                        max_amount: exact.or((amounts & 2 == 2).then(|| Amount::from_whole(400))),
                        from_ms: (span & 1 == 1).then(|| at(times.len() / 3)),
                        to_ms: (span & 2 == 2).then(|| at(2 * times.len() / 3)),
                        before_seq: None,
                        limit,
                        chunk: round,
                        scan_budget: budget,
                    };
                    searches.push(query);
                }
                // Two that exercise every case whatever the draw: all
                // transfers, a few per round; and a filter nothing matches,
                // walked a transfer at a time, which the budget cuts.
                searches.push(TransferQuery {
                    limit: 4,
                    chunk: 3,
                    scan_budget: 5,
                    ..TransferQuery::default()
                });
                searches.push(TransferQuery {
                    min_amount: Some(Amount::from_whole(1_000_000_000)),
                    limit: 5,
                    chunk: 1,
                    scan_budget: 2,
                    ..TransferQuery::default()
                });
                for query in searches {
                    let want = expected(&all, &query);
                    if !want.is_empty() {
                        non_empty.set(non_empty.get() + 1);
                        let exact =
                            query.min_amount.is_some() && query.min_amount == query.max_amount;
                        if exact && want.iter().any(|&seq| seq < filed_end) {
                            by_amount_index.set(by_amount_index.get() + 1);
                        }
                        if query.party.is_some() {
                            by_party.set(by_party.get() + 1);
                            if want.iter().any(|&seq| seq < filed_end)
                                && query.error_code.is_none()
                                && query.state.is_none()
                                && query.settlement_window.is_none()
                            {
                                by_party_index.set(by_party_index.get() + 1);
                            }
                        }
                    }
                    for (backend, reader) in
                        [("SQLite", &sqlite as &dyn StoreReader), ("PostgreSQL", &pg)]
                    {
                        let (found, cut) = every_page(reader, &query, &ids);
                        prop_assert_eq!(&found, &want, "{} {:?}", backend, query);
                        cut_short.set(cut_short.get() + cut);
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    // The cases exercised something: matches, and pages the budget ended.
    assert!(non_empty.get() >= 20, "{}", non_empty.get());
    assert!(cut_short.get() >= 5, "{}", cut_short.get());
    assert!(lagging.get() >= 2, "{}", lagging.get());
    assert!(by_party.get() >= 3, "{}", by_party.get());
    assert!(by_party_index.get() >= 2, "{}", by_party_index.get());
    assert!(index_lagging.get() >= 2, "{}", index_lagging.get());
    assert!(by_amount_index.get() >= 2, "{}", by_amount_index.get());
    eprintln!(
        "non-empty {} (by party {}, in the party index {}, by amount in it {}) cut short {} lagging {} index lagging {}",
        non_empty.get(),
        by_party.get(),
        by_party_index.get(),
        by_amount_index.get(),
        cut_short.get(),
        lagging.get(),
        index_lagging.get()
    );
}
