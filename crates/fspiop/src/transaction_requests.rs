//! Request-to-pay bodies: `POST /transactionRequests`
//! (TransactionRequestsPostRequest), `PUT /transactionRequests/{ID}`
//! (TransactionRequestsIDPutResponse), `PUT /authorizations/{ID}`
//! (AuthorizationsIDPutResponse), and the query string of
//! `GET /authorizations/{ID}`. The `…/error` callbacks are
//! ErrorInformationObjects: use [`crate::parse_error_information`].
//!
//! As for quotes, the hub only routes these: the parsers check the schema
//! (first fault in schema order wins) and return what routing and logging
//! need; the body is forwarded as received.

use crate::json::{JsonObj, JsonStr};
use crate::party::{party, party_id_info, ParsedPartyIdInfo, PartyIdInfoRaw, PartyRaw};
use crate::quotes::{optional_date_time, transaction_type, TransactionTypeRaw, TEXT_MAX_CHARS};
use crate::schema::{
    check_geo_code, correlation_id_field, currency, money, one_of, optional_correlation_id,
    optional_text, Child, GeoCodeRaw, Money,
};
use crate::transfers::{
    check_extension_list, optional_obj, parse_object, required_str, ExtensionListRaw, FieldPath,
    MoneyRaw,
};
use crate::FspiopError;
use ledger::{Amount, RequestHash, TransferId};
use serde::Deserialize;

/// `AuthenticationType` as Mojaloop's transaction-requests-service accepts
/// it (the v1.1 text's enumeration; the U2F of later third-party snippets
/// is not routed by that service).
const AUTHENTICATION_TYPES: &[&str] = &["OTP", "QRCODE"];
const TRANSACTION_REQUEST_STATES: &[&str] = &["RECEIVED", "PENDING", "ACCEPTED", "REJECTED"];
/// `AuthenticationValue`'s `^\d{3,10}$|^\S{1,64}$`: the second branch
/// covers the first.
const AUTHENTICATION_VALUE_MAX_CHARS: usize = 64;

// ------------------------------------------------------------- raw shapes

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct TransactionRequestPostRaw<'a> {
    #[serde(borrow)]
    transaction_request_id: JsonStr<'a>,
    #[serde(borrow)]
    payee: JsonObj<PartyRaw<'a>>,
    #[serde(borrow)]
    payer: JsonObj<PartyIdInfoRaw<'a>>,
    #[serde(borrow)]
    amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    transaction_type: JsonObj<TransactionTypeRaw<'a>>,
    #[serde(borrow)]
    note: JsonStr<'a>,
    #[serde(borrow)]
    geo_code: JsonObj<GeoCodeRaw<'a>>,
    #[serde(borrow)]
    authentication_type: JsonStr<'a>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct TransactionRequestPutRaw<'a> {
    #[serde(borrow)]
    transaction_id: JsonStr<'a>,
    #[serde(borrow)]
    transaction_request_state: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct AuthenticationInfoRaw<'a> {
    #[serde(borrow)]
    authentication: JsonStr<'a>,
    #[serde(borrow)]
    authentication_value: JsonStr<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct AuthorizationPutRaw<'a> {
    #[serde(borrow)]
    authentication_info: JsonObj<AuthenticationInfoRaw<'a>>,
    #[serde(borrow)]
    response_type: JsonStr<'a>,
}

// ------------------------------------------------------------------- POST

/// A checked `POST /transactionRequests` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedTransactionRequestPost {
    pub transaction_request_id: TransferId,
    /// `payee.partyIdInfo`.
    pub payee: ParsedPartyIdInfo,
    /// `payer` (a bare PartyIdInfo: the payee FSP may not know more).
    pub payer: ParsedPartyIdInfo,
    pub amount: Money,
    /// `transactionType.scenario`, e.g. `TRANSFER`.
    pub scenario: &'static str,
    /// `transactionType.initiator`: `PAYER` or `PAYEE`.
    pub initiator: &'static str,
    /// `authenticationType` (`OTP` or `QRCODE`), when given.
    pub authentication_type: Option<&'static str>,
    pub expiration_ms: Option<i64>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `POST /transactionRequests` body
