//! What the operator sees of refused admin requests: each one counted
//! ([`Hub::refuse`]), and in the audit trail.
//!
//! A change the ledger refuses is its own audit event (the ledger records
//! it, see [`crate::audit`]); a write a handler refused before the ledger
//! is noted here, one event each (its caller is an authenticated
//! operator). Unauthenticated attempts come from anyone, so their events
//! are coalesced: at most one per (kind, remote address or credential's
//! name) per [`COALESCE_WINDOW`], the first at once and then one per window
//! carrying the count of attempts it stands for, with a bounded table of
//! keys — a flood of bad tokens cannot grow the store faster than a few
//! rows a minute.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use ledger::{AuditRender, AuditTag, Command};
use serde_json::{json, Value};

use crate::admin_auth::{self, GateRefusal, RefusedWrite, Source};
use crate::refused::Class;
use crate::Hub;

/// At most one audit event per (kind, key) in this time.
pub const COALESCE_WINDOW: Duration = Duration::from_secs(60);

/// Keys followed at once; beyond, attempts share the key [`OTHERS`].
pub const COALESCE_KEYS_MAX: usize = 1_024;

/// The key of attempts past [`COALESCE_KEYS_MAX`] others.
pub const OTHERS: &str = "(others)";

/// Longest request line or reason an event keeps.
const TEXT_MAX: usize = 200;

/// What kind of refused attempt, each coalesced on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// No valid credential (401).
    Unauthenticated,
    /// A role that may not do this (403).
    Forbidden,
    /// A browser's cross-site write or a rebound Host (403, open loopback
    /// admin address).
    CrossSite,
}

impl Kind {
    pub fn class(self) -> Class {
        match self {
            Kind::Unauthenticated => Class::AdminUnauthenticated,
            Kind::Forbidden => Class::AdminForbidden,
            Kind::CrossSite => Class::AdminCrossSite,
        }
    }

    /// The event's action.
    pub fn action(self) -> &'static str {
        match self {
            Kind::Unauthenticated => "admin.authenticate",
            Kind::Forbidden => "admin.authorize",
            Kind::CrossSite => "admin.crossSite",
        }
    }

    /// The event's outcome.
    pub fn outcome(self) -> &'static str {
        match self {
            Kind::Unauthenticated => "UNAUTHENTICATED",
            Kind::Forbidden => "FORBIDDEN",
            Kind::CrossSite => "REFUSED CROSS-SITE",
        }
    }
}

/// One refused attempt, as its event shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub actor: String,
    pub role: String,
    /// How the actor signed in ([`crate::admin_auth::Source`]), `none`
    /// when no credential was accepted.
    pub source: String,
    /// The peer's address, or `in-process`.
    pub remote: String,
    /// `METHOD /path`.
    pub request: String,
    pub why: String,
}

/// Who an audit event of a refusal names.
struct Who<'a> {
    actor: &'a str,
    role: &'a str,
    /// How they signed in (`none` when no credential was accepted).
    source: &'a str,
}

struct Pending {
    window_end: Instant,
    /// Attempts since the last event, not yet written.
    unwritten: u64,
    last: Attempt,
    flush_scheduled: bool,
}

/// What to do with an attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write an event now, standing for this many attempts.
    Write(u64),
    /// Counted for a later event; `Some`: flush the key at that instant
    /// (the first attempt held back in a window asks for it).
    Hold(Option<Instant>),
}

/// The coalescing table.
pub struct Coalescer {
    window: Duration,
    max_keys: usize,
    entries: Mutex<HashMap<(Kind, String), Pending>>,
}

impl Default for Coalescer {
    fn default() -> Coalescer {
        Coalescer::new(COALESCE_WINDOW, COALESCE_KEYS_MAX)
    }
}

impl Coalescer {
    pub fn new(window: Duration, max_keys: usize) -> Coalescer {
        Coalescer {
            window,
            max_keys,
            entries: Mutex::default(),
        }
    }

