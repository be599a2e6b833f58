//! The simulation in CI: a fixed set of seeds, each in both pipeline
//! shapes with and without a retention horizon. `SIM_SEED=N` runs that
//! seed alone (`SIM_SHAPE=1|1r|2|2r` one shape of it, `SIM_STEPS` more
//! steps), to reproduce a failure.

use std::time::Instant;

use vopr::{run, Config, Report};

/// Seeds × 4 shapes; each run is onboarding plus this many steps.
const SEEDS: u64 = 32;
const STEPS: usize = 40;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[test]
fn seeded_simulations_of_the_pipeline_and_its_store_find_nothing() {
    let steps = env("SIM_STEPS").map_or(STEPS, |s| s.parse().expect("SIM_STEPS is a number"));
    let seeds: Vec<u64> = match env("SIM_SEED") {
        Some(seed) => vec![seed.parse().expect("SIM_SEED is a number")],
        None => (0..SEEDS).collect(),
    };
    let configs: Vec<Config> = match env("SIM_SHAPE") {
        Some(name) => vec![Config::parse(&name, steps).expect("SIM_SHAPE is 1, 1r, 2 or 2r")],
        None => Config::all(steps).to_vec(),
    };
    let started = Instant::now();
    // A run mostly waits on its simulated disk: the shapes run at once.
    let results: Vec<(Report, Vec<String>)> = std::thread::scope(|scope| {
        let runs: Vec<_> = configs
            .iter()
            .map(|&config| {
                let seeds = &seeds;
                scope.spawn(move || {
                    let mut total = Report::default();
                    let mut failures = Vec::new();
                    for &seed in seeds {
                        match run(seed, config) {
                            Ok(report) => total.add(&report),
                            Err(failure) => failures.push(failure.to_string()),
                        }
                    }
                    (total, failures)
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut total = Report::default();
    let mut failures = Vec::new();
    for (report, failed) in results {
        total.add(&report);
        failures.extend(failed);
    }
    eprintln!(
        "{} runs in {:.1?}: {total:?}",
        seeds.len() * configs.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if env("SIM_SEED").is_none() {
        // The seeds must reach what the simulation is for.
        assert!(total.crashes > 0, "no crash or fatal fault: {total:?}");
        assert!(total.restarts > 0, "no clean restart: {total:?}");
        assert!(total.transient > 0, "no transient fault: {total:?}");
        assert!(
            total.refused > 0,
            "nothing refused during a fault: {total:?}"
        );
        assert!(total.evicted > 0, "nothing left memory: {total:?}");
        assert!(
            total.disk.prefetch_found > 0,
            "nothing was read back from the store: {total:?}"
        );
        assert!(
            total.unread_refused > 0,
            "no failed read refused anything: {total:?}"
        );
        assert!(total.duplicates > 0 && total.modified > 0, "{total:?}");
        assert!(total.expired > 0, "nothing expired: {total:?}");
        assert!(
            total.durable_unacknowledged > 0,
            "no crash left a durable but unacknowledged commit: {total:?}"
        );
    }
}
