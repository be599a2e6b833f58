//! DFSPs' JWS public keys and the optional check of FSPIOP-Signature on
//! inbound requests (off by default, as in Mojaloop).
//!
//! - Keys live in one directory, `<fspId>.pem` each (a public key or a
//!   certificate), as Mojaloop's services and SDK read them. The directory
//!   is the one source of truth: it is polled (one directory listing and a
//!   `stat` per file every [`KEY_POLL_INTERVAL`]) and a changed file is
//!   re-read; the admin API (`PUT`/`GET`/`DELETE /participants/{name}/jwsKey`)
//!   writes and removes those files (temp file, fsync, rename) and reloads.
//! - The check runs as a middleware of the FSPIOP router, on the request's
//!   own task, before any handler: a request that fails it is answered
//!   400 with error 3105 and nothing else happens. The header checks run
//!   on the task; the crypto in the hub's JWS pool, which the task awaits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ledger::{ErrorCode, FspName};
use serde_json::json;

use crate::jws::{self, VerifyingKey};
use crate::{Hub, HubError};

/// How often the keys directory is looked at for changes.
pub const KEY_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// FSPIOP error 3105, "Invalid signature".
pub const INVALID_SIGNATURE: ErrorCode = ErrorCode(3105);

/// The resources `--jws-verify` can name (the first segment of the path).
pub const RESOURCES: &[&str] = &[
    "transfers",
    "quotes",
    "parties",
    "participants",
    "transactionRequests",
    "authorizations",
    "bulkQuotes",
    "bulkTransfers",
    "fxQuotes",
    "fxTransfers",
];

/// Which inbound requests must carry a valid FSPIOP-Signature.
#[derive(Clone, Debug, Default)]
pub struct VerifyPolicy {
    /// Resources whose non-GET requests are checked; empty: none.
    pub resources: Vec<String>,
    /// Check `PUT /parties/...` too (Mojaloop's JWS_VALIDATE_PUT_PARTIES;
    /// off by default because many DFSPs do not sign party answers).
    pub put_parties: bool,
    /// Only requests from these FSPs are checked; none: from every FSP.
    pub participants: Option<Vec<String>>,
}

impl VerifyPolicy {
    /// `list` (comma-separated resource names, or `all`) as resources;
    /// an unknown name is refused, so a typo never disables a check.
    pub fn parse_resources(list: &[String]) -> Result<Vec<String>, String> {
        let mut resources = Vec::new();
        for name in list.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            if name == "all" {
                resources.extend(RESOURCES.iter().map(|r| r.to_string()));
            } else if RESOURCES.contains(&name) {
                resources.push(name.to_string());
            } else {
                return Err(format!(
                    "unknown resource {name:?}; known: all, {}",
                    RESOURCES.join(", ")
                ));
            }
        }
        Ok(resources)
    }

    pub fn is_on(&self) -> bool {
        !self.resources.is_empty()
    }

    /// Whether a request must be signed (FSPIOP-Source aside).
    fn covers(&self, method: &Method, path: &str) -> bool {
        if *method == Method::GET {
            return false;
        }
        let resource = path.trim_start_matches('/').split('/').next().unwrap_or("");
        if !self.resources.iter().any(|r| r == resource) {
            return false;
        }
        !(resource == "parties" && *method == Method::PUT && !self.put_parties)
    }
}

/// A file's identity for change detection.
type Stamp = (SystemTime, u64);

/// The public keys of `<fspId>.pem` files in one directory.
pub struct JwsKeys {
    dir: PathBuf,
    keys: RwLock<HashMap<String, Arc<VerifyingKey>>>,
    /// What each file looked like when last read; serialises reloads.
    seen: Mutex<HashMap<String, Stamp>>,
    temp_counter: AtomicU64,
}