    /// Counts an attempt under (`kind`, `key`); the key it was counted
    /// under (`key`, or [`OTHERS`] when the table is full) and what to do.
    pub fn note(
        &self,
        kind: Kind,
        key: &str,
        attempt: Attempt,
        now: Instant,
    ) -> (String, Decision) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = key.to_string();
        if !entries.contains_key(&(kind, key.clone())) && entries.len() >= self.max_keys {
            // Forget quiet keys first; ones still owing an event stay.
            entries.retain(|_, pending| pending.window_end > now || pending.unwritten > 0);
            if entries.len() >= self.max_keys {
                key = OTHERS.to_string();
            }
        }
        let window = self.window;
        let fresh = |unwritten| Pending {
            window_end: now + window,
            unwritten,
            last: attempt.clone(),
            flush_scheduled: false,
        };
        let decision = match entries.get_mut(&(kind, key.clone())) {
            Some(pending) if now < pending.window_end => {
                pending.unwritten += 1;
                pending.last = attempt.clone();
                if pending.flush_scheduled {
                    Decision::Hold(None)
                } else {
                    pending.flush_scheduled = true;
                    Decision::Hold(Some(pending.window_end))
                }
            }
            Some(pending) => {
                // The window ended and its flush has not run yet: this
                // event stands for those too.
                let attempts = pending.unwritten + 1;
                *pending = fresh(0);
                Decision::Write(attempts)
            }
            None => {
                entries.insert((kind, key.clone()), fresh(0));
                Decision::Write(1)
            }
        };
        (key, decision)
    }

    /// At the end of the window that ended at `window_end`: the attempts
    /// held back in it and the last of them, to be written as one event
    /// (which opens a new window); `None` if there are none or the window
    /// was already closed by an attempt.
    pub fn flush(
        &self,
        kind: Kind,
        key: &str,
        window_end: Instant,
        now: Instant,
    ) -> Option<(u64, Attempt)> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let slot = (kind, key.to_string());
        let pending = entries.get_mut(&slot)?;
        if pending.window_end != window_end {
            return None;
        }
        if pending.unwritten == 0 {
            entries.remove(&slot);
            return None;
        }
        let attempts = pending.unwritten;
        let last = pending.last.clone();
        *pending = Pending {
            window_end: now + self.window,
            unwritten: 0,
            last: last.clone(),
            flush_scheduled: false,
        };
        Some((attempts, last))
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

