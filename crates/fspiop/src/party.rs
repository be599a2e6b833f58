//! Party identifiers: FSPIOP's `PartyIdType`, the `{Type}/{ID}[/{SubId}]`
//! path parameters of `/parties` and `/participants`, and the
//! `PartyIdInfo` object (read from bodies and written into callbacks).

use crate::json::{self, JsonObj, JsonStr};
use crate::schema::{
    is_fspiop_date, is_merchant_classification_code, is_name, optional_pattern, optional_text,
    Child,
};
use crate::transfers::{
    bounded_text, check_extension_list, fsp_id, optional_obj, parse_object, required_obj,
    required_str, ExtensionListRaw, FieldPath,
};
use crate::FspiopError;
use ledger::{FspName, PartyKey};
use serde::Deserialize;
use std::fmt;

/// FSPIOP's `PartyIdentifier` maxLength.
pub const PARTY_IDENTIFIER_MAX_CHARS: usize = 128;
/// FSPIOP's `PartySubIdOrType` maxLength.
pub const PARTY_SUB_ID_MAX_CHARS: usize = 128;

/// FSPIOP's `PartyIdType` enumeration (v1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartyIdType {
    Msisdn,
    Email,
    PersonalId,
    Business,
    Device,
    AccountId,
    Iban,
    Alias,
}

impl PartyIdType {
    /// Every value, in the schema's order.
    pub const ALL: [PartyIdType; 8] = [
        PartyIdType::Msisdn,
        PartyIdType::Email,
        PartyIdType::PersonalId,
        PartyIdType::Business,
        PartyIdType::Device,
        PartyIdType::AccountId,
        PartyIdType::Iban,
        PartyIdType::Alias,
    ];

