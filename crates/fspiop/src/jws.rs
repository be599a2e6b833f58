//! FSPIOP-Signature (JWS, FSPIOP API v1.1 "Signature" document): key
//! parsing, signing, verification and the canonical JSON Mojaloop's
//! verifiers rebuild the payload with. Pure: no I/O, no clock, no HTTP
//! framework. The crypto ([`SigningKey::sign`], [`Checked::verify_body`])
//! runs, in the hub, on the threads of its JWS pool (`hub::jws_pool`),
//! never on the async runtime's nor the ledger's; what surrounds it (the
//! protected header, base64, the header checks) runs where the message
//! is. Here, beside the rest of the wire format, so that a DFSP's side
//! (`kasi bench`, `kasi sim`) signs and verifies with it without the hub.
//!
//! Implementations, the faster for each algorithm by measurement on the
//! 2-core machine (BENCHMARKS.md, "Signing"): RSA with aws-lc-rs (it signs
//! 2.3× and verifies 1.16× as fast as ring), P-256 with ring (aws-lc-rs is
//! within 10%, not worth a change).
//!
//! The header value is `{"signature":"<b64url>","protectedHeader":"<b64url>"}`;
//! the protected header is a JSON object with `alg`, `FSPIOP-URI`,
//! `FSPIOP-HTTP-Method`, `FSPIOP-Source` and, when the HTTP request has
//! them, `FSPIOP-Destination` and `Date`; the signing input is
//! `b64url(protectedHeader) + "." + b64url(body)`.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use serde_json::{Map, Value};

/// The JWS algorithms FSPIOP-Signature uses: the spec's three RSA ones, and
/// ES256, which Mojaloop's signer picks for an EC key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Es256,
}

impl Alg {
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Es256 => "ES256",
        }
    }

    pub fn parse(name: &str) -> Option<Alg> {
        match name {
            "RS256" => Some(Alg::Rs256),
            "RS384" => Some(Alg::Rs384),
            "RS512" => Some(Alg::Rs512),
            "ES256" => Some(Alg::Es256),
            _ => None,
        }
    }
}

// DER object identifiers (content bytes only).
const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// One PEM block: its label (`PRIVATE KEY`, `PUBLIC KEY`, ...) and DER bytes.
fn pem_blocks(text: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let label_end = after.find("-----").ok_or("PEM: unterminated BEGIN line")?;
        let label = after[..label_end].to_string();
        let body_and_rest = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let end = body_and_rest
            .find(&end_marker)
            .ok_or_else(|| format!("PEM: no END line for {label}"))?;
        let body: String = body_and_rest[..end]
            .lines()
            // Encrypted PEM's "Proc-Type:" style headers are not supported.
            .filter(|line| !line.contains(':'))
            .flat_map(|line| line.chars())
            .filter(|c| !c.is_whitespace())
            .collect();
        let der = STANDARD
            .decode(body.as_bytes())
            .map_err(|error| format!("PEM {label}: bad base64: {error}"))?;
        blocks.push((label, der));
        rest = &body_and_rest[end + end_marker.len()..];
    }
    if blocks.is_empty() {
        return Err("no PEM block found".into());
    }
    Ok(blocks)
}

/// A DER TLV with `tag` around `content`.
fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A SEC1 `EC PRIVATE KEY` (P-256) wrapped as PKCS#8, the form ring reads.
fn sec1_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    let algorithm = [der_tlv(0x06, OID_EC_PUBLIC_KEY), der_tlv(0x06, OID_P256)].concat();
    der_tlv(
        0x30,
        &[
            der_tlv(0x02, &[0]),
            der_tlv(0x30, &algorithm),
            der_tlv(0x04, sec1),
        ]
        .concat(),
    )
}

enum Signer {
    /// aws-lc-rs: its RSA private-key operation is 2.3× ring's here.
    Rsa(aws_lc_rs::signature::RsaKeyPair),
    Ec(EcdsaKeyPair),
}

/// The hub's private key: RS256 for an RSA key, ES256 for a P-256 key (as
/// Mojaloop's signer chooses).
pub struct SigningKey {
    signer: Signer,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    /// Never shows key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.alg().name())
    }
}

