//! The configuration a scheme runs, measured: mutual TLS on every
//! connection, the hub's signature on what it originates, the DFSPs' on
//! what they send.
//!
//! - `--tls`: a throw-away scheme CA (rcgen, P-256) made for the run. The
//!   embedded hub serves both addresses over TLS with a certificate for
//!   127.0.0.1 and requires a client certificate on its FSPIOP address;
//!   each simulated DFSP connects with a certificate of its own (subject
//!   CN and DNS name: the DFSP's name, which the hub binds FSPIOP-Source
//!   to), on a connection pool of its own; the callback server is HTTPS
//!   too and requires the hub's client certificate.
//! - `--hub-jws`: the embedded hub signs what it originates with a key made
//!   for the run; the DFSPs check a sample of those signatures.
//! - `--dfsp-jws`: every DFSP signs every request and callback it sends,
//!   its public key installed through the admin API
//!   (`PUT /participants/{name}/jwsKey`), and the hub checks them all
//!   (`--jws-verify all`); the sample the DFSPs check includes what the hub
//!   forwards with the other DFSP's signature.
//!
//! A signature the DFSPs find invalid, or missing where one is due, fails
//! the run. The checks use kasi's FSPIOP signature code (`fspiop::jws`, as
//! the hub does): the bench measures; the end-to-end tests verify the
//! hub's signatures with another implementation (openssl).

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use clap::ValueEnum;
use fspiop::jws::{self, SigningKey, VerifyingKey};
use http::StatusCode;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::sync::Semaphore;

use crate::dfsp::HttpClient;

/// A JWS algorithm of `--hub-jws` and `--dfsp-jws`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JwsAlg {
    /// ECDSA P-256 with SHA-256 (a P-256 key made for the run).
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (an RSA-2048 key made for the run by
    /// `openssl genpkey`).
    Rs256,
}

impl JwsAlg {
    pub(crate) fn name(self) -> &'static str {
        match self {
            JwsAlg::Es256 => "ES256",
            JwsAlg::Rs256 => "RS256",
        }
    }

    /// A private key (PKCS#8 PEM) for this algorithm, and its public half
    /// (SPKI PEM).
    fn make_key(self) -> anyhow::Result<(String, String)> {
        match self {
            JwsAlg::Es256 => {
                let key = rcgen::KeyPair::generate().context("cannot make a P-256 key")?;
                Ok((key.serialize_pem(), key.public_key_pem()))
            }
            JwsAlg::Rs256 => {
                let private = openssl(
                    &[
                        "genpkey",
                        "-algorithm",
                        "RSA",
                        "-pkeyopt",
                        "rsa_keygen_bits:2048",
                    ],
                    None,
                )?;
                let public = openssl(&["pkey", "-pubout"], Some(&private))?;
                Ok((private, public))
            }
        }
    }
}

/// What `openssl args` prints, given `input`.
fn openssl(args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = std::process::Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("RS256 needs an RSA key, made with `openssl genpkey`: is openssl installed?")?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    if let Some(input) = input {
        stdin.write_all(input.as_bytes())?;
    }
    drop(stdin);
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).context("openssl printed no PEM")
}

/// What a run secures, and how: the flags' choices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Choice {
    pub(crate) tls: bool,
    pub(crate) hub_jws: Option<JwsAlg>,
    pub(crate) dfsp_jws: Option<JwsAlg>,
    /// One in this many signed messages a DFSP receives is verified.
    pub(crate) verify_every: u32,
}

impl Choice {
    /// The configuration in a few words, for the report.
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec![if self.tls { "mTLS" } else { "plain HTTP" }.to_string()];
        if let Some(alg) = self.hub_jws {
            parts.push(format!("hub signs {}", alg.name()));
        }
        if let Some(alg) = self.dfsp_jws {
            parts.push(format!("DFSPs sign {} (hub verifies)", alg.name()));
        }
        parts.join(", ")
    }
}

