//! FSPIOP request headers (API Definition v1.1 §3.2, §3.3.4): Content-Type
//! and Accept with version negotiation, Date, FSPIOP-Source and
//! FSPIOP-Destination. Values come in as `Option<&str>`; the caller maps
//! its HTTP library's header map (see [`header_str`] for non-UTF-8 values).

use crate::FspiopError;
use ledger::{ErrorCode, FspName};
use std::fmt;

/// The FSPIOP resource a request is about; its word names the media type
/// `application/vnd.interoperability.{word}+json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Transfers,
    Parties,
    Participants,
    Quotes,
    TransactionRequests,
    Authorizations,
    BulkQuotes,
    /// v2.0: a payer DFSP asks an FXP for a conversion's terms.
    FxQuotes,
    /// v2.0: a payer DFSP asks an FXP to convert (the conversion).
    FxTransfers,
    /// v2.0: `/services/FXP[/{Source}/{Target}]`, which FXPs convert.
    Services,
}

impl Resource {
    pub const ALL: [Resource; 10] = [
        Resource::Transfers,
        Resource::Parties,
        Resource::Participants,
        Resource::Quotes,
        Resource::TransactionRequests,
        Resource::Authorizations,
        Resource::BulkQuotes,
        Resource::FxQuotes,
        Resource::FxTransfers,
        Resource::Services,
    ];

    /// The media-type word, also the first path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Transfers => "transfers",
            Resource::Parties => "parties",
            Resource::Participants => "participants",
            Resource::Quotes => "quotes",
            Resource::TransactionRequests => "transactionRequests",
            Resource::Authorizations => "authorizations",
            Resource::BulkQuotes => "bulkQuotes",
            Resource::FxQuotes => "fxQuotes",
            Resource::FxTransfers => "fxTransfers",
            Resource::Services => "services",
        }
    }

    /// The first FSPIOP version that has this resource: 1.0, except v2.0's
    /// foreign exchange (`fxQuotes`, `fxTransfers`) and `/services/FXP`.
    ///
    /// It limits only what the hub writes (see [`Resource::hub_version`]).
    /// What it reads is the same for every resource, [`Version::SUPPORTED`]:
    /// kasi accepts what Mojaloop's hub accepts, and Mojaloop's header
    /// check is not per resource — ml-api-adapter validates `fxTransfers`
    /// with `transfers`' list (content 1.0, 1.1, 2.0; accept 1, 1.0, 1.1, 2,
    /// 2.0), and quoting-service checks the headers of `quotes` only, so
    /// an `fxQuotes` request passes whatever its version. A body is judged
    /// by its schema, which for FX is v2.0's whatever the label says.
    pub fn since(self) -> Version {
        match self {
            Resource::FxQuotes | Resource::FxTransfers | Resource::Services => Version::V2_0,
            _ => Version::V1_0,
        }
    }

    /// The version of a message the hub writes itself about this resource
    /// (an error from the hub, a PATCH, a state callback), given the one
    /// negotiated with its addressee: that one, but never older than the
    /// resource ([`Resource::since`]). So FX messages are always 2.0, as
    /// Mojaloop's hub writes them (central-services-shared's default
    /// versions for `fxQuotes` and `fxTransfers`: content 2.0, accept 2)
    /// — a v1.x label on a body only v2.0 defines would describe nothing.
    /// Mojaloop's default for `services` is 1.0, a resource v1.x does not
    /// have; kasi writes it as the v2.0 it comes from.
    pub fn hub_version(self, negotiated: Version) -> Version {
        negotiated.max(self.since())
    }

    /// The resource named by a path's first segment (`transfers`, ...).
    pub fn from_path_segment(segment: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.as_str() == segment)
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An FSPIOP API version, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
}

impl Version {
    pub const V1_0: Version = Version { major: 1, minor: 0 };
    pub const V1_1: Version = Version { major: 1, minor: 1 };
    pub const V2_0: Version = Version { major: 2, minor: 0 };
    /// The versions kasi reads and writes, oldest first: Mojaloop's
    /// defaults (`PROTOCOL_VERSIONS`). A 2.0 body of a resource kasi serves
    /// is a 1.1 body with optional fields added, forwarded as it came.
    pub const SUPPORTED: [Version; 3] = [Version::V1_0, Version::V1_1, Version::V2_0];

    pub fn is_supported(self) -> bool {
        Version::SUPPORTED.contains(&self)
    }

    /// One byte for the ledger to keep (`ledger::Prepare::wire_version`):
    /// `major << 4 | minor`, 0 for none.
    pub fn packed(self) -> u8 {
        let major = self.major.min(15) as u8;
        let minor = self.minor.min(15) as u8;
        major << 4 | minor
    }