impl SigningKey {
    /// Reads a PEM private key: PKCS#8 (`PRIVATE KEY`, RSA or P-256),
    /// PKCS#1 (`RSA PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`, P-256).
    pub fn from_pem(text: &str) -> Result<SigningKey, String> {
        let rng = SystemRandom::new();
        for (label, der) in pem_blocks(text)? {
            let signer = match label.as_str() {
                "PRIVATE KEY" => match aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&der) {
                    Ok(pair) => Signer::Rsa(pair),
                    Err(rsa_error) => EcdsaKeyPair::from_pkcs8(
                        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                        &der,
                        &rng,
                    )
                    .map(Signer::Ec)
                    .map_err(|ec_error| {
                        format!(
                            "PKCS#8 key is neither a usable RSA key ({rsa_error}) nor a P-256 key ({ec_error})"
                        )
                    })?,
                },
                "RSA PRIVATE KEY" => Signer::Rsa(
                    aws_lc_rs::signature::RsaKeyPair::from_der(&der)
                        .map_err(|error| format!("PKCS#1 RSA key rejected: {error}"))?,
                ),
                "EC PRIVATE KEY" => Signer::Ec(
                    EcdsaKeyPair::from_pkcs8(
                        &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                        &sec1_to_pkcs8(&der),
                        &rng,
                    )
                    .map_err(|error| format!("SEC1 EC key rejected (P-256 only): {error}"))?,
                ),
                // e.g. the `EC PARAMETERS` block `openssl ecparam` writes first.
                _ => continue,
            };
            if let Signer::Rsa(pair) = &signer {
                if pair.public_modulus_len() < 256 {
                    return Err("RSA keys must have at least 2048 bits".into());
                }
            }
            return Ok(SigningKey { signer, rng });
        }
        Err("no private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) in the PEM".into())
    }

    pub fn alg(&self) -> Alg {
        match self.signer {
            Signer::Rsa(_) => Alg::Rs256,
            Signer::Ec(_) => Alg::Es256,
        }
    }

    /// The raw JWS signature of `input` (RSA PKCS#1 v1.5, or ECDSA r||s).
    pub fn sign(&self, input: &[u8]) -> Result<Vec<u8>, String> {
        match &self.signer {
            Signer::Rsa(pair) => {
                let mut out = vec![0; pair.public_modulus_len()];
                // PKCS#1 v1.5 is deterministic: the generator is unused.
                let rng = aws_lc_rs::rand::SystemRandom::new();
                pair.sign(
                    &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                    &rng,
                    input,
                    &mut out,
                )
                .map_err(|_| "RSA signing failed".to_string())?;
                Ok(out)
            }
            Signer::Ec(pair) => pair
                .sign(&self.rng, input)
                .map(|sig| sig.as_ref().to_vec())
                .map_err(|_| "ECDSA signing failed".to_string()),
        }
    }

    /// The public half, for tests and for showing what a DFSP must install.
    pub fn public_key(&self) -> VerifyingKey {
        match &self.signer {
            Signer::Rsa(pair) => {
                use aws_lc_rs::signature::KeyPair as _;
                VerifyingKey::Rsa(pair.public_key().as_ref().to_vec())
            }
            Signer::Ec(pair) => VerifyingKey::Ec(pair.public_key().as_ref().to_vec()),
        }
    }
}

/// A DFSP's public key: RSA (PKCS#1 `RSAPublicKey` DER) or P-256 (the
/// uncompressed point).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyingKey {
    Rsa(Vec<u8>),
    Ec(Vec<u8>),
}

impl VerifyingKey {
    /// Reads a PEM public key (`PUBLIC KEY`, `RSA PUBLIC KEY`) or the first
    /// certificate of a PEM chain (`CERTIFICATE`).
    pub fn from_pem(text: &str) -> Result<VerifyingKey, String> {
        for (label, der) in pem_blocks(text)? {
            return match label.as_str() {
                "PUBLIC KEY" => Self::from_spki(&der),
                "RSA PUBLIC KEY" => Ok(VerifyingKey::Rsa(der)),
                "CERTIFICATE" => {
                    let (_, certificate) = x509_parser::parse_x509_certificate(&der)
                        .map_err(|error| format!("certificate does not parse: {error}"))?;
                    Self::from_spki(certificate.public_key().raw)
                }
                _ => continue,
            }
            .and_then(Self::checked);
        }
        Err("no public key (PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE) in the PEM".into())
    }

