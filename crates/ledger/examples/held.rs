//! What a finished transfer costs the ledger's memory while it is held for
//! its retention horizon: heap bytes counted by this binary's allocator
//! (and RSS, for comparison), per transfer, with N finished transfers held.
//!
//! `cargo run --release -p ledger --example held -- [N] [DFSPS] [phases|steady]`
//! (default 2,000,000 transfers between 8 DFSPs, the default
//! `--finished-transfers-in-memory` and a 24 h horizon, so that none
//! leaves). Each batch prepares 500 transfers and fulfils the previous
//! batch's, 100 ms apart (5,000 transfers/s); with `phases`, as `kasi
//! bench ledger` does, all are prepared first, then all fulfilled; with
//! `steady`, at most 2,000,000 stay (the default), so that past them each
//! batch's finishes push out as many of the oldest. Ids,
//! request hashes and fulfilments are random, amounts up to 1,000.0000.
//! Prints one JSON line: heap and RSS per transfer held, and the apply's
//! time per command (wall clock, and the thread's CPU time).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ledger::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const T0: i64 = 1_700_000_000_000;
const BATCH: u64 = 500;
const BATCH_MS: i64 = 100;

/// SplitMix64: the example's only randomness, seeded, so runs compare.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn bytes(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        out
    }
}