impl JwsKeys {
    /// Opens (creating it if needed) and reads the keys directory.
    pub fn open(dir: &Path) -> std::io::Result<JwsKeys> {
        std::fs::create_dir_all(dir)?;
        let keys = JwsKeys {
            dir: dir.to_path_buf(),
            keys: RwLock::default(),
            seen: Mutex::default(),
            temp_counter: AtomicU64::new(0),
        };
        keys.reload()?;
        Ok(keys)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn get(&self, fsp: &str) -> Option<Arc<VerifyingKey>> {
        self.keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(fsp)
            .cloned()
    }

    /// How many keys are loaded.
    pub fn len(&self) -> usize {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Re-reads the files that changed, drops the keys whose file is gone.
    /// A file that does not parse leaves its FSP without a key (its signed
    /// requests then fail), and is logged once per change.
    pub fn reload(&self) -> std::io::Result<()> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut present: HashMap<String, Stamp> = HashMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(fsp) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".pem"))
                .filter(|n| !n.is_empty() && !n.starts_with('.'))
            else {
                continue;
            };
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if !metadata.is_file() {
                continue;
            }
            let stamp = (
                metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                metadata.len(),
            );
            present.insert(fsp.to_string(), stamp);
        }
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        keys.retain(|fsp, _| present.contains_key(fsp));
        seen.retain(|fsp, _| present.contains_key(fsp));
        for (fsp, stamp) in present {
            if seen.get(&fsp) == Some(&stamp) {
                continue;
            }
            seen.insert(fsp.clone(), stamp);
            let path = self.dir.join(format!("{fsp}.pem"));
            match std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| VerifyingKey::from_pem(&text))
            {
                Ok(key) => {
                    tracing::info!(fsp = %fsp, "JWS public key loaded");
                    keys.insert(fsp, Arc::new(key));
                }
                Err(error) => {
                    tracing::warn!(fsp = %fsp, file = %path.display(), %error, "JWS public key not usable; the FSP has no key");
                    keys.remove(&fsp);
                }
            }
        }
        Ok(())
    }

    /// Polls the directory for ever (a task of the runtime; the file system
    /// work runs on the blocking pool).
    pub async fn watch(self: Arc<Self>, every: Duration) {
        // Polled each second: an unreadable directory is said once, then
        // every 10 s with the count, and once when it reads again.
        let mut failures = engine::Repeats::new(Duration::from_secs(10));
        loop {
            tokio::time::sleep(every).await;
            let keys = self.clone();
            match tokio::task::spawn_blocking(move || keys.reload()).await {
                Ok(Ok(())) => {
                    if let Some(recovered) = failures.recovered() {
                        tracing::warn!(dir = %self.dir.display(), failures = recovered.failures, "JWS keys directory readable again")
                    }
                }
                Ok(Err(error)) => {
                    if let Some(repeated) = failures.failed() {
                        tracing::warn!(dir = %self.dir.display(), %error, repeated, "JWS keys directory not readable")
                    }
                }
                Err(_) => return,
            }
        }
    }

    fn path(&self, fsp: FspName) -> PathBuf {
        self.dir.join(format!("{fsp}.pem"))
    }

    /// Replaces `<fsp>.pem` atomically (temp file, fsync, rename, fsync of
    /// the directory), then reloads.
    fn write(&self, fsp: FspName, pem: &str) -> std::io::Result<()> {
        use std::io::Write;
        let temp = self.dir.join(format!(
            ".{fsp}.pem.{}.{}.tmp",
            std::process::id(),
            self.temp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(pem.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temp, self.path(fsp))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        written?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        self.reload()
    }

    /// Removes `<fsp>.pem`; false if there was none.
    fn remove(&self, fsp: FspName) -> std::io::Result<bool> {
        match std::fs::remove_file(self.path(fsp)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        }
        std::fs::File::open(&self.dir)?.sync_all()?;
        self.reload()?;
        Ok(true)
    }

    fn read(&self, fsp: FspName) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(self.path(fsp)) {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// Checks the signature of a request the policy covers (the FSPIOP gate,
/// `fspiop_gate`): the request, its body read, or the refusal to answer.
/// Requests the policy does not cover pass untouched.
pub(crate) async fn verified(
    hub: &Hub,
    request: axum::extract::Request,
) -> Result<axum::extract::Request, Response> {
    let policy = &hub.config.jws_verify;
    if !policy.covers(request.method(), request.uri().path()) {
        return Ok(request);
    }
    let headers = request.headers();
    let header = |name: &str| -> Option<String> {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (source, uri, method, signature, destination, date) = (
        header("fspiop-source"),
        header("fspiop-uri"),
        header("fspiop-http-method"),
        header("fspiop-signature"),
        header("fspiop-destination"),
        header("date"),
    );
    // Without FSPIOP-Source the route refuses the request itself (3102).
    let Some(source) = source.filter(|s| !s.is_empty()) else {
        return Ok(request);
    };
    // A message a proxy carried from another scheme (the gate bound it,
    // see `crate::Proxied`) is signed by the proxy, with its own key: the
    // other scheme's DFSP has no key here (docs/design/interscheme.md,
    // rule 6). What it signs still names that DFSP as its source.
    let signer = request
        .extensions()
        .get::<crate::Proxied>()
        .map_or_else(|| source.clone(), |proxied| proxied.proxy.to_string());
    if let Some(participants) = &policy.participants {
        if !participants.contains(&signer) {
            return Ok(request);
        }
    }
    let refuse = |why: String| {
        let description = format!("Invalid signature - {why}");
        hub.refuse(crate::refused::Class::Jws, &source, &description);
        HubError::new(INVALID_SIGNATURE, description).into_response()
    };
    let Some(key) = hub.jws_keys.as_ref().and_then(|keys| keys.get(&signer)) else {
        return Err(refuse(format!("no JWS public key for {signer}")));
    };
    let (Some(uri), Some(method), Some(signature)) = (uri, method, signature) else {
        return Err(refuse(
            "the fspiop-uri, fspiop-http-method and fspiop-signature headers are required".into(),
        ));
    };
    // Stricter than Mojaloop: the signed target must be this request's,
    // so a signed message cannot be replayed on another resource or method.
    let real_uri = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    if uri != real_uri || method != request.method().as_str() {
        return Err(refuse(
            "fspiop-uri or fspiop-http-method is not this request's".into(),
        ));
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, hub.config.max_body_bytes).await {
        Ok(body) => body,
        Err(_) => {
            let mut response = HubError::new(
                ErrorCode::MALFORMED_SYNTAX,
                "Malformed syntax - the body is larger than allowed",
            )
            .into_response();
            *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return Err(response);
        }
    };
    let covered = jws::Covered {
        uri: &uri,
        method: &method,
        source: &source,
        destination: destination.as_deref(),
        date: date.as_deref(),
    };
    let checked = match jws::check(&key, &signature, &covered) {
        Ok(checked) => checked,
        Err(jws::Invalid(why)) => return Err(refuse(why)),
    };
    let Some(pool) = &hub.jws_pool else {
        // `Hub::new` makes a pool whenever verification is on.
        return Err(internal_error("the hub has no JWS pool"));
    };
    match pool.verify(key, checked, body.clone()).await {
        Ok(Ok(())) => {}
        Ok(Err(jws::Invalid(why))) => return Err(refuse(why)),
        Err(unavailable) => return Err(internal_error(&unavailable.to_string())),
    }
    Ok(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(body),
    ))
}

/// A signature that could not be checked for a fault of the hub's own.
fn internal_error(why: &str) -> Response {
    tracing::error!(%why, "an FSPIOP-Signature could not be checked");
    HubError::new(
        ErrorCode::INTERNAL_SERVER_ERROR,
        "Internal server error - the signature could not be checked",
    )
    .into_response()
}

/// `PUT`/`GET`/`DELETE /participants/{name}/jwsKey` on the admin address.
pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route(
            "/participants/:name/jwsKey",
            get(get_key).put(put_key).delete(delete_key),
        )
        .with_state(hub)
}

fn keys_of(hub: &Hub) -> Result<Arc<JwsKeys>, HubError> {
    hub.jws_keys.clone().ok_or_else(|| {
        HubError::new(
            ErrorCode(2002),
            "Not implemented - the hub has no JWS keys directory (--jws-keys-dir)",
        )
    })
}

fn participant(name: &str) -> Result<FspName, HubError> {
    FspName::new(name).ok_or_else(|| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("Generic validation error - '{name}' is not a participant name"),
        )
    })
}

