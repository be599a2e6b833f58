//! Bulk quote bodies: `POST /bulkQuotes` (BulkQuotesPostRequest) and
//! `PUT /bulkQuotes/{ID}` (BulkQuotesIDPutResponse). `PUT
//! /bulkQuotes/{ID}/error` is an ErrorInformationObject: use
//! [`crate::parse_error_information`].
//!
//! Routed as single quotes are: checked (schema order, first fault wins,
//! items named `individualQuotes[3].amount.currency`) and forwarded as
//! received.

use crate::json::{JsonArr, JsonObj, JsonStr};
use crate::party::{party, ParsedPartyIdInfo, PartyRaw};
use crate::quotes::{
    amount_type, optional_date_time, transaction_type, QuotePostRaw, TEXT_MAX_CHARS,
};
use crate::schema::{
    check_geo_code, correlation_id_field, money, optional_money, optional_pattern, optional_text,
    Child, GeoCodeRaw, Item,
};
use crate::transfers::{
    check_extension_list, date_time, error_information, is_ilp_packet, optional_obj, optional_str,
    parse_object, required_obj, required_str, ErrorInformationRaw, ExtensionListRaw, FieldPath,
    MoneyRaw,
};
use crate::FspiopError;
use ledger::{Condition, Currency, RequestHash, TransferId};
use serde::Deserialize;

/// `individualQuotes` and `individualQuoteResults` maxItems.
pub const BULK_QUOTE_MAX_ITEMS: usize = 1000;

// ------------------------------------------------------------- raw shapes

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BulkQuotePostRaw<'a> {
    #[serde(borrow)]
    bulk_quote_id: JsonStr<'a>,
    #[serde(borrow)]
    payer: JsonObj<PartyRaw<'a>>,
    #[serde(borrow)]
    geo_code: JsonObj<GeoCodeRaw<'a>>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    individual_quotes: JsonArr<JsonObj<QuotePostRaw<'a>>, BULK_QUOTE_MAX_ITEMS>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct IndividualQuoteResultRaw<'a> {
    #[serde(borrow)]
    quote_id: JsonStr<'a>,
    #[serde(borrow)]
    payee: JsonObj<PartyRaw<'a>>,
    #[serde(borrow)]
    transfer_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_receive_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_fsp_fee: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    payee_fsp_commission: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    ilp_packet: JsonStr<'a>,
    #[serde(borrow)]
    condition: JsonStr<'a>,
    #[serde(borrow)]
    error_information: JsonObj<ErrorInformationRaw<'a>>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BulkQuotePutRaw<'a> {
    #[serde(borrow)]
    individual_quote_results: JsonArr<JsonObj<IndividualQuoteResultRaw<'a>>, BULK_QUOTE_MAX_ITEMS>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

/// The items of an array property with `min..=BULK_QUOTE_MAX_ITEMS` items;
/// `None` when it is absent and may be.
fn items<'r, T>(
    value: &'r JsonArr<T, BULK_QUOTE_MAX_ITEMS>,
    path: FieldPath<'static>,
    min: usize,
) -> Result<Option<&'r [T]>, FspiopError> {
    match value {
        JsonArr::Items { items, len } if (min..=BULK_QUOTE_MAX_ITEMS).contains(len) => {
            Ok(Some(items))
        }
        JsonArr::Items { len, .. } => Err(FspiopError::invalid(
            path,
            format_args!("must have {min} to {BULK_QUOTE_MAX_ITEMS} items, has {len}"),
        )),
        JsonArr::Absent if min == 0 => Ok(None),
        JsonArr::Absent => Err(FspiopError::missing(path)),
        JsonArr::Wrong(kind) => Err(FspiopError::malformed(
            path,
            format_args!("expected an array, found {kind}"),
        )),
    }
}

// ------------------------------------------------------------------- POST

/// A checked `POST /bulkQuotes` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedBulkQuotePost {
    pub bulk_quote_id: TransferId,
    /// `payer.partyIdInfo`.
    pub payer: ParsedPartyIdInfo,
    pub expiration_ms: Option<i64>,
    /// Each `individualQuotes[i].quoteId`, in order.
    pub quote_ids: Vec<TransferId>,
    /// The currencies of the individual quotes' amounts, each once, in the
    /// order they first appear: the payments the bulk quote would start.
    pub currencies: Vec<Currency>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `POST /bulkQuotes` body (BulkQuotesPostRequest).
