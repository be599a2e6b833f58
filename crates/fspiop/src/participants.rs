//! The participant registry's bodies: `POST /participants/{Type}/{ID}[/{SubId}]`
//! (ParticipantsTypeIDSubIDPostRequest), the batch `POST /participants`
//! (ParticipantsPostRequest), and the callbacks the hub writes for them,
//! `PUT /participants/{Type}/{ID}[/{SubId}]` (ParticipantsTypeIDPutResponse)
//! and `PUT /participants/{requestId}` (ParticipantsIDPutResponse).

use crate::error::push_error_information;
use crate::json::{self, JsonArr, JsonObj, JsonStr};
use crate::party::{party_id_info, push_party_id_info, ParsedPartyIdInfo, PartyIdInfoRaw};
use crate::schema::{correlation_id_field, optional_currency, Child, Item};
use crate::transfers::{check_extension_list, fsp_id, parse_object, ExtensionListRaw, FieldPath};
use crate::FspiopError;
use ledger::{Currency, ErrorCode, FspName, PartyKey, TransferId};
use serde::Deserialize;

/// ParticipantsPostRequest's and ParticipantsIDPutResponse's `partyList`
/// bounds.
pub const PARTY_LIST_MAX_ITEMS: usize = 10_000;

// ------------------------------------------------------------ one party

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ParticipantPostRaw<'a> {
    #[serde(borrow)]
    fsp_id: JsonStr<'a>,
    #[serde(borrow)]
    currency: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

/// A checked `POST /participants/{Type}/{ID}[/{SubId}]` body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedParticipantPost {
    /// `fspId`: the FSP the party belongs to.
    pub fsp: FspName,
    pub currency: Option<Currency>,
}

/// Parses and checks a `POST /participants/{Type}/{ID}[/{SubId}]` body
/// (ParticipantsTypeIDSubIDPostRequest): `fspId` required, `currency` and
/// `extensionList` optional. Unknown properties are ignored.
pub fn parse_participant_post(body: &[u8]) -> Result<ParsedParticipantPost, FspiopError> {
    let raw: ParticipantPostRaw<'_> = parse_object(body)?;
    let fsp = fsp_id(&raw.fsp_id, FieldPath::new("fspId"))?;
    let currency = optional_currency(&raw.currency, FieldPath::new("currency"))?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;
    Ok(ParsedParticipantPost { fsp, currency })
}

// ---------------------------------------------------------------- batch

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ParticipantsBatchRaw<'a> {
    #[serde(borrow)]
    request_id: JsonStr<'a>,
    #[serde(borrow)]
    party_list: JsonArr<JsonObj<PartyIdInfoRaw<'a>>, PARTY_LIST_MAX_ITEMS>,
    #[serde(borrow)]
    currency: JsonStr<'a>,
}

/// A checked batch `POST /participants` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedParticipantsBatch {
    /// `requestId`: the `{ID}` of the `PUT /participants/{ID}` callback.
    pub request_id: TransferId,
    /// `partyList`, in the request's order (1 to 10,000 items).
    pub parties: Vec<ParsedPartyIdInfo>,
    pub currency: Option<Currency>,
}

/// Parses and checks a batch `POST /participants` body
/// (ParticipantsPostRequest): `requestId` a CorrelationId, `partyList` 1 to
/// 10,000 `PartyIdInfo` objects (`partyList[i].partyIdType` ... in error
/// descriptions), optional `currency`. Unknown properties are ignored.
///
/// Every item is checked as the schema says and no more: whether an item's
/// `fspId` matches the sender is for the caller to decide.
pub fn parse_participants_batch(body: &[u8]) -> Result<ParsedParticipantsBatch, FspiopError> {
    let raw: ParticipantsBatchRaw<'_> = parse_object(body)?;
    let request_id = correlation_id_field(&raw.request_id, FieldPath::new("requestId"))?;
    let list_path = FieldPath::new("partyList");
    let (items, len) = match &raw.party_list {
        JsonArr::Items { items, len } => (items, *len),
        JsonArr::Absent => return Err(FspiopError::missing(list_path)),
        JsonArr::Wrong(kind) => {
            return Err(FspiopError::malformed(
                list_path,
                format_args!("expected an array, found {kind}"),
            ))
        }
    };
    if len == 0 || len > PARTY_LIST_MAX_ITEMS {
        return Err(FspiopError::invalid(
            list_path,
            format_args!("must have 1 to {PARTY_LIST_MAX_ITEMS} items, has {len}"),
        ));
    }
    let parties = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let parsed = party_id_info(item, Item(list_path, index))?;
            // A registered id becomes a path value of every lookup's
            // callback: the same rule as `/participants/{Type}/{ID}`.
            let item_path = Item(list_path, index);
            if crate::party::is_url_syntax(&parsed.key.identifier) {
                return Err(FspiopError::malformed(
                    Child(item_path, "partyIdentifier"),
                    crate::party::URL_SYNTAX_RULE,
                ));
            }
            if parsed
                .key
                .sub_id
                .as_deref()
                .is_some_and(crate::party::is_url_syntax)
            {
                return Err(FspiopError::malformed(
                    Child(item_path, "partySubIdOrType"),
                    crate::party::URL_SYNTAX_RULE,
                ));
            }
            Ok(parsed)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let currency = optional_currency(&raw.currency, FieldPath::new("currency"))?;
    Ok(ParsedParticipantsBatch {
        request_id,
        parties,
        currency,
    })
}