fn io_error(error: std::io::Error) -> HubError {
    HubError::new(
        ErrorCode::INTERNAL_SERVER_ERROR,
        format!("Internal server error - JWS keys directory: {error}"),
    )
}

fn not_found(fsp: FspName) -> Response {
    let mut response = HubError::new(
        ErrorCode::ID_NOT_FOUND,
        format!("Id not found - no JWS key for {fsp}"),
    )
    .into_response();
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

fn key_answer(fsp: FspName, pem: &str) -> Response {
    let key_type = match VerifyingKey::from_pem(pem) {
        Ok(VerifyingKey::Rsa(_)) => "RSA",
        Ok(VerifyingKey::Ec(_)) => "EC",
        Err(_) => "unusable",
    };
    axum::Json(json!({"name": fsp.as_str(), "keyType": key_type, "publicKey": pem})).into_response()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, HubError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| {
            HubError::new(
                ErrorCode::INTERNAL_SERVER_ERROR,
                format!("Internal server error - {e}"),
            )
        })?
        .map_err(io_error)
}

/// Body: the PEM text, or `{"publicKey": "<PEM>"}`. A key that does not
/// parse (or could never verify: RSA under 2048 bits, EC not P-256) is
/// refused with 3100 and the file is left as it was.
async fn put_key(
    State(hub): State<Arc<Hub>>,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Result<Response, HubError> {
    let keys = keys_of(&hub)?;
    let fsp = participant(&name)?;
    let text = std::str::from_utf8(&body).map_err(|_| {
        HubError::new(
            ErrorCode::MALFORMED_SYNTAX,
            "Malformed syntax - the key is not UTF-8",
        )
    })?;
    let pem = if text.trim_start().starts_with('{') {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v["publicKey"].as_str().map(str::to_string))
            .ok_or_else(|| {
                HubError::new(
                    ErrorCode::MALFORMED_SYNTAX,
                    "Malformed syntax - expected {\"publicKey\": \"<PEM>\"}",
                )
            })?
    } else {
        text.to_string()
    };
    VerifyingKey::from_pem(&pem).map_err(|error| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            format!("Generic validation error - not a usable JWS public key: {error}"),
        )
    })?;
    let stored = pem.clone();
    let before = {
        let keys = keys.clone();
        blocking(move || keys.read(fsp)).await?
    };
    blocking(move || keys.write(fsp, &stored)).await?;
    tracing::info!(fsp = %fsp, "JWS public key uploaded");
    record_change(&hub, "jwsKey.set", fsp, before.as_deref(), Some(&pem)).await?;
    Ok(key_answer(fsp, &pem))
}