    /// The inverse of [`Version::packed`]; `None` for 0 or a version kasi
    /// does not speak.
    pub fn unpacked(byte: u8) -> Option<Version> {
        let version = Version {
            major: u16::from(byte >> 4),
            minor: u16::from(byte & 15),
        };
        version.is_supported().then_some(version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The `(major, minor)` extension pairs a 3001 answer lists (§3.3.4.3).
pub(crate) const SUPPORTED_VERSION_EXTENSIONS: [(&str, &str); 3] =
    [("1", "0"), ("1", "1"), ("2", "0")];

pub const CONTENT_TYPE: &str = "Content-Type";
pub const ACCEPT: &str = "Accept";
pub const DATE: &str = "Date";
pub const FSPIOP_SOURCE: &str = "FSPIOP-Source";
pub const FSPIOP_DESTINATION: &str = "FSPIOP-Destination";
/// Set by a proxy (Mojaloop's inter-scheme proxy adapter) on every message
/// it passes between two schemes: the proxy's participant name.
pub const FSPIOP_PROXY: &str = "FSPIOP-Proxy";

/// `application/vnd.interoperability.{resource}+json;version={major.minor}`,
/// the Content-Type of a body kasi sends in `version`.
pub fn content_type_for(resource: Resource, version: Version) -> String {
    format!(
        "application/vnd.interoperability.{}+json;version={}",
        resource.as_str(),
        version
    )
}

/// A header's bytes as text: `Ok(None)` when absent, 3101 naming the header
/// when the bytes are not UTF-8 (no FSPIOP header can contain such bytes).
pub fn header_str<'a>(name: &str, value: Option<&'a [u8]>) -> Result<Option<&'a str>, FspiopError> {
    match value {
        None => Ok(None),
        Some(bytes) => std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FspiopError::malformed(name, "not valid UTF-8")),
    }
}

fn is_ows(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

fn trim_ows(text: &str) -> &str {
    text.trim_matches(|c| c == ' ' || c == '\t')
}

/// A present, non-empty (after trimming whitespace) header value. An empty
/// value counts as missing.
fn present(value: Option<&str>) -> Option<&str> {
    value.map(trim_ows).filter(|v| !v.is_empty())
}

fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// One media type of a Content-Type or Accept value: `type/subtype` and the
/// raw value of its `version` parameter, if any. Other parameters (`q`,
/// `charset`, ...) are checked for syntax and otherwise ignored.
struct MediaType<'s> {
    essence_type: &'s str,
    subtype: &'s str,
    version: Option<&'s str>,
}

impl MediaType<'_> {
    fn is_for(&self, resource: Resource) -> bool {
        const PREFIX: &str = "vnd.interoperability.";
        const SUFFIX: &str = "+json";
        let word = resource.as_str();
        let sub = self.subtype.as_bytes();
        self.essence_type.eq_ignore_ascii_case("application")
            && sub.len() == PREFIX.len() + word.len() + SUFFIX.len()
            && sub[..PREFIX.len()].eq_ignore_ascii_case(PREFIX.as_bytes())
            && sub[PREFIX.len()..PREFIX.len() + word.len()].eq_ignore_ascii_case(word.as_bytes())
            && sub[PREFIX.len() + word.len()..].eq_ignore_ascii_case(SUFFIX.as_bytes())
    }
}

/// A hand-written reader for RFC 7231 media types and comma lists of them.
struct Scanner<'s> {
    text: &'s str,
    at: usize,
}

impl<'s> Scanner<'s> {
    fn new(text: &'s str) -> Self {
        Scanner { text, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn at_end(&self) -> bool {
        self.at >= self.text.len()
    }

    fn skip_ows(&mut self) {
        while self.peek().is_some_and(is_ows) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn token(&mut self) -> Option<&'s str> {
        let start = self.at;
        while self.peek().is_some_and(is_tchar) {
            self.at += 1;
        }
        (self.at > start).then(|| &self.text[start..self.at])
    }

    /// A quoted-string; returns its raw inside (escapes left in place).
    fn quoted(&mut self) -> Option<&'s str> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        loop {
            match self.peek()? {
                b'"' => {
                    let inside = &self.text[start..self.at];
                    self.at += 1;
                    return Some(inside);
                }
                b'\\' => self.at += 2,
                byte if byte == b'\t' || byte >= 0x20 && byte != 0x7f => self.at += 1,
                _ => return None,
            }
        }
    }