// ------------------------------------------------------- callback bodies

/// The `PUT /participants/{Type}/{ID}[/{SubId}]` body
/// (ParticipantsTypeIDPutResponse): `{"fspId":"..."}`.
pub fn participant_put_body(fsp: &FspName) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + fsp.as_str().len());
    out.extend_from_slice(b"{\"fspId\":");
    json::push_str(&mut out, fsp.as_str());
    out.push(b'}');
    out
}

/// The `PUT /participants/{requestId}` body (ParticipantsIDPutResponse):
/// `{"partyList":[{"partyId":{PartyIdInfo},"errorInformation":{..}},..],
/// "currency":".."}`, one `PartyResult` per entry of `results` in order.
/// An entry with `None` succeeded and has no `errorInformation`; one with
/// `Some((code, description))` failed (e.g. 3003 "Add Party information
/// error"), its description cut to 128 characters as [`crate::error_body`]
/// does. The `partyId` objects carry no `fspId`; see
/// [`participants_batch_put_body_with_fsp`].
///
/// The schema requires 1 to 10,000 results (a parsed batch has that many);
/// the caller keeps to it.
pub fn participants_batch_put_body(
    results: &[(PartyKey, Option<(ErrorCode, String)>)],
    currency: Option<Currency>,
) -> Vec<u8> {
    participants_batch_put_body_with_fsp(results, None, currency)
}