/// A scheme CA made for one run.
struct Pki {
    ca: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

/// A certificate the CA issued, and its key.
struct Issued {
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: PrivateKeyDer<'static>,
}

impl Pki {
    fn new() -> anyhow::Result<Pki> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kasi bench scheme CA");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&ca_key)?;
        Ok(Pki { ca, ca_key })
    }

    /// A server certificate for 127.0.0.1 and localhost.
    fn server(&self, common_name: &str) -> anyhow::Result<Issued> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate naming `name` (subject CN and DNS name).
    fn client(&self, name: &str) -> anyhow::Result<Issued> {
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()])?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    fn issue(&self, params: rcgen::CertificateParams) -> anyhow::Result<Issued> {
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca, &self.ca_key)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca.der().clone())
            .expect("the CA made here is a valid trust anchor");
        roots
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The connector of every client here: `http://`, and `https://` with
/// `tls`; TCP_NODELAY and a connect timeout.
fn connector(tls: rustls::ClientConfig) -> hyper_rustls::HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// A pooled client over `tls`.
pub(crate) fn client(tls: rustls::ClientConfig) -> HttpClient {
    Client::builder(TokioExecutor::new())
        // Below the time a hub keeps an idle keep-alive connection open
        // (kasi's --header-timeout-ms, 10 s; Node's keepAliveTimeout, 5 s,
        // for Mojaloop's services), so the pool never reuses a connection
        // the hub is closing (with 20 s, the likely cause of POSTs reset now
        // and then: "transport" errors, 2 in 720,000 transfers at 2,000/s).
        .pool_idle_timeout(Duration::from_secs(4))
        .pool_timer(TokioTimer::new())
        .build(connector(tls))
}

/// A client of plain HTTP (an `https://` URL fails: no trust anchors).
pub fn plain_client() -> HttpClient {
    client(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    )
}

/// The run's key material, in a temporary directory the embedded hub reads
/// (removed with it).
pub(crate) struct Material {
    pub(crate) choice: Choice,
    dir: tempfile::TempDir,
    pki: Option<Pki>,
    hub_key: Option<VerifyingKey>,
    /// Every DFSP's key pair, for RS256 (one RSA key takes ~0.1 s to make).
    shared_dfsp_key: Option<(String, String)>,
}