    /// `type "/" subtype *( OWS ";" OWS name "=" value )`, leaving the
    /// scanner on the OWS after it. `None` on a syntax error.
    fn media_type(&mut self) -> Option<MediaType<'s>> {
        let essence_type = self.token()?;
        if !self.eat(b'/') {
            return None;
        }
        let subtype = self.token()?;
        let mut version = None;
        loop {
            let before = self.at;
            self.skip_ows();
            if !self.eat(b';') {
                self.at = before;
                break;
            }
            self.skip_ows();
            let name = self.token()?;
            if !self.eat(b'=') {
                return None;
            }
            let value = match self.peek() {
                Some(b'"') => self.quoted()?,
                _ => self.token()?,
            };
            if name.eq_ignore_ascii_case("version") {
                if version.is_some() {
                    return None; // two versions: ambiguous
                }
                version = Some(value);
            }
        }
        self.skip_ows();
        Some(MediaType {
            essence_type,
            subtype,
            version,
        })
    }
}

/// A version parameter's value: `major` or `major.minor`, digits only.
/// Returns `(major, Some(minor))` or `(major, None)`; numbers too large for
/// a u16 saturate (they are unsupported anyway, not malformed).
fn parse_version_value(text: &str) -> Option<(u16, Option<u16>)> {
    fn number(text: &str) -> Option<u16> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(text.bytes().fold(0u16, |n, b| {
            n.saturating_mul(10).saturating_add(u16::from(b - b'0'))
        }))
    }
    match text.split_once('.') {
        Some((major, minor)) => Some((number(major)?, Some(number(minor)?))),
        None => Some((number(text)?, None)),
    }
}

// The descriptions of header faults are Mojaloop's own (central-services-
// shared's header validation plugin and its OpenAPI validation), word for
// word: a scheme's conformance suite compares them.

/// 3102 for a missing Content-Type.
pub const CONTENT_TYPE_REQUIRED: &str = "Missing mandatory element - Content-type is required";
/// 3101 for a Content-Type that is not this resource's media type with a
/// version.
pub const CONTENT_TYPE_INVALID: &str = "Malformed syntax - Invalid content-type header";
/// 3001 (406) for a Content-Type version kasi does not speak.
pub const CONTENT_VERSION_UNSUPPORTED: &str = "Unacceptable version requested - Client supplied a protocol version which is not supported by the server";
/// 3102 for a missing Accept.
pub const ACCEPT_REQUIRED: &str = "Missing mandatory element - Accept is required";
/// 3101 for an Accept that lists no media type of this resource.
pub const ACCEPT_INVALID: &str = "Malformed syntax - Invalid accept header";
/// 3001 (406) for an Accept none of whose versions kasi speaks.
pub const ACCEPT_VERSION_UNSUPPORTED: &str = "Unacceptable version requested - The Client requested an unsupported version, see extension list for supported version(s).";
/// 3102 for a missing Date.
pub const DATE_REQUIRED: &str = "Missing mandatory element - Missing required date header";
/// 3101 for a Date that is not an HTTP date.
pub const DATE_INVALID: &str = "Malformed syntax - Invalid date header";

/// Checks a request's `Content-Type` and returns the version its body is in.
///
/// It must be `application/vnd.interoperability.{resource}+json;version=X.Y`
/// (type and parameter names in any case, whitespace allowed around `;`;
/// `version=1` means 1.0; other parameters such as `charset` are ignored).
/// Missing or empty → 3102; any other shape, another resource's media type
/// or no version → 3101; a version other than 1.0, 1.1 or 2.0 → 3001 (406).
pub fn check_content_type(resource: Resource, value: Option<&str>) -> Result<Version, FspiopError> {
    let value = present(value).ok_or_else(|| {
        FspiopError::new(ErrorCode::MISSING_MANDATORY_ELEMENT, CONTENT_TYPE_REQUIRED)
    })?;
    let invalid = || FspiopError::new(ErrorCode::MALFORMED_SYNTAX, CONTENT_TYPE_INVALID);
    let mut scanner = Scanner::new(value);
    let media = match scanner.media_type() {
        Some(media) if scanner.at_end() => media,
        _ => return Err(invalid()),
    };
    if !media.is_for(resource) {
        return Err(invalid());
    }
    let raw = media.version.ok_or_else(invalid)?;
    let (major, minor) = parse_version_value(raw).ok_or_else(invalid)?;
    let version = Version {
        major,
        minor: minor.unwrap_or(0),
    };
    if !version.is_supported() {
        return Err(FspiopError::new(
            ErrorCode::UNACCEPTABLE_VERSION,
            CONTENT_VERSION_UNSUPPORTED,
        ));
    }
    Ok(version)
}