/// (TransactionRequestsPostRequest). Required: `transactionRequestId`
/// (CorrelationId), `payee` (Party), `payer` (PartyIdInfo), `amount`
/// (Money), `transactionType`. Optional, checked when present: `note`,
/// `geoCode`, `authenticationType`, `expiration`, `extensionList`. Unknown
/// properties are ignored.
pub fn parse_transaction_request_post(
    body: &[u8],
) -> Result<ParsedTransactionRequestPost, FspiopError> {
    let raw: TransactionRequestPostRaw<'_> = parse_object(body)?;

    let transaction_request_id = correlation_id_field(
        &raw.transaction_request_id,
        FieldPath::new("transactionRequestId"),
    )?;
    let payee = party(&raw.payee, FieldPath::new("payee"))?;
    let payer = party_id_info(&raw.payer, FieldPath::new("payer"))?;
    let amount = money(&raw.amount, FieldPath::new("amount"))?;
    let (scenario, initiator, _) =
        transaction_type(&raw.transaction_type, FieldPath::new("transactionType"))?;
    optional_text(&raw.note, FieldPath::new("note"), TEXT_MAX_CHARS)?;
    check_geo_code(&raw.geo_code, FieldPath::new("geoCode"))?;
    let authentication_type = match &raw.authentication_type {
        JsonStr::Absent => None,
        other => Some(one_of(
            other,
            FieldPath::new("authenticationType"),
            AUTHENTICATION_TYPES,
        )?),
    };
    let expiration_ms = optional_date_time(&raw.expiration, FieldPath::new("expiration"))?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;

    Ok(ParsedTransactionRequestPost {
        transaction_request_id,
        payee,
        payer,
        amount,
        scenario,
        initiator,
        authentication_type,
        expiration_ms,
        request_hash: RequestHash::of(body),
    })
}

// -------------------------------------------------------------------- PUT

/// A checked `PUT /transactionRequests/{ID}` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedTransactionRequestPut {
    /// `transactionId`, once the payer FSP has started the transaction.
    pub transaction_id: Option<TransferId>,
    /// `transactionRequestState`: `RECEIVED`, `PENDING`, `ACCEPTED` or
    /// `REJECTED`.
    pub state: &'static str,
}

/// Parses and checks a `PUT /transactionRequests/{ID}` body
/// (TransactionRequestsIDPutResponse): `transactionId` optional
/// (CorrelationId), `transactionRequestState` required, `extensionList`
/// optional. Unknown properties are ignored.
pub fn parse_transaction_request_put(
    body: &[u8],
) -> Result<ParsedTransactionRequestPut, FspiopError> {
    let raw: TransactionRequestPutRaw<'_> = parse_object(body)?;
    let transaction_id =
        optional_correlation_id(&raw.transaction_id, FieldPath::new("transactionId"))?;
    let state = one_of(
        &raw.transaction_request_state,
        FieldPath::new("transactionRequestState"),
        TRANSACTION_REQUEST_STATES,
    )?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;
    Ok(ParsedTransactionRequestPut {
        transaction_id,
        state,
    })
}

// --------------------------------------------------------- authorizations

/// A checked `PUT /authorizations/{ID}` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedAuthorizationPut {
    /// `responseType`, as sent: FSPIOP lists `ENTERED`, `REJECTED` and
    /// `RESEND`, but transaction-requests-service's schema takes any
    /// string and passes it on (the Testing Toolkit's golden path checks
    /// that an unknown one is answered 200): the payee FSP that asked
    /// judges it.
    pub response_type: String,
    /// `authenticationInfo.authentication`, when given.
    pub authentication: Option<&'static str>,
}

