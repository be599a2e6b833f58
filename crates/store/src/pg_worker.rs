//! A PostgreSQL connection owned by a thread of its own.
//!
//! The `postgres` client drives its connection on a private async runtime
//! and refuses to be called (or dropped) from inside another one, such as
//! the hub's request tasks. So readers the hub calls from its tasks send
//! their work to this thread and wait for the answer on a plain channel:
//! the caller blocks, as it would on a SQLite read, and never nests
//! runtimes.

use std::sync::mpsc;
use std::sync::Mutex;

use postgres::Client;

use crate::pg::connect;
use crate::StoreError;

type Job = Box<dyn FnOnce(&mut Option<Client>) + Send>;

/// A thread holding one connection to `url`, opened again on the next job
/// after it is lost.
pub(crate) struct PgWorker {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl PgWorker {
    /// Starts the thread and connects (so that a bad URL fails now).
    pub(crate) fn start(url: &str, name: &str) -> Result<PgWorker, StoreError> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let (ready_sender, ready) = mpsc::sync_channel(1);
        let url = url.to_string();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut client = match connect(&url) {
                    Ok(client) => {
                        let _ = ready_sender.send(Ok(()));
                        Some(client)
                    }
                    Err(error) => {
                        let _ = ready_sender.send(Err(error));
                        return;
                    }
                };
                while let Ok(job) = receiver.recv() {
                    if client.as_ref().is_none_or(Client::is_closed) {
                        client = connect(&url).ok();
                    }
                    job(&mut client);
                }
            })
            .map_err(|e| StoreError::fatal(format!("cannot start a store thread: {e}")))?;
        ready
            .recv()
            .map_err(|_| StoreError::fatal("the store thread stopped"))??;
        Ok(PgWorker {
            jobs: Mutex::new(jobs),
        })
    }

    /// Runs `work` on the connection's thread and waits for its answer.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (answer, answered) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |client: &mut Option<Client>| {
            let result = match client.as_mut() {
                Some(client) => work(client),
                None => Err(StoreError::transient(
                    "cannot reach the store (reconnecting)",
                )),
            };
            let _ = answer.send(result);
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| StoreError::fatal("the store thread stopped"))?;
        answered
            .recv()
            .map_err(|_| StoreError::fatal("the store thread stopped"))?
    }
}
