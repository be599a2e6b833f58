use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::jws::test_keys::{covered, ec_pem, rsa_pem};

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(10);

/// Waits until `condition` holds, or panics with `what` after [`WAIT`].
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_pool_signs_and_verifies_as_inline() {
    let pool = JwsPool::new(2, 8);
    let body = br#"{"transferState":"COMMITTED"}"#;
    for pem in [rsa_pem(), ec_pem()] {
        let key = Arc::new(SigningKey::from_pem(&pem).unwrap());
        let public = Arc::new(key.public_key());
        let pooled = pool
            .sign(&key, SigningInput::new(key.alg(), &covered(), body))
            .await
            .unwrap();
        let inline = jws::sign(&key, &covered(), body).unwrap();
        if key.alg() == Alg::Rs256 {
            // PKCS#1 v1.5 is deterministic: the very same header.
            assert_eq!(pooled, inline);
        }
        // Each verifies, in the pool and inline, and fails for another body.
        for header in [&pooled, &inline] {
            jws::verify(&public, header, &covered(), body).unwrap();
            let checked = jws::check(&public, header, &covered()).unwrap();
            assert_eq!(checked.alg(), key.alg());
            pool.verify(public.clone(), checked, Bytes::from_static(body))
                .await
                .unwrap()
                .unwrap();
            let checked = jws::check(&public, header, &covered()).unwrap();
            let changed = pool
                .verify(
                    public.clone(),
                    checked,
                    Bytes::from_static(br#"{"transferState":"ABORTED"}"#),
                )
                .await
                .unwrap();
            assert_eq!(
                changed,
                Err(Invalid("the signature does not verify".into()))
            );
        }
    }
    // The canonical fallback runs in the pool too: a sorted-key signature
    // over bytes sent unsorted.
    let key = SigningKey::from_pem(&ec_pem()).unwrap();
    let public = Arc::new(key.public_key());
    let canonical = br#"{"a":1,"b":[2.5]}"#;
    let header = jws::sign(&key, &covered(), canonical).unwrap();
    let checked = jws::check(&public, &header, &covered()).unwrap();
    pool.verify(
        public,
        checked,
        Bytes::from_static(br#"{ "b": [2.50], "a": 1 }"#),
    )
    .await
    .unwrap()
    .unwrap();
}

/// Gives `pool`'s one thread a job that holds it until the returned
/// sender opens the gate (then the job returns true); returns once the job
/// has started.
async fn hold_the_thread(
    pool: &Arc<JwsPool>,
) -> (
    tokio::task::JoinHandle<Result<bool, Unavailable>>,
    std::sync::mpsc::Sender<()>,
) {
    let (started, has_started) = std::sync::mpsc::channel();
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let holding = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.run(Kind::Sign, Alg::Es256, move || {
                started.send(()).unwrap();
                gate.recv_timeout(WAIT).is_ok()
            })
            .await
        })
    };
    tokio::task::spawn_blocking(move || has_started.recv_timeout(WAIT))
        .await
        .unwrap()
        .expect("the holding job started");
    (holding, open)
}

#[tokio::test]
async fn a_full_queue_makes_callers_wait_rather_than_fail() {
    // One thread, room for one job.
    let pool = JwsPool::new(1, 1);
    let (holding, open) = hold_the_thread(&pool).await;
    let key = Arc::new(SigningKey::from_pem(&rsa_pem()).unwrap());
    let waiting: Vec<_> = (0..2)
        .map(|i| {
            let (pool, key) = (pool.clone(), key.clone());
            tokio::spawn(async move {
                let body = format!("{{\"n\":{i}}}");
                let input = SigningInput::new(key.alg(), &covered(), body.as_bytes());
                pool.sign(&key, input).await
            })
        })
        .collect();
    // One job queued, and the other caller waiting for room: neither has
    // failed, neither has finished.
    eventually("one job queued", || pool.stats.queued.get() == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pool.stats.queued.get(), 1);
    assert!(waiting.iter().all(|task| !task.is_finished()));
    open.send(()).unwrap();
    assert_eq!(
        tokio::time::timeout(WAIT, holding).await.unwrap().unwrap(),
        Ok(true)
    );
    for (i, task) in waiting.into_iter().enumerate() {
        let header = tokio::time::timeout(WAIT, task)
            .await
            .expect("the waiting caller was answered")
            .unwrap()
            .expect("and signed");
        let body = format!("{{\"n\":{i}}}");
        jws::verify(&key.public_key(), &header, &covered(), body.as_bytes()).unwrap();
    }
    assert_eq!(pool.stats.queued.get(), 0);
}

