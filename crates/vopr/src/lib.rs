//! A seeded simulation of kasi's ledger pipeline and its store, with
//! TigerBeetle's VOPR as the model: from one `u64` seed, a workload of
//! DFSPs and an operator, a simulated clock, and a simulated store
//! ([`disk::SimStore`]) that fails transiently, fails for good, crashes
//! the process or slows down at chosen commits and reads — run through
//! the real [`engine::Engine`] (both pipeline shapes, with and without a
//! retention horizon), crashed and recovered with [`engine::recover_at`],
//! and checked after every step ([`run`] says what). A failure names its
//! seed; `SIM_SEED=… cargo test -p vopr --test seeds` or
//! `cargo run --release -p vopr -- --seed …` runs it again.

pub mod check;
pub mod disk;
pub mod rng;
mod run;
pub mod workload;

pub use run::{run, Config, Failure, Report};
