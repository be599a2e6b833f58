//! Which URLs the hub will call: DFSP callback endpoints and external
//! oracles, checked when the operator sets them.
//!
//! A URL must be `http://` or `https://` with a host, and carry no
//! credentials (`user:password@`): they would sit in the store and the
//! logs. Templates such as `{{partyIdType}}` are allowed in the path only;
//! the host is fixed at onboarding. With an allow-list
//! (`--callback-allow`), the host must also be one of: an exact name
//! (`dfsp1.example.com`), a subdomain pattern (`*.example.com`, any name
//! ending in `.example.com`), or an address range (`10.0.0.0/8`; it
//! matches hosts written as addresses only: names are not resolved here,
//! since resolution would neither be stable nor checked at call time).

use std::net::IpAddr;

use ledger::ErrorCode;

use crate::tls::Cidr;
use crate::HubError;

/// One entry of the allow-list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// This host name exactly (lowercase).
    Host(String),
    /// Any host name ending in this suffix (lowercase, starting with `.`).
    Subdomains(String),
    /// Hosts given as an address in this range.
    Range(Cidr),
}

impl std::str::FromStr for Allowed {
    type Err = String;

    fn from_str(text: &str) -> Result<Allowed, String> {
        let text = text.trim().to_ascii_lowercase();
        if text.is_empty() {
            return Err("an empty callback allow-list entry".to_string());
        }
        if let Some(domain) = text.strip_prefix("*.") {
            if domain.is_empty() || !is_host_name(domain) {
                return Err(format!("'{text}' is not a pattern such as *.example.com"));
            }
            return Ok(Allowed::Subdomains(format!(".{domain}")));
        }
        if text.contains('/') || text.parse::<IpAddr>().is_ok() {
            return text.parse::<Cidr>().map(Allowed::Range);
        }
        if !is_host_name(&text) {
            return Err(format!(
                "'{text}' is not a host name, *.domain or an address range"
            ));
        }
        Ok(Allowed::Host(text))
    }
}

impl std::fmt::Display for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Allowed::Host(host) => f.write_str(host),
            Allowed::Subdomains(suffix) => write!(f, "*{suffix}"),
            Allowed::Range(range) => write!(f, "{range}"),
        }
    }
}

fn is_host_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .split('.')
            .all(|label| !label.is_empty() && label.len() <= 63)
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// The host of `url` if it is one the hub may call, or why not.
pub fn host_of(url: &str) -> Result<String, String> {
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("it holds spaces or control characters".to_string());
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "it is not an absolute URL (scheme://host/...)".to_string())?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(format!("scheme '{scheme}' is not http or https"));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if authority.contains('@') {
        return Err("it carries credentials (user@ or user:password@)".to_string());
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (address, after) = bracketed
            .split_once(']')
            .ok_or_else(|| "its IPv6 host has no closing ']'".to_string())?;
        let port =
            match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| {
                    "something other than a port follows its IPv6 host".to_string()
                })?),
            };
        address
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("'{address}' is not an IPv6 address"))?;
        (address.to_ascii_lowercase(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_ascii_lowercase(), Some(port)),
            None => (authority.to_ascii_lowercase(), None),
        }
    };
    if host.is_empty() {
        return Err("it has no host".to_string());
    }
    if host.contains(['{', '}']) {
        return Err("templates ({{...}}) are allowed in the path, not in the host".to_string());
    }
    if host.parse::<IpAddr>().is_err() && !is_host_name(&host) {
        return Err(format!("'{host}' is not a host name or address"));
    }
    if let Some(port) = port {
        if port.parse::<u16>().ok().filter(|p| *p > 0).is_none() {
            return Err(format!("port '{port}' is not 1-65535"));
        }
    }
    Ok(host)
}

/// Checks a URL the hub would call against the rules and the allow-list
/// (empty: any host); a refusal is central-ledger's validation error.
pub fn check(field: &str, url: &str, allow: &[Allowed]) -> Result<(), HubError> {
    let refuse = |why: String| {
        HubError::new(
            ErrorCode::GENERIC_VALIDATION_ERROR,
            // FSPIOP descriptions are short (128 characters): no URL echo.
            format!("Generic validation error - {field}: {why}"),
        )
    };
    let host = host_of(url).map_err(refuse)?;
    if allow.is_empty() {
        return Ok(());
    }
    let address = host.parse::<IpAddr>().ok();
    let allowed = allow.iter().any(|entry| match entry {
        Allowed::Host(name) => *name == host,
        Allowed::Subdomains(suffix) => host.ends_with(suffix.as_str()),
        Allowed::Range(range) => address.is_some_and(|a| range.contains(a)),
    });
    if allowed {
        Ok(())
    } else {
        Err(refuse(format!("host '{host}' is not in --callback-allow")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_a_scheme_a_host_and_no_credentials() {
        for good in [
            "http://dfsp1.example.com/callbacks",
            "https://dfsp1:8443/parties/{{partyIdType}}/{{partyIdentifier}}",
            "http://10.1.2.3:3000",
            "http://[::1]:4000/x?y=1",
            "HTTPS://Example.COM",
        ] {
            assert!(host_of(good).is_ok(), "{good}: {:?}", host_of(good));
        }
        for (bad, why) in [
            ("ftp://example.com/x", "scheme"),
            ("example.com/x", "absolute"),
            ("http:///callbacks", "no host"),
            ("http://user:secret@example.com/", "credentials"),
            ("http://token@example.com/", "credentials"),
            ("http://{{host}}/x", "templates"),
            ("http://example.com:99999/", "port"),
            ("http://example.com:/", "port"),
            ("http://exa mple.com/", "spaces"),
            ("http://[::1/x", "closing"),
            ("http://bad!host/", "host name"),
        ] {
            let error = host_of(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn the_allow_list_matches_names_subdomains_and_ranges() {
        let allow: Vec<Allowed> = ["dfsp1.example.com", "*.scheme.org", "10.0.0.0/8", "::1"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        for good in [
            "http://DFSP1.example.com/x",
            "https://a.b.scheme.org/{{x}}",
            "http://10.200.0.1:3000/",
            "http://[::1]:80/",
        ] {
            assert!(check("value", good, &allow).is_ok(), "{good}");
        }
        for bad in [
            "http://dfsp2.example.com/",
            "http://scheme.org/",
            "http://evilscheme.org/",
            "http://11.0.0.1/",
            "http://localhost/",
        ] {
            let error = check("value", bad, &allow).unwrap_err();
            assert_eq!(error.code, ErrorCode::GENERIC_VALIDATION_ERROR);
            assert!(error.description.contains("--callback-allow"), "{bad}");
        }
        assert!(check("value", "http://anything.net/", &[]).is_ok());
        assert!(check("value", "http://u:p@anything.net/", &[]).is_err());
        for bad in ["", "*.", "bad host", "10.0.0.0/40"] {
            assert!(bad.parse::<Allowed>().is_err(), "{bad}");
        }
    }
}