/// What an audit event shows of a key: its type and the SHA-256 of its
/// PEM text (enough to tell keys apart without copying them into the
/// audit trail).
fn key_summary(pem: Option<&str>) -> String {
    use sha2::Digest as _;
    match pem {
        None => "null".to_string(),
        Some(pem) => {
            let key_type = match VerifyingKey::from_pem(pem) {
                Ok(VerifyingKey::Rsa(_)) => "RSA",
                Ok(VerifyingKey::Ec(_)) => "EC",
                Err(_) => "unusable",
            };
            let digest = sha2::Sha256::digest(pem.as_bytes());
            let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
            json!({"keyType": key_type, "pemSha256": hex}).to_string()
        }
    }
}

/// Records the audit event of a key change already made on disk. If the
/// store cannot record it, the change stands but the caller is told (500).
async fn record_change(
    hub: &Hub,
    action: &str,
    fsp: FspName,
    before: Option<&str>,
    after: Option<&str>,
) -> Result<(), HubError> {
    let note = ledger::request::NoteExternalChange {
        before: key_summary(before),
        after: key_summary(after),
    };
    hub.ask_audited(crate::audit::Change::external(action, fsp), note)
        .await??;
    Ok(())
}

async fn get_key(
    State(hub): State<Arc<Hub>>,
    UrlPath(name): UrlPath<String>,
) -> Result<Response, HubError> {
    let keys = keys_of(&hub)?;
    let fsp = participant(&name)?;
    Ok(match blocking(move || keys.read(fsp)).await? {
        Some(pem) => key_answer(fsp, &pem),
        None => not_found(fsp),
    })
}