#[tokio::test]
async fn the_pool_shows_its_work_in_the_metrics() {
    let pool = JwsPool::new(2, 8);
    let mut metrics = crate::metrics::Metrics::new(
        engine::StatsSnapshot::default,
        Vec::new,
        Arc::new(crate::role::Role::embedded()),
    );
    metrics.register_jws_pool(&pool);
    let rsa = Arc::new(SigningKey::from_pem(&rsa_pem()).unwrap());
    let ec = Arc::new(SigningKey::from_pem(&ec_pem()).unwrap());
    let header = pool
        .sign(&rsa, SigningInput::new(rsa.alg(), &covered(), b"{}"))
        .await
        .unwrap();
    let public = Arc::new(rsa.public_key());
    let checked = jws::check(&public, &header, &covered()).unwrap();
    pool.verify(public, checked, Bytes::from_static(b"{}"))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..2 {
        pool.sign(&ec, SigningInput::new(ec.alg(), &covered(), b"{}"))
            .await
            .unwrap();
    }
    let sample = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(-1.0)
    };
    eventually("every operation counted", || {
        let text = metrics.render();
        sample(
            &text,
            r#"kasi_jws_operations_total{kind="sign",alg="RS256"}"#,
        ) == 1.0
            && sample(
                &text,
                r#"kasi_jws_operations_total{kind="verify",alg="RS256"}"#,
            ) == 1.0
            && sample(
                &text,
                r#"kasi_jws_operations_total{kind="sign",alg="ES256"}"#,
            ) == 2.0
            && sample(&text, "kasi_jws_queue_wait_seconds_count") == 4.0
    })
    .await;
    let text = metrics.render();
    // An RSA signature takes tens of µs at the very least.
    assert!(
        sample(
            &text,
            r#"kasi_jws_busy_seconds_total{kind="sign",alg="RS256"}"#
        ) > 0.00001,
        "{text}"
    );
    assert!(
        sample(&text, "kasi_jws_queue_wait_seconds_sum") > 0.0,
        "{text}"
    );
    assert_eq!(sample(&text, "kasi_jws_queued"), 0.0, "{text}");
    assert_eq!(sample(&text, "kasi_jws_threads"), 2.0, "{text}");
    assert_eq!(sample(&text, "kasi_jws_queue_capacity"), 8.0, "{text}");
}

/// The proof that the crypto is off the runtime: a runtime of ONE worker
/// thread answers a request while a task of it awaits an RSA signing job
/// that lasts until that request is answered. Were the crypto run on the
/// task, the worker would be busy signing and the request never answered
/// (the job would end at its 10 s deadline, unanswered).
#[test]
fn a_runtime_of_one_thread_answers_while_a_slow_rsa_signature_is_computed() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let pool = JwsPool::new(1, 4);
    let key = Arc::new(SigningKey::from_pem(&rsa_pem()).unwrap());
    let started = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicBool::new(false));
    let (addr, signing) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // The other request's server: a task of the same runtime.
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 256];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        // Spawned, so that it is the worker thread that awaits the pool.
        let signing = tokio::spawn({
            let (pool, key) = (pool.clone(), key.clone());
            let (started, answered) = (started.clone(), answered.clone());
            async move {
                pool.run(Kind::Sign, Alg::Rs256, move || {
                    started.store(true, Ordering::SeqCst);
                    let deadline = Instant::now() + WAIT;
                    let mut signatures = 0u32;
                    while !answered.load(Ordering::SeqCst) && Instant::now() < deadline {
                        key.sign(b"a slow signature").unwrap();
                        signatures += 1;
                    }
                    (answered.load(Ordering::SeqCst), signatures)
                })
                .await
            }
        });
        eventually("the signing job started", || started.load(Ordering::SeqCst)).await;
        (addr, signing)
    });
    // The client is a thread of its own, outside the runtime.
    let client = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.set_read_timeout(Some(WAIT * 2)).unwrap();
            stream
                .write_all(b"GET /health HTTP/1.1\r\nhost: hub\r\n\r\n")
                .unwrap();
            let mut answer = [0u8; 64];
            let read = stream.read(&mut answer).unwrap_or(0);
            let ok = answer[..read].starts_with(b"HTTP/1.1 200");
            answered.store(ok, Ordering::SeqCst);
            ok
        })
    };
    assert!(client.join().unwrap(), "the request was answered");
    let (answered_while_signing, signatures) = runtime
        .block_on(async { tokio::time::timeout(WAIT * 2, signing).await })
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        answered_while_signing,
        "the signing job ran to its deadline: the request was not answered while it signed"
    );
    assert!(signatures >= 1);
}

