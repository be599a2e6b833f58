//! The admin API, called in-process with the visitor's credential.

use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt as _;

use crate::session::{Credential, Visitor};

/// Answers larger than this are not the admin API's (its largest list is
/// the participants of a big scheme, a few MB).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The API's refusal, in its own words (FSPIOP `errorInformation`).
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub description: String,
}

impl ApiError {
    /// What a person reads: the API's description, with its code.
    pub fn message(&self) -> String {
        if self.code.is_empty() {
            self.description.clone()
        } else {
            format!("{} (error {})", self.description, self.code)
        }
    }

    pub fn not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

pub(crate) struct Raw {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Visitor {
    /// One admin API request as this visitor; the answer whatever its status.
    pub async fn call_raw(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
        accept: &str,
    ) -> Result<Raw, ApiError> {
        let mut request = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(header::ACCEPT, accept);
        if let Credential::Bearer(token) = &self.session.credential {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match body {
            Some(value) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(value.to_string())
            }
            None => Body::empty(),
        };
        let mut request = request.body(body).map_err(|error| ApiError {
            status: StatusCode::BAD_REQUEST,
            code: String::new(),
            description: format!("cannot build the request {path_and_query}: {error}"),
        })?;
        if let Some(connection) = &self.connection {
            request.extensions_mut().insert(connection.clone());
        }
        let response = match self.console.api.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, MAX_ANSWER_BYTES)
            .await
            .map_err(|error| ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: String::new(),
                description: format!("the admin API's answer could not be read: {error}"),
            })?;
        Ok(Raw {
            status: parts.status,
            body,
        })
    }

    /// A JSON request; the JSON answer (`Null` for an empty one), or the
    /// API's refusal.
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let raw = self
            .call_raw(method.clone(), path_and_query, body, "application/json")
            .await?;
        if !raw.status.is_success() {
            return Err(refusal(raw.status, &raw.body));
        }
        if raw.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&exact_numbers(&raw.body)).map_err(|error| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: String::new(),
            description: format!("{method} {path_and_query} answered what is not JSON: {error}"),
        })
    }

    /// A read. The path is taken at once (not when the read is awaited), so
    /// several reads built with `format!` can be joined.
    pub fn get(
        &self,
        path_and_query: impl Into<String>,
    ) -> impl std::future::Future<Output = Result<Value, ApiError>> + '_ {
        let path_and_query = path_and_query.into();
        async move { self.call(Method::GET, &path_and_query, None).await }
    }
}

/// The API writes amounts as JSON numbers with up to 18 integer and 4
/// decimal digits; read as `f64` they would lose digits (`serde_json`
/// without `arbitrary_precision`, which would change every crate's JSON).
/// So, before parsing, every number with a fraction, an exponent or more
/// than 15 digits is turned into a string of the same text: shown and
/// parsed exactly (`page::text`, `page::signed_amount`, `page::float`),
/// while ids and counts stay numbers.
pub(crate) fn exact_numbers(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut i = 0;
    let mut in_string = false;
    while i < json.len() {
        let byte = json[i];
        if in_string {
            out.push(byte);
            match byte {
                b'\\' if i + 1 < json.len() => {
                    out.push(json[i + 1]);
                    i += 1;
                }
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if byte == b'"' {
            in_string = true;
            out.push(byte);
            i += 1;
            continue;
        }
        if byte == b'-' || byte.is_ascii_digit() {
            let start = i;
            while i < json.len()
                && matches!(json[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            {
                i += 1;
            }
            let number = &json[start..i];
            let digits = number.iter().filter(|b| b.is_ascii_digit()).count();
            let plain_integer = number.iter().all(|b| b.is_ascii_digit() || *b == b'-');
            if plain_integer && digits <= 15 {
                out.extend_from_slice(number);
            } else {
                out.push(b'"');
                out.extend_from_slice(number);
                out.push(b'"');
            }
            continue;
        }
        out.push(byte);
        i += 1;
    }
    out
}

fn refusal(status: StatusCode, body: &[u8]) -> ApiError {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let info = parsed.as_ref().and_then(|v| v.get("errorInformation"));
    let text = |key: &str| {
        info.and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut description = text("errorDescription");
    if description.is_empty() {
        description = format!(
            "the admin API answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
    }
    ApiError {
        status,
        code: text("errorCode"),
        description,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(text: &str) -> String {
        String::from_utf8(exact_numbers(text.as_bytes())).unwrap()
    }

    #[test]
    fn amounts_stay_exact_and_ids_stay_numbers() {
        assert_eq!(
            exact(r#"{"id":3,"value":-1234567890123.4567,"big":123456789012345678,"n":-2000}"#),
            r#"{"id":3,"value":"-1234567890123.4567","big":"123456789012345678","n":-2000}"#
        );
        // Numbers inside strings (and escaped quotes) are left alone.
        assert_eq!(
            exact(r#"{"a":"x\"1.5","b":[1.5e3]}"#),
            r#"{"a":"x\"1.5","b":["1.5e3"]}"#
        );
        let parsed: Value =
            serde_json::from_slice(&exact_numbers(b"[12345678901234567.5]")).unwrap();
        assert_eq!(parsed[0], "12345678901234567.5");
    }
}