impl Material {
    pub(crate) fn new(choice: Choice) -> anyhow::Result<Material> {
        let dir = tempfile::Builder::new()
            .prefix("kasi-bench-keys-")
            .tempdir()
            .context("cannot make a temp dir")?;
        let pki = choice.tls.then(Pki::new).transpose()?;
        let mut hub_key = None;
        if let Some(alg) = choice.hub_jws {
            let (private, public) = alg.make_key()?;
            hub_key = Some(VerifyingKey::from_pem(&public).map_err(anyhow::Error::msg)?);
            std::fs::write(dir.path().join("hub-jws.pem"), private)?;
        }
        let shared_dfsp_key = match choice.dfsp_jws {
            Some(JwsAlg::Rs256) => Some(JwsAlg::Rs256.make_key()?),
            _ => None,
        };
        Ok(Material {
            choice,
            dir,
            pki,
            hub_key,
            shared_dfsp_key,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `kasi serve`'s flags for this configuration (with `hub_name`, the
    /// name its client certificate carries).
    pub(crate) fn serve_args(&self, hub_name: &str) -> anyhow::Result<Vec<OsString>> {
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: &Path| {
            args.push(name.into());
            args.push(value.into());
        };
        if let Some(pki) = &self.pki {
            let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
                let path = self.path(name);
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Ok(path)
            };
            let ca = write("ca.pem", &pki.ca.pem())?;
            let server = pki.server("kasi bench hub")?;
            let client = pki.client(hub_name)?;
            flag("--tls-cert", &write("hub.pem", &server.cert_pem)?);
            flag("--tls-key", &write("hub-key.pem", &server.key_pem)?);
            flag("--tls-client-ca", &ca);
            flag("--callback-ca", &ca);
            flag(
                "--callback-cert",
                &write("hub-client.pem", &client.cert_pem)?,
            );
            flag(
                "--callback-key",
                &write("hub-client-key.pem", &client.key_pem)?,
            );
        }
        if self.choice.hub_jws.is_some() {
            flag("--jws-signing-key", &self.path("hub-jws.pem"));
        }
        if self.choice.dfsp_jws.is_some() {
            flag("--jws-keys-dir", &self.path("jws-keys"));
            args.push("--jws-verify".into());
            args.push("all".into());
        }
        Ok(args)
    }

    /// The scheme of the hub's URLs.
    pub(crate) fn scheme(&self) -> &'static str {
        if self.pki.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The client of the admin API (no client certificate: the hub asks
    /// for one only on its FSPIOP address).
    pub(crate) fn admin_client(&self) -> HttpClient {
        match &self.pki {
            None => plain_client(),
            Some(pki) => client(
                rustls::ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default versions")
                    .with_root_certificates(pki.roots())
                    .with_no_client_auth(),
            ),
        }
    }

    /// The callback server's TLS: its certificate, and the hub's client
    /// certificate required; `None` for plain HTTP.
    pub(crate) fn callback_server(&self) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
        let Some(pki) = &self.pki else {
            return Ok(None);
        };
        let issued = pki.server("kasi bench DFSPs")?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(pki.roots()),
            provider(),
        )
        .build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![issued.cert_der], issued.key_der)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// Each DFSP's identity (`names` in order): its client, its signing key,
    /// the keys the DFSPs verify what they receive with, and at most
    /// `connections_per_dfsp` requests of each in flight at once.
    pub(crate) fn identities(
        &self,
        names: &[String],
        hub_name: &str,
        admin: HttpClient,
        api_base_path: &str,
        connections_per_dfsp: usize,
    ) -> anyhow::Result<Identities> {
        let mut clients = Vec::new();
        if let Some(pki) = &self.pki {
            for name in names {
                let issued = pki.client(name)?;
                let tls = rustls::ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(pki.roots())
                    .with_client_auth_cert(vec![issued.cert_der], issued.key_der)?;
                clients.push(client(tls));
            }
        }
        let mut signers = Vec::new();
        let mut public_keys = Vec::new();
        let mut verifiers = HashMap::new();
        if let Some(hub_key) = &self.hub_key {
            verifiers.insert(hub_name.to_string(), hub_key.clone());
        }
        if let Some(alg) = self.choice.dfsp_jws {
            for name in names {
                let (private, public) = match &self.shared_dfsp_key {
                    Some(pair) => pair.clone(),
                    None => alg.make_key()?,
                };
                signers.push(SigningKey::from_pem(&private).map_err(anyhow::Error::msg)?);
                verifiers.insert(
                    name.clone(),
                    VerifyingKey::from_pem(&public).map_err(anyhow::Error::msg)?,
                );
                public_keys.push(public);
            }
        }
        Ok(Identities {
            admin,
            clients,
            in_flight: names
                .iter()
                .map(|_| Semaphore::new(connections_per_dfsp.max(1)))
                .collect(),
            signers,
            public_keys,
            verifiers,
            hub_name: hub_name.to_string(),
            choice: self.choice,
            api_base_path: api_base_path.trim_end_matches('/').to_string(),
            received: AtomicU64::new(0),
            checks: SignatureChecks::default(),
        })
    }
}

/// What the DFSPs found in the signatures they checked.
#[derive(Default)]
pub(crate) struct SignatureChecks {
    pub(crate) verified: AtomicU64,
    /// Of `verified`, the hub's own.
    pub(crate) verified_hub: AtomicU64,
    pub(crate) invalid: AtomicU64,
    /// Messages that should have carried a signature and did not.
    pub(crate) missing: AtomicU64,
    /// The first problem, for the report.
    pub(crate) first_problem: std::sync::Mutex<Option<String>>,
}

impl SignatureChecks {
    fn problem(&self, counter: &AtomicU64, what: String) {
        counter.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_problem.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(what);
        }
    }
}