    fn from_spki(der: &[u8]) -> Result<VerifyingKey, String> {
        use x509_parser::prelude::FromDer;
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(der)
            .map_err(|error| format!("public key does not parse: {error}"))?;
        let oid = spki.algorithm.algorithm.as_bytes();
        let key = spki.subject_public_key.data.to_vec();
        if oid == OID_RSA_ENCRYPTION {
            Ok(VerifyingKey::Rsa(key))
        } else if oid == OID_EC_PUBLIC_KEY {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|oid| oid.as_bytes().to_vec());
            if curve.as_deref() != Some(OID_P256) {
                return Err("EC keys must be on P-256 (ES256)".into());
            }
            Ok(VerifyingKey::Ec(key))
        } else {
            Err("the key is neither RSA nor EC".into())
        }
    }

    /// Refuses keys that could never verify (short RSA, bad points), so a
    /// bad upload fails when made rather than at every request.
    fn checked(self) -> Result<VerifyingKey, String> {
        match &self {
            VerifyingKey::Rsa(der) => {
                let modulus_bits = rsa_modulus_bits(der).ok_or("RSA public key does not parse")?;
                if modulus_bits < 2048 {
                    return Err(format!(
                        "RSA keys must have at least 2048 bits, this one has {modulus_bits}"
                    ));
                }
            }
            VerifyingKey::Ec(point) => {
                if point.len() != 65 || point[0] != 4 {
                    return Err("EC public key is not an uncompressed P-256 point".into());
                }
            }
        }
        Ok(self)
    }

    /// Whether this key can check `alg`.
    pub fn accepts(&self, alg: Alg) -> bool {
        matches!(
            (self, alg),
            (VerifyingKey::Rsa(_), Alg::Rs256 | Alg::Rs384 | Alg::Rs512)
                | (VerifyingKey::Ec(_), Alg::Es256)
        )
    }

    /// Whether `signature` is this key's `alg` signature of `input`.
    pub fn verify(&self, alg: Alg, input: &[u8], signature_bytes: &[u8]) -> bool {
        use aws_lc_rs::signature as aws;
        match (self, alg) {
            // RSA with aws-lc-rs, P-256 with ring: the faster of the two
            // for each (see the module's documentation).
            (VerifyingKey::Rsa(der), Alg::Rs256 | Alg::Rs384 | Alg::Rs512) => {
                let algorithm: &aws::RsaParameters = match alg {
                    Alg::Rs256 => &aws::RSA_PKCS1_2048_8192_SHA256,
                    Alg::Rs384 => &aws::RSA_PKCS1_2048_8192_SHA384,
                    _ => &aws::RSA_PKCS1_2048_8192_SHA512,
                };
                aws::UnparsedPublicKey::new(algorithm, der)
                    .verify(input, signature_bytes)
                    .is_ok()
            }
            (VerifyingKey::Ec(point), Alg::Es256) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(input, signature_bytes)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// Bits of the modulus of a PKCS#1 `RSAPublicKey` (SEQUENCE { INTEGER n, INTEGER e }).
fn rsa_modulus_bits(der: &[u8]) -> Option<usize> {
    fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let len = rest[..count]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, &rest[count..])
        };
        (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
    }
    let (tag, sequence, _) = read_tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, modulus, _) = read_tlv(sequence)?;
    if tag != 0x02 {
        return None;
    }
    let significant: &[u8] = {
        let skip = modulus.iter().take_while(|b| **b == 0).count();
        &modulus[skip..]
    };
    let first = *significant.first()?;
    Some((significant.len() - 1) * 8 + (8 - first.leading_zeros() as usize))
}

pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    // Some signers pad; JWS does not, both are accepted.
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

