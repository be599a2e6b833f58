//! TLS on kasi's listeners, and who the client is.
//!
//! rustls (TLS 1.2 and 1.3 only) terminates TLS on either address with one
//! certificate, re-read from its files on SIGHUP without dropping a
//! connection (new handshakes get the new one). On the FSPIOP address, a
//! scheme CA (`--tls-client-ca`) makes it mutual TLS: a client without a
//! certificate that CA signed is refused at the handshake, and the names in
//! its certificate (subject CN and DNS SANs) are the FSP ids it may act as.
//! Behind a gateway that terminates mTLS itself, the identity it vouches for
//! is taken from a header, only from trusted addresses.
//!
//! The check that binds a request's FSPIOP-Source to that identity is
//! [`authenticate_source`], applied to every FSPIOP route.

use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use ledger::ErrorCode;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};

use crate::HubError;

/// Files of a certificate and its key (PEM).
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The server certificate, swappable while serving.
#[derive(Debug)]
pub struct ReloadingCert {
    files: CertFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    pub fn load(files: CertFiles) -> Result<Arc<ReloadingCert>, String> {
        let key = certified_key(&files)?;
        Ok(Arc::new(ReloadingCert {
            files,
            current: RwLock::new(Arc::new(key)),
        }))
    }

    /// Re-reads the files; on any error the certificate in use stays.
    pub fn reload(&self) -> Result<(), String> {
        let key = certified_key(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    pub fn files(&self) -> &CertFiles {
        &self.files
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn read_pem(path: &Path) -> Result<BufReader<File>, String> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))
}

/// Every certificate in a PEM file.
pub fn certificates(
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let certs = rustls_pemfile::certs(&mut read_pem(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{} is not PEM: {error}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut read_pem(path)?)
        .map_err(|error| format!("{} is not PEM: {error}", path.display()))?
        .ok_or_else(|| format!("{} holds no private key", path.display()))
}

fn certified_key(files: &CertFiles) -> Result<CertifiedKey, String> {
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|error| format!("{}: unusable key: {error}", files.key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|error| {
        format!(
            "{} does not match {}: {error}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    Ok(certified)
}

/// The trust anchors of a CA bundle.
pub fn root_store(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots
            .add(cert)
            .map_err(|error| format!("{}: not a usable CA certificate: {error}", path.display()))?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration serving `cert`; with `client_ca`, clients must
/// present a certificate that CA signed.
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, String> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| error.to_string())?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(root_store(path)?),
                provider(),
            )
            .build()
            .map_err(|error| format!("{}: {error}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side of the hub's outbound HTTPS (callbacks, oracle calls):
/// servers verified against `ca` (a PEM bundle, e.g. the scheme CA) or,
/// without one, against the system's roots; `identity` is presented to
/// servers that ask for a client certificate (mutual TLS).
pub fn client_config(
    ca: Option<&Path>,
    identity: Option<&CertFiles>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = match ca {
        Some(path) => root_store(path)?,
        None => system_roots(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots);
    // No ALPN here: the connector sets the protocols it speaks.
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(files) => builder
            .with_client_auth_cert(certificates(&files.cert)?, private_key(&files.key)?)
            .map_err(|error| {
                format!(
                    "{} with {}: {error}",
                    files.cert.display(),
                    files.key.display()
                )
            })?,
    };
    Ok(Arc::new(config))
}

/// The operating system's trusted roots; certificates it cannot parse are
/// skipped (logged), and none at all only means that no https endpoint
/// verifies.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "a system root certificate could not be loaded");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::debug!(added, ignored, "system root certificates skipped");
    }
    roots
}

/// The connector of the hub's HTTP clients: `http://` and `https://` with
/// `tls`, TCP_NODELAY, and a connect timeout.
pub fn https_connector(
    tls: Arc<rustls::ClientConfig>,
    connect_timeout: std::time::Duration,
) -> hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// Who a client's certificate says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The subject's common name and the DNS names of the certificate.
    pub names: Vec<String>,
    /// SHA-256 of the certificate (DER), hex.
    pub fingerprint: String,
}

impl ClientIdentity {
    pub fn of(certificate: &[u8]) -> ClientIdentity {
        let mut names = Vec::new();
        if let Ok((_, cert)) = x509_parser::parse_x509_certificate(certificate) {
            names.extend(
                cert.subject()
                    .iter_common_name()
                    .filter_map(|cn| cn.as_str().ok())
                    .map(str::to_string),
            );
            if let Ok(Some(san)) = cert.subject_alternative_name() {
                for name in &san.value.general_names {
                    if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                        names.push((*dns).to_string());
                    }
                }
            }
        }
        names.dedup();
        let fingerprint = Sha256::digest(certificate)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        ClientIdentity { names, fingerprint }
    }
}

/// What the server knows of the connection a request came on.
#[derive(Clone, Debug)]
pub struct Connection {
    pub peer: SocketAddr,
    /// The client's certificate, on a mutual-TLS connection.
    pub certificate: Option<Arc<ClientIdentity>>,
}

/// An address range, `10.0.0.0/8` or `::1/128` (a bare address is /32 or
/// /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Cidr, String> {
        let bad = || format!("'{text}' is not an address range such as 10.0.0.0/8");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.trim().parse().map_err(|_| bad())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(bad)?,
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Cidr {
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match (self.network, address) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

/// How the FSPIOP address learns who is calling.
#[derive(Clone, Debug, Default)]
pub struct IdentityPolicy {
    /// Mutual TLS: the client certificate's names.
    pub client_certificates: bool,
    /// A gateway's header, believed only from these addresses.
    pub proxy: Option<ProxyIdentity>,
}

#[derive(Clone, Debug)]
pub struct ProxyIdentity {
    pub header: HeaderName,
    pub trusted: Vec<Cidr>,
}

impl IdentityPolicy {
    pub fn is_enforced(&self) -> bool {
        self.client_certificates || self.proxy.is_some()
    }
}

/// Why a request was refused; answered as Mojaloop's header validation
/// answers a source its gateway did not vouch for.
#[derive(Debug)]
pub struct Refusal {
    pub reason: &'static str,
    /// The identity is the hub's own name: no DFSP may hold it.
    pub names_hub: bool,
}

impl Refusal {
    pub(crate) fn new(reason: &'static str) -> Refusal {
        Refusal {
            reason,
            names_hub: false,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            "Generic validation error - Invalid fspiop-source header",
        )
        .into_response();
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response
    }
}

/// The identities a request may act as, or why it has none.
///
/// An identity that names the hub (`hub`: its name) is refused: the hub's
/// name is the hub's alone, and a certificate or a gateway's word that
/// carries it (issued by mistake, or to a DFSP that should not have it)
/// must not let a DFSP act as the hub, or as anyone else.
pub fn identities(
    policy: &IdentityPolicy,
    connection: Option<&Connection>,
    headers: &axum::http::HeaderMap,
    hub: &str,
) -> Result<Vec<String>, Refusal> {
    let names = claimed_identities(policy, connection, headers)?;
    if names.iter().any(|name| name == hub) {
        return Err(Refusal {
            reason: "the client's identity is the hub's name",
            names_hub: true,
        });
    }
    Ok(names)
}

fn claimed_identities(
    policy: &IdentityPolicy,
    connection: Option<&Connection>,
    headers: &axum::http::HeaderMap,
) -> Result<Vec<String>, Refusal> {
    let Some(connection) = connection else {
        return Err(Refusal::new("no connection information"));
    };
    if let Some(proxy) = &policy.proxy {
        let mut values = headers.get_all(&proxy.header).iter();
        let vouched = values.next();
        // The door refuses this first (counted as a repeated header); kept
        // here so no caller of this function can believe one of two names.
        if values.next().is_some() {
            return Err(Refusal::new("the identity header appears more than once"));
        }
        let trusted = proxy
            .trusted
            .iter()
            .any(|c| c.contains(connection.peer.ip()));
        match (vouched, trusted) {
            (Some(value), true) => {
                return value
                    .to_str()
                    .map(|v| vec![v.trim().to_string()])
                    .map_err(|_| Refusal::new("the gateway's identity header is not text"))
            }
            (Some(_), false) => {
                return Err(Refusal::new(
                    "an identity header from an address that is not a trusted proxy",
                ))
            }
            (None, _) => {}
        }
    }
    if policy.client_certificates {
        if let Some(certificate) = &connection.certificate {
            return Ok(certificate.names.clone());
        }
    }
    Err(Refusal::new("the client is not authenticated"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_contain_what_they_should() {
        let range: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(range.contains("10.1.200.3".parse().unwrap()));
        assert!(!range.contains("10.2.0.1".parse().unwrap()));
        assert!(range.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nonsense", "10.0.0.0/x", "::/129"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    /// The hub's callback client keeps connections alive, and when a DFSP
    /// closes one, the next handshake resumes the TLS session (no
    /// certificate chain sent or verified again): what TLS costs per
    /// callback stays small.
    #[tokio::test]
    async fn the_callback_client_resumes_its_tls_sessions() {
        use http_body_util::{BodyExt as _, Full};
        use std::sync::Mutex;

        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();

        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![server_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = Arc::new(Mutex::new(Vec::new()));
        let seen = handshakes.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let tls = acceptor.accept(tcp).await.unwrap();
                seen.lock().unwrap().push(tls.get_ref().1.handshake_kind());
                // One request per connection: the DFSP closes it.
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .header("connection", "close")
                            .body(Full::new(bytes::Bytes::new()))
                            .unwrap(),
                    )
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service),
                );
            }
        });

        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build::<_, Full<bytes::Bytes>>(https_connector(
                    client_config(Some(&ca_file), None).unwrap(),
                    std::time::Duration::from_secs(5),
                ));
        for _ in 0..3 {
            let request = http::Request::put(format!("https://localhost:{port}/transfers/1"))
                .body(Full::new(bytes::Bytes::from_static(b"{}")))
                .unwrap();
            let response = client.request(request).await.unwrap();
            assert!(response.status().is_success());
            response.into_body().collect().await.unwrap();
        }
        let handshakes = handshakes.lock().unwrap().clone();
        use rustls::HandshakeKind::{Full as FullHandshake, Resumed};
        assert_eq!(
            handshakes,
            [Some(FullHandshake), Some(Resumed), Some(Resumed)],
            "one full handshake, then resumed sessions"
        );
    }

    #[test]
    fn a_certificate_names_its_common_name_and_dns_names() {
        let mut params =
            rcgen::CertificateParams::new(vec!["payerfsp".into(), "payer.example".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "payerfsp");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let identity = ClientIdentity::of(cert.der());
        assert_eq!(identity.names, ["payerfsp", "payer.example"]);
        assert_eq!(identity.fingerprint.len(), 64);
    }
}