/// The run's configuration and what its checks found, for the report.
pub(crate) struct SecuritySummary {
    pub(crate) description: String,
    pub(crate) verified: u64,
    pub(crate) verified_hub: u64,
    pub(crate) invalid: u64,
    pub(crate) missing: u64,
    pub(crate) first_problem: Option<String>,
    /// TLS handshakes the callback server failed (the hub's connections).
    pub(crate) failed_handshakes: u64,
}

impl SecuritySummary {
    pub(crate) fn of(identities: &Identities, failed_handshakes: u64) -> SecuritySummary {
        let checks = &identities.checks;
        SecuritySummary {
            description: identities.choice.describe(),
            verified: checks.verified.load(Ordering::Relaxed),
            verified_hub: checks.verified_hub.load(Ordering::Relaxed),
            invalid: checks.invalid.load(Ordering::Relaxed),
            missing: checks.missing.load(Ordering::Relaxed),
            first_problem: checks
                .first_problem
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            failed_handshakes,
        }
    }

    /// Signatures found bad or missing: the run fails.
    pub(crate) fn failed(&self) -> u64 {
        self.invalid + self.missing
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "configuration": self.description,
            "signatures_verified": self.verified,
            "signatures_verified_hub": self.verified_hub,
            "signatures_invalid": self.invalid,
            "signatures_missing": self.missing,
            "first_signature_problem": self.first_problem,
            "callback_tls_handshakes_failed": self.failed_handshakes,
        })
    }
}

/// Who the simulated DFSPs are on the wire.
pub(crate) struct Identities {
    /// The admin API's client, and every DFSP's without TLS.
    pub(crate) admin: HttpClient,
    /// By DFSP index (`Shared::names`): its client, with its certificate.
    clients: Vec<HttpClient>,
    /// By DFSP index: its requests in flight, bounded as a DFSP's
    /// connection pool is. hyper's pool opens a connection for every
    /// request that finds none idle: in an open loop that falls behind,
    /// thousands of connections (each a full mutual-TLS handshake on the
    /// hub), which measures handshakes, not transfers.
    in_flight: Vec<Semaphore>,
    /// By DFSP index: its JWS key.
    signers: Vec<SigningKey>,
    /// By DFSP index: its public key (PEM), installed in the hub.
    public_keys: Vec<String>,
    /// By FSPIOP-Source: the key its signatures verify with.
    verifiers: HashMap<String, VerifyingKey>,
    hub_name: String,
    pub(crate) choice: Choice,
    /// The path of the hub's FSPIOP base URL, stripped from FSPIOP-URI.
    api_base_path: String,
    received: AtomicU64,
    pub(crate) checks: SignatureChecks,
}

impl Identities {
    /// DFSP `index`'s public JWS key (PEM), when DFSPs sign.
    pub(crate) fn public_key(&self, index: usize) -> Option<&str> {
        self.public_keys.get(index).map(String::as_str)
    }

    /// Sends `request` as DFSP `source` (its index; `None`: a request of no
    /// DFSP here): over its own connections, signed with its key when
    /// DFSPs sign.
    pub(crate) async fn send_as(
        &self,
        source: Option<u32>,
        request: http::Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes), (String, String)> {
        let index = source.map(|index| index as usize);
        // As Mojaloop's SDK: a GET has no body, and is not signed (the hub
        // checks only other methods).
        let signer = index
            .and_then(|index| self.signers.get(index))
            .filter(|_| request.method() != http::Method::GET);
        let request = match signer {
            None => request,
            Some(key) => self.sign(key, request).await?,
        };
        let client = index
            .and_then(|index| self.clients.get(index))
            .unwrap_or(&self.admin);
        let _slot = match index.and_then(|index| self.in_flight.get(index)) {
            Some(slots) => Some(slots.acquire().await.expect("never closed")),
            None => None,
        };
        crate::dfsp::send(client, request).await
    }