/// The FSPIOP headers a signature covers, as sent on the wire.
#[derive(Clone, Copy, Debug, Default)]
pub struct Covered<'a> {
    /// `FSPIOP-URI`: the path and query from the resource name on.
    pub uri: &'a str,
    pub method: &'a str,
    pub source: &'a str,
    pub destination: Option<&'a str>,
    pub date: Option<&'a str>,
}

/// What a signature covers, built before the crypto: the protected header
/// (base64url) and the signing input `protectedHeader.b64url(body)`.
/// Cheap (a small JSON object and base64), so it is made where the
/// message is, and only [`SigningKey::sign`] goes to the pool.
#[derive(Debug)]
pub struct SigningInput {
    protected: String,
    input: String,
}

impl SigningInput {
    /// The signing input of a message with `covered` headers and `body`
    /// (the exact bytes sent), signed with `alg`.
    pub fn new(alg: Alg, covered: &Covered<'_>, body: &[u8]) -> SigningInput {
        let mut protected = Map::new();
        protected.insert("alg".into(), alg.name().into());
        protected.insert("FSPIOP-URI".into(), covered.uri.into());
        protected.insert("FSPIOP-HTTP-Method".into(), covered.method.into());
        protected.insert("FSPIOP-Source".into(), covered.source.into());
        if let Some(destination) = covered.destination {
            protected.insert("FSPIOP-Destination".into(), destination.into());
        }
        if let Some(date) = covered.date {
            protected.insert("Date".into(), date.into());
        }
        let protected = b64url(Value::Object(protected).to_string().as_bytes());
        let input = format!("{protected}.{}", b64url(body));
        SigningInput { protected, input }
    }

    /// The bytes the signature is computed over.
    pub fn bytes(&self) -> &[u8] {
        self.input.as_bytes()
    }

    /// The `FSPIOP-Signature` header value carrying `signature_bytes`.
    pub fn header_value(&self, signature_bytes: &[u8]) -> String {
        serde_json::json!({
            "signature": b64url(signature_bytes),
            "protectedHeader": self.protected,
        })
        .to_string()
    }
}

/// The `FSPIOP-Signature` header value of a message with `covered` headers
/// and `body` (the exact bytes sent), signed on the calling thread.
pub fn sign(key: &SigningKey, covered: &Covered<'_>, body: &[u8]) -> Result<String, String> {
    let input = SigningInput::new(key.alg(), covered, body);
    let signature_bytes = key.sign(input.bytes())?;
    Ok(input.header_value(&signature_bytes))
}

/// Why a request's signature was refused (the 3105 description).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

/// Checks an `FSPIOP-Signature` header value against `key`, the headers the
/// request carried (`http`) and its `body`, as Mojaloop's validator does
/// (steps 3-4 of its checks; finding the key and the required headers are
/// the caller's): [`check`], then [`Checked::verify_body`], on the calling
/// thread.
pub fn verify(
    key: &VerifyingKey,
    header_value: &str,
    http: &Covered<'_>,
    body: &[u8],
) -> Result<(), Invalid> {
    check(key, header_value, http)?.verify_body(key, body)
}

/// A signature header that passed every check but the crypto.
#[derive(Debug)]
pub struct Checked {
    alg: Alg,
    protected_b64: String,
    signature_bytes: Vec<u8>,
}