async fn delete_key(
    State(hub): State<Arc<Hub>>,
    UrlPath(name): UrlPath<String>,
) -> Result<Response, HubError> {
    let keys = keys_of(&hub)?;
    let fsp = participant(&name)?;
    let before = {
        let keys = keys.clone();
        blocking(move || keys.read(fsp)).await?
    };
    Ok(if blocking(move || keys.remove(fsp)).await? {
        tracing::info!(fsp = %fsp, "JWS public key removed");
        record_change(&hub, "jwsKey.delete", fsp, before.as_deref(), None).await?;
        StatusCode::NO_CONTENT.into_response()
    } else {
        not_found(fsp)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jws::test_keys::{ec_pem, openssl_pkey, rsa_pem};

    #[test]
    fn the_directory_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ec_public = openssl_pkey(&ec_pem(), &["-pubout"]);
        std::fs::write(dir.path().join("payerfsp.pem"), &ec_public).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a key").unwrap();
        std::fs::write(dir.path().join("broken.pem"), "garbage").unwrap();
        let keys = JwsKeys::open(dir.path()).unwrap();
        assert!(matches!(
            keys.get("payerfsp").as_deref(),
            Some(VerifyingKey::Ec(_))
        ));
        assert!(keys.get("broken").is_none());
        assert_eq!(keys.len(), 1);

        // Replaced, added, removed.
        let rsa_public = openssl_pkey(&rsa_pem(), &["-pubout"]);
        let payer = FspName::new("payerfsp").unwrap();
        keys.write(payer, &rsa_public).unwrap();
        assert!(matches!(
            keys.get("payerfsp").as_deref(),
            Some(VerifyingKey::Rsa(_))
        ));
        std::fs::write(dir.path().join("payeefsp.pem"), &ec_public).unwrap();
        keys.reload().unwrap();
        assert!(keys.get("payeefsp").is_some());
        assert!(keys.remove(payer).unwrap());
        assert!(!keys.remove(payer).unwrap());
        assert!(keys.get("payerfsp").is_none());
        // No temp file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn the_policy_covers_what_it_names() {
        let policy = VerifyPolicy {
            resources: VerifyPolicy::parse_resources(&["transfers".into(), "parties".into()])
                .unwrap(),
            ..VerifyPolicy::default()
        };
        assert!(policy.covers(&Method::POST, "/transfers"));
        assert!(policy.covers(&Method::PUT, "/transfers/1/error"));
        assert!(!policy.covers(&Method::GET, "/transfers/1"));
        assert!(!policy.covers(&Method::POST, "/quotes"));
        assert!(!policy.covers(&Method::PUT, "/parties/MSISDN/1/error"));
        let with_put = VerifyPolicy {
            put_parties: true,
            ..policy.clone()
        };
        assert!(with_put.covers(&Method::PUT, "/parties/MSISDN/1"));
        assert_eq!(
            VerifyPolicy::parse_resources(&["all".into()])
                .unwrap()
                .len(),
            RESOURCES.len()
        );
        assert!(VerifyPolicy::parse_resources(&["transfer".into()]).is_err());
    }
}