#[tokio::test]
async fn a_caller_that_goes_away_costs_no_crypto() {
    let pool = JwsPool::new(1, 4);
    let (holding, open) = hold_the_thread(&pool).await;
    let ran = Arc::new(AtomicBool::new(false));
    let abandoned = {
        let (pool, ran) = (pool.clone(), ran.clone());
        tokio::spawn(async move {
            pool.run(Kind::Verify, Alg::Es256, move || {
                ran.store(true, Ordering::SeqCst)
            })
            .await
        })
    };
    eventually("the second job queued", || pool.stats.queued.get() == 1).await;
    abandoned.abort();
    let _ = abandoned.await;
    open.send(()).unwrap();
    tokio::time::timeout(WAIT, holding)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // A third job runs after the abandoned one was taken (one thread, FIFO).
    pool.run(Kind::Verify, Alg::Es256, || ()).await.unwrap();
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(pool.stats.queued.get(), 0);
}

/// Not a test: what a signature and a verification cost with ring and
/// with aws-lc-rs, and what the hand-off to the pool costs, on this
/// machine: `cargo test -p hub --release --lib jws_costs -- --ignored
/// --nocapture` (BENCHMARKS.md, "Signing"). Each operation is timed with
/// ring, then aws-lc-rs, twice over (A B A B), in CPU time of the timing
/// thread (what a core pays, whatever else the machine runs) and in wall
/// time.
#[test]
#[ignore]
fn jws_costs() {
    let rsa_pkcs8 = pkcs8(&rsa_pem());
    let ec_pkcs8 = pkcs8(&ec_pem());
    let message = vec![b'x'; 600];
    type Operation = Box<dyn FnMut()>;
    let ring_rng = ring::rand::SystemRandom::new();
    let aws_rng = aws_lc_rs::rand::SystemRandom::new();
    let ring_rsa = ring::signature::RsaKeyPair::from_pkcs8(&rsa_pkcs8).unwrap();
    let aws_rsa = aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&rsa_pkcs8).unwrap();
    let ring_ec = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &ec_pkcs8,
        &ring_rng,
    )
    .unwrap();
    let aws_ec = aws_lc_rs::signature::EcdsaKeyPair::from_pkcs8(
        &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &ec_pkcs8,
    )
    .unwrap();
    let mut rsa_signature = vec![0; 256];
    ring_rsa
        .sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring_rng,
            &message,
            &mut rsa_signature,
        )
        .unwrap();
    let ec_signature = ring_ec.sign(&ring_rng, &message).unwrap().as_ref().to_vec();
    let rsa_public = {
        use ring::signature::KeyPair as _;
        ring_rsa.public_key().as_ref().to_vec()
    };
    let ec_public = {
        use ring::signature::KeyPair as _;
        ring_ec.public_key().as_ref().to_vec()
    };
    let ring_rsa = Arc::new(ring_rsa);
    let aws_rsa = Arc::new(aws_rsa);
    let ring_ec = Arc::new(ring_ec);
    let aws_ec = Arc::new(aws_ec);
    let message = Arc::new(message);
    // The same call in either library: ring's and aws-lc-rs's APIs have
    // the same shape, under different paths.
    macro_rules! rsa_sign {
        ($lib:ident, $pair:expr, $rng:expr) => {{
            let (pair, message, rng) = ($pair.clone(), message.clone(), $rng.clone());
            Box::new(move || {
                let mut out = [0u8; 256];
                pair.sign(&$lib::signature::RSA_PKCS1_SHA256, &rng, &message, &mut out)
                    .unwrap();
            }) as Operation
        }};
    }
    macro_rules! ec_sign {
        ($pair:expr, $rng:expr) => {{
            let (pair, message, rng) = ($pair.clone(), message.clone(), $rng.clone());
            Box::new(move || {
                pair.sign(&rng, &message).unwrap();
            }) as Operation
        }};
    }
    macro_rules! verify {
        ($lib:ident, $alg:ident, $public:expr, $signature:expr) => {{
            let (public, message, signature) =
                ($public.clone(), message.clone(), $signature.clone());
            Box::new(move || {
                $lib::signature::UnparsedPublicKey::new(&$lib::signature::$alg, &public)
                    .verify(&message, &signature)
                    .unwrap()
            }) as Operation
        }};
    }
    // (name, iterations, ring, aws-lc-rs)
    let operations: Vec<(&str, u32, Operation, Operation)> = vec![
        (
            "RS256 sign",
            2_000,
            rsa_sign!(ring, ring_rsa, ring_rng),
            rsa_sign!(aws_lc_rs, aws_rsa, aws_rng),
        ),
        (
            "RS256 verify",
            20_000,
            verify!(ring, RSA_PKCS1_2048_8192_SHA256, rsa_public, rsa_signature),
            verify!(
                aws_lc_rs,
                RSA_PKCS1_2048_8192_SHA256,
                rsa_public,
                rsa_signature
            ),
        ),
        (
            "ES256 sign",
            20_000,
            ec_sign!(ring_ec, ring_rng),
            ec_sign!(aws_ec, aws_rng),
        ),
        (
            "ES256 verify",
            20_000,
            verify!(ring, ECDSA_P256_SHA256_FIXED, ec_public, ec_signature),
            verify!(aws_lc_rs, ECDSA_P256_SHA256_FIXED, ec_public, ec_signature),
        ),
    ];
    println!("µs per operation: thread CPU (wall)");
    println!(
        "{:14} {:>17} {:>17} {:>17} {:>17}",
        "", "ring", "aws-lc-rs", "ring", "aws-lc-rs"
    );
    for (name, count, mut ring_op, mut aws_op) in operations {
        let mut cells = Vec::new();
        for _ in 0..2 {
            cells.push(time(count, &mut ring_op));
            cells.push(time(count, &mut aws_op));
        }
        let cells: Vec<String> = cells
            .iter()
            .map(|(cpu, wall)| format!("{cpu:.1} ({wall:.1})"))
            .collect();
        println!(
            "{name:14} {:>17} {:>17} {:>17} {:>17}",
            cells[0], cells[1], cells[2], cells[3]
        );
    }

    // The hand-off: a no-op awaited through the pool, one at a time, from
    // a runtime task, against the same no-op called inline; CPU of the
    // whole process (the task's thread and the pool's), and wall time.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pool = JwsPool::new(2, QUEUE_CAPACITY);
    for round in 1..=2 {
        let pool = pool.clone();
        runtime.block_on(async move {
            tokio::spawn(async move {
                let count = 20_000u32;
                let (cpu, wall) = (process_cpu(), Instant::now());
                for _ in 0..count {
                    (std::hint::black_box(|| ()))();
                }
                let inline = per_op(process_cpu() - cpu, wall.elapsed(), count);
                let (cpu, wall) = (process_cpu(), Instant::now());
                for _ in 0..count {
                    pool.run(Kind::Sign, Alg::Es256, || std::hint::black_box(()))
                        .await
                        .unwrap();
                }
                let pooled = per_op(process_cpu() - cpu, wall.elapsed(), count);
                // 64 callers at once, as on a loaded hub: the threads find
                // the next job waiting instead of sleeping between jobs.
                let (cpu, wall) = (process_cpu(), Instant::now());
                let callers: Vec<_> = (0..64)
                    .map(|_| {
                        let pool = pool.clone();
                        tokio::spawn(async move {
                            for _ in 0..count / 64 {
                                pool.run(Kind::Sign, Alg::Es256, || std::hint::black_box(()))
                                    .await
                                    .unwrap();
                            }
                        })
                    })
                    .collect();
                for caller in callers {
                    caller.await.unwrap();
                }
                let busy = per_op(process_cpu() - cpu, wall.elapsed(), count / 64 * 64);
                println!(
                    "round {round}: no-op inline {:.2} ({:.2}); through the pool, one at a time {:.1} ({:.1}), 64 at once {:.1} ({:.1}) µs process CPU (wall)",
                    inline.0, inline.1, pooled.0, pooled.1, busy.0, busy.1
                );
            })
            .await
            .unwrap();
        });
    }
}

/// `count` calls of `work` after a tenth as many to warm up: µs of this
/// thread's CPU and µs of wall time per call.
fn time(count: u32, work: &mut dyn FnMut()) -> (f64, f64) {
    for _ in 0..count / 10 {
        work();
    }
    let (cpu, wall) = (thread_cpu(), Instant::now());
    for _ in 0..count {
        work();
    }
    per_op(thread_cpu() - cpu, wall.elapsed(), count)
}

fn per_op(cpu: Duration, wall: Duration, count: u32) -> (f64, f64) {
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(count);
    (us(cpu), us(wall))
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill in.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut now) }, 0);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The DER of a PEM `PRIVATE KEY` (PKCS#8), as openssl writes it.
fn pkcs8(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}