/// The checks of a signature header that need no crypto: the protected
/// header's `alg` must be allowed and fit the key, its `FSPIOP-URI`,
/// `FSPIOP-HTTP-Method` and `FSPIOP-Source` must equal the HTTP headers, a
/// protected `Date` must equal the HTTP one, and `FSPIOP-Destination` must
/// be in both or neither, with the same value. Cheap: a refusal here never
/// waits for the pool.
pub fn check(
    key: &VerifyingKey,
    header_value: &str,
    http: &Covered<'_>,
) -> Result<Checked, Invalid> {
    let invalid = |why: &str| Invalid(why.to_string());
    let parsed: Value = serde_json::from_str(header_value)
        .map_err(|_| invalid("FSPIOP-Signature is not a JSON object"))?;
    let signature_b64 = parsed["signature"]
        .as_str()
        .ok_or_else(|| invalid("FSPIOP-Signature has no signature"))?;
    let protected_b64 = parsed["protectedHeader"]
        .as_str()
        .ok_or_else(|| invalid("FSPIOP-Signature has no protectedHeader"))?;
    let protected: Value = b64url_decode(protected_b64)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(Value::is_object)
        .ok_or_else(|| invalid("the protected header is not base64url JSON"))?;
    let alg = protected["alg"]
        .as_str()
        .and_then(Alg::parse)
        .ok_or_else(|| invalid("the protected header's alg is not RS256, RS384, RS512 or ES256"))?;
    if !key.accepts(alg) {
        return Err(invalid("the protected header's alg does not fit the key"));
    }
    for (name, expected) in [
        ("FSPIOP-URI", http.uri),
        ("FSPIOP-HTTP-Method", http.method),
        ("FSPIOP-Source", http.source),
    ] {
        match protected[name].as_str() {
            None => return Err(Invalid(format!("the protected header has no {name}"))),
            Some(value) if value != expected => {
                return Err(Invalid(format!(
                    "the protected header's {name} is not the HTTP header's"
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(date) = protected.get("Date") {
        if date.as_str() != http.date {
            return Err(invalid("the protected header's Date is not the HTTP Date"));
        }
    }
    if protected.get("FSPIOP-Destination").and_then(Value::as_str) != http.destination {
        return Err(invalid(
            "FSPIOP-Destination differs between the protected header and the HTTP headers",
        ));
    }
    let signature_bytes =
        b64url_decode(signature_b64).ok_or_else(|| invalid("the signature is not base64url"))?;
    Ok(Checked {
        alg,
        protected_b64: protected_b64.to_string(),
        signature_bytes,
    })
}

impl Checked {
    pub fn alg(&self) -> Alg {
        self.alg
    }

    /// The crypto: whether the signature covers the raw body, or else its
    /// canonical re-serialisation (what Mojaloop's validator rebuilds), so
    /// both signer populations pass. The signing input is built here, with
    /// the crypto, so that the fallback (which needs the first answer)
    /// costs no second trip to the pool.
    pub fn verify_body(&self, key: &VerifyingKey, body: &[u8]) -> Result<(), Invalid> {
        let raw_input = format!("{}.{}", self.protected_b64, b64url(body));
        if key.verify(self.alg, raw_input.as_bytes(), &self.signature_bytes) {
            return Ok(());
        }
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            let canonical = canonical_json(&value);
            if canonical.as_bytes() != body {
                let input = format!("{}.{}", self.protected_b64, b64url(canonical.as_bytes()));
                if key.verify(self.alg, input.as_bytes(), &self.signature_bytes) {
                    return Ok(());
                }
            }
        }
        Err(Invalid("the signature does not verify".into()))
    }
}

/// `value` as `safe-stable-stringify` (what Mojaloop's signer and validator
/// use) writes it: object keys sorted by UTF-16 code units, no whitespace,
/// numbers as JavaScript prints them, strings escaped as `JSON.stringify`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&js_number(n)),
        // serde_json escapes exactly as JSON.stringify does: `"`, `\`, the
        // short forms \b \f \n \r \t, other controls as lowercase \u00xx,
        // everything else (non-ASCII, `/`, U+2028) literally.
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            // JavaScript's default sort compares UTF-16 code units.
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
    }
}

/// A JSON number as JavaScript's `Number.prototype.toString` prints the
/// double it parses to.
fn js_number(n: &serde_json::Number) -> String {
    const EXACT: u64 = 1 << 53;
    if let Some(i) = n.as_u64().filter(|i| *i <= EXACT) {
        return i.to_string();
    }
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= EXACT) {
        return i.to_string();
    }
    js_double(n.as_f64().unwrap_or(0.0))
}

fn js_double(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        // JSON.stringify writes null for NaN and the infinities.
        return "null".into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // Rust's shortest round-trip digits, in scientific form "d.ddde±x".
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e_sign = if e < 0 { '-' } else { '+' };
        if k == 1 {
            format!("{digits}e{e_sign}{}", e.abs())
        } else {
            format!("{}.{}e{e_sign}{}", &digits[..1], &digits[1..], e.abs())
        }
    };
    format!("{sign}{body}")
}

/// Keys made for tests with the `openssl` CLI (so no key material lives
/// in the repository), and a covered-headers fixture; for this crate's
/// tests and, with the `test-keys` feature, other crates' tests.
#[cfg(any(test, feature = "test-keys"))]
pub mod test_keys {
    use super::Covered;

    /// A fresh private key in PEM from the `openssl` CLI (`args` after
    /// `genpkey`), so no key material lives in the repository.
    pub fn openssl_key(args: &[&str]) -> String {
        let output = std::process::Command::new("openssl")
            .arg("genpkey")
            .args(args)
            .output()
            .expect("the openssl CLI runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    /// `openssl pkey` over `pem` with `args` (format conversions).
    pub fn openssl_pkey(pem: &str, args: &[&str]) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("openssl")
            .arg("pkey")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(pem.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    }

    pub fn rsa_pem() -> String {
        openssl_key(&["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
    }

    pub fn ec_pem() -> String {
        openssl_key(&["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
    }

    pub fn covered() -> Covered<'static> {
        Covered {
            uri: "/transfers/abc",
            method: "PUT",
            source: "Hub",
            destination: Some("payeefsp"),
            date: Some("Tue, 01 Jul 2025 10:00:00 GMT"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_keys::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn rsa_and_ec_keys_sign_and_verify_in_every_pem_form() {
        let rsa = rsa_pem();
        let ec = ec_pem();
        let forms = [
            (rsa.clone(), Alg::Rs256),
            // PKCS#1 `RSA PRIVATE KEY`.
            (openssl_pkey(&rsa, &["-traditional"]), Alg::Rs256),
            (ec.clone(), Alg::Es256),
            // SEC1 `EC PRIVATE KEY`.
            (openssl_pkey(&ec, &["-traditional"]), Alg::Es256),
        ];
        for (pem, alg) in forms {
            let key = SigningKey::from_pem(&pem).unwrap_or_else(|e| panic!("{e}: {pem}"));
            assert_eq!(key.alg(), alg);
            let body = br#"{"transferState":"COMMITTED"}"#;
            let header = sign(&key, &covered(), body).unwrap();
            let public = openssl_pkey(&pem, &["-pubout"]);
            let verifying = VerifyingKey::from_pem(&public).unwrap();
            assert_eq!(verifying, key.public_key());
            verify(&verifying, &header, &covered(), body).unwrap();
            // Any change of the body or a covered header fails.
            assert!(verify(
                &verifying,
                &header,
                &covered(),
                br#"{"transferState":"ABORTED"}"#
            )
            .is_err());
            let mut other = covered();
            other.uri = "/transfers/other";
            assert!(verify(&verifying, &header, &other, body).is_err());
        }
    }

    #[test]
    fn the_protected_header_names_what_it_covers() {
        let key = SigningKey::from_pem(&ec_pem()).unwrap();
        let header: Value = serde_json::from_str(&sign(&key, &covered(), b"{}").unwrap()).unwrap();
        let protected = URL_SAFE_NO_PAD
            .decode(header["protectedHeader"].as_str().unwrap())
            .unwrap();
        let protected: Value = serde_json::from_slice(&protected).unwrap();
        assert_eq!(
            protected,
            json!({
                "alg": "ES256",
                "FSPIOP-URI": "/transfers/abc",
                "FSPIOP-HTTP-Method": "PUT",
                "FSPIOP-Source": "Hub",
                "FSPIOP-Destination": "payeefsp",
                "Date": "Tue, 01 Jul 2025 10:00:00 GMT",
            })
        );
        // Without Destination and Date, neither is protected.
        let bare = Covered {
            destination: None,
            date: None,
            ..covered()
        };
        let header: Value = serde_json::from_str(&sign(&key, &bare, b"{}").unwrap()).unwrap();
        let protected = URL_SAFE_NO_PAD
            .decode(header["protectedHeader"].as_str().unwrap())
            .unwrap();
        let protected: Value = serde_json::from_slice(&protected).unwrap();
        assert!(protected.get("Date").is_none() && protected.get("FSPIOP-Destination").is_none());
    }

    /// A signature made by hand with `alg` over `payload`.
    fn signed_by_hand(key: &SigningKey, alg: &str, protected: &Value, payload: &[u8]) -> String {
        let _ = alg;
        let protected = b64url(protected.to_string().as_bytes());
        let input = format!("{protected}.{}", b64url(payload));
        let sig = key.sign(input.as_bytes()).unwrap();
        json!({"signature": b64url(&sig), "protectedHeader": protected}).to_string()
    }

    #[test]
    fn rs384_and_rs512_signed_by_ring_verify() {
        // ring signs with each RSA digest (another implementation than the
        // verifier's); the verifier must pick the one the protected header
        // names.
        let pem = rsa_pem();
        let der = pem_blocks(&pem).unwrap().remove(0).1;
        let pair = signature::RsaKeyPair::from_pkcs8(&der).unwrap();
        let verifying = VerifyingKey::from_pem(&openssl_pkey(&pem, &["-pubout"])).unwrap();
        let body = br#"{"a":1}"#;
        for (alg, padding) in [
            ("RS384", &signature::RSA_PKCS1_SHA384),
            ("RS512", &signature::RSA_PKCS1_SHA512),
        ] {
            let protected = b64url(
                json!({"alg": alg, "FSPIOP-URI": "/transfers/abc", "FSPIOP-HTTP-Method": "PUT",
                       "FSPIOP-Source": "Hub", "FSPIOP-Destination": "payeefsp"})
                .to_string()
                .as_bytes(),
            );
            let input = format!("{protected}.{}", b64url(body));
            let mut sig = vec![0; pair.public().modulus_len()];
            pair.sign(padding, &SystemRandom::new(), input.as_bytes(), &mut sig)
                .unwrap();
            let header =
                json!({"signature": b64url(&sig), "protectedHeader": protected}).to_string();
            let http = Covered {
                date: None,
                ..covered()
            };
            verify(&verifying, &header, &http, body).unwrap();
            // The same signature claimed as RS256 fails.
            let claimed = b64url(
                json!({"alg": "RS256", "FSPIOP-URI": "/transfers/abc", "FSPIOP-HTTP-Method": "PUT",
                       "FSPIOP-Source": "Hub", "FSPIOP-Destination": "payeefsp"})
                .to_string()
                .as_bytes(),
            );
            let header = json!({"signature": b64url(&sig), "protectedHeader": claimed}).to_string();
            assert!(verify(&verifying, &header, &http, body).is_err());
        }
    }

    #[test]
    fn a_sorted_key_signature_verifies_over_unsorted_bytes() {
        let key = SigningKey::from_pem(&rsa_pem()).unwrap();
        let verifying = key.public_key();
        let sent = br#"{ "b": 1, "a": {"d": [1, 2.50, {"z": true, "y": null}], "c": "x"} }"#;
        let protected = json!({"alg": "RS256", "FSPIOP-URI": "/transfers/abc",
            "FSPIOP-HTTP-Method": "PUT", "FSPIOP-Source": "Hub",
            "FSPIOP-Destination": "payeefsp", "Date": "Tue, 01 Jul 2025 10:00:00 GMT"});
        let canonical = br#"{"a":{"c":"x","d":[1,2.5,{"y":null,"z":true}]},"b":1}"#;
        let header = signed_by_hand(&key, "RS256", &protected, canonical);
        verify(&verifying, &header, &covered(), sent).unwrap();
        // ... but not over a body that means something else.
        let changed = br#"{ "b": 2, "a": {"d": [1, 2.50, {"z": true, "y": null}], "c": "x"} }"#;
        assert!(verify(&verifying, &header, &covered(), changed).is_err());
    }

    #[test]
    fn header_rules_are_enforced() {
        let key = SigningKey::from_pem(&ec_pem()).unwrap();
        let verifying = key.public_key();
        let header = sign(&key, &covered(), b"{}").unwrap();
        for (http, why) in [
            (
                Covered {
                    method: "POST",
                    ..covered()
                },
                "FSPIOP-HTTP-Method",
            ),
            (
                Covered {
                    source: "payerfsp",
                    ..covered()
                },
                "FSPIOP-Source",
            ),
            (
                Covered {
                    date: Some("Wed, 02 Jul 2025 10:00:00 GMT"),
                    ..covered()
                },
                "Date",
            ),
            (
                Covered {
                    destination: None,
                    ..covered()
                },
                "FSPIOP-Destination",
            ),
            (
                Covered {
                    destination: Some("other"),
                    ..covered()
                },
                "FSPIOP-Destination",
            ),
        ] {
            let error = verify(&verifying, &header, &http, b"{}").unwrap_err();
            assert!(error.0.contains(why), "{why}: {error:?}");
        }
        // HTTP Destination present but not protected.
        let bare = sign(
            &key,
            &Covered {
                destination: None,
                ..covered()
            },
            b"{}",
        )
        .unwrap();
        assert!(verify(&verifying, &bare, &covered(), b"{}").is_err());
        // A key of the other kind, malformed values.
        let rsa = SigningKey::from_pem(&rsa_pem()).unwrap().public_key();
        assert!(verify(&rsa, &header, &covered(), b"{}").is_err());
        for bad in ["", "{}", r#"{"signature":"x","protectedHeader":"!!"}"#] {
            assert!(verify(&verifying, bad, &covered(), b"{}").is_err(), "{bad}");
        }
        // alg none is never accepted.
        let none = json!({"signature": "", "protectedHeader": b64url(
            json!({"alg":"none","FSPIOP-URI":"/transfers/abc","FSPIOP-HTTP-Method":"PUT",
                   "FSPIOP-Source":"Hub","FSPIOP-Destination":"payeefsp"}).to_string().as_bytes())})
        .to_string();
        assert!(verify(&verifying, &none, &covered(), b"{}").is_err());
    }

    #[test]
    fn keys_that_cannot_serve_are_refused() {
        let short = openssl_key(&["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"]);
        assert!(SigningKey::from_pem(&short).is_err());
        assert!(VerifyingKey::from_pem(&openssl_pkey(&short, &["-pubout"])).is_err());
        let p384 = openssl_key(&["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]);
        assert!(SigningKey::from_pem(&p384).is_err());
        assert!(VerifyingKey::from_pem(&openssl_pkey(&p384, &["-pubout"])).is_err());
        assert!(VerifyingKey::from_pem("not a key").is_err());
        assert!(SigningKey::from_pem(
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
        )
        .is_err());
        // A private key is not a public key file.
        assert!(VerifyingKey::from_pem(&ec_pem()).is_err());
    }

    #[test]
    fn a_certificate_gives_its_public_key() {
        let pair = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["payerfsp".into()])
            .unwrap()
            .self_signed(&pair)
            .unwrap();
        let from_cert = VerifyingKey::from_pem(&cert.pem()).unwrap();
        let key = SigningKey::from_pem(&pair.serialize_pem()).unwrap();
        assert_eq!(from_cert, key.public_key());
    }

    #[test]
    fn canonical_json_sorts_nested_keys_and_prints_like_javascript() {
        let value: Value = serde_json::from_str(
            r#"{"b":[{"z":1,"a":[3,{"y":"\u0001\n\"/é","x":false}]}],"a":null,"B":1.0,
               "n":[1e21,1e-7,123.456,-0.0,0.000001,1.5e300,100,2.50,9007199254740993]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"B":1,"a":null,"b":[{"a":[3,{"x":false,"y":"\u0001\n\"/é"}],"z":1}],"n":[1e+21,1e-7,123.456,0,0.000001,1.5e+300,100,2.5,9007199254740992]}"#
        );
        // UTF-16 order: U+FF21 (one unit) sorts after U+1F600 (a surrogate pair).
        let value = json!({"\u{ff21}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(
            canonical_json(&value),
            "{\"a\":3,\"\u{1f600}\":2,\"\u{ff21}\":1}"
        );
        assert_eq!(js_double(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(js_double(1e20), "100000000000000000000");
        assert_eq!(js_double(-1.25e-10), "-1.25e-10");
    }
}
