//! `vopr`: runs the simulation for as long as asked.
//!
//! ```text
//! cargo run --release -p vopr -- --seconds 3600        # seeds from the clock, for an hour
//! cargo run --release -p vopr -- --seeds 1000 --from 7 # seeds 7..1007
//! cargo run --release -p vopr -- --seed 42 --shape 2r  # one run again
//! ```
//!
//! Every seed runs in the four shapes (1 or 2 pipeline threads, retention
//! off or on: `1`, `1r`, `2`, `2r`) unless `--shape` picks one. A run
//! spends most of its time waiting on its simulated slow disk, so
//! `--jobs N` (default: the cores) runs N seeds at once. Stops at the
//! first failure, printing how to run it again; exits 1 then. A release
//! build leaves out the pipeline's `debug_assert!`s; `cargo run -p vopr`
//! (a debug build) keeps them, at a fraction of the speed.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vopr::{run, Config, Report};

struct Args {
    seed: Option<u64>,
    from: Option<u64>,
    seeds: Option<u64>,
    seconds: Option<u64>,
    shape: Option<String>,
    steps: usize,
    jobs: usize,
}

const USAGE: &str = "usage: vopr [--seed N | --seeds COUNT [--from N] | --seconds S] \
                     [--shape 1|1r|2|2r] [--steps N] [--jobs N]";

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seed: None,
        from: None,
        seeds: None,
        seconds: None,
        shape: None,
        steps: 200,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let mut value = || words.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("{flag}: {text:?} is not a number"))
        };
        match flag.as_str() {
            "--seed" => args.seed = Some(number(value()?)?),
            "--from" => args.from = Some(number(value()?)?),
            "--seeds" => args.seeds = Some(number(value()?)?),
            "--seconds" => args.seconds = Some(number(value()?)?),
            "--shape" => args.shape = Some(value()?),
            "--steps" => args.steps = number(value()?)? as usize,
            "--jobs" => args.jobs = (number(value()?)? as usize).max(1),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let configs: Vec<Config> = match &args.shape {
        None => Config::all(args.steps).to_vec(),
        Some(name) => match Config::parse(name, args.steps) {
            Some(config) => vec![config],
            None => {
                eprintln!("--shape: {name:?} is none of 1, 1r, 2, 2r");
                return ExitCode::from(2);
            }
        },
    };
    let clock_seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let first = args.seed.or(args.from).unwrap_or(clock_seed);
    let count = match (args.seed, args.seeds, args.seconds) {
        (Some(_), _, _) => 1,
        (None, Some(count), _) => count,
        (None, None, Some(_)) => u64::MAX,
        (None, None, None) => 1,
    };
    let until = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let total = Mutex::new((Report::default(), 0u64));
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count
                    || failed.load(Ordering::Relaxed)
                    || until.is_some_and(|until| Instant::now() >= until)
                {
                    return;
                }
                let seed = first.wrapping_add(i);
                for &config in &configs {
                    match run(seed, config) {
                        Ok(report) => {
                            let mut total = total.lock().unwrap_or_else(|e| e.into_inner());
                            total.0.add(&report);
                            total.1 += 1;
                            if total.1 % 400 == 0 {
                                eprintln!(
                                    "{} runs, up to seed {seed}, {:.0?}",
                                    total.1,
                                    started.elapsed()
                                );
                            }
                        }
                        Err(failure) => {
                            failed.store(true, Ordering::Relaxed);
                            eprintln!("{failure}");
                            return;
                        }
                    }
                }
            });
        }
    });
    if failed.load(Ordering::Relaxed) {
        return ExitCode::from(1);
    }
    let (total, runs) = total.into_inner().unwrap_or_else(|e| e.into_inner());
    println!(
        "{runs} runs from seed {first} passed in {:.1?}: {} steps, {} submissions, {} commits, \
         {} crashes or fatal faults, {} clean restarts, {} transient faults, {} ids read back \
         from the store, {} evicted, {} duplicates, {} modified requests",
        started.elapsed(),
        total.steps,
        total.submissions,
        total.disk.commits,
        total.crashes,
        total.restarts,
        total.transient,
        total.disk.prefetch_found,
        total.evicted,
        total.duplicates,
        total.modified,
    );
    ExitCode::SUCCESS
}