/// Required: `bulkQuoteId` (CorrelationId), `payer` (Party),
/// `individualQuotes` (1 to 1000 IndividualQuotes: `quoteId`,
/// `transactionId`, `payee`, `amountType`, `amount`, `transactionType`
/// required; `fees`, `note`, `extensionList` optional). Optional:
/// `geoCode`, `expiration`, `extensionList`. Unknown properties are
/// ignored.
pub fn parse_bulk_quote_post(body: &[u8]) -> Result<ParsedBulkQuotePost, FspiopError> {
    let raw: BulkQuotePostRaw<'_> = parse_object(body)?;

    let bulk_quote_id = correlation_id_field(&raw.bulk_quote_id, FieldPath::new("bulkQuoteId"))?;
    let payer = party(&raw.payer, FieldPath::new("payer"))?;
    check_geo_code(&raw.geo_code, FieldPath::new("geoCode"))?;
    let expiration_ms = optional_date_time(&raw.expiration, FieldPath::new("expiration"))?;
    let list_path = FieldPath::new("individualQuotes");
    let quotes = items(&raw.individual_quotes, list_path, 1)?.unwrap_or_default();
    let mut quote_ids = Vec::with_capacity(quotes.len());
    let mut currencies = Vec::new();
    for (index, quote) in quotes.iter().enumerate() {
        let (quote_id, currency) = individual_quote(quote, Item(list_path, index))?;
        quote_ids.push(quote_id);
        if !currencies.contains(&currency) {
            currencies.push(currency);
        }
    }
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;

    Ok(ParsedBulkQuotePost {
        bulk_quote_id,
        payer,
        expiration_ms,
        quote_ids,
        currencies,
        request_hash: RequestHash::of(body),
    })
}

/// One `IndividualQuote`; its `quoteId` and its amount's currency. It is read as a quote request
/// whose payer, geoCode and expiration belong to the bulk: those of an
/// item are unknown properties, ignored.
fn individual_quote(
    value: &JsonObj<QuotePostRaw<'_>>,
    path: Item<FieldPath<'static>>,
) -> Result<(TransferId, Currency), FspiopError> {
    let quote = required_obj(value, path)?;
    let quote_id = correlation_id_field(&quote.quote_id, Child(path, "quoteId"))?;
    correlation_id_field(&quote.transaction_id, Child(path, "transactionId"))?;
    party(&quote.payee, Child(path, "payee"))?;
    amount_type(&quote.amount_type, Child(path, "amountType"))?;
    let amount = money(&quote.amount, Child(path, "amount"))?;
    optional_money(&quote.fees, Child(path, "fees"))?;
    transaction_type(&quote.transaction_type, Child(path, "transactionType"))?;
    optional_text(&quote.note, Child(path, "note"), TEXT_MAX_CHARS)?;
    check_extension_list(&quote.extension_list, Child(path, "extensionList"))?;
    Ok((quote_id, amount.currency))
}

// -------------------------------------------------------------------- PUT

/// A checked `PUT /bulkQuotes/{ID}` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedBulkQuotePut {
    /// Each `individualQuoteResults[i].quoteId`, in order.
    pub quote_ids: Vec<TransferId>,
    pub expiration_ms: i64,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `PUT /bulkQuotes/{ID}` body
/// (BulkQuotesIDPutResponse): `individualQuoteResults` optional (0 to 1000
/// IndividualQuoteResults: `quoteId` required; `payee`, the four Money
/// amounts, `ilpPacket`, `condition`, `errorInformation`, `extensionList`
/// optional), `expiration` required, `extensionList` optional. Unknown
/// properties are ignored.
pub fn parse_bulk_quote_put(body: &[u8]) -> Result<ParsedBulkQuotePut, FspiopError> {
    let raw: BulkQuotePutRaw<'_> = parse_object(body)?;

    let list_path = FieldPath::new("individualQuoteResults");
    let results = items(&raw.individual_quote_results, list_path, 0)?.unwrap_or_default();
    let mut quote_ids = Vec::with_capacity(results.len());
    for (index, result) in results.iter().enumerate() {
        quote_ids.push(individual_quote_result(result, Item(list_path, index))?);
    }
    let path = FieldPath::new("expiration");
    let expiration_ms = date_time(required_str(&raw.expiration, path)?, path)?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;

    Ok(ParsedBulkQuotePut {
        quote_ids,
        expiration_ms,
        request_hash: RequestHash::of(body),
    })
}