/// Picks the version to answer in from a request's `Accept`.
///
/// `Accept` is a comma-separated list of media types. Each
/// `application/vnd.interoperability.{resource}+json` entry may carry
/// `version=M` (any minor of major M), `version=M.m` (exactly that), or no
/// version (any). The answer is the highest supported version any entry
/// allows. Entries for other media types (including wildcards such as
/// `*/*`) are ignored as long as one is the resource's own; `q` and other
/// parameters are ignored too.
///
/// Missing or empty → 3102; a list that is not media types, none of the
/// resource's own, or a version that is not digits → 3101; a well-formed
/// list with no supported version → 3001 (406).
pub fn negotiate_accept(resource: Resource, value: Option<&str>) -> Result<Version, FspiopError> {
    negotiate_accept_preferring(resource, value, None)
}

/// [`negotiate_accept`], but answering `preferred` (the version of the
/// request's own body) whenever the Accept allows it: a client that writes
/// 1.0 and accepts any 1.x is surely able to read 1.0.
pub fn negotiate_accept_preferring(
    resource: Resource,
    value: Option<&str>,
    preferred: Option<Version>,
) -> Result<Version, FspiopError> {
    let value = present(value)
        .ok_or_else(|| FspiopError::new(ErrorCode::MISSING_MANDATORY_ELEMENT, ACCEPT_REQUIRED))?;
    let invalid = || FspiopError::new(ErrorCode::MALFORMED_SYNTAX, ACCEPT_INVALID);
    let mut scanner = Scanner::new(value);
    let mut best: Option<Version> = None;
    let mut preferred_allowed = false;
    let mut listed_ours = false;
    loop {
        scanner.skip_ows();
        // RFC 7230 §7: empty list elements are allowed and ignored.
        if scanner.eat(b',') {
            continue;
        }
        if scanner.at_end() {
            break;
        }
        let media = scanner.media_type().ok_or_else(invalid)?;
        if !(scanner.at_end() || scanner.eat(b',')) {
            return Err(invalid());
        }
        if !media.is_for(resource) {
            continue;
        }
        listed_ours = true;
        let wanted = match media.version {
            None => (None, None),
            Some(raw) => {
                let (major, minor) = parse_version_value(raw).ok_or_else(invalid)?;
                (Some(major), minor)
            }
        };
        for candidate in Version::SUPPORTED {
            let matches = wanted.0.unwrap_or(candidate.major) == candidate.major
                && wanted.1.unwrap_or(candidate.minor) == candidate.minor;
            if matches {
                best = best.max(Some(candidate));
                preferred_allowed |= preferred == Some(candidate);
            }
        }
    }
    if !listed_ours {
        return Err(invalid());
    }
    if preferred_allowed {
        return Ok(preferred.expect("allowed only when some"));
    }
    best.ok_or_else(|| {
        FspiopError::new(ErrorCode::UNACCEPTABLE_VERSION, ACCEPT_VERSION_UNSUPPORTED)
    })
}

/// Checks `Date`: an HTTP date (RFC 7231 §7.1.1.1: IMF-fixdate, or the
/// obsolete RFC 850 and asctime forms every recipient must accept).
/// Missing or empty → 3102; unparsable → 3101.
pub fn check_date(value: Option<&str>) -> Result<(), FspiopError> {
    let value = present(value)
        .ok_or_else(|| FspiopError::new(ErrorCode::MISSING_MANDATORY_ELEMENT, DATE_REQUIRED))?;
    httpdate::parse_http_date(value)
        .map(|_| ())
        .map_err(|_| FspiopError::new(ErrorCode::MALFORMED_SYNTAX, DATE_INVALID))
}

/// Checks an FSP header (`FSPIOP-Source`, required; `FSPIOP-Destination`,
/// optional). An empty value counts as absent (FSPIOP asks senders to leave
/// Destination empty when unknown). Absent and required → 3102 in
/// Mojaloop's words (`/header must have required property
/// 'fspiop-source'`); not a valid [`FspName`] (1-32 printable ASCII, no
/// space or `/`) → 3101 naming the header the same way.
pub fn check_fsp_header(
    name: &str,
    value: Option<&str>,
    required: bool,
) -> Result<Option<FspName>, FspiopError> {
    let lower = name.to_ascii_lowercase();
    match present(value) {
        None if required => Err(FspiopError::new(
            ErrorCode::MISSING_MANDATORY_ELEMENT,
            format!("Missing mandatory element - /header must have required property '{lower}'"),
        )),
        None => Ok(None),
        Some(text) => FspName::new(text).map(Some).ok_or_else(|| {
            FspiopError::new(
                ErrorCode::MALFORMED_SYNTAX,
                format!(
                    "Malformed syntax - /header/{lower} must be an FSP id (1-32 printable ASCII, no space or '/')"
                ),
            )
        }),
    }
}