/// [`participants_batch_put_body`] whose `partyId` objects also carry
/// `fspId` (the FSP the parties were registered for) when `fsp` is given.
pub fn participants_batch_put_body_with_fsp(
    results: &[(PartyKey, Option<(ErrorCode, String)>)],
    fsp: Option<&FspName>,
    currency: Option<Currency>,
) -> Vec<u8> {
    debug_assert!(
        (1..=PARTY_LIST_MAX_ITEMS).contains(&results.len()),
        "a partyList has 1 to {PARTY_LIST_MAX_ITEMS} items, not {}",
        results.len()
    );
    let mut out = Vec::with_capacity(32 + results.len() * 96);
    out.extend_from_slice(b"{\"partyList\":[");
    for (index, (key, error)) in results.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"partyId\":");
        push_party_id_info(&mut out, key, fsp);
        if let Some((code, description)) = error {
            out.extend_from_slice(b",\"errorInformation\":");
            push_error_information(&mut out, *code, description, &[]);
        }
        out.push(b'}');
    }
    out.push(b']');
    if let Some(currency) = currency {
        out.extend_from_slice(b",\"currency\":\"");
        out.extend_from_slice(currency.as_str().as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::party::PartyIdType;
    use crate::test_support::{assert_error, bytes};
    use serde_json::{json, Value};

    const ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";

    #[test]
    fn a_participant_post_parses() {
        let body = bytes(&json!({"fspId": "payeefsp", "currency": "USD",
            "extensionList": {"extension": [{"key": "k", "value": "v"}]}, "other": [1]}));
        let parsed = parse_participant_post(&body).unwrap();
        assert_eq!(parsed.fsp.as_str(), "payeefsp");
        assert_eq!(parsed.currency, Currency::parse("USD"));
        let parsed = parse_participant_post(br#"{"fspId":"payeefsp"}"#).unwrap();
        assert_eq!(parsed.currency, None);
    }

    #[test]
    fn participant_post_faults() {
        for (value, code, path) in [
            (json!({}), 3102, "fspId"),
            (json!({"currency": "USD"}), 3102, "fspId"),
            (json!({"fspId": 1234}), 3101, "fspId"),
            (json!({"fspId": null}), 3101, "fspId"),
            (json!({"fspId": ""}), 3100, "fspId"),
            (json!({"fspId": "x".repeat(33)}), 3100, "fspId"),
            (json!({"fspId": "a b"}), 3100, "fspId"),
            (json!({"fspId": "fsp", "currency": "usd"}), 3100, "currency"),
            (json!({"fspId": "fsp", "currency": 840}), 3101, "currency"),
            (
                json!({"fspId": "fsp", "extensionList": {"extension": []}}),
                3100,
                "extensionList.extension",
            ),
        ] {
            let error = parse_participant_post(&bytes(&value)).unwrap_err();
            assert_error(&error, code, path);
        }
        assert_error(&parse_participant_post(b"").unwrap_err(), 3102, "body");
        assert_error(&parse_participant_post(b"[]").unwrap_err(), 3101, "body");
    }

    fn batch_json() -> Value {
        json!({
            "requestId": ID,
            "partyList": [
                {"partyIdType": "MSISDN", "partyIdentifier": "16135551212", "fspId": "payeefsp"},
                {"partyIdType": "PERSONAL_ID", "partyIdentifier": "A1234",
                 "partySubIdOrType": "PASSPORT", "extensionList": {"extension": [{"key": "k", "value": "v"}]}}
            ],
            "currency": "XOF"
        })
    }

    #[test]
    fn a_batch_parses() {
        let mut value = batch_json();
        value["ignored"] = json!({"deep": [1]});
        value["partyList"][0]["extra"] = json!(true);
        let parsed = parse_participants_batch(&bytes(&value)).unwrap();
        assert_eq!(parsed.request_id, TransferId::parse(ID).unwrap());
        assert_eq!(parsed.currency, Currency::parse("XOF"));
        assert_eq!(parsed.parties.len(), 2);
        assert_eq!(
            parsed.parties[0],
            ParsedPartyIdInfo {
                key: PartyKey {
                    id_type: "MSISDN".into(),
                    identifier: "16135551212".into(),
                    sub_id: None
                },
                fsp: FspName::new("payeefsp"),
            }
        );
        assert_eq!(
            parsed.parties[1].key.id_type,
            PartyIdType::PersonalId.as_str()
        );
        assert_eq!(parsed.parties[1].key.sub_id.as_deref(), Some("PASSPORT"));
        assert_eq!(parsed.parties[1].fsp, None);

        let mut value = batch_json();
        value.as_object_mut().unwrap().remove("currency");
        assert_eq!(
            parse_participants_batch(&bytes(&value)).unwrap().currency,
            None
        );
    }

    #[test]
    fn batch_faults() {
        let cases: Vec<(&str, Value, u16, &str)> = vec![
            ("requestId", Value::Null, 3101, "requestId"),
            (
                "requestId",
                json!("B51EC534-EE48-4575-B6A9-EAD2955B8069"),
                3100,
                "requestId",
            ),
            ("partyList", json!({}), 3101, "partyList"),
            ("partyList", json!([]), 3100, "partyList"),
            ("partyList", json!(["MSISDN"]), 3101, "partyList[0]"),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1"}, {"partyIdentifier": "2"}]),
                3102,
                "partyList[1].partyIdType",
            ),
            (
                "partyList",
                json!([{"partyIdType": "PHONE", "partyIdentifier": "1"}]),
                3100,
                "partyList[0].partyIdType",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN"}]),
                3102,
                "partyList[0].partyIdentifier",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "x".repeat(129)}]),
                3100,
                "partyList[0].partyIdentifier",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1"}, {"partyIdType": "MSISDN", "partyIdentifier": "../admin"}]),
                3101,
                "partyList[1].partyIdentifier",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1", "partySubIdOrType": "a\r\nb"}]),
                3101,
                "partyList[0].partySubIdOrType",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1", "partySubIdOrType": ""}]),
                3100,
                "partyList[0].partySubIdOrType",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1", "fspId": 7}]),
                3101,
                "partyList[0].fspId",
            ),
            (
                "partyList",
                json!([{"partyIdType": "MSISDN", "partyIdentifier": "1",
                        "extensionList": {"extension": [{"key": "k"}]}}]),
                3102,
                "partyList[0].extensionList.extension[0].value",
            ),
            ("currency", json!("EURO"), 3100, "currency"),
        ];
        for (field, bad, code, path) in cases {
            let mut value = batch_json();
            value[field] = bad;
            let error = parse_participants_batch(&bytes(&value)).unwrap_err();
            assert_error(&error, code, path);
        }
        for field in ["requestId", "partyList"] {
            let mut value = batch_json();
            value.as_object_mut().unwrap().remove(field);
            let error = parse_participants_batch(&bytes(&value)).unwrap_err();
            assert_error(&error, 3102, field);
        }
    }

    #[test]
    fn batch_size_bounds() {
        let item = json!({"partyIdType": "MSISDN", "partyIdentifier": "1"});
        let mut value = batch_json();
        value["partyList"] = Value::Array(vec![item.clone(); PARTY_LIST_MAX_ITEMS]);
        let parsed = parse_participants_batch(&bytes(&value)).unwrap();
        assert_eq!(parsed.parties.len(), PARTY_LIST_MAX_ITEMS);
        value["partyList"] = Value::Array(vec![item; PARTY_LIST_MAX_ITEMS + 1]);
        let error = parse_participants_batch(&bytes(&value)).unwrap_err();
        assert_error(&error, 3100, "partyList");
        assert!(
            error.description.contains("has 10001"),
            "{}",
            error.description
        );
    }

    #[test]
    fn put_bodies() {
        let fsp = FspName::new("payeefsp").unwrap();
        assert_eq!(participant_put_body(&fsp), br#"{"fspId":"payeefsp"}"#);

        let ok = crate::parse_party_key("MSISDN", "16135551212", None).unwrap();
        let failed = crate::parse_party_key("PERSONAL_ID", "A1", Some("PASSPORT")).unwrap();
        let results = vec![
            (ok.clone(), None),
            (
                failed.clone(),
                Some((ErrorCode(3003), "Add Party information error".to_string())),
            ),
        ];
        let body = participants_batch_put_body(&results, Currency::parse("USD"));
        assert_eq!(
            String::from_utf8(body).unwrap(),
            concat!(
                r#"{"partyList":[{"partyId":{"partyIdType":"MSISDN","partyIdentifier":"16135551212"}},"#,
                r#"{"partyId":{"partyIdType":"PERSONAL_ID","partyIdentifier":"A1","partySubIdOrType":"PASSPORT"},"#,
                r#""errorInformation":{"errorCode":"3003","errorDescription":"Add Party information error"}}],"#,
                r#""currency":"USD"}"#
            )
        );
        let body = participants_batch_put_body_with_fsp(&results[..1], Some(&fsp), None);
        assert_eq!(
            body,
            br#"{"partyList":[{"partyId":{"partyIdType":"MSISDN","partyIdentifier":"16135551212","fspId":"payeefsp"}}]}"#
        );
        // Long and empty descriptions stay schema-valid.
        let results = vec![
            (ok.clone(), Some((ErrorCode(3003), "é".repeat(300)))),
            (failed, Some((ErrorCode(3204), String::new()))),
        ];
        let value: Value =
            serde_json::from_slice(&participants_batch_put_body(&results, None)).unwrap();
        let list = value["partyList"].as_array().unwrap();
        let first = list[0]["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap();
        assert_eq!(first.chars().count(), 128);
        assert_eq!(list[1]["errorInformation"]["errorCode"], "3204");
        assert!(!list[1]["errorInformation"]["errorDescription"]
            .as_str()
            .unwrap()
            .is_empty());
        assert!(value.get("currency").is_none());
    }

    #[test]
    fn what_the_hub_writes_it_reads_back_as_party_id_info() {
        // The batch answer's partyId objects are PartyIdInfo: parse them
        // with the batch request's reader.
        let key = crate::parse_party_key("ALIAS", "bob \"the\" builder", Some("x")).unwrap();
        let fsp = FspName::new("dfsp1").unwrap();
        let body = participants_batch_put_body_with_fsp(&[(key.clone(), None)], Some(&fsp), None);
        let value: Value = serde_json::from_slice(&body).unwrap();
        let request =
            json!({"requestId": ID, "partyList": [value["partyList"][0]["partyId"].clone()]});
        let parsed = parse_participants_batch(&bytes(&request)).unwrap();
        assert_eq!(parsed.parties[0].key, key);
        assert_eq!(parsed.parties[0].fsp, Some(fsp));
    }
}