/// `text` cut to [`TEXT_MAX`] bytes at a character boundary.
fn cut(text: &str) -> String {
    let mut end = text.len().min(TEXT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The participant an admin path is about (`/participants/{name}/…`, or
/// the console's `/console/participants/{name}/…`), if any: refusals are
/// counted under it when it is a known DFSP.
pub fn participant_in_path(path: &str) -> Option<&str> {
    let path = path.strip_prefix("/console").unwrap_or(path);
    let name = path.strip_prefix("/participants/")?.split('/').next()?;
    (!name.is_empty() && name != "limits").then_some(name)
}

fn remote_text(remote: Option<IpAddr>) -> String {
    remote.map_or_else(|| "in-process".to_string(), |ip| ip.to_string())
}

impl Hub {
    /// Counts and audits a refusal of the admin gate (401, 403).
    pub fn admin_gate_refused(self: &Arc<Self>, refusal: &GateRefusal<'_>) {
        let remote = remote_text(refusal.remote);
        let request = cut(&format!("{} {}", refusal.method, refusal.path));
        let (kind, key, attempt) = match refusal.caller {
            Some(caller) if refusal.status == StatusCode::FORBIDDEN => {
                let reason = refusal
                    .reason
                    .unwrap_or(crate::access::Refusal::UnlistedRoute);
                self.metrics
                    .record_admin_forbidden(caller.role.kind().as_str(), reason.as_str());
                (
                    Kind::Forbidden,
                    caller.name.clone(),
                    Attempt {
                        actor: caller.name.clone(),
                        role: caller.role.to_string(),
                        source: caller.source.as_str().to_string(),
                        remote,
                        request,
                        why: reason.describe(caller.role, refusal.method, refusal.path),
                    },
                )
            }
            _ => (
                Kind::Unauthenticated,
                remote.clone(),
                Attempt {
                    actor: "unknown".to_string(),
                    role: "none".to_string(),
                    // What was presented, though refused.
                    source: match refusal.provider_refusal {
                        Some(_) => Source::Provider.as_str(),
                        None => "none",
                    }
                    .to_string(),
                    remote,
                    request,
                    why: if let Some(refused) = refusal.provider_refusal {
                        self.metrics.record_admin_provider_refused(refused.as_str());
                        format!(
                            "the identity provider's access token was refused: {}",
                            refused.as_str()
                        )
                    } else if refusal.with_credential {
                        "the credential presented is not valid".to_string()
                    } else {
                        "no credential".to_string()
                    },
                },
            ),
        };
        self.admin_refused(kind, &key, participant_in_path(refusal.path), attempt);
    }

    /// Counts, warns (rate-limited) and audits (coalesced) a refused admin
    /// attempt.
    pub(crate) fn admin_refused(
        self: &Arc<Self>,
        kind: Kind,
        key: &str,
        participant: Option<&str>,
        attempt: Attempt,
    ) {
        let detail = format!(
            "{} by '{}' ({}) from {}: {}",
            attempt.request, attempt.actor, attempt.role, attempt.remote, attempt.why
        );
        self.refuse(kind.class(), participant.unwrap_or("unknown"), &detail);
        let (key, decision) =
            self.admin_refusal_events
                .note(kind, key, attempt.clone(), Instant::now());
        match decision {
            Decision::Write(attempts) => {
                let hub = self.clone();
                tokio::spawn(async move { hub.write_refusal_event(kind, attempt, attempts).await });
            }
            Decision::Hold(Some(window_end)) => {
                let hub = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(window_end)).await;
                    let flushed =
                        hub.admin_refusal_events
                            .flush(kind, &key, window_end, Instant::now());
                    if let Some((attempts, last)) = flushed {
                        hub.write_refusal_event(kind, last, attempts).await;
                    }
                });
            }
            Decision::Hold(None) => {}
        }
    }

    async fn write_refusal_event(&self, kind: Kind, attempt: Attempt, attempts: u64) {
        let detail = json!({
            "attempts": attempts,
            "remote": attempt.remote,
            "request": attempt.request,
            "reason": attempt.why,
        });
        let who = Who {
            actor: &attempt.actor,
            role: &attempt.role,
            source: &attempt.source,
        };
        self.note_refused_event(
            who,
            kind.action(),
            &format!("remote/{}", attempt.remote),
            kind.outcome(),
            detail,
        )
        .await;
    }

    /// Records an event for a request refused before the ledger, durable
    /// like any other (through the ledger, in a batch of its own).
    async fn note_refused_event(
        &self,
        who: Who<'_>,
        action: &str,
        target: &str,
        outcome: &str,
        detail: Value,
    ) {
        let Who {
            actor,
            role,
            source,
        } = who;
        let tag = AuditTag {
            actor: actor.to_string(),
            role: role.to_string(),
            source: source.to_string(),
            action: action.to_string(),
            target: target.to_string(),
            view: None,
            render: AuditRender(|_, _| "null".to_string()),
        };
        let command = Command::Audited {
            command: Box::new(Command::NoteRefused {
                outcome: outcome.to_string(),
                detail: detail.to_string(),
            }),
            tag: Box::new(tag),
        };
        match self.execute_one(command).await {
            Ok(_) => tracing::info!(
                actor = %crate::log_safe(actor),
                role = %role,
                source = %source,
                action = %action,
                target = %crate::log_safe(target),
                outcome = %outcome,
                after = %crate::log_safe(&detail.to_string()),
                "audit event"
            ),
            // A full queue or a store fault: the refusal is still counted.
            Err(error) => {
                tracing::warn!(%error, action = %action, "audit event of a refusal not recorded")
            }
        }
    }

    /// Counts and audits a write the admin API refused in a handler, before
    /// the ledger (a body it could not read, a malformed value).
    pub fn admin_write_refused(self: &Arc<Self>, refused: &RefusedWrite<'_>) {
        let info: Value = serde_json::from_slice(refused.body).unwrap_or(Value::Null);
        let info = &info["errorInformation"];
        let code = info["errorCode"].as_str().unwrap_or("");
        let description = info["errorDescription"]
            .as_str()
            .map_or_else(|| refused.status.to_string(), cut);
        let request = cut(&format!("{} {}", refused.method, refused.path));
        let participant = participant_in_path(refused.path);
        self.refuse(
            Class::AdminInvalid,
            participant.unwrap_or("unknown"),
            &format!(
                "{request} by '{}' answered {}: {description}",
                refused.caller.name,
                refused.status.as_u16()
            ),
        );
        let outcome = if code.is_empty() {
            format!("REFUSED: {description}")
        } else {
            format!("REFUSED {code}: {description}")
        };
        let hub = self.clone();
        let actor = refused.caller.name.clone();
        let role = refused.caller.role.to_string();
        let source = refused.caller.source.as_str();
        let target = participant.map_or_else(|| request.clone(), str::to_string);
        let detail = json!({"request": request, "status": refused.status.as_u16()});
        tokio::spawn(async move {
            let who = Who {
                actor: &actor,
                role: &role,
                source,
            };
            hub.note_refused_event(who, "admin.request", &target, &outcome, detail)
                .await
        });
    }
}