/// The FSPIOP headers of one request, as the HTTP layer found them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestHeaders<'a> {
    pub content_type: Option<&'a str>,
    pub accept: Option<&'a str>,
    pub date: Option<&'a str>,
    pub source: Option<&'a str>,
    pub destination: Option<&'a str>,
    /// Carried for forwarding; not checked here.
    pub signature: Option<&'a str>,
    pub uri: Option<&'a str>,
    pub http_method: Option<&'a str>,
    pub encryption: Option<&'a str>,
}

/// What [`RequestHeaders::check`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedHeaders {
    /// The version of the request's body (from Content-Type).
    pub content_version: Version,
    /// The version to answer in, when the request had an Accept: the body's
    /// own version if Accept allows it, else the highest Accept allows.
    pub accept_version: Option<Version>,
    pub source: FspName,
    pub destination: Option<FspName>,
}

impl RequestHeaders<'_> {
    /// Checks every mandatory header of a request about `resource`, in
    /// Mojaloop's order: Accept (required when `accept_required`, i.e.
    /// POST, GET and DELETE; on a PUT or PATCH callback checked only when
    /// present), Date, Content-Type (on every request, GETs included),
    /// FSPIOP-Source, FSPIOP-Destination. The first fault is returned.
    pub fn check(
        &self,
        resource: Resource,
        accept_required: bool,
    ) -> Result<CheckedHeaders, FspiopError> {
        // Mojaloop checks Accept before Date and Content-Type; the version
        // to answer in prefers the body's own when Accept allows it, so the
        // Accept is read twice only on a valid request.
        if accept_required || present(self.accept).is_some() {
            negotiate_accept(resource, self.accept)?;
        }
        check_date(self.date)?;
        let content_version = check_content_type(resource, self.content_type)?;
        let accept_version = if accept_required || present(self.accept).is_some() {
            Some(negotiate_accept_preferring(
                resource,
                self.accept,
                Some(content_version),
            )?)
        } else {
            None
        };
        let source = check_fsp_header(FSPIOP_SOURCE, self.source, true)?
            .expect("a required header is present when Ok");
        let destination = check_fsp_header(FSPIOP_DESTINATION, self.destination, false)?;
        Ok(CheckedHeaders {
            content_version,
            accept_version,
            source,
            destination,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::ErrorCode;

    const T: Resource = Resource::Transfers;
    const CT_11: &str = "application/vnd.interoperability.transfers+json;version=1.1";

    fn code(result: Result<impl fmt::Debug, FspiopError>) -> (u16, u16, String) {
        let error = result.expect_err("expected an error");
        (error.code.0, error.http_status, error.description)
    }

    #[test]
    fn content_type_accepts_the_supported_versions() {
        assert_eq!(check_content_type(T, Some(CT_11)), Ok(Version::V1_1));
        for (value, version) in [
            (
                "application/vnd.interoperability.transfers+json;version=1.0",
                Version::V1_0,
            ),
            (
                "application/vnd.interoperability.transfers+json;version=1",
                Version::V1_0,
            ),
            (
                "application/vnd.interoperability.transfers+json ; version=1.1",
                Version::V1_1,
            ),
            (
                "application/vnd.interoperability.transfers+json;\tversion=1.1 ",
                Version::V1_1,
            ),
            (
                "  Application/VND.Interoperability.Transfers+JSON;Version=1.1",
                Version::V1_1,
            ),
            (
                "application/vnd.interoperability.transfers+json;version=\"1.1\"",
                Version::V1_1,
            ),
            (
                "application/vnd.interoperability.transfers+json;charset=utf-8;version=1.1",
                Version::V1_1,
            ),
            (
                "application/vnd.interoperability.transfers+json;version=1.1; charset=UTF-8",
                Version::V1_1,
            ),
        ] {
            assert_eq!(check_content_type(T, Some(value)), Ok(version), "{value}");
        }
        assert_eq!(
            check_content_type(
                Resource::Quotes,
                Some("application/vnd.interoperability.quotes+json;version=1.0")
            ),
            Ok(Version::V1_0)
        );
    }

    #[test]
    fn content_type_missing_is_3102() {
        for value in [None, Some(""), Some("  ")] {
            let (c, status, description) = code(check_content_type(T, value));
            assert_eq!((c, status), (3102, 400));
            assert_eq!(description, CONTENT_TYPE_REQUIRED);
        }
    }

    #[test]
    fn content_type_malformed_is_3101() {
        for value in [
            "application/json",
            "application/vnd.interoperability.transfers+json",
            "application/vnd.interoperability.quotes+json;version=1.1",
            "application/vnd.interoperability.transfers+xml;version=1.1",
            "application/vnd.interoperability.transfers+json;version=",
            "application/vnd.interoperability.transfers+json;version=1.x",
            "application/vnd.interoperability.transfers+json;version=1.1.1",
            "application/vnd.interoperability.transfers+json;version=v1",
            "application/vnd.interoperability.transfers+json;version=1.1;",
            "application/vnd.interoperability.transfers+json;version=1.0;version=1.1",
            "application/vnd.interoperability.transfers+json;version=1.1, application/json",
            "application/vnd.interoperability.transfers+json version=1.1",
            "application/vnd.interoperability.transfers+json;version=\"1.1",
            "vnd.interoperability.transfers+json;version=1.1",
            "/json;version=1.1",
        ] {
            let (c, status, description) = code(check_content_type(T, Some(value)));
            assert_eq!((c, status), (3101, 400), "{value}");
            assert_eq!(
                description,
                "Malformed syntax - Invalid content-type header"
            );
        }
    }

    #[test]
    fn content_type_unsupported_version_is_3001() {
        for value in ["3.0", "1.2", "0.9", "2.1", "99999999"] {
            let header = format!("application/vnd.interoperability.transfers+json;version={value}");
            let (c, status, description) = code(check_content_type(T, Some(&header)));
            assert_eq!((c, status), (3001, 406), "{value}");
            assert_eq!(
                description,
                "Unacceptable version requested - Client supplied a protocol version which is not supported by the server"
            );
        }
        for (value, version) in [("2.0", Version::V2_0), ("2", Version::V2_0)] {
            let header = format!("application/vnd.interoperability.transfers+json;version={value}");
            assert_eq!(check_content_type(T, Some(&header)), Ok(version));
        }
    }

    #[test]
    fn accept_picks_the_highest_listed_supported_version() {
        let ours = |v: &str| format!("application/vnd.interoperability.transfers+json;version={v}");
        for (value, version) in [
            (ours("1"), Version::V1_1),
            (ours("1.0"), Version::V1_0),
            (ours("1.1"), Version::V1_1),
            (format!("{},{}", ours("1.0"), ours("1.1")), Version::V1_1),
            (format!("{}, {}", ours("1.1"), ours("1.0")), Version::V1_1),
            (format!("{},{}", ours("3.0"), ours("1.0")), Version::V1_0),
            (format!("{} , {}", ours("2"), ours("1")), Version::V2_0),
            (ours("2"), Version::V2_0),
            (ours("2.0"), Version::V2_0),
            (format!("{},{}", ours("1.2"), ours("1.0")), Version::V1_0),
            (
                "application/vnd.interoperability.transfers+json".to_string(),
                Version::V2_0,
            ),
            (format!("application/json, {}", ours("1.0")), Version::V1_0),
            (format!("{};q=0.5", ours("1.0")), Version::V1_0),
            (format!(",{},,", ours("1.0")), Version::V1_0),
            (
                "APPLICATION/VND.INTEROPERABILITY.TRANSFERS+JSON;VERSION=1.0".to_string(),
                Version::V1_0,
            ),
        ] {
            assert_eq!(negotiate_accept(T, Some(&value)), Ok(version), "{value}");
        }
    }

    #[test]
    fn the_answer_prefers_the_bodys_own_version_when_accept_allows_it() {
        let ours = |v: &str| format!("application/vnd.interoperability.transfers+json;version={v}");
        for (accept, body, answer) in [
            (ours("1"), Version::V1_0, Version::V1_0),
            (ours("1"), Version::V1_1, Version::V1_1),
            (ours("1.1"), Version::V1_0, Version::V1_1),
            (ours("2"), Version::V1_1, Version::V2_0),
            (
                format!("{},{}", ours("2"), ours("1")),
                Version::V1_1,
                Version::V1_1,
            ),
        ] {
            assert_eq!(
                negotiate_accept_preferring(T, Some(&accept), Some(body)),
                Ok(answer),
                "{accept} with a {body} body"
            );
        }
    }

    #[test]
    fn accept_missing_is_3102() {
        for value in [None, Some(""), Some(" \t")] {
            let (c, status, description) = code(negotiate_accept(T, value));
            assert_eq!((c, status), (3102, 400));
            assert_eq!(
                description,
                "Missing mandatory element - Accept is required"
            );
        }
    }

    #[test]
    fn accept_malformed_is_3101() {
        for value in [
            "transfers",
            "application/vnd.interoperability.transfers+json;version=1.a",
            "application/vnd.interoperability.transfers+json;version",
            "application/vnd.interoperability.transfers+json;version=1.0 application/json",
            "application/vnd.interoperability.transfers+json;;version=1",
            "application/vnd.interoperability.transfers+json;version=1;",
            "application/vnd.interoperability.transfers+json;version=1.0;version=1.1",
            "application/vnd.interoperability.transfers+json;version=1.0, /json",
            // Well-formed media types, but none of this resource's.
            "application/vnd.interoperability.quotes+json;version=1",
            "application/json",
            "*/*",
        ] {
            let (c, status, description) = code(negotiate_accept(T, Some(value)));
            assert_eq!((c, status), (3101, 400), "{value}");
            assert_eq!(description, "Malformed syntax - Invalid accept header");
        }
    }

    #[test]
    fn accept_without_a_supported_version_is_3001() {
        for value in [
            "application/vnd.interoperability.transfers+json;version=3",
            "application/vnd.interoperability.transfers+json;version=2.1,application/vnd.interoperability.transfers+json;version=1.2",
            "application/json, application/vnd.interoperability.transfers+json;version=9",
        ] {
            let (c, status, description) = code(negotiate_accept(T, Some(value)));
            assert_eq!((c, status), (3001, 406), "{value}");
            assert_eq!(
                description,
                "Unacceptable version requested - The Client requested an unsupported version, see extension list for supported version(s)."
            );
        }
    }

    #[test]
    fn date_is_an_http_date() {
        assert_eq!(check_date(Some("Sun, 06 Nov 1994 08:49:37 GMT")), Ok(()));
        assert_eq!(check_date(Some("Tue, 17 Nov 2026 10:00:00 GMT")), Ok(()));
        let (c, status, description) = code(check_date(None));
        assert_eq!(
            (c, status, description.as_str()),
            (
                3102,
                400,
                "Missing mandatory element - Missing required date header"
            )
        );
        for value in [
            "yesterday",
            "2026-11-17T10:00:00Z",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            let (c, status, description) = code(check_date(Some(value)));
            assert_eq!((c, status), (3101, 400), "{value}");
            assert_eq!(description, "Malformed syntax - Invalid date header");
        }
    }

    #[test]
    fn fsp_headers() {
        assert_eq!(
            check_fsp_header(FSPIOP_SOURCE, Some("payerfsp"), true),
            Ok(Some(FspName::new("payerfsp").unwrap()))
        );
        assert_eq!(check_fsp_header(FSPIOP_DESTINATION, None, false), Ok(None));
        assert_eq!(
            check_fsp_header(FSPIOP_DESTINATION, Some(""), false),
            Ok(None)
        );
        let missing =
            "Missing mandatory element - /header must have required property 'fspiop-source'";
        let (c, status, description) = code(check_fsp_header(FSPIOP_SOURCE, None, true));
        assert_eq!((c, status), (3102, 400));
        assert_eq!(description, missing);
        let (c, _, description) = code(check_fsp_header(FSPIOP_SOURCE, Some(""), true));
        assert_eq!(c, 3102);
        assert_eq!(description, missing);
        for bad in ["a b", "a/b", &"x".repeat(33), "é"] {
            let (c, status, description) =
                code(check_fsp_header(FSPIOP_DESTINATION, Some(bad), false));
            assert_eq!((c, status), (3101, 400), "{bad}");
            assert!(description.starts_with("Malformed syntax - /header/fspiop-destination"));
        }
    }

    #[test]
    fn content_type_for_callbacks() {
        assert_eq!(content_type_for(T, Version::V1_1), CT_11);
        assert_eq!(
            content_type_for(Resource::Parties, Version::V1_0),
            "application/vnd.interoperability.parties+json;version=1.0"
        );
        for resource in Resource::ALL {
            for version in Version::SUPPORTED {
                assert_eq!(
                    check_content_type(resource, Some(&content_type_for(resource, version))),
                    Ok(version)
                );
            }
            assert_eq!(
                Resource::from_path_segment(resource.as_str()),
                Some(resource)
            );
        }
        assert_eq!(Resource::from_path_segment("bulkTransfers"), None);
        assert_eq!(
            Resource::from_path_segment("fxQuotes"),
            Some(Resource::FxQuotes)
        );
        assert_eq!(Resource::from_path_segment("fxquotes"), None);
    }

    #[test]
    fn fx_resources_are_read_in_every_version_and_written_in_2_0() {
        for resource in [
            Resource::FxQuotes,
            Resource::FxTransfers,
            Resource::Services,
        ] {
            for version in Version::SUPPORTED {
                let header = content_type_for(resource, version);
                assert_eq!(check_content_type(resource, Some(&header)), Ok(version));
                assert_eq!(resource.hub_version(version), Version::V2_0);
            }
            let accept = format!("application/vnd.interoperability.{resource}+json;version=2");
            assert_eq!(negotiate_accept(resource, Some(&accept)), Ok(Version::V2_0));
        }
        assert_eq!(
            content_type_for(Resource::FxTransfers, Version::V2_0),
            "application/vnd.interoperability.fxTransfers+json;version=2.0"
        );
        for version in Version::SUPPORTED {
            assert_eq!(Resource::Quotes.hub_version(version), version);
        }
        // One resource's media type is not another's.
        let (c, _, _) = code(check_content_type(
            Resource::FxQuotes,
            Some("application/vnd.interoperability.quotes+json;version=2.0"),
        ));
        assert_eq!(c, 3101);
        let (c, _, _) = code(check_content_type(
            Resource::Transfers,
            Some("application/vnd.interoperability.fxTransfers+json;version=2.0"),
        ));
        assert_eq!(c, 3101);
    }

    #[test]
    fn each_resource_has_its_own_media_type() {
        let quotes = "application/vnd.interoperability.quotes+json;version=1.1";
        let (c, _, description) = code(check_content_type(Resource::BulkQuotes, Some(quotes)));
        assert_eq!(c, 3101, "{description}");
        assert_eq!(
            check_content_type(
                Resource::TransactionRequests,
                Some("application/vnd.interoperability.transactionRequests+json;version=1.1")
            ),
            Ok(Version::V1_1)
        );
        assert_eq!(
            check_content_type(
                Resource::Authorizations,
                Some("application/vnd.interoperability.authorizations+json;version=1.0")
            ),
            Ok(Version::V1_0)
        );
    }

    #[test]
    fn header_bytes_must_be_utf8() {
        assert_eq!(header_str("Date", None), Ok(None));
        assert_eq!(header_str("Date", Some(b"x")), Ok(Some("x")));
        let error = header_str("FSPIOP-Source", Some(b"\xff")).unwrap_err();
        assert_eq!(error.code, ErrorCode::MALFORMED_SYNTAX);
        assert!(error.description.contains("FSPIOP-Source"));
    }

    fn good() -> RequestHeaders<'static> {
        RequestHeaders {
            content_type: Some(CT_11),
            accept: Some("application/vnd.interoperability.transfers+json;version=1"),
            date: Some("Tue, 17 Nov 2026 10:00:00 GMT"),
            source: Some("payerfsp"),
            destination: Some("payeefsp"),
            ..RequestHeaders::default()
        }
    }

    #[test]
    fn request_headers_check_all() {
        let checked = good().check(T, true).unwrap();
        assert_eq!(checked.content_version, Version::V1_1);
        assert_eq!(checked.accept_version, Some(Version::V1_1));
        assert_eq!(checked.source.as_str(), "payerfsp");
        assert_eq!(
            checked.destination.map(|d| d.to_string()),
            Some("payeefsp".into())
        );

        let callback = RequestHeaders {
            accept: None,
            ..good()
        };
        assert_eq!(callback.check(T, false).unwrap().accept_version, None);
        assert_eq!(code(callback.check(T, true)).0, 3102);

        for (headers, expected) in [
            (
                RequestHeaders {
                    content_type: None,
                    ..good()
                },
                CONTENT_TYPE_REQUIRED,
            ),
            (
                RequestHeaders {
                    date: None,
                    ..good()
                },
                DATE_REQUIRED,
            ),
            (
                RequestHeaders {
                    source: None,
                    ..good()
                },
                "Missing mandatory element - /header must have required property 'fspiop-source'",
            ),
            (
                RequestHeaders {
                    accept: None,
                    ..good()
                },
                ACCEPT_REQUIRED,
            ),
        ] {
            assert_eq!(code(headers.check(T, true)).2, expected);
        }
        let no_destination = RequestHeaders {
            destination: None,
            ..good()
        };
        assert_eq!(no_destination.check(T, true).unwrap().destination, None);
        let bad_destination = RequestHeaders {
            destination: Some("a b"),
            ..good()
        };
        assert_eq!(code(bad_destination.check(T, true)).0, 3101);
        // Accept is checked first, as Mojaloop does.
        let both_bad = RequestHeaders {
            accept: Some("x"),
            content_type: None,
            ..good()
        };
        assert_eq!(code(both_bad.check(T, true)).2, ACCEPT_INVALID);
    }
}