    /// The wire spelling (`MSISDN`, `PERSONAL_ID`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            PartyIdType::Msisdn => "MSISDN",
            PartyIdType::Email => "EMAIL",
            PartyIdType::PersonalId => "PERSONAL_ID",
            PartyIdType::Business => "BUSINESS",
            PartyIdType::Device => "DEVICE",
            PartyIdType::AccountId => "ACCOUNT_ID",
            PartyIdType::Iban => "IBAN",
            PartyIdType::Alias => "ALIAS",
        }
    }

    /// Exactly one of the enumeration's values (case-sensitive).
    pub fn parse(text: &str) -> Option<PartyIdType> {
        PartyIdType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl fmt::Display for PartyIdType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const PARTY_ID_TYPE_RULE: &str =
    "must be one of MSISDN, EMAIL, PERSONAL_ID, BUSINESS, DEVICE, ACCOUNT_ID, IBAN, ALIAS";

/// The path parameter `{Type}`: one of [`PartyIdType`]'s values, else 3101
/// naming `path parameter Type` (as for a malformed path `{ID}`).
pub fn parse_party_id_type(text: &str) -> Result<PartyIdType, FspiopError> {
    PartyIdType::parse(text)
        .ok_or_else(|| FspiopError::malformed("path parameter Type", PARTY_ID_TYPE_RULE))
}

fn check_path_text(text: &str, name: &str, max: usize) -> Result<(), FspiopError> {
    if text.is_empty() || !json::char_len_at_most(text, max) {
        return Err(FspiopError::malformed(
            format_args!("path parameter {name}"),
            format_args!("must be 1 to {max} characters"),
        ));
    }
    if is_url_syntax(text) {
        return Err(FspiopError::malformed(
            format_args!("path parameter {name}"),
            URL_SYNTAX_RULE,
        ));
    }
    Ok(())
}

const URL_SYNTAX_RULE: &str =
    "must not contain '/', '?', '#' or control characters, nor be '.' or '..'";

/// Whether a decoded path value would act as URL syntax if it were put
/// back into a URL: a `/`, `?` or `#` (a new segment, a query, a
/// fragment), a dot segment (`.`/`..`, which URL parsers resolve even when
/// percent-encoded, so no encoding makes them safe), or a control
/// character (CR/LF and NUL split log lines and headers). The router
/// percent-decodes `%2F`, `%3F`, `%23`, `%0D%0A`, so they arrive here
/// decoded. FSPIOP gives `PartyIdentifier` no pattern; no real identifier
/// (MSISDN, e-mail, IBAN, alias) needs any of these.
pub fn is_url_syntax(text: &str) -> bool {
    text == "."
        || text == ".."
        || text
            .chars()
            .any(|c| matches!(c, '/' | '?' | '#') || c.is_control())
}

/// The path parameter `{ID}` of a party (`PartyIdentifier`): 1-128
/// characters (after percent-decoding), and no URL syntax (see
/// [`is_url_syntax`]), else 3101 naming `path parameter ID`.
pub fn check_party_identifier(text: &str) -> Result<(), FspiopError> {
    check_path_text(text, "ID", PARTY_IDENTIFIER_MAX_CHARS)
}

/// The path parameter `{SubId}` (`PartySubIdOrType`): 1-128 characters
/// and no URL syntax, else 3101 naming `path parameter SubId`.
pub fn check_party_sub_id(text: &str) -> Result<(), FspiopError> {
    check_path_text(text, "SubId", PARTY_SUB_ID_MAX_CHARS)
}

/// Checks the path parameters `{Type}/{ID}[/{SubId}]` of a `/parties` or
/// `/participants` request (see [`parse_party_id_type`],
/// [`check_party_identifier`], [`check_party_sub_id`]) and returns the
/// party they name. [`PartyKey`] is the ledger's (the registry's key); its
/// `id_type` is then the canonical spelling of a [`PartyIdType`].
pub fn parse_party_key(
    id_type: &str,
    identifier: &str,
    sub_id: Option<&str>,
) -> Result<PartyKey, FspiopError> {
    let id_type = parse_party_id_type(id_type)?;
    check_party_identifier(identifier)?;
    if let Some(sub_id) = sub_id {
        check_party_sub_id(sub_id)?;
    }
    Ok(PartyKey {
        id_type: id_type.as_str().to_owned(),
        identifier: identifier.to_owned(),
        sub_id: sub_id.map(str::to_owned),
    })
}

/// A checked `PartyIdInfo` object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParsedPartyIdInfo {
    /// `partyIdType`, `partyIdentifier` and `partySubIdOrType`.
    pub key: PartyKey,
    /// `fspId`, when given.
    pub fsp: Option<FspName>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct PartyIdInfoRaw<'a> {
    #[serde(borrow)]
    party_id_type: JsonStr<'a>,
    #[serde(borrow)]
    party_identifier: JsonStr<'a>,
    #[serde(borrow)]
    party_sub_id_or_type: JsonStr<'a>,
    #[serde(borrow)]
    fsp_id: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

/// A required `PartyIdInfo` object at `path`, checked in schema order.
pub(crate) fn party_id_info(
    value: &JsonObj<PartyIdInfoRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<ParsedPartyIdInfo, FspiopError> {
    let raw = required_obj(value, path)?;
    let type_path = Child(path, "partyIdType");
    let id_type = PartyIdType::parse(required_str(&raw.party_id_type, type_path)?)
        .ok_or_else(|| FspiopError::invalid(type_path, PARTY_ID_TYPE_RULE))?;
    let identifier = bounded_text(
        &raw.party_identifier,
        Child(path, "partyIdentifier"),
        PARTY_IDENTIFIER_MAX_CHARS,
    )?;
    let sub_id = optional_text(
        &raw.party_sub_id_or_type,
        Child(path, "partySubIdOrType"),
        PARTY_SUB_ID_MAX_CHARS,
    )?;
    let fsp = match &raw.fsp_id {
        JsonStr::Absent => None,
        other => Some(fsp_id(other, Child(path, "fspId"))?),
    };
    check_extension_list(&raw.extension_list, Child(path, "extensionList"))?;
    Ok(ParsedPartyIdInfo {
        key: PartyKey {
            id_type: id_type.as_str().to_owned(),
            identifier: identifier.to_owned(),
            sub_id: sub_id.map(str::to_owned),
        },
        fsp,
    })
}

// ------------------------------------------------------------------ Party

/// FSPIOP's `PartyName` maxLength.
const PARTY_NAME_MAX_CHARS: usize = 128;

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ComplexNameRaw<'a> {
    #[serde(borrow)]
    first_name: JsonStr<'a>,
    #[serde(borrow)]
    middle_name: JsonStr<'a>,
    #[serde(borrow)]
    last_name: JsonStr<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct PersonalInfoRaw<'a> {
    #[serde(borrow)]
    complex_name: JsonObj<ComplexNameRaw<'a>>,
    #[serde(borrow)]
    date_of_birth: JsonStr<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct PartyRaw<'a> {
    #[serde(borrow)]
    party_id_info: JsonObj<PartyIdInfoRaw<'a>>,
    #[serde(borrow)]
    merchant_classification_code: JsonStr<'a>,
    #[serde(borrow)]
    name: JsonStr<'a>,
    #[serde(borrow)]
    personal_info: JsonObj<PersonalInfoRaw<'a>>,
}

/// A required `Party` at `path` (`payee` or `payer`): `partyIdInfo`, then
/// the optional `merchantClassificationCode`, `name`, `personalInfo`.
pub(crate) fn party(
    value: &JsonObj<PartyRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<ParsedPartyIdInfo, FspiopError> {
    let raw = required_obj(value, path)?;
    let info = party_id_info(&raw.party_id_info, Child(path, "partyIdInfo"))?;
    optional_pattern(
        &raw.merchant_classification_code,
        Child(path, "merchantClassificationCode"),
        is_merchant_classification_code,
        "must be 1 to 4 digits",
    )?;
    optional_text(&raw.name, Child(path, "name"), PARTY_NAME_MAX_CHARS)?;
    let info_path = Child(path, "personalInfo");
    if let Some(personal) = optional_obj(&raw.personal_info, info_path)? {
        let name_path = Child(info_path, "complexName");
        if let Some(names) = optional_obj(&personal.complex_name, name_path)? {
            for (value, leaf) in [
                (&names.first_name, "firstName"),
                (&names.middle_name, "middleName"),
                (&names.last_name, "lastName"),
            ] {
                optional_pattern(
                    value,
                    Child(name_path, leaf),
                    is_name,
                    "not a Name (1 to 128 letters, digits, spaces and . , ' - _)",
                )?;
            }
        }
        optional_pattern(
            &personal.date_of_birth,
            Child(info_path, "dateOfBirth"),
            is_fspiop_date,
            "not a Date (YYYY-MM-DD)",
        )?;
    }
    Ok(info)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PartyPutRaw<'a> {
    #[serde(borrow)]
    party: JsonObj<PartyRaw<'a>>,
}

/// Checks a `PUT /parties/{Type}/{ID}[/{SubId}]` body
/// (PartiesTypeIDPutResponse): `{party: Party}`, the Party's `partyIdInfo`
/// required, its `merchantClassificationCode`, `name` and `personalInfo`
/// (`complexName`, `dateOfBirth`) checked when present. Returns the
/// party's `partyIdInfo`. Unknown properties are ignored.
pub fn check_party_put(body: &[u8]) -> Result<ParsedPartyIdInfo, FspiopError> {
    let raw: PartyPutRaw<'_> = parse_object(body)?;
    party(&raw.party, FieldPath::new("party"))
}

/// Appends a `PartyIdInfo` object: `{"partyIdType":..,"partyIdentifier":..,
/// "partySubIdOrType":..,"fspId":..}`, the last two only when given.
pub(crate) fn push_party_id_info(out: &mut Vec<u8>, key: &PartyKey, fsp: Option<&FspName>) {
    out.extend_from_slice(b"{\"partyIdType\":");
    json::push_str(out, &key.id_type);
    out.extend_from_slice(b",\"partyIdentifier\":");
    json::push_str(out, &key.identifier);
    if let Some(sub_id) = &key.sub_id {
        out.extend_from_slice(b",\"partySubIdOrType\":");
        json::push_str(out, sub_id);
    }
    if let Some(fsp) = fsp {
        out.extend_from_slice(b",\"fspId\":");
        json::push_str(out, fsp.as_str());
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::ErrorCode;

    #[test]
    fn party_id_types_round_trip() {
        for id_type in PartyIdType::ALL {
            assert_eq!(PartyIdType::parse(id_type.as_str()), Some(id_type));
            assert_eq!(parse_party_id_type(id_type.as_str()), Ok(id_type));
            assert_eq!(id_type.to_string(), id_type.as_str());
        }
        assert_eq!(
            PartyIdType::ALL.map(PartyIdType::as_str),
            [
                "MSISDN",
                "EMAIL",
                "PERSONAL_ID",
                "BUSINESS",
                "DEVICE",
                "ACCOUNT_ID",
                "IBAN",
                "ALIAS"
            ]
        );
        for bad in [
            "",
            "msisdn",
            "PHONE",
            "MSISDN ",
            "CONSENT",
            "THIRD_PARTY_LINK",
        ] {
            let error = parse_party_id_type(bad).unwrap_err();
            assert_eq!(error.code, ErrorCode::MALFORMED_SYNTAX, "{bad}");
            assert!(error.description.contains("path parameter Type"));
        }
    }

    #[test]
    fn path_values_that_would_be_url_syntax_are_refused() {
        // What the router hands over after decoding `..%2F`, `%2F`, `%3F`,
        // `%23`, `%0D%0A`, `%00`, `%1B`, `%7F`.
        for bad in [
            "../x",
            "..",
            ".",
            "a/b",
            "/",
            "a?b=1",
            "a#frag",
            "a\r\nb",
            "a\0",
            "\u{1b}[31m",
            "a\u{7f}",
            "a\u{85}",
            "\t",
        ] {
            assert!(is_url_syntax(bad), "{bad:?}");
            let error = check_party_identifier(bad).unwrap_err();
            assert_error(&error, 3101, "path parameter ID");
            assert!(error.description.contains("must not contain"), "{error:?}");
            let error = check_party_sub_id(bad).unwrap_err();
            assert_error(&error, 3101, "path parameter SubId");
        }
        // Data that merely looks special is allowed: FSPIOP gives
        // PartyIdentifier no pattern.
        for good in [
            "+16135551212",
            "bob@example.org",
            "bob the builder",
            "a.b",
            "...",
            ".x",
            "x..",
            "50%",
            "a&b=c;d",
            "é",
        ] {
            assert!(!is_url_syntax(good), "{good:?}");
            assert!(check_party_identifier(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn path_texts_are_bounded() {
        assert!(check_party_identifier("16135551212").is_ok());
        assert!(check_party_identifier(&"é".repeat(128)).is_ok());
        assert!(check_party_sub_id("PASSPORT").is_ok());
        for (result, name) in [
            (check_party_identifier(""), "path parameter ID"),
            (
                check_party_identifier(&"x".repeat(129)),
                "path parameter ID",
            ),
            (check_party_sub_id(""), "path parameter SubId"),
            (check_party_sub_id(&"x".repeat(129)), "path parameter SubId"),
        ] {
            let error = result.unwrap_err();
            assert_eq!(error.code, ErrorCode::MALFORMED_SYNTAX);
            assert!(error.description.contains(name), "{}", error.description);
        }
    }

    #[test]
    fn party_keys() {
        let key = parse_party_key("MSISDN", "16135551212", None).unwrap();
        assert_eq!(key.to_string(), "MSISDN/16135551212");
        let key = parse_party_key("PERSONAL_ID", "123", Some("PASSPORT")).unwrap();
        assert_eq!(key.id_type, PartyIdType::PersonalId.as_str());
        assert_eq!(key.sub_id.as_deref(), Some("PASSPORT"));
        assert_eq!(key.to_string(), "PERSONAL_ID/123/PASSPORT");
        assert!(parse_party_key("PHONE", "1", None).is_err());
        assert!(parse_party_key("MSISDN", "", None).is_err());
        assert!(parse_party_key("MSISDN", "1", Some("")).is_err());
    }

    #[test]
    fn party_id_info_is_written() {
        let key = parse_party_key("PERSONAL_ID", "a\"b", Some("PASSPORT")).unwrap();
        let fsp = FspName::new("payeefsp").unwrap();
        let mut out = Vec::new();
        push_party_id_info(&mut out, &key, Some(&fsp));
        assert_eq!(
            out,
            br#"{"partyIdType":"PERSONAL_ID","partyIdentifier":"a\"b","partySubIdOrType":"PASSPORT","fspId":"payeefsp"}"#
        );
        let mut out = Vec::new();
        let key = parse_party_key("MSISDN", "1", None).unwrap();
        push_party_id_info(&mut out, &key, None);
        assert_eq!(out, br#"{"partyIdType":"MSISDN","partyIdentifier":"1"}"#);
    }

    fn assert_error(error: &FspiopError, code: u16, path: &str) {
        assert_eq!(error.code, ErrorCode(code), "{}", error.description);
        assert!(
            error.description.contains(&format!(" - {path}")),
            "{} should name {path}",
            error.description
        );
    }

    fn party_put_json() -> serde_json::Value {
        serde_json::json!({
            "party": {
                "partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "16135551212",
                                "fspId": "payeefsp"},
                "merchantClassificationCode": "4321",
                "name": "Henrik Karlsson",
                "personalInfo": {
                    "complexName": {"firstName": "Henrik", "middleName": "Johannes",
                                    "lastName": "Karlsson"},
                    "dateOfBirth": "1966-06-16"
                }
            }
        })
    }

    #[test]
    fn a_party_put_parses() {
        let mut value = party_put_json();
        value["party"]["supportedCurrencies"] = serde_json::json!(["USD"]);
        value["extra"] = serde_json::json!({"x": 1});
        let parsed = check_party_put(&serde_json::to_vec(&value).unwrap()).unwrap();
        assert_eq!(
            parsed.key,
            parse_party_key("MSISDN", "16135551212", None).unwrap()
        );
        assert_eq!(parsed.fsp, FspName::new("payeefsp"));
        let minimal =
            br#"{"party":{"partyIdInfo":{"partyIdType":"EMAIL","partyIdentifier":"a@b.c"}}}"#;
        assert_eq!(check_party_put(minimal).unwrap().fsp, None);
    }

    #[test]
    fn party_put_faults() {
        use serde_json::json;
        let cases: Vec<(&str, &str, serde_json::Value, u16)> = vec![
            ("partyIdInfo", "party.partyIdInfo", json!("MSISDN"), 3101),
            (
                "partyIdInfo",
                "party.partyIdInfo.partyIdType",
                json!({"partyIdentifier": "1"}),
                3102,
            ),
            (
                "merchantClassificationCode",
                "party.merchantClassificationCode",
                json!("12345"),
                3100,
            ),
            ("name", "party.name", json!(""), 3100),
            (
                "personalInfo",
                "party.personalInfo.complexName.firstName",
                json!({"complexName": {"firstName": "<script>"}}),
                3100,
            ),
            (
                "personalInfo",
                "party.personalInfo.dateOfBirth",
                json!({"dateOfBirth": "1966-02-30"}),
                3100,
            ),
            (
                "personalInfo",
                "party.personalInfo.complexName",
                json!({"complexName": []}),
                3101,
            ),
        ];
        for (field, path, bad, code) in cases {
            let mut value = party_put_json();
            value["party"][field] = bad;
            let error = check_party_put(&serde_json::to_vec(&value).unwrap()).unwrap_err();
            assert_error(&error, code, path);
        }
        assert_error(&check_party_put(b"{}").unwrap_err(), 3102, "party");
        assert_error(
            &check_party_put(br#"{"party":null}"#).unwrap_err(),
            3101,
            "party",
        );
        assert_error(
            &check_party_put(br#"{"party":{"name":"x"}}"#).unwrap_err(),
            3102,
            "party.partyIdInfo",
        );
        assert_error(&check_party_put(b"").unwrap_err(), 3102, "body");
    }
}