/// The open loopback admin address's guard against browsers: see
/// [`admin_auth::cross_site`]. `/health` stays open to probes.
pub async fn same_site(
    hub: Arc<Hub>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    if matches!(path, "/health" | "/health/live" | "/health/ready") {
        return next.run(request).await;
    }
    let api_route = !(path == "/console" || path.starts_with("/console/"));
    if let Err(why) = admin_auth::cross_site(request.method(), request.headers(), api_route) {
        let remote = request
            .extensions()
            .get::<crate::tls::Connection>()
            .map(|connection| connection.peer.ip());
        let remote = remote_text(remote);
        let attempt = Attempt {
            actor: "unknown".to_string(),
            role: "none".to_string(),
            source: "none".to_string(),
            remote: remote.clone(),
            request: cut(&format!("{} {path}", request.method())),
            why: cut(&why),
        };
        hub.admin_refused(Kind::CrossSite, &remote, participant_in_path(path), attempt);
        return admin_auth::refusal(StatusCode::FORBIDDEN, &format!("Forbidden: {why}"));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u32) -> Attempt {
        Attempt {
            actor: "unknown".into(),
            role: "none".into(),
            source: "none".into(),
            remote: "10.0.0.1".into(),
            request: format!("GET /participants?try={n}"),
            why: "no credential".into(),
        }
    }

    #[test]
    fn a_burst_is_one_event_now_and_one_a_window_after_with_the_count() {
        let table = Coalescer::new(Duration::from_secs(60), 16);
        let start = Instant::now();
        let (_, first) = table.note(Kind::Unauthenticated, "10.0.0.1", attempt(0), start);
        assert_eq!(first, Decision::Write(1), "the first is seen at once");
        let mut flush_at = None;
        for i in 1..200u32 {
            let at = start + Duration::from_millis(u64::from(i) * 100);
            match table
                .note(Kind::Unauthenticated, "10.0.0.1", attempt(i), at)
                .1
            {
                Decision::Hold(Some(end)) => {
                    assert!(flush_at.is_none(), "one flush per window");
                    flush_at = Some(end);
                }
                Decision::Hold(None) => {}
                Decision::Write(n) => panic!("a second event within the window ({n})"),
            }
        }
        let end = flush_at.expect("a flush was asked for");
        assert_eq!(end, start + Duration::from_secs(60));
        let (attempts, last) = table
            .flush(Kind::Unauthenticated, "10.0.0.1", end, end)
            .expect("held attempts are written");
        assert_eq!(attempts, 199, "every attempt is counted by some event");
        assert_eq!(last, attempt(199));
        // Another kind, or another key, has its own window.
        assert_eq!(
            table.note(Kind::Forbidden, "10.0.0.1", attempt(0), start).1,
            Decision::Write(1)
        );
        assert_eq!(
            table
                .note(Kind::Unauthenticated, "10.0.0.2", attempt(0), start)
                .1,
            Decision::Write(1)
        );
        // After a quiet window, the next flush finds nothing and forgets
        // the key; the next attempt is seen at once again.
        let later = end + Duration::from_secs(60);
        assert_eq!(
            table.flush(Kind::Unauthenticated, "10.0.0.1", later, later),
            None
        );
        assert_eq!(
            table
                .note(Kind::Unauthenticated, "10.0.0.1", attempt(1), later)
                .1,
            Decision::Write(1)
        );
    }

    #[test]
    fn an_attempt_after_the_window_stands_for_those_not_yet_flushed() {
        let table = Coalescer::new(Duration::from_secs(60), 16);
        let start = Instant::now();
        table.note(Kind::Unauthenticated, "k", attempt(0), start);
        table.note(
            Kind::Unauthenticated,
            "k",
            attempt(1),
            start + Duration::from_secs(1),
        );
        table.note(
            Kind::Unauthenticated,
            "k",
            attempt(2),
            start + Duration::from_secs(2),
        );
        let late = start + Duration::from_secs(61);
        assert_eq!(
            table.note(Kind::Unauthenticated, "k", attempt(3), late).1,
            Decision::Write(3)
        );
        // The flush that was due finds its window gone.
        assert_eq!(
            table.flush(
                Kind::Unauthenticated,
                "k",
                start + Duration::from_secs(60),
                late
            ),
            None
        );
    }

    #[test]
    fn a_stream_of_new_keys_shares_one_key_past_the_bound() {
        let table = Coalescer::new(Duration::from_secs(60), 4);
        let start = Instant::now();
        let mut events = 0;
        for i in 0..1_000u32 {
            let key = format!("10.0.{}.{}", i / 256, i % 256);
            let (counted_as, decision) = table.note(Kind::Unauthenticated, &key, attempt(i), start);
            if i >= 4 {
                assert_eq!(counted_as, OTHERS);
            }
            if matches!(decision, Decision::Write(_)) {
                events += 1;
            }
        }
        assert_eq!(events, 5, "four keys and the others: one event each");
        assert_eq!(table.keys(), 5);
        // Quiet keys are forgotten when room is needed.
        let later = start + Duration::from_secs(120);
        let (counted_as, decision) =
            table.note(Kind::Unauthenticated, "10.9.9.9", attempt(0), later);
        assert_eq!(
            (counted_as.as_str(), decision),
            ("10.9.9.9", Decision::Write(1))
        );
    }

    #[test]
    fn participants_are_read_from_admin_paths() {
        assert_eq!(
            participant_in_path("/participants/payerfsp"),
            Some("payerfsp")
        );
        assert_eq!(
            participant_in_path("/participants/payerfsp/accounts/3"),
            Some("payerfsp")
        );
        assert_eq!(
            participant_in_path("/console/participants/payerfsp/limits"),
            Some("payerfsp")
        );
        assert_eq!(participant_in_path("/participants/limits"), None);
        assert_eq!(participant_in_path("/participants"), None);
        assert_eq!(participant_in_path("/v2/settlements"), None);
    }
}