/// Parses and checks a `PUT /authorizations/{ID}` body
/// (AuthorizationsIDPutResponse): `authenticationInfo` optional (then its
/// `authentication`, OTP or QRCODE, and `authenticationValue`, 1-64
/// characters without white space, are required), `responseType` a
/// required string (any value, see [`ParsedAuthorizationPut`]). Unknown
/// properties are ignored.
pub fn parse_authorization_put(body: &[u8]) -> Result<ParsedAuthorizationPut, FspiopError> {
    let raw: AuthorizationPutRaw<'_> = parse_object(body)?;
    let info_path = FieldPath::new("authenticationInfo");
    let authentication = match optional_obj(&raw.authentication_info, info_path)? {
        None => None,
        Some(info) => {
            let authentication = one_of(
                &info.authentication,
                Child(info_path, "authentication"),
                AUTHENTICATION_TYPES,
            )?;
            let value_path = Child(info_path, "authenticationValue");
            let value = required_str(&info.authentication_value, value_path)?;
            if !is_authentication_value(value) {
                return Err(FspiopError::invalid(
                    value_path,
                    "must be 1 to 64 characters without white space",
                ));
            }
            Some(authentication)
        }
    };
    let response_type = required_str(&raw.response_type, FieldPath::new("responseType"))?;
    Ok(ParsedAuthorizationPut {
        response_type: response_type.to_owned(),
        authentication,
    })
}

fn is_authentication_value(text: &str) -> bool {
    !text.is_empty()
        && text.chars().count() <= AUTHENTICATION_VALUE_MAX_CHARS
        && !text.chars().any(char::is_whitespace)
}

/// The checked query of a `GET /authorizations/{ID}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedAuthorizationQuery {
    /// `authenticationType`: `OTP` or `QRCODE`.
    pub authentication_type: &'static str,
    /// `retriesLeft`: retries before the payer FSP rejects the transaction.
    pub retries_left: i64,
    /// `amount` in `currency`.
    pub amount: Money,
}

const QUERY_KEYS: [&str; 4] = ["authenticationType", "retriesLeft", "amount", "currency"];

/// Checks the query string of `GET /authorizations/{ID}` (without the
/// `?`), as Mojaloop's transaction-requests-service does: all four keys
/// required (3102 naming the first missing), `authenticationType` OTP or
/// QRCODE, `amount` an Amount and `currency` a Currency (3100 otherwise),
/// `retriesLeft` an integer (3101 otherwise, a JSON-type fault in
/// Mojaloop's validator). A key given twice, or a value that does not
/// percent-decode to UTF-8, is 3101. Other keys are ignored.
pub fn parse_authorization_query(
    query: Option<&str>,
) -> Result<ParsedAuthorizationQuery, FspiopError> {
    let mut values: [Option<String>; 4] = Default::default();
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode_query_component(key)
            .ok_or_else(|| FspiopError::malformed("query string", "not percent-encoded UTF-8"))?;
        let Some(slot) = QUERY_KEYS.iter().position(|known| *known == key) else {
            continue;
        };
        let name = QueryParameter(QUERY_KEYS[slot]);
        let value = decode_query_component(value)
            .ok_or_else(|| FspiopError::malformed(name, "not percent-encoded UTF-8"))?;
        if values[slot].replace(value).is_some() {
            return Err(FspiopError::malformed(name, "given more than once"));
        }
    }
    let [authentication_type, retries_left, amount, currency_text] = values;
    let present = |value: Option<String>, slot: usize| {
        value
            .filter(|value| !value.is_empty())
            .ok_or_else(|| FspiopError::missing(QueryParameter(QUERY_KEYS[slot])))
    };

    let authentication_type = present(authentication_type, 0)?;
    let authentication_type = AUTHENTICATION_TYPES
        .iter()
        .copied()
        .find(|known| *known == authentication_type)
        .ok_or_else(|| {
            FspiopError::invalid(QueryParameter(QUERY_KEYS[0]), "must be one of OTP, QRCODE")
        })?;
    let retries_left = present(retries_left, 1)?;
    let retries_left = parse_integer(&retries_left)
        .ok_or_else(|| FspiopError::malformed(QueryParameter(QUERY_KEYS[1]), "not an integer"))?;
    let amount = present(amount, 2)?;
    let amount = Amount::parse_fspiop(&amount)
        .map_err(|error| FspiopError::invalid(QueryParameter(QUERY_KEYS[2]), error))?;
    let currency_text = present(currency_text, 3)?;
    let currency = currency(&currency_text, QueryParameter(QUERY_KEYS[3]))?;

    Ok(ParsedAuthorizationQuery {
        authentication_type,
        retries_left,
        amount: Money { amount, currency },
    })
}

