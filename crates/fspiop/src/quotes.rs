//! Quote bodies: `POST /quotes` (QuotesPostRequest) and `PUT /quotes/{ID}`
//! (QuotesIDPutResponse). `PUT /quotes/{ID}/error` is an
//! ErrorInformationObject: use [`crate::parse_error_information`].
//!
//! The hub routes quotes without keeping them, so these parsers check the
//! schema (every property it knows, in its order, first fault wins) and
//! return what routing and logging need; the body itself is forwarded as
//! received.

use crate::json::{JsonObj, JsonStr};
use crate::party::{party, ParsedPartyIdInfo, PartyRaw};
use crate::schema::{
    check_geo_code, correlation_id_field, is_balance_of_payments, is_undefined_enum, money, one_of,
    optional_correlation_id, optional_money, optional_pattern, optional_text, Child, GeoCodeRaw,
    Money,
};
use crate::transfers::{
    check_extension_list, date_time, is_ilp_packet, optional_obj, optional_str, parse_object,
    required_str, ExtensionListRaw, FieldPath, MoneyRaw,
};
use crate::{FspiopError, ILP_PACKET_MAX_CHARS};
use ledger::{Condition, FspName, RequestHash, TransferId};
use serde::Deserialize;
use std::fmt;

/// FSPIOP's `Note` and `RefundReason` maxLength.
pub(crate) const TEXT_MAX_CHARS: usize = 128;

/// FSPIOP's `AmountType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmountType {
    /// The amount the payer sends, fees included.
    Send,
    /// The amount the payee receives, fees excluded.
    Receive,
}

impl AmountType {
    pub fn as_str(self) -> &'static str {
        match self {
            AmountType::Send => "SEND",
            AmountType::Receive => "RECEIVE",
        }
    }
}

impl fmt::Display for AmountType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const TRANSACTION_SCENARIOS: &[&str] = &["DEPOSIT", "WITHDRAWAL", "TRANSFER", "PAYMENT", "REFUND"];
const TRANSACTION_INITIATORS: &[&str] = &["PAYER", "PAYEE"];
const TRANSACTION_INITIATOR_TYPES: &[&str] = &["CONSUMER", "AGENT", "BUSINESS", "DEVICE"];