    /// Adds FSPIOP-URI, FSPIOP-HTTP-Method and FSPIOP-Signature, as a DFSP
    /// that signs sends them.
    async fn sign(
        &self,
        key: &SigningKey,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Request<Full<Bytes>>, (String, String)> {
        let (mut parts, body) = request.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(never) => match never {},
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = path
            .strip_prefix(self.api_base_path.as_str())
            .filter(|rest| rest.starts_with('/'))
            .unwrap_or(path)
            .to_string();
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let covered = jws::Covered {
            uri: &uri,
            method: parts.method.as_str(),
            source: header("fspiop-source").unwrap_or(""),
            destination: header("fspiop-destination"),
            date: header("date"),
        };
        let signature =
            jws::sign(key, &covered, &body).map_err(|error| ("sign".to_string(), error))?;
        let value = |text: &str| {
            http::HeaderValue::from_str(text)
                .map_err(|error| ("sign".to_string(), error.to_string()))
        };
        let method = value(parts.method.as_str())?;
        let uri = value(&uri)?;
        let signature = value(&signature)?;
        parts.headers.insert("fspiop-uri", uri);
        parts.headers.insert("fspiop-http-method", method);
        parts.headers.insert("fspiop-signature", signature);
        Ok(http::Request::from_parts(parts, Full::new(body)))
    }

    /// Whether a message from `source` must be signed (a GET never is).
    fn expects_signature(&self, method: &http::Method, source: &str) -> bool {
        if method == http::Method::GET {
            return false;
        }
        if source == self.hub_name {
            self.choice.hub_jws.is_some()
        } else {
            self.choice.dfsp_jws.is_some() && self.verifiers.contains_key(source)
        }
    }
}

/// The callback server's check of what the DFSPs receive: a signature
/// missing where one is due, on every message; one in `verify_every`
/// signed messages verified against its FSPIOP-Source's key.
pub(crate) async fn check_signature(
    State(identities): State<Arc<Identities>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let source = headers
        .get("fspiop-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let signed = headers.contains_key("fspiop-signature");
    if !signed {
        if identities.expects_signature(request.method(), &source) {
            identities.checks.problem(
                &identities.checks.missing,
                format!(
                    "{} {} from {source} carried no FSPIOP-Signature",
                    request.method(),
                    request.uri()
                ),
            );
        }
        return next.run(request).await;
    }
    let every = u64::from(identities.choice.verify_every.max(1));
    if identities.received.fetch_add(1, Ordering::Relaxed) % every != 0 {
        return next.run(request).await;
    }
    let Some(key) = identities.verifiers.get(&source) else {
        // Signed by someone whose key this run does not hold (a DFSP's
        // message when only the hub signs cannot happen here).
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let covered = jws::Covered {
        uri: header("fspiop-uri").unwrap_or(""),
        method: header("fspiop-http-method").unwrap_or(""),
        source: &source,
        destination: header("fspiop-destination"),
        date: header("date"),
    };
    match jws::verify(
        key,
        header("fspiop-signature").unwrap_or(""),
        &covered,
        &body,
    ) {
        Ok(()) => {
            identities.checks.verified.fetch_add(1, Ordering::Relaxed);
            if source == identities.hub_name {
                identities
                    .checks
                    .verified_hub
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(jws::Invalid(why)) => identities.checks.problem(
            &identities.checks.invalid,
            format!("{} {} from {source}: {why}", parts.method, parts.uri),
        ),
    }
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// Serves `app` over TLS on `listener` until the runtime stops; failed
/// handshakes are counted.
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: axum::Router,
    failed_handshakes: Arc<AtomicU64>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                eprintln!("kasi: the callback server cannot accept: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let failed_handshakes = failed_handshakes.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(_) => {
                    failed_handshakes.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;

    fn choice(dfsp_jws: Option<JwsAlg>) -> Choice {
        Choice {
            tls: false,
            hub_jws: None,
            dfsp_jws,
            verify_every: 1,
        }
    }

    /// A callback server with the check, and the identities of `a` and `b`.
    async fn checked_server(material: &Material) -> (String, Arc<Identities>) {
        let names = ["a".to_string(), "b".to_string()];
        let identities = Arc::new(
            material
                .identities(&names, "Hub", plain_client(), "", 8)
                .unwrap(),
        );
        let app = axum::Router::new()
            .route("/transfers", post(|| async { StatusCode::ACCEPTED }))
            .layer(axum::middleware::from_fn_with_state(
                identities.clone(),
                check_signature,
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/transfers", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, identities)
    }

    fn request(url: &str, source: &str) -> http::Request<Full<Bytes>> {
        crate::dfsp::fspiop_request(
            http::Method::POST,
            url,
            crate::dfsp::Api::Transfers,
            source,
            Some("b"),
            r#"{"transferId":"1"}"#.to_string(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn signatures_are_verified_and_bad_or_missing_ones_counted() {
        let material = Material::new(choice(Some(JwsAlg::Es256))).unwrap();
        let (url, identities) = checked_server(&material).await;
        let checks = &identities.checks;

        // a signs as a: verified.
        let (status, _) = identities
            .send_as(Some(0), request(&url, "a"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(checks.verified.load(Ordering::Relaxed), 1);

        // b's key signing a message from a: invalid.
        identities
            .send_as(Some(1), request(&url, "a"))
            .await
            .unwrap();
        assert_eq!(checks.invalid.load(Ordering::Relaxed), 1);
        let problem = checks.first_problem.lock().unwrap().clone().unwrap();
        assert!(problem.contains("from a"), "{problem}");

        // Unsigned, from a DFSP that signs: missing.
        identities.send_as(None, request(&url, "a")).await.unwrap();
        assert_eq!(checks.missing.load(Ordering::Relaxed), 1);
        assert_eq!(checks.verified.load(Ordering::Relaxed), 1);

        let summary = SecuritySummary::of(&identities, 0);
        assert_eq!(summary.failed(), 2);
        assert_eq!(
            summary.description,
            "plain HTTP, DFSPs sign ES256 (hub verifies)"
        );
    }

    #[tokio::test]
    async fn a_signed_body_changed_on_the_way_fails_verification() {
        let material = Material::new(choice(Some(JwsAlg::Es256))).unwrap();
        let (url, identities) = checked_server(&material).await;
        let signed = identities
            .sign(&identities.signers[0], request(&url, "a"))
            .await
            .unwrap();
        let (parts, _) = signed.into_parts();
        let tampered =
            http::Request::from_parts(parts, Full::new(Bytes::from(r#"{"transferId":"2"}"#)));
        crate::dfsp::send(&identities.admin, tampered)
            .await
            .unwrap();
        assert_eq!(identities.checks.invalid.load(Ordering::Relaxed), 1);
        assert_eq!(identities.checks.verified.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_hub_is_given_its_tls_and_keys_and_reached_over_https() {
        let material = Material::new(Choice {
            tls: true,
            hub_jws: Some(JwsAlg::Es256),
            dfsp_jws: Some(JwsAlg::Es256),
            verify_every: 1,
        })
        .unwrap();
        let args = material.serve_args("Hub").unwrap();
        let args: Vec<String> = args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        for flag in [
            "--tls-cert",
            "--tls-key",
            "--tls-client-ca",
            "--callback-ca",
            "--callback-cert",
            "--callback-key",
            "--jws-signing-key",
            "--jws-keys-dir",
        ] {
            let at = args
                .iter()
                .position(|arg| arg == flag)
                .unwrap_or_else(|| panic!("{flag} in {args:?}"));
            if flag != "--jws-keys-dir" {
                assert!(
                    Path::new(&args[at + 1]).is_file(),
                    "{flag} {}",
                    args[at + 1]
                );
            }
        }
        assert!(args
            .windows(2)
            .any(|w| w[0] == "--jws-verify" && w[1] == "all"));
        assert_eq!(material.scheme(), "https");
        assert!(material.callback_server().unwrap().is_some());
        // The hub's signing key is the one the DFSPs verify with.
        let private = std::fs::read_to_string(
            &args[args.iter().position(|a| a == "--jws-signing-key").unwrap() + 1],
        )
        .unwrap();
        let signing = SigningKey::from_pem(&private).unwrap();
        assert_eq!(Some(&signing.public_key()), material.hub_key.as_ref());
    }

    #[tokio::test]
    async fn the_callback_server_refuses_a_client_without_the_schemes_certificate() {
        let material = Material::new(Choice {
            tls: true,
            verify_every: 1,
            ..Choice::default()
        })
        .unwrap();
        let names = ["a".to_string()];
        let identities = material
            .identities(&names, "Hub", material.admin_client(), "", 8)
            .unwrap();
        let app =
            axum::Router::new().route("/a/transfers", post(|| async { StatusCode::ACCEPTED }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/a/transfers", listener.local_addr().unwrap());
        let failed = Arc::new(AtomicU64::new(0));
        tokio::spawn(serve_tls(
            listener,
            material.callback_server().unwrap().unwrap(),
            app,
            failed.clone(),
        ));
        // With a's certificate (as the hub's would be): served.
        let (status, _) = identities
            .send_as(Some(0), request(&url, "a"))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::ACCEPTED);
        // The admin client trusts the CA but has no certificate: refused.
        let refused = identities.send_as(None, request(&url, "a")).await;
        assert!(refused.is_err(), "{refused:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while failed.load(Ordering::Relaxed) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no failed handshake counted"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dfsps_requests_in_flight_and_its_connections_stay_within_its_bound() {
        #[derive(Default)]
        struct Seen {
            now: AtomicU64,
            most: AtomicU64,
            peers: std::sync::Mutex<std::collections::HashSet<std::net::SocketAddr>>,
        }
        let seen = Arc::new(Seen::default());
        let handler = {
            let seen = seen.clone();
            move |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<
                std::net::SocketAddr,
            >| {
                let seen = seen.clone();
                async move {
                    seen.peers.lock().unwrap().insert(peer);
                    let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    seen.now.fetch_sub(1, Ordering::SeqCst);
                    StatusCode::ACCEPTED
                }
            }
        };
        let app = axum::Router::new().route("/transfers", post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/transfers", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
            )
            .await
        });
        let material = Material::new(Choice::default()).unwrap();
        let names = ["a".to_string(), "b".to_string()];
        let bound = 3;
        let identities = Arc::new(
            material
                .identities(&names, "Hub", plain_client(), "", bound)
                .unwrap(),
        );
        let mut sent = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let (identities, url) = (identities.clone(), url.clone());
            sent.spawn(async move { identities.send_as(Some(0), request(&url, "a")).await });
        }
        while let Some(answer) = sent.join_next().await {
            assert_eq!(answer.unwrap().unwrap().0, StatusCode::ACCEPTED);
        }
        let most = seen.most.load(Ordering::SeqCst);
        assert!(
            most <= bound as u64,
            "{most} requests of one DFSP in flight"
        );
        assert!(
            most >= 2,
            "the requests never overlapped: nothing was bounded"
        );
        // hyper may open one more while a finished request's connection
        // returns to its pool; never one per request.
        let connections = seen.peers.lock().unwrap().len();
        assert!(
            connections <= 2 * bound,
            "{connections} connections for 40 requests"
        );
    }
}