/// One `IndividualQuoteResult`; its `quoteId`.
fn individual_quote_result(
    value: &JsonObj<IndividualQuoteResultRaw<'_>>,
    path: Item<FieldPath<'static>>,
) -> Result<TransferId, FspiopError> {
    let result = required_obj(value, path)?;
    let quote_id = correlation_id_field(&result.quote_id, Child(path, "quoteId"))?;
    if !matches!(result.payee, JsonObj::Absent) {
        party(&result.payee, Child(path, "payee"))?;
    }
    for (amount, leaf) in [
        (&result.transfer_amount, "transferAmount"),
        (&result.payee_receive_amount, "payeeReceiveAmount"),
        (&result.payee_fsp_fee, "payeeFspFee"),
        (&result.payee_fsp_commission, "payeeFspCommission"),
    ] {
        optional_money(amount, Child(path, leaf))?;
    }
    optional_pattern(
        &result.ilp_packet,
        Child(path, "ilpPacket"),
        is_ilp_packet,
        "must be 1 to 32768 base64url characters",
    )?;
    let condition_path = Child(path, "condition");
    if let Some(condition) = optional_str(&result.condition, condition_path)? {
        Condition::from_base64url(condition).ok_or_else(|| {
            FspiopError::invalid(condition_path, "must be 43 base64url characters (32 bytes)")
        })?;
    }
    let error_path = Child(path, "errorInformation");
    if optional_obj(&result.error_information, error_path)?.is_some() {
        error_information(&result.error_information, error_path)?;
    }
    check_extension_list(&result.extension_list, Child(path, "extensionList"))?;
    Ok(quote_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_error, bytes, remove, set};
    use serde_json::{json, Value};

    const BULK_ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";
    const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";

    fn id(n: u32) -> String {
        format!("a8323bc6-c228-4df2-ae82-{n:012x}")
    }

    fn individual(n: u32) -> Value {
        json!({
            "quoteId": id(2 * n),
            "transactionId": id(2 * n + 1),
            "payee": {"partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": format!("2771380{n}"), "fspId": "payeefsp"}},
            "amountType": "SEND",
            "amount": {"amount": "100", "currency": "XOF"},
            "fees": {"amount": "1", "currency": "XOF"},
            "transactionType": {"scenario": "TRANSFER", "initiator": "PAYER", "initiatorType": "CONSUMER"},
            "note": "n",
            "extensionList": {"extension": [{"key": "k", "value": "v"}]}
        })
    }

    fn post_json() -> Value {
        json!({
            "bulkQuoteId": BULK_ID,
            "payer": {"partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "44123456789", "fspId": "payerfsp"}},
            "geoCode": {"latitude": "+45.4215", "longitude": "+75.6972"},
            "expiration": "2016-05-24T08:38:08.699-04:00",
            "individualQuotes": [individual(0), individual(1)],
            "extensionList": {"extension": [{"key": "k", "value": "v"}]}
        })
    }

    fn post_error(value: &Value) -> FspiopError {
        parse_bulk_quote_post(&bytes(value)).expect_err("expected an error")
    }

    fn put_json() -> Value {
        json!({
            "individualQuoteResults": [
                {
                    "quoteId": id(0),
                    "payee": {"partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "27713800", "fspId": "payeefsp"}},
                    "transferAmount": {"amount": "100", "currency": "XOF"},
                    "payeeReceiveAmount": {"amount": "99", "currency": "XOF"},
                    "payeeFspFee": {"amount": "1", "currency": "XOF"},
                    "payeeFspCommission": {"amount": "0", "currency": "XOF"},
                    "ilpPacket": "AYIBgQAAAAAAAASw",
                    "condition": CONDITION,
                    "extensionList": {"extension": [{"key": "k", "value": "v"}]}
                },
                {
                    "quoteId": id(2),
                    "errorInformation": {"errorCode": "5100", "errorDescription": "Payee rejected"}
                }
            ],
            "expiration": "2016-05-24T08:38:08.699-04:00"
        })
    }

    fn put_error(value: &Value) -> FspiopError {
        parse_bulk_quote_put(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn a_bulk_quote_request_parses() {
        let body = bytes(&post_json());
        let parsed = parse_bulk_quote_post(&body).unwrap();
        assert_eq!(parsed.bulk_quote_id, TransferId::parse(BULK_ID).unwrap());
        assert_eq!(parsed.payer.fsp.unwrap().as_str(), "payerfsp");
        assert_eq!(
            parsed.quote_ids,
            [
                TransferId::parse(&id(0)).unwrap(),
                TransferId::parse(&id(2)).unwrap()
            ]
        );
        assert_eq!(parsed.request_hash, RequestHash::of(&body));
        assert_eq!(parsed.currencies, [Currency::parse("XOF").unwrap()]);
        let mut mixed = post_json();
        mixed["individualQuotes"][1]["amount"]["currency"] = json!("USD");
        mixed["individualQuotes"]
            .as_array_mut()
            .unwrap()
            .push(individual(2));
        let parsed = parse_bulk_quote_post(&bytes(&mixed)).unwrap();
        assert_eq!(
            parsed.currencies,
            [
                Currency::parse("XOF").unwrap(),
                Currency::parse("USD").unwrap()
            ],
            "each currency once, in the order it first appears"
        );
        let minimal = json!({
            "bulkQuoteId": BULK_ID,
            "payer": {"partyIdInfo": {"partyIdType": "MSISDN", "partyIdentifier": "1"}},
            "individualQuotes": [individual(0)],
            "unknown": [1, 2]
        });
        let parsed = parse_bulk_quote_post(&bytes(&minimal)).unwrap();
        assert_eq!(parsed.expiration_ms, None);
    }

    #[test]
    fn bulk_quote_request_faults_name_their_field() {
        for path in [
            "bulkQuoteId",
            "payer",
            "individualQuotes",
            "payer.partyIdInfo",
            "geoCode.longitude",
            "individualQuotes.1.quoteId",
            "individualQuotes.0.transactionId",
            "individualQuotes.0.payee",
            "individualQuotes.0.amountType",
            "individualQuotes.0.amount",
            "individualQuotes.1.transactionType",
            "individualQuotes.0.fees.currency",
            "individualQuotes.0.payee.partyIdInfo.partyIdentifier",
        ] {
            let mut value = post_json();
            remove(&mut value, path);
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&post_error(&value), 3102, &named);
        }
        for path in [
            "bulkQuoteId",
            "payer",
            "geoCode",
            "expiration",
            "individualQuotes",
            "individualQuotes.1",
            "individualQuotes.0.amount",
            "individualQuotes.0.note",
            "extensionList",
        ] {
            let mut value = post_json();
            set(&mut value, path, json!(null));
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&post_error(&value), 3101, &named);
        }
        for (path, bad) in [
            ("bulkQuoteId", json!("x")),
            ("expiration", json!("tomorrow")),
            ("individualQuotes", json!([])),
            ("individualQuotes.0.quoteId", json!("x")),
            ("individualQuotes.1.amountType", json!("BOTH")),
            ("individualQuotes.0.amount.amount", json!("1.0")),
            ("individualQuotes.0.transactionType.initiator", json!("HUB")),
            ("individualQuotes.1.note", json!("")),
            ("individualQuotes.0.extensionList.extension", json!([])),
        ] {
            let mut value = post_json();
            set(&mut value, path, bad);
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&post_error(&value), 3100, &named);
        }
        let mut value = post_json();
        value["individualQuotes"] = Value::Array((0..1001).map(individual).collect());
        assert_error(&post_error(&value), 3100, "individualQuotes");
        value["individualQuotes"] = Value::Array((0..1000).map(individual).collect());
        assert_eq!(
            parse_bulk_quote_post(&bytes(&value))
                .unwrap()
                .quote_ids
                .len(),
            1000
        );
    }

    #[test]
    fn a_bulk_quote_answer_parses() {
        let parsed = parse_bulk_quote_put(&bytes(&put_json())).unwrap();
        assert_eq!(parsed.quote_ids.len(), 2);
        assert_eq!(parsed.expiration_ms, 1_464_079_088_699 + 4 * 3_600_000);
        let empty = json!({"expiration": "2016-05-24T08:38:08.699Z"});
        assert!(parse_bulk_quote_put(&bytes(&empty))
            .unwrap()
            .quote_ids
            .is_empty());
    }

    #[test]
    fn bulk_quote_answer_faults_name_their_field() {
        for path in [
            "expiration",
            "individualQuoteResults.0.quoteId",
            "individualQuoteResults.0.transferAmount.amount",
            "individualQuoteResults.1.errorInformation.errorDescription",
        ] {
            let mut value = put_json();
            remove(&mut value, path);
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&put_error(&value), 3102, &named);
        }
        for path in [
            "individualQuoteResults",
            "individualQuoteResults.0.payee",
            "individualQuoteResults.0.ilpPacket",
            "individualQuoteResults.1.errorInformation",
            "expiration",
        ] {
            let mut value = put_json();
            set(&mut value, path, json!(5));
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&put_error(&value), 3101, &named);
        }
        for (path, bad) in [
            ("individualQuoteResults.0.quoteId", json!("x")),
            (
                "individualQuoteResults.0.payeeFspFee.currency",
                json!("ZZZ"),
            ),
            ("individualQuoteResults.0.ilpPacket", json!("not base64!")),
            ("individualQuoteResults.0.condition", json!("short")),
            (
                "individualQuoteResults.1.errorInformation.errorCode",
                json!("0999"),
            ),
            ("expiration", json!("2016-05-24")),
        ] {
            let mut value = put_json();
            set(&mut value, path, bad);
            let named = path.replace(".0", "[0]").replace(".1", "[1]");
            assert_error(&put_error(&value), 3100, &named);
        }
        // Schema order: the results come before the expiration.
        let mut value = put_json();
        remove(&mut value, "expiration");
        value["individualQuoteResults"][0]["quoteId"] = json!("x");
        assert_error(
            &put_error(&value),
            3100,
            "individualQuoteResults[0].quoteId",
        );
    }
}