// ------------------------------------------------------------- raw shapes

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RefundRaw<'a> {
    #[serde(borrow)]
    original_transaction_id: JsonStr<'a>,
    #[serde(borrow)]
    refund_reason: JsonStr<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct TransactionTypeRaw<'a> {
    #[serde(borrow)]
    scenario: JsonStr<'a>,
    #[serde(borrow)]
    sub_scenario: JsonStr<'a>,
    #[serde(borrow)]
    initiator: JsonStr<'a>,
    #[serde(borrow)]
    initiator_type: JsonStr<'a>,
    #[serde(borrow)]
    refund_info: JsonObj<RefundRaw<'a>>,
    #[serde(borrow)]
    balance_of_payments: JsonStr<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct QuotePostRaw<'a> {
    #[serde(borrow)]
    pub(crate) quote_id: JsonStr<'a>,
    #[serde(borrow)]
    pub(crate) transaction_id: JsonStr<'a>,
    #[serde(borrow)]
    transaction_request_id: JsonStr<'a>,
    #[serde(borrow)]
    pub(crate) payee: JsonObj<PartyRaw<'a>>,
    #[serde(borrow)]
    payer: JsonObj<PartyRaw<'a>>,
    #[serde(borrow)]
    pub(crate) amount_type: JsonStr<'a>,
    #[serde(borrow)]
    pub(crate) amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    pub(crate) fees: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    pub(crate) transaction_type: JsonObj<TransactionTypeRaw<'a>>,
    #[serde(borrow)]
    geo_code: JsonObj<GeoCodeRaw<'a>>,
    #[serde(borrow)]
    pub(crate) note: JsonStr<'a>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    pub(crate) extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct QuotePutRaw<'a> {
    #[serde(borrow)]
    transfer_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_receive_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_fsp_fee: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_fsp_commission: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    geo_code: JsonObj<GeoCodeRaw<'a>>,
    #[serde(borrow)]
    ilp_packet: JsonStr<'a>,
    #[serde(borrow)]
    condition: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

// ----------------------------------------------------------------- checks

/// A required `TransactionType`; returns (scenario, initiator, initiatorType).
pub(crate) fn transaction_type(
    value: &JsonObj<TransactionTypeRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<(&'static str, &'static str, &'static str), FspiopError> {
    let raw = crate::transfers::required_obj(value, path)?;
    let scenario = one_of(
        &raw.scenario,
        Child(path, "scenario"),
        TRANSACTION_SCENARIOS,
    )?;
    optional_pattern(
        &raw.sub_scenario,
        Child(path, "subScenario"),
        is_undefined_enum,
        "must be 1 to 32 of A-Z and _",
    )?;
    let initiator = one_of(
        &raw.initiator,
        Child(path, "initiator"),
        TRANSACTION_INITIATORS,
    )?;
    let initiator_type = one_of(
        &raw.initiator_type,
        Child(path, "initiatorType"),
        TRANSACTION_INITIATOR_TYPES,
    )?;
    let refund_path = Child(path, "refundInfo");
    if let Some(refund) = optional_obj(&raw.refund_info, refund_path)? {
        correlation_id_field(
            &refund.original_transaction_id,
            Child(refund_path, "originalTransactionId"),
        )?;
        optional_text(
            &refund.refund_reason,
            Child(refund_path, "refundReason"),
            TEXT_MAX_CHARS,
        )?;
    }
    optional_pattern(
        &raw.balance_of_payments,
        Child(path, "balanceOfPayments"),
        is_balance_of_payments,
        "must be 3 digits without a leading zero",
    )?;
    Ok((scenario, initiator, initiator_type))
}

/// A `DateTime` property that may be absent.
pub(crate) fn optional_date_time(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<Option<i64>, FspiopError> {
    match optional_str(value, path)? {
        Some(text) => date_time(text, path).map(Some),
        None => Ok(None),
    }
}

/// A required `AmountType`.
pub(crate) fn amount_type(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<AmountType, FspiopError> {
    Ok(match one_of(value, path, &["SEND", "RECEIVE"])? {
        "SEND" => AmountType::Send,
        _ => AmountType::Receive,
    })
}

// ------------------------------------------------------------------- POST

/// A checked `POST /quotes` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedQuotePost {
    pub quote_id: TransferId,
    pub transaction_id: TransferId,
    pub transaction_request_id: Option<TransferId>,
    /// `payee.partyIdInfo` (its `fspId` is the payee FSP, when given).
    pub payee: ParsedPartyIdInfo,
    /// `payer.partyIdInfo` (its `fspId` is the payer FSP, when given).
    pub payer: ParsedPartyIdInfo,
    pub amount_type: AmountType,
    pub amount: Money,
    pub fees: Option<Money>,
    /// `transactionType.scenario`, e.g. `TRANSFER`.
    pub scenario: &'static str,
    /// `transactionType.initiator`: `PAYER` or `PAYEE`.
    pub initiator: &'static str,
    /// `transactionType.initiatorType`, e.g. `CONSUMER`.
    pub initiator_type: &'static str,
    pub expiration_ms: Option<i64>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

impl ParsedQuotePost {
    /// `payer.partyIdInfo.fspId`, when given.
    pub fn payer_fsp(&self) -> Option<FspName> {
        self.payer.fsp
    }

    /// `payee.partyIdInfo.fspId`, when given.
    pub fn payee_fsp(&self) -> Option<FspName> {
        self.payee.fsp
    }
}

/// Parses and checks a `POST /quotes` body (QuotesPostRequest). Required:
/// `quoteId` and `transactionId` (CorrelationIds), `payee` and `payer`
/// (Party, each with a `partyIdInfo`), `amountType` (SEND or RECEIVE),
/// `amount` (Money), `transactionType` (`scenario`, `initiator`,
/// `initiatorType`). Optional properties are checked when present:
/// `transactionRequestId`, `fees`, `geoCode`, `note`, `expiration`,
/// `extensionList`, and the optional parts of each Party and of the
/// transaction type. Unknown properties are ignored.
pub fn parse_quote_post(body: &[u8]) -> Result<ParsedQuotePost, FspiopError> {
    let raw: QuotePostRaw<'_> = parse_object(body)?;

    let quote_id = correlation_id_field(&raw.quote_id, FieldPath::new("quoteId"))?;
    let transaction_id =
        correlation_id_field(&raw.transaction_id, FieldPath::new("transactionId"))?;
    let transaction_request_id = optional_correlation_id(
        &raw.transaction_request_id,
        FieldPath::new("transactionRequestId"),
    )?;
    let payee = party(&raw.payee, FieldPath::new("payee"))?;
    let payer = party(&raw.payer, FieldPath::new("payer"))?;
    let amount_type = amount_type(&raw.amount_type, FieldPath::new("amountType"))?;
    let amount = money(&raw.amount, FieldPath::new("amount"))?;
    let fees = optional_money(&raw.fees, FieldPath::new("fees"))?;
    let (scenario, initiator, initiator_type) =
        transaction_type(&raw.transaction_type, FieldPath::new("transactionType"))?;
    check_geo_code(&raw.geo_code, FieldPath::new("geoCode"))?;
    optional_text(&raw.note, FieldPath::new("note"), TEXT_MAX_CHARS)?;
    let expiration_ms = optional_date_time(&raw.expiration, FieldPath::new("expiration"))?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;

    Ok(ParsedQuotePost {
        quote_id,
        transaction_id,
        transaction_request_id,
        payee,
        payer,
        amount_type,
        amount,
        fees,
        scenario,
        initiator,
        initiator_type,
        expiration_ms,
        request_hash: RequestHash::of(body),
    })
}

// -------------------------------------------------------------------- PUT

/// A checked `PUT /quotes/{ID}` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedQuotePut {
    pub transfer_amount: Money,
    pub payee_receive_amount: Option<Money>,
    pub payee_fsp_fee: Option<Money>,
    pub payee_fsp_commission: Option<Money>,
    pub expiration_ms: i64,
    pub condition: Condition,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `PUT /quotes/{ID}` body (QuotesIDPutResponse).
/// Required: `transferAmount` (Money), `expiration` (DateTime), `ilpPacket`
/// (base64url, 1-32768 characters), `condition` (43 base64url characters).
/// Optional, checked when present: `payeeReceiveAmount`, `payeeFspFee`,
/// `payeeFspCommission` (Money), `geoCode`, `extensionList`. Unknown
/// properties are ignored.
pub fn parse_quote_put(body: &[u8]) -> Result<ParsedQuotePut, FspiopError> {
    let raw: QuotePutRaw<'_> = parse_object(body)?;

    let transfer_amount = money(&raw.transfer_amount, FieldPath::new("transferAmount"))?;
    let payee_receive_amount = optional_money(
        &raw.payee_receive_amount,
        FieldPath::new("payeeReceiveAmount"),
    )?;
    let payee_fsp_fee = optional_money(&raw.payee_fsp_fee, FieldPath::new("payeeFspFee"))?;
    let payee_fsp_commission = optional_money(
        &raw.payee_fsp_commission,
        FieldPath::new("payeeFspCommission"),
    )?;
    let path = FieldPath::new("expiration");
    let expiration_ms = date_time(required_str(&raw.expiration, path)?, path)?;
    check_geo_code(&raw.geo_code, FieldPath::new("geoCode"))?;
    let path = FieldPath::new("ilpPacket");
    if !is_ilp_packet(required_str(&raw.ilp_packet, path)?) {
        return Err(FspiopError::invalid(
            path,
            format_args!("must be 1 to {ILP_PACKET_MAX_CHARS} base64url characters"),
        ));
    }
    let path = FieldPath::new("condition");
    let condition = Condition::from_base64url(required_str(&raw.condition, path)?)
        .ok_or_else(|| FspiopError::invalid(path, "must be 43 base64url characters (32 bytes)"))?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;

    Ok(ParsedQuotePut {
        transfer_amount,
        payee_receive_amount,
        payee_fsp_fee,
        payee_fsp_commission,
        expiration_ms,
        condition,
        request_hash: RequestHash::of(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::party::PartyIdType;
    use crate::test_support::{assert_error, bytes, remove, set};
    use ledger::{Amount, Currency, ErrorCode, PartyKey};
    use serde_json::{json, Value};

    const QUOTE_ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";
    const TRANSACTION_ID: &str = "a8323bc6-c228-4df2-ae82-e5a997baf899";
    const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
    const ILP: &str = "AYIBgQAAAAAAAASwNGxldmVsb25lLmRmc3AxLm1lci45T2RTOF81MDdqUUZERmZlakgyOVc4bXFmNEpLMHlGTFGCAUBQU0svMS4wCk5vbmNlOiB1SXlweUYzY3pYSXBFdzVVc05TYWh3CkVuY3J5cHRpb246IG5vbmUKUGF5bWVudC1JZDogMTMyMzZhM2ItOGZhOC00MTYzLTg0NDctNGMzZWQzZGE5OGE3CgpDb250ZW50LUxlbmd0aDogMTM1CkNvbnRlbnQtVHlwZTogYXBwbGljYXRpb24vanNvbgpTZW5kZXItSWRlbnRpZmllcjogOTI4MDYzOTEKCiJ7XCJmZWVcIjowLFwidHJhbnNmZXJDb2RlXCI6XCJpbnZvaWNlXCIsXCJkZWJpdE5hbWVcIjpcImFsaWNlIGNvb3BlclwiLFwiY3JlZGl0TmFtZVwiOlwibWVyIGNoYW50XCIsXCJkZWJpdElkZW50aWZpZXJcIjpcIjkyODA2MzkxXCJ9IgA";

    /// What Mojaloop's SDK scheme adapter sends for a P2P transfer.
    fn post_json() -> Value {
        json!({
            "quoteId": QUOTE_ID,
            "transactionId": TRANSACTION_ID,
            "payee": {
                "partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "27713803912", "fspId": "payeefsp"}
            },
            "payer": {
                "partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "44123456789", "fspId": "payerfsp"},
                "name": "Henrik Karlsson",
                "personalInfo": {
                    "complexName": {"firstName": "Henrik", "middleName": "Johannes", "lastName": "Karlsson"},
                    "dateOfBirth": "1966-06-16"
                }
            },
            "amountType": "SEND",
            "amount": {"amount": "100", "currency": "XOF"},
            "transactionType": {"scenario": "TRANSFER", "initiator": "PAYER", "initiatorType": "CONSUMER"},
            "note": "Free-text memo."
        })
    }

    /// Every optional property, valid.
    fn full_post_json() -> Value {
        let mut value = post_json();
        value["transactionRequestId"] = json!("a8323bc6-c228-4df2-ae82-e5a997baf890");
        value["payee"]["merchantClassificationCode"] = json!("4321");
        value["payee"]["partyIdInfo"]["partySubIdOrType"] = json!("DRIVING_LICENSE");
        value["payee"]["partyIdInfo"]["extensionList"] =
            json!({"extension": [{"key": "k", "value": "v"}]});
        value["fees"] = json!({"amount": "1.5", "currency": "XOF"});
        value["transactionType"]["subScenario"] = json!("LOCALLY_DEFINED");
        value["transactionType"]["refundInfo"] =
            json!({"originalTransactionId": QUOTE_ID, "refundReason": "Free text"});
        value["transactionType"]["balanceOfPayments"] = json!("123");
        value["geoCode"] = json!({"latitude": "+45.4215", "longitude": "+75.6972"});
        value["expiration"] = json!("2016-05-24T08:38:08.699-04:00");
        value["extensionList"] = json!({"extension": [{"key": "k", "value": "v"}]});
        value
    }

    fn post_error(value: &Value) -> FspiopError {
        parse_quote_post(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn a_mojaloop_quote_request_parses() {
        let body = bytes(&post_json());
        let parsed = parse_quote_post(&body).unwrap();
        assert_eq!(parsed.quote_id, TransferId::parse(QUOTE_ID).unwrap());
        assert_eq!(
            parsed.transaction_id,
            TransferId::parse(TRANSACTION_ID).unwrap()
        );
        assert_eq!(parsed.transaction_request_id, None);
        assert_eq!(parsed.payer_fsp(), FspName::new("payerfsp"));
        assert_eq!(parsed.payee_fsp(), FspName::new("payeefsp"));
        assert_eq!(
            parsed.payee.key,
            PartyKey {
                id_type: "MSISDN".into(),
                identifier: "27713803912".into(),
                sub_id: None
            }
        );
        assert_eq!(parsed.amount_type, AmountType::Send);
        assert_eq!(
            parsed.amount,
            Money {
                amount: Amount::from_whole(100),
                currency: Currency::parse("XOF").unwrap()
            }
        );
        assert_eq!(parsed.fees, None);
        assert_eq!(
            (parsed.scenario, parsed.initiator, parsed.initiator_type),
            ("TRANSFER", "PAYER", "CONSUMER")
        );
        assert_eq!(parsed.expiration_ms, None);
        assert_eq!(parsed.request_hash, RequestHash::of(&body));

        let parsed = parse_quote_post(&bytes(&full_post_json())).unwrap();
        assert_eq!(
            parsed.transaction_request_id,
            TransferId::parse("a8323bc6-c228-4df2-ae82-e5a997baf890")
        );
        assert_eq!(parsed.payee.key.sub_id.as_deref(), Some("DRIVING_LICENSE"));
        assert_eq!(parsed.fees.unwrap().amount, Amount::from_units(15_000));
        assert_eq!(
            parsed.expiration_ms,
            Some(1_464_079_088_699 + 4 * 3_600_000)
        );

        let mut value = post_json();
        value["amountType"] = json!("RECEIVE");
        remove(&mut value, "payer.partyIdInfo.fspId");
        let parsed = parse_quote_post(&bytes(&value)).unwrap();
        assert_eq!(parsed.amount_type, AmountType::Receive);
        assert_eq!(parsed.payer_fsp(), None);
    }

    #[test]
    fn unknown_quote_properties_are_ignored() {
        let mut value = full_post_json();
        value["converter"] = json!("PAYER");
        value["deep"] = json!({"a": [1, {"b": null}]});
        value["payee"]["partyIdInfo"]["extra"] = json!(1);
        value["payer"]["supportedCurrencies"] = json!(["XOF"]);
        value["payer"]["personalInfo"]["complexName"]["title"] = json!(7);
        value["transactionType"]["x"] = json!([]);
        value["amount"]["x"] = json!(false);
        value["geoCode"]["altitude"] = json!("3");
        assert!(parse_quote_post(&bytes(&value)).is_ok());
    }

    #[test]
    fn each_missing_quote_field_is_3102_naming_it() {
        for path in [
            "quoteId",
            "transactionId",
            "payee",
            "payer",
            "amountType",
            "amount",
            "transactionType",
            "payee.partyIdInfo",
            "payer.partyIdInfo",
            "payee.partyIdInfo.partyIdType",
            "payee.partyIdInfo.partyIdentifier",
            "payer.partyIdInfo.partyIdType",
            "payer.partyIdInfo.partyIdentifier",
            "amount.amount",
            "amount.currency",
            "transactionType.scenario",
            "transactionType.initiator",
            "transactionType.initiatorType",
        ] {
            let mut value = post_json();
            remove(&mut value, path);
            let error = post_error(&value);
            assert_error(&error, 3102, path);
            assert_eq!(
                error.description,
                format!("Missing mandatory element - {path}")
            );
        }
        for path in [
            "fees.amount",
            "geoCode.latitude",
            "geoCode.longitude",
            "transactionType.refundInfo.originalTransactionId",
            "extensionList.extension",
        ] {
            let mut value = full_post_json();
            remove(&mut value, path);
            assert_error(&post_error(&value), 3102, path);
        }
    }

    #[test]
    fn each_wrong_json_type_is_3101_naming_it() {
        for path in [
            "quoteId",
            "transactionId",
            "transactionRequestId",
            "payee",
            "payer",
            "payee.partyIdInfo",
            "payer.partyIdInfo.fspId",
            "payer.name",
            "payer.personalInfo",
            "payer.personalInfo.complexName.firstName",
            "payer.personalInfo.dateOfBirth",
            "amountType",
            "amount",
            "amount.amount",
            "fees",
            "transactionType",
            "transactionType.scenario",
            "transactionType.refundInfo",
            "geoCode",
            "geoCode.latitude",
            "note",
            "expiration",
            "extensionList",
        ] {
            for wrong in [json!(null), json!(1), json!(true), json!([])] {
                let mut value = full_post_json();
                set(&mut value, path, wrong.clone());
                assert_error(&post_error(&value), 3101, path);
            }
        }
        let mut value = post_json();
        value["quoteId"] = json!({"id": QUOTE_ID});
        assert_error(&post_error(&value), 3101, "quoteId");
        let mut value = post_json();
        value["payee"] = json!("payeefsp");
        assert_error(&post_error(&value), 3101, "payee");
    }

    #[test]
    fn each_quote_rule_violation_is_3100_naming_it() {
        let cases: Vec<(&str, Value)> = vec![
            ("quoteId", json!("B51EC534-EE48-4575-B6A9-EAD2955B8069")),
            ("quoteId", json!("not-a-uuid")),
            (
                "transactionId",
                json!("a8323bc6-c228-9df2-ae82-e5a997baf899"),
            ),
            ("transactionRequestId", json!("")),
            ("payee.partyIdInfo.partyIdType", json!("PHONE")),
            ("payer.partyIdInfo.partyIdType", json!("msisdn")),
            ("payee.partyIdInfo.partyIdentifier", json!("")),
            ("payee.partyIdInfo.partyIdentifier", json!("1".repeat(129))),
            ("payee.partyIdInfo.partySubIdOrType", json!("")),
            ("payee.partyIdInfo.fspId", json!("")),
            ("payee.partyIdInfo.fspId", json!("x".repeat(33))),
            ("payee.merchantClassificationCode", json!("12345")),
            ("payee.merchantClassificationCode", json!("ab")),
            ("payer.name", json!("")),
            ("payer.name", json!("n".repeat(129))),
            ("payer.personalInfo.complexName.firstName", json!("   ")),
            ("payer.personalInfo.complexName.middleName", json!("a<b")),
            ("payer.personalInfo.complexName.lastName", json!("")),
            ("payer.personalInfo.dateOfBirth", json!("1966-02-30")),
            ("payer.personalInfo.dateOfBirth", json!("16-06-1966")),
            ("amountType", json!("send")),
            ("amountType", json!("BOTH")),
            ("amount.amount", json!("100.00")),
            ("amount.amount", json!("-1")),
            ("amount.currency", json!("usd")),
            ("fees.amount", json!("01")),
            ("fees.currency", json!("ZZZ")),
            ("transactionType.scenario", json!("GIFT")),
            ("transactionType.subScenario", json!("lower")),
            ("transactionType.initiator", json!("HUB")),
            ("transactionType.initiatorType", json!("PERSON")),
            (
                "transactionType.refundInfo.originalTransactionId",
                json!("x"),
            ),
            ("transactionType.refundInfo.refundReason", json!("")),
            ("transactionType.balanceOfPayments", json!("012")),
            ("geoCode.latitude", json!("91")),
            ("geoCode.longitude", json!("-180.5")),
            ("note", json!("")),
            ("note", json!("n".repeat(129))),
            ("expiration", json!("2016-05-24T08:38:08Z")),
            ("extensionList.extension", json!([])),
        ];
        for (path, bad) in cases {
            let mut value = full_post_json();
            set(&mut value, path, bad.clone());
            let error = post_error(&value);
            assert_error(&error, 3100, path);
            assert!(
                error.description.starts_with("Generic validation error - "),
                "{bad}"
            );
        }
        let mut value = full_post_json();
        value["payee"]["partyIdInfo"]["extensionList"] =
            json!({"extension": [{"key": "", "value": "v"}]});
        assert_error(
            &post_error(&value),
            3100,
            "payee.partyIdInfo.extensionList.extension[0].key",
        );
    }

    #[test]
    fn quote_request_boundaries() {
        let mut value = full_post_json();
        value["amount"]["amount"] = json!("0");
        value["payee"]["partyIdInfo"]["partyIdentifier"] = json!("é".repeat(128));
        value["note"] = json!("✓".repeat(128));
        value["payer"]["personalInfo"]["complexName"]["firstName"] = json!("Zoë-Ann O'Neil");
        value["geoCode"] = json!({"latitude": "-90", "longitude": "180.000000"});
        assert!(parse_quote_post(&bytes(&value)).is_ok());
        for id_type in PartyIdType::ALL {
            value["payee"]["partyIdInfo"]["partyIdType"] = json!(id_type.as_str());
            assert!(parse_quote_post(&bytes(&value)).is_ok(), "{id_type}");
        }
    }

    #[test]
    fn quote_request_bodies_that_are_not_one_object() {
        for (body, code) in [
            (&b""[..], 3102),
            (b"{", 3101),
            (b"[]", 3101),
            (b"null", 3101),
            (b"{\"quoteId\":\"a\",\"quoteId\":\"b\"}", 3101),
        ] {
            assert_error(&parse_quote_post(body).unwrap_err(), code, "body");
        }
        assert_error(&parse_quote_post(b"{}").unwrap_err(), 3102, "quoteId");
    }

    fn put_json() -> Value {
        json!({
            "transferAmount": {"amount": "100", "currency": "XOF"},
            "payeeReceiveAmount": {"amount": "99", "currency": "XOF"},
            "payeeFspFee": {"amount": "1", "currency": "XOF"},
            "payeeFspCommission": {"amount": "0.5", "currency": "XOF"},
            "expiration": "2016-05-24T08:38:08.699-04:00",
            "geoCode": {"latitude": "+45.4215", "longitude": "+75.6972"},
            "ilpPacket": ILP,
            "condition": CONDITION,
            "extensionList": {"extension": [{"key": "k", "value": "v"}]}
        })
    }

    fn put_error(value: &Value) -> FspiopError {
        parse_quote_put(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn a_quote_response_parses() {
        let body = bytes(&put_json());
        let parsed = parse_quote_put(&body).unwrap();
        let xof = Currency::parse("XOF").unwrap();
        assert_eq!(
            parsed.transfer_amount,
            Money {
                amount: Amount::from_whole(100),
                currency: xof
            }
        );
        assert_eq!(
            parsed.payee_receive_amount.unwrap().amount,
            Amount::from_whole(99)
        );
        assert_eq!(parsed.payee_fsp_fee.unwrap().amount, Amount::from_whole(1));
        assert_eq!(
            parsed.payee_fsp_commission.unwrap().amount,
            Amount::from_units(5_000)
        );
        assert_eq!(parsed.expiration_ms, 1_464_079_088_699 + 4 * 3_600_000);
        assert_eq!(
            parsed.condition,
            Condition::from_base64url(CONDITION).unwrap()
        );
        assert_eq!(parsed.request_hash, RequestHash::of(&body));

        let minimal = json!({
            "transferAmount": {"amount": "100", "currency": "XOF"},
            "expiration": "2016-05-24T08:38:08.699Z",
            "ilpPacket": ILP,
            "condition": CONDITION,
            "unknown": {"x": [1]}
        });
        let parsed = parse_quote_put(&bytes(&minimal)).unwrap();
        assert_eq!(parsed.payee_receive_amount, None);
        assert_eq!(parsed.payee_fsp_fee, None);
        assert_eq!(parsed.payee_fsp_commission, None);
    }

    #[test]
    fn quote_response_faults() {
        for path in [
            "transferAmount",
            "expiration",
            "ilpPacket",
            "condition",
            "transferAmount.amount",
            "transferAmount.currency",
            "payeeFspFee.currency",
            "geoCode.longitude",
        ] {
            let mut value = put_json();
            remove(&mut value, path);
            assert_error(&put_error(&value), 3102, path);
        }
        for path in [
            "transferAmount",
            "payeeReceiveAmount",
            "payeeFspFee",
            "payeeFspCommission",
            "expiration",
            "geoCode",
            "ilpPacket",
            "condition",
            "extensionList",
            "transferAmount.amount",
        ] {
            for wrong in [json!(null), json!(5), json!([])] {
                let mut value = put_json();
                set(&mut value, path, wrong.clone());
                assert_error(&put_error(&value), 3101, path);
            }
        }
        for (path, bad) in [
            ("transferAmount.amount", json!("1.00")),
            ("transferAmount.currency", json!("XO")),
            ("payeeReceiveAmount.amount", json!("1e2")),
            ("payeeFspFee.amount", json!("")),
            ("payeeFspCommission.currency", json!("abc")),
            ("expiration", json!("2016-05-24")),
            ("geoCode.latitude", json!("north")),
            ("ilpPacket", json!("")),
            ("ilpPacket", json!("not base64!")),
            ("condition", json!("short")),
            ("condition", json!(format!("{CONDITION}A"))),
            (
                "extensionList.extension",
                json!([{"key": "k", "value": ""}]),
            ),
        ] {
            let mut value = put_json();
            set(&mut value, path, bad.clone());
            let path = if path == "extensionList.extension" {
                "extensionList.extension[0].value"
            } else {
                path
            };
            assert_error(&put_error(&value), 3100, path);
        }
        assert_error(&parse_quote_put(b"").unwrap_err(), 3102, "body");
        assert_error(&parse_quote_put(b"[1]").unwrap_err(), 3101, "body");
    }

    #[test]
    fn the_first_fault_in_schema_order_wins() {
        let mut value = post_json();
        value["transactionType"] = json!(1);
        remove(&mut value, "payer");
        assert_error(&post_error(&value), 3102, "payer");
        let mut value = put_json();
        value["condition"] = json!("x");
        value["transferAmount"]["amount"] = json!("x");
        assert_error(&put_error(&value), 3100, "transferAmount.amount");
    }

    #[test]
    fn quote_error_callbacks_use_the_error_parser() {
        let body = br#"{"errorInformation":{"errorCode":"3201","errorDescription":"Destination FSP Error"}}"#;
        let parsed = crate::parse_error_information(body).unwrap();
        assert_eq!(parsed.code, ErrorCode(3201));
    }
}