/// `query parameter {name}`, as error descriptions name it.
#[derive(Clone, Copy)]
struct QueryParameter(&'static str);

impl std::fmt::Display for QueryParameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "query parameter {}", self.0)
    }
}

/// An optionally signed decimal integer that fits an `i64` (Mojaloop's
/// `type: integer`, not the stricter FSPIOP `Integer` pattern).
fn parse_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// One `application/x-www-form-urlencoded` component: `+` is a space,
/// `%XX` a byte; the bytes must be UTF-8.
fn decode_query_component(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(at + 1..at + 3)?;
                let high = char::from(hex[0]).to_digit(16)?;
                let low = char::from(hex[1]).to_digit(16)?;
                out.push((high * 16 + low) as u8);
                at += 2;
            }
            byte => out.push(byte),
        }
        at += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_error, bytes, remove, set};
    use ledger::Currency;
    use serde_json::{json, Value};

    const REQUEST_ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";
    const TRANSACTION_ID: &str = "a8323bc6-c228-4df2-ae82-e5a997baf899";

    /// A merchant's request to pay, as in the v1.1 text's example.
    fn post_json() -> Value {
        json!({
            "transactionRequestId": REQUEST_ID,
            "payee": {
                "partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "27713803912", "fspId": "payeefsp"},
                "name": "Merchant"
            },
            "payer": {"partyIdType": "MSISDN", "partyIdentifier": "44123456789", "fspId": "payerfsp"},
            "amount": {"amount": "100", "currency": "USD"},
            "transactionType": {"scenario": "PAYMENT", "initiator": "PAYEE", "initiatorType": "BUSINESS"}
        })
    }

    fn full_post_json() -> Value {
        let mut value = post_json();
        value["note"] = json!("Invoice 42");
        value["geoCode"] = json!({"latitude": "+45.4215", "longitude": "+75.6972"});
        value["authenticationType"] = json!("OTP");
        value["expiration"] = json!("2016-05-24T08:38:08.699-04:00");
        value["extensionList"] = json!({"extension": [{"key": "k", "value": "v"}]});
        value
    }

    fn post_error(value: &Value) -> FspiopError {
        parse_transaction_request_post(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn a_transaction_request_parses() {
        let body = bytes(&post_json());
        let parsed = parse_transaction_request_post(&body).unwrap();
        assert_eq!(
            parsed.transaction_request_id,
            TransferId::parse(REQUEST_ID).unwrap()
        );
        assert_eq!(parsed.payee.fsp.unwrap().as_str(), "payeefsp");
        assert_eq!(parsed.payer.fsp.unwrap().as_str(), "payerfsp");
        assert_eq!(parsed.payer.key.identifier, "44123456789");
        assert_eq!(parsed.amount.currency, Currency::parse("USD").unwrap());
        assert_eq!((parsed.scenario, parsed.initiator), ("PAYMENT", "PAYEE"));
        assert_eq!(parsed.authentication_type, None);
        assert_eq!(parsed.request_hash, RequestHash::of(&body));

        let mut value = full_post_json();
        value["unknown"] = json!({"deep": [1]});
        value["payer"]["extra"] = json!(true);
        let parsed = parse_transaction_request_post(&bytes(&value)).unwrap();
        assert_eq!(parsed.authentication_type, Some("OTP"));
        assert_eq!(
            parsed.expiration_ms,
            Some(1_464_079_088_699 + 4 * 3_600_000)
        );
    }

    #[test]
    fn transaction_request_faults_name_their_field() {
        for path in [
            "transactionRequestId",
            "payee",
            "payer",
            "amount",
            "transactionType",
            "payee.partyIdInfo",
            "payer.partyIdType",
            "payer.partyIdentifier",
            "amount.currency",
            "transactionType.initiatorType",
            "geoCode.latitude",
            "extensionList.extension",
        ] {
            let mut value = full_post_json();
            remove(&mut value, path);
            assert_error(&post_error(&value), 3102, path);
        }
        for path in [
            "transactionRequestId",
            "payee",
            "payer",
            "payer.fspId",
            "amount",
            "transactionType",
            "note",
            "geoCode",
            "authenticationType",
            "expiration",
            "extensionList",
        ] {
            for wrong in [json!(null), json!(7), json!([])] {
                let mut value = full_post_json();
                set(&mut value, path, wrong);
                assert_error(&post_error(&value), 3101, path);
            }
        }
        for (path, bad) in [
            ("transactionRequestId", json!("not-a-uuid")),
            ("payee.partyIdInfo.partyIdType", json!("PHONE")),
            ("payer.partyIdType", json!("msisdn")),
            ("payer.partyIdentifier", json!("")),
            ("amount.amount", json!("1.00")),
            ("amount.currency", json!("usd")),
            ("transactionType.scenario", json!("GIFT")),
            ("note", json!("")),
            ("geoCode.longitude", json!("181")),
            ("authenticationType", json!("U2F")),
            ("authenticationType", json!("otp")),
            ("expiration", json!("2016-05-24")),
        ] {
            let mut value = full_post_json();
            set(&mut value, path, bad);
            assert_error(&post_error(&value), 3100, path);
        }
        // Schema order: payee comes before amount.
        let mut value = post_json();
        value["amount"] = json!(1);
        remove(&mut value, "payee");
        assert_error(&post_error(&value), 3102, "payee");
        assert_error(
            &parse_transaction_request_post(b"").unwrap_err(),
            3102,
            "body",
        );
        assert_error(
            &parse_transaction_request_post(b"[]").unwrap_err(),
            3101,
            "body",
        );
    }

    #[test]
    fn a_transaction_request_answer_parses_and_is_checked() {
        let parsed =
            parse_transaction_request_put(br#"{"transactionRequestState":"RECEIVED"}"#).unwrap();
        assert_eq!(parsed.state, "RECEIVED");
        assert_eq!(parsed.transaction_id, None);
        let body = json!({
            "transactionId": TRANSACTION_ID,
            "transactionRequestState": "ACCEPTED",
            "extensionList": {"extension": [{"key": "k", "value": "v"}]},
            "other": 1
        });
        let parsed = parse_transaction_request_put(&bytes(&body)).unwrap();
        assert_eq!(parsed.state, "ACCEPTED");
        assert_eq!(parsed.transaction_id, TransferId::parse(TRANSACTION_ID));

        let put_error = |value: &Value| parse_transaction_request_put(&bytes(value)).unwrap_err();
        assert_error(
            &put_error(&json!({"transactionId": TRANSACTION_ID})),
            3102,
            "transactionRequestState",
        );
        assert_error(
            &put_error(&json!({"transactionRequestState": "DONE"})),
            3100,
            "transactionRequestState",
        );
        assert_error(
            &put_error(&json!({"transactionRequestState": 1})),
            3101,
            "transactionRequestState",
        );
        assert_error(
            &put_error(&json!({"transactionId": "x", "transactionRequestState": "DONE"})),
            3100,
            "transactionId",
        );
        assert_error(
            &put_error(&json!({"transactionRequestState": "PENDING", "extensionList": {}})),
            3102,
            "extensionList.extension",
        );
    }

    #[test]
    fn an_authorization_answer_parses_and_is_checked() {
        let parsed = parse_authorization_put(br#"{"responseType":"REJECTED"}"#).unwrap();
        assert_eq!(parsed.response_type, "REJECTED");
        assert_eq!(parsed.authentication, None);
        let parsed = parse_authorization_put(
            br#"{"authenticationInfo":{"authentication":"QRCODE","authenticationValue":"a1b2-c3"},"responseType":"ENTERED"}"#,
        )
        .unwrap();
        assert_eq!(parsed.authentication, Some("QRCODE"));

        let error = |value: Value| parse_authorization_put(&bytes(&value)).unwrap_err();
        let info = |authentication: Value, value: Value| {
            json!({
                "authenticationInfo": {"authentication": authentication, "authenticationValue": value},
                "responseType": "ENTERED"
            })
        };
        assert_error(&error(json!({})), 3102, "responseType");
        assert_error(&error(json!({"responseType": 1})), 3101, "responseType");
        // Any string, as transaction-requests-service takes it.
        let parsed = parse_authorization_put(br#"{"responseType":"WHAT"}"#).unwrap();
        assert_eq!(parsed.response_type, "WHAT");
        assert_error(
            &error(json!({"authenticationInfo": [], "responseType": "ENTERED"})),
            3101,
            "authenticationInfo",
        );
        assert_error(
            &error(
                json!({"authenticationInfo": {"authenticationValue": "1234"}, "responseType": "ENTERED"}),
            ),
            3102,
            "authenticationInfo.authentication",
        );
        assert_error(
            &error(info(json!("PIN"), json!("1234"))),
            3100,
            "authenticationInfo.authentication",
        );
        for bad in [json!(""), json!("12 34"), json!("x".repeat(65))] {
            assert_error(
                &error(info(json!("OTP"), bad)),
                3100,
                "authenticationInfo.authenticationValue",
            );
        }
        assert_error(
            &error(info(json!("OTP"), json!(1234))),
            3101,
            "authenticationInfo.authenticationValue",
        );
        assert!(
            parse_authorization_put(&bytes(&info(json!("OTP"), json!("x".repeat(64))))).is_ok()
        );
    }

    #[test]
    fn the_authorization_query_needs_its_four_keys() {
        let parsed = parse_authorization_query(Some(
            "authenticationType=OTP&retriesLeft=2&amount=102&currency=USD",
        ))
        .unwrap();
        assert_eq!(parsed.authentication_type, "OTP");
        assert_eq!(parsed.retries_left, 2);
        assert_eq!(parsed.amount.amount, Amount::from_whole(102));
        assert_eq!(parsed.amount.currency, Currency::parse("USD").unwrap());
        // Any order, percent-encoding, unknown keys ignored.
        let parsed = parse_authorization_query(Some(
            "x=1&currency=USD&amount=1%2E5&retriesLeft=0&authenticationType=QR%43ODE&",
        ))
        .unwrap();
        assert_eq!(parsed.authentication_type, "QRCODE");
        assert_eq!(parsed.amount.amount, Amount::from_units(15_000));

        let full = "authenticationType=OTP&retriesLeft=2&amount=102&currency=USD";
        for (index, key) in QUERY_KEYS.iter().enumerate() {
            let without: Vec<&str> = full
                .split('&')
                .enumerate()
                .filter(|(at, _)| *at != index)
                .map(|(_, pair)| pair)
                .collect();
            let error = parse_authorization_query(Some(&without.join("&"))).unwrap_err();
            assert_error(&error, 3102, &format!("query parameter {key}"));
            let emptied = full.replace(&format!("{key}="), &format!("{key}=&was="));
            let error = parse_authorization_query(Some(&emptied)).unwrap_err();
            assert_error(&error, 3102, &format!("query parameter {key}"));
        }
        assert_error(
            &parse_authorization_query(None).unwrap_err(),
            3102,
            "query parameter authenticationType",
        );
        for (query, code, key) in [
            ("authenticationType=PIN", 3100, "authenticationType"),
            ("authenticationType=U2F", 3100, "authenticationType"),
            ("retriesLeft=two", 3101, "retriesLeft"),
            ("retriesLeft=1.5", 3101, "retriesLeft"),
            ("amount=1.50", 3100, "amount"),
            ("amount=-1", 3100, "amount"),
            ("currency=usd", 3100, "currency"),
            ("currency=XYZ", 3100, "currency"),
            ("amount=5&amount=5", 3101, "amount"),
            ("amount=%E2%82", 3101, "amount"),
        ] {
            let key_of = |pair: &str| pair.split('=').next().unwrap().to_string();
            let kept: Vec<&str> = full.split('&').filter(|pair| key_of(pair) != key).collect();
            let query = format!("{}&{query}", kept.join("&"));
            let error = parse_authorization_query(Some(&query)).unwrap_err();
            assert_error(&error, code, &format!("query parameter {key}"));
        }
        assert_error(
            &parse_authorization_query(Some("%zz=1")).unwrap_err(),
            3101,
            "query string",
        );
    }
}