/// CPU time of this thread, in ns: the apply's own cost, whatever else
/// the machine runs meanwhile.
fn thread_cpu_nanos() -> u128 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn expect_done(outcomes: &[Outcome]) {
    for outcome in outcomes {
        match outcome {
            Outcome::Rejected(rejection) => panic!("setup refused: {rejection:?}"),
            Outcome::Failed { error, .. } => panic!("setup failed: {error:?}"),
            _ => {}
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let held: u64 = args
        .next()
        .map(|n| n.parse().expect("N: transfers"))
        .unwrap_or(2_000_000);
    let dfsps: u32 = args.next().map(|n| n.parse().expect("DFSPS")).unwrap_or(8);
    let mode = args.next().unwrap_or_default();
    let phases = mode == "phases";
    let steady = mode == "steady";
    let limits = Limits {
        transfer_retention_ms: Some(24 * 3_600_000),
        max_finished_in_memory: match steady {
            true => 2_000_000,
            false => held.max(2_000_000) as usize,
        },
        ..Limits::default()
    };
    let mut ledger = Ledger::new(limits);
    let usd = Currency::parse("USD").expect("USD");
    let mut now = T0;
    let mut setup = vec![
        Command::CreateHub {
            name: FspName::new("Hub").expect("name"),
        },
        Command::CreateHubAccount {
            currency: usd,
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency: usd,
            kind: AccountKind::HubReconciliation,
        },
    ];
    let names: Vec<FspName> = (0..dfsps)
        .map(|i| FspName::new(&format!("dfsp{i:04}")).expect("name"))
        .collect();
    for &name in &names {
        setup.push(Command::CreateParticipant {
            name,
            currency: usd,
        });
        setup.push(Command::InitNetDebitCap {
            name,
            currency: usd,
            net_debit_cap: Amount::from_whole(1_000_000_000_000),
        });
    }
    let result = ledger.apply_batch(now, &setup);
    expect_done(&result.outcomes);
    let settlement: Vec<AccountId> = result
        .outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Outcome::AccountsCreated(ids) if ids.len() == 2 => Some(ids[1]),
            _ => None,
        })
        .collect();
    let funding: Vec<Command> = names
        .iter()
        .zip(&settlement)
        .enumerate()
        .map(|(i, (&participant, &account))| {
            Command::FundsIn(Funds {
                transfer_id: TransferId::new(u128::MAX - i as u128),
                participant,
                account,
                amount: Amount::from_whole(1_000_000_000_000),
                currency: usd,
                memo: FundsMemo::default(),
                request_hash: RequestHash::default(),
            })
        })
        .collect();
    expect_done(&ledger.apply_batch(now, &funding).outcomes);

    let mut random = Random(31);
    let heap_before = LIVE.load(Ordering::Relaxed);
    let rss_before = rss_bytes();
    let transfers_before = ledger.transfer_count();
    let mut pending: Vec<Command> = Vec::new();
    let mut applied = 0u64;
    let mut apply_nanos = 0u128;
    let mut apply_cpu_nanos = 0u128;
    let mut next = 0u64;
    let mut errors = 0u64;
    // With `phases`: the fulfils, once every transfer is prepared; the
    // CPU time of the prepares.
    let mut fulfils: Vec<Command> = Vec::new();
    let mut prepare_cpu_nanos = 0u128;
    // With `steady`: the CPU time and commands of the batches applied with
    // the most held.
    let (mut steady_cpu_nanos, mut steady_commands) = (0u128, 0u64);
    while next < held || !pending.is_empty() || !fulfils.is_empty() {
        now += BATCH_MS;
        let mut commands = match phases {
            false => std::mem::take(&mut pending),
            true if next < held => {
                fulfils.append(&mut pending);
                Vec::new()
            }
            true => {
                if prepare_cpu_nanos == 0 {
                    prepare_cpu_nanos = apply_cpu_nanos.max(1);
                    fulfils.append(&mut pending);
                    fulfils.reverse();
                }
                fulfils.split_off(fulfils.len().saturating_sub(BATCH as usize))
            }
        };
        let count = BATCH.min(held - next);
        for _ in 0..count {
            let n = next as usize;
            next += 1;
            let id = TransferId::new(u128::from(random.next()) << 64 | u128::from(random.next()));
            let fulfilment = Fulfilment::from_preimage(random.bytes());
            let payer = names[n % names.len()];
            let payee = names[(n + 1 + n / names.len() % (names.len() - 1)) % names.len()];
            commands.push(Command::Prepare(Prepare {
                transfer_id: id,
                payer,
                payee,
                amount: Amount::from_units(1 + (random.next() % 10_000_000) as i128),
                currency: usd,
                condition: fulfilment.condition(),
                expiration_ms: now + if phases { 86_400_000 } else { 60_000 },
                request_hash: RequestHash(random.bytes()),
                wire_version: 1,
                parties: None,
            }));
            pending.push(Command::Fulfil(Fulfil {
                transfer_id: id,
                caller: payee,
                fulfilment: Some(fulfilment),
                destination: Some(payer),
                request_hash: RequestHash(random.bytes()),
            }));
        }
        let started = Instant::now();
        let cpu = thread_cpu_nanos();
        let result = ledger.apply_batch(now, &commands);
        let spent = thread_cpu_nanos() - cpu;
        apply_cpu_nanos += spent;
        if steady && ledger.transfer_count() - transfers_before >= 2_000_000 {
            steady_cpu_nanos += spent;
            steady_commands += commands.len() as u64;
        }
        apply_nanos += started.elapsed().as_nanos();
        applied += commands.len() as u64;
        errors += result
            .outcomes
            .iter()
            .filter(|outcome| outcome.error_code().is_some())
            .count() as u64;
        let durable = ledger.batches_applied();
        ledger.evict(now, durable, 4096 + 4 * commands.len());
        drop(result);
    }
    drop(fulfils);
    let phase_cpu = match phases {
        true => format!(
            ", \"prepare_cpu_ns_per_command\": {:.0}, \"fulfil_cpu_ns_per_command\": {:.0}",
            prepare_cpu_nanos as f64 / held.max(1) as f64,
            (apply_cpu_nanos - prepare_cpu_nanos) as f64 / held.max(1) as f64
        ),
        false if steady => format!(
            ", \"steady_cpu_ns_per_command\": {:.0}",
            steady_cpu_nanos as f64 / steady_commands.max(1) as f64
        ),
        false => String::new(),
    };
    let held_now = (ledger.transfer_count() - transfers_before) as u64;
    let heap = LIVE.load(Ordering::Relaxed) - heap_before;
    let rss = rss_bytes().saturating_sub(rss_before);
    println!(
        "{{\"held\": {held_now}, \"errors\": {errors}, \"heap_bytes\": {heap}, \"heap_per_transfer\": {:.1}, \"rss_bytes\": {rss}, \"rss_per_transfer\": {:.1}, \"apply_ns_per_command\": {:.0}, \"apply_cpu_ns_per_command\": {:.0}{phase_cpu}}}",
        heap as f64 / held_now.max(1) as f64,
        rss as f64 / held_now.max(1) as f64,
        apply_nanos as f64 / applied.max(1) as f64,
        apply_cpu_nanos as f64 / applied.max(1) as f64
    );
    assert_eq!(errors, 0, "every transfer commits");
    let most = if steady { held.min(2_000_000) } else { held };
    assert_eq!(held_now, most, "every transfer is held, or the most");
}
