//! FSPIOP v2.0 foreign exchange (payer conversion) bodies:
//!
//! | Message | Schema | Here |
//! |---|---|---|
//! | `POST /fxQuotes` | FxQuotesPostRequest | [`parse_fx_quote_post`] |
//! | `PUT /fxQuotes/{ID}` | FxQuotesIDPutResponse | [`parse_fx_quote_put`] |
//! | `POST /fxTransfers` | FxTransfersPostRequest | [`parse_fx_transfer_prepare`] |
//! | `PUT /fxTransfers/{ID}` | FxTransfersIDPutResponse | [`parse_fx_transfer_fulfil`], [`fx_transfer_put_body`] |
//! | `PATCH /fxTransfers/{ID}` | FxTransfersIDPatchResponse | [`parse_fx_transfer_patch`], [`fx_transfer_patch_body`] |
//! | `PUT /services/FXP[/{Source}/{Target}]` | ServicesFXPPutResponse | [`parse_services_fxp_put`], [`services_fxp_put_body`] |
//!
//! The `…/error` callbacks are ErrorInformationObjects: use
//! [`crate::parse_error_information`].
//!
//! As for v1.1 bodies: every property the schema knows is checked, in its
//! order, the first fault wins (3102 absent, 3101 wrong JSON type, 3100 a
//! rule broken), unknown properties are ignored, ids may be UUIDs or ULIDs,
//! and `request_hash` is the SHA-256 of the raw bytes for duplicate checks.
//! Rules the schema leaves optional but a hub holding conversions needs
//! are separate checks the caller applies
//! ([`ParsedFxPrepare::check_payer_conversion`]).

use crate::json::{self, JsonArr, JsonObj, JsonStr};
use crate::quotes::{amount_type, optional_date_time, AmountType};
use crate::schema::{
    correlation_id_field, currency, money, optional_correlation_id, optional_money, Child, Item,
    Money,
};
use crate::transfers::{
    bounded_text, check_extension_list, date_time, fsp_id, optional_fulfilment, optional_str,
    parse_object, required_obj, required_str, state_body, wire_state, ExtensionListRaw, FieldPath,
    MoneyRaw,
};
use crate::{FspiopError, WireState};
use ledger::{Amount, Condition, Currency, FspName, Fulfilment, RequestHash, TransferId};
use serde::Deserialize;
use std::fmt;

/// `FxConversion.charges` maxItems.
pub const FX_CHARGES_MAX_ITEMS: usize = 16;
/// `FxCharge.chargeType` maxLength.
pub const FX_CHARGE_TYPE_MAX_CHARS: usize = 32;
/// `ServicesFXPPutResponse.providers` maxItems.
pub const FXP_PROVIDERS_MAX_ITEMS: usize = 16;

// ------------------------------------------------------------- raw shapes

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxChargeRaw<'a> {
    #[serde(borrow)]
    charge_type: JsonStr<'a>,
    #[serde(borrow)]
    source_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    target_amount: JsonObj<MoneyRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxConversionRaw<'a> {
    #[serde(borrow)]
    conversion_id: JsonStr<'a>,
    #[serde(borrow)]
    determining_transfer_id: JsonStr<'a>,
    #[serde(borrow)]
    initiating_fsp: JsonStr<'a>,
    #[serde(borrow)]
    counter_party_fsp: JsonStr<'a>,
    #[serde(borrow)]
    amount_type: JsonStr<'a>,
    /// FxMoney has the same two properties as Money; only `amount` is
    /// optional.
    #[serde(borrow)]
    source_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    target_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
    #[serde(borrow)]
    charges: JsonArr<JsonObj<FxChargeRaw<'a>>, FX_CHARGES_MAX_ITEMS>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxQuotePostRaw<'a> {
    #[serde(borrow)]
    conversion_request_id: JsonStr<'a>,
    #[serde(borrow)]
    conversion_terms: JsonObj<FxConversionRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxQuotePutRaw<'a> {
    #[serde(borrow)]
    condition: JsonStr<'a>,
    #[serde(borrow)]
    conversion_terms: JsonObj<FxConversionRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxPrepareRaw<'a> {
    #[serde(borrow)]
    commit_request_id: JsonStr<'a>,
    #[serde(borrow)]
    determining_transfer_id: JsonStr<'a>,
    #[serde(borrow)]
    initiating_fsp: JsonStr<'a>,
    #[serde(borrow)]
    counter_party_fsp: JsonStr<'a>,
    #[serde(borrow)]
    source_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    target_amount: JsonObj<MoneyRaw<'a>>,
    #[serde(borrow)]
    condition: JsonStr<'a>,
    #[serde(borrow)]
    expiration: JsonStr<'a>,
}

/// FxTransfersIDPutResponse and FxTransfersIDPatchResponse: the PATCH has
/// no `fulfilment`.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct FxStateRaw<'a> {
    #[serde(borrow)]
    fulfilment: JsonStr<'a>,
    #[serde(borrow)]
    completed_timestamp: JsonStr<'a>,
    #[serde(borrow)]
    conversion_state: JsonStr<'a>,
    #[serde(borrow)]
    extension_list: JsonObj<ExtensionListRaw<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ServicesFxpPutRaw<'a> {
    #[serde(borrow)]
    providers: JsonArr<JsonStr<'a>, FXP_PROVIDERS_MAX_ITEMS>,
}

// ----------------------------------------------------------------- checks

/// A required `DateTime` property.
fn required_date_time(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<i64, FspiopError> {
    date_time(required_str(value, path)?, path)
}

/// A required `IlpCondition` property.
fn ilp_condition(
    value: &JsonStr<'_>,
    path: impl fmt::Display + Copy,
) -> Result<Condition, FspiopError> {
    Condition::from_base64url(required_str(value, path)?)
        .ok_or_else(|| FspiopError::invalid(path, "must be 43 base64url characters (32 bytes)"))
}

/// A required `Money` whose amount can be moved: as the transfer parser
/// does, FSPIOP's `0` is refused here rather than later.
fn movable_money(
    value: &JsonObj<MoneyRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<Money, FspiopError> {
    let money = money(value, path)?;
    if money.amount == Amount::ZERO {
        return Err(FspiopError::invalid(
            Child(path, "amount"),
            "must be greater than 0",
        ));
    }
    Ok(money)
}

// ----------------------------------------------------------- FxConversion

/// FSPIOP v2.0's `FxMoney`: a currency, and an amount the requester may
/// leave for the FXP to fill in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FxMoney {
    pub currency: Currency,
    pub amount: Option<Amount>,
}

/// A required `FxMoney` object: `{currency, amount?}`, in that order.
fn fx_money(
    value: &JsonObj<MoneyRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<FxMoney, FspiopError> {
    let raw = required_obj(value, path)?;
    let currency_path = Child(path, "currency");
    let currency = currency(required_str(&raw.currency, currency_path)?, currency_path)?;
    let amount_path = Child(path, "amount");
    let amount = match optional_str(&raw.amount, amount_path)? {
        Some(text) => Some(
            Amount::parse_fspiop(text).map_err(|error| FspiopError::invalid(amount_path, error))?,
        ),
        None => None,
    };
    Ok(FxMoney { currency, amount })
}

/// A checked `FxConversion` (the `conversionTerms` of an FX quote request
/// or answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxConversion {
    pub conversion_id: TransferId,
    /// The transfer this conversion depends on, when named.
    pub determining_transfer_id: Option<TransferId>,
    /// The DFSP asking for the conversion (the payer, in payer conversion).
    pub initiating_fsp: FspName,
    /// The FXP.
    pub counter_party_fsp: FspName,
    pub amount_type: AmountType,
    pub source: FxMoney,
    pub target: FxMoney,
    pub expiration_ms: i64,
}

/// A required `FxConversion` at `path`. Required: `conversionId`,
/// `initiatingFsp`, `counterPartyFsp`, `amountType`, `sourceAmount` and
/// `targetAmount` (FxMoney), `expiration`; optional: `determiningTransferId`,
/// `charges` (0-16 FxCharge: `chargeType` 1-32 characters, optional
/// `sourceAmount`/`targetAmount` Money), `extensionList`.
fn fx_conversion(
    value: &JsonObj<FxConversionRaw<'_>>,
    path: impl fmt::Display + Copy,
) -> Result<ParsedFxConversion, FspiopError> {
    let raw = required_obj(value, path)?;
    let conversion_id = correlation_id_field(&raw.conversion_id, Child(path, "conversionId"))?;
    let determining_transfer_id = optional_correlation_id(
        &raw.determining_transfer_id,
        Child(path, "determiningTransferId"),
    )?;
    let initiating_fsp = fsp_id(&raw.initiating_fsp, Child(path, "initiatingFsp"))?;
    let counter_party_fsp = fsp_id(&raw.counter_party_fsp, Child(path, "counterPartyFsp"))?;
    let amount_type = amount_type(&raw.amount_type, Child(path, "amountType"))?;
    let source = fx_money(&raw.source_amount, Child(path, "sourceAmount"))?;
    let target = fx_money(&raw.target_amount, Child(path, "targetAmount"))?;
    let expiration_ms = required_date_time(&raw.expiration, Child(path, "expiration"))?;
    check_charges(&raw.charges, Child(path, "charges"))?;
    check_extension_list(&raw.extension_list, Child(path, "extensionList"))?;
    Ok(ParsedFxConversion {
        conversion_id,
        determining_transfer_id,
        initiating_fsp,
        counter_party_fsp,
        amount_type,
        source,
        target,
        expiration_ms,
    })
}

/// An optional array of 0-16 `FxCharge`.
fn check_charges(
    value: &JsonArr<JsonObj<FxChargeRaw<'_>>, FX_CHARGES_MAX_ITEMS>,
    path: impl fmt::Display + Copy,
) -> Result<(), FspiopError> {
    let (items, len) = match value {
        JsonArr::Absent => return Ok(()),
        JsonArr::Items { items, len } => (items, *len),
        JsonArr::Wrong(kind) => {
            return Err(FspiopError::malformed(
                path,
                format_args!("expected an array, found {kind}"),
            ))
        }
    };
    if len > FX_CHARGES_MAX_ITEMS {
        return Err(FspiopError::invalid(
            path,
            format_args!("must have at most {FX_CHARGES_MAX_ITEMS} items, has {len}"),
        ));
    }
    for (index, item) in items.iter().enumerate() {
        let item_path = Item(path, index);
        let charge = required_obj(item, item_path)?;
        bounded_text(
            &charge.charge_type,
            Child(item_path, "chargeType"),
            FX_CHARGE_TYPE_MAX_CHARS,
        )?;
        optional_money(&charge.source_amount, Child(item_path, "sourceAmount"))?;
        optional_money(&charge.target_amount, Child(item_path, "targetAmount"))?;
    }
    Ok(())
}

// ------------------------------------------------------------ fxQuotes

/// A checked `POST /fxQuotes` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxQuotePost {
    pub conversion_request_id: TransferId,
    pub conversion_terms: ParsedFxConversion,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `POST /fxQuotes` body (FxQuotesPostRequest).
/// Required: `conversionRequestId` (CorrelationId) and `conversionTerms`
/// (FxConversion, either amount left out or both given). Unknown
/// properties are ignored.
pub fn parse_fx_quote_post(body: &[u8]) -> Result<ParsedFxQuotePost, FspiopError> {
    let raw: FxQuotePostRaw<'_> = parse_object(body)?;
    let conversion_request_id = correlation_id_field(
        &raw.conversion_request_id,
        FieldPath::new("conversionRequestId"),
    )?;
    let conversion_terms = fx_conversion(&raw.conversion_terms, FieldPath::new("conversionTerms"))?;
    Ok(ParsedFxQuotePost {
        conversion_request_id,
        conversion_terms,
        request_hash: RequestHash::of(body),
    })
}

/// A checked `PUT /fxQuotes/{ID}` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxQuotePut {
    /// The FXP's condition for the conversion, when it gives one.
    pub condition: Option<Condition>,
    /// The terms the FXP offers (it fills in the amounts).
    pub conversion_terms: ParsedFxConversion,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `PUT /fxQuotes/{ID}` body (FxQuotesIDPutResponse).
/// Required: `conversionTerms` (FxConversion); optional: `condition` (43
/// base64url characters). Unknown properties are ignored.
pub fn parse_fx_quote_put(body: &[u8]) -> Result<ParsedFxQuotePut, FspiopError> {
    let raw: FxQuotePutRaw<'_> = parse_object(body)?;
    let path = FieldPath::new("condition");
    let condition = match raw.condition {
        JsonStr::Absent => None,
        ref other => Some(ilp_condition(other, path)?),
    };
    let conversion_terms = fx_conversion(&raw.conversion_terms, FieldPath::new("conversionTerms"))?;
    Ok(ParsedFxQuotePut {
        condition,
        conversion_terms,
        request_hash: RequestHash::of(body),
    })
}

// --------------------------------------------------------- fxTransfers

/// A checked `POST /fxTransfers` body: a conversion's prepare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxPrepare {
    pub commit_request_id: TransferId,
    /// The transfer whose success the conversion depends on; the schema
    /// leaves it out for a bulk currency purchase, kasi requires it (see
    /// [`ParsedFxPrepare::check_payer_conversion`]).
    pub determining_transfer_id: Option<TransferId>,
    /// The DFSP asking for the conversion: the payer, whose source-currency
    /// position is reserved.
    pub initiating_fsp: FspName,
    /// The FXP.
    pub counter_party_fsp: FspName,
    /// What the initiating DFSP pays, in the source currency.
    pub source: Money,
    /// What the FXP pays on, in the target currency.
    pub target: Money,
    pub condition: Condition,
    pub expiration_ms: Option<i64>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

impl ParsedFxPrepare {
    /// 3100 unless `FSPIOP-Source` is the body's `initiatingFsp` (as a
    /// transfer's source must be its `payerFsp`).
    pub fn check_source(&self, source: &FspName) -> Result<(), FspiopError> {
        if *source == self.initiating_fsp {
            Ok(())
        } else {
            Err(FspiopError::invalid(
                "FSPIOP-Source",
                format_args!(
                    "{source} does not match initiatingFsp {}",
                    self.initiating_fsp
                ),
            ))
        }
    }

    /// kasi's rule for a conversion it holds (payer conversion): the two
    /// properties the schema leaves optional are required — answered as
    /// any absent required property is, 3102 "Missing mandatory element"
    /// naming the first absent in schema order — and the two currencies
    /// differ (3100 naming `targetAmount.currency`). Returns
    /// `(determiningTransferId, expiration)`.
    ///
    /// Mojaloop's schema lets both be absent; its central-ledger then
    /// refuses a missing `expiration` (3100, a NOT NULL column) and, with
    /// no `determiningTransferId`, keeps the conversion with no callback
    /// until it expires (fx-research §10.6). Failing fast is the same
    /// refusal, at once.
    pub fn check_payer_conversion(&self) -> Result<(TransferId, i64), FspiopError> {
        let determining_transfer_id = self
            .determining_transfer_id
            .ok_or_else(|| FspiopError::missing("determiningTransferId"))?;
        let expiration_ms = self
            .expiration_ms
            .ok_or_else(|| FspiopError::missing("expiration"))?;
        if self.source.currency == self.target.currency {
            return Err(FspiopError::invalid(
                "targetAmount.currency",
                format_args!(
                    "must differ from sourceAmount.currency ({})",
                    self.source.currency.as_str()
                ),
            ));
        }
        Ok((determining_transfer_id, expiration_ms))
    }
}

/// Parses and checks a `POST /fxTransfers` body (FxTransfersPostRequest).
/// Required: `commitRequestId` (CorrelationId), `initiatingFsp` and
/// `counterPartyFsp` (FspId), `sourceAmount` and `targetAmount` (Money,
/// more than 0), `condition` (43 base64url characters); optional:
/// `determiningTransferId` (CorrelationId), `expiration` (DateTime).
/// Unknown properties are ignored (an `extensionList`, which the schema
/// does not name, included).
pub fn parse_fx_transfer_prepare(body: &[u8]) -> Result<ParsedFxPrepare, FspiopError> {
    let raw: FxPrepareRaw<'_> = parse_object(body)?;
    let commit_request_id =
        correlation_id_field(&raw.commit_request_id, FieldPath::new("commitRequestId"))?;
    let determining_transfer_id = optional_correlation_id(
        &raw.determining_transfer_id,
        FieldPath::new("determiningTransferId"),
    )?;
    let initiating_fsp = fsp_id(&raw.initiating_fsp, FieldPath::new("initiatingFsp"))?;
    let counter_party_fsp = fsp_id(&raw.counter_party_fsp, FieldPath::new("counterPartyFsp"))?;
    let source = movable_money(&raw.source_amount, FieldPath::new("sourceAmount"))?;
    let target = movable_money(&raw.target_amount, FieldPath::new("targetAmount"))?;
    let condition = ilp_condition(&raw.condition, FieldPath::new("condition"))?;
    let expiration_ms = optional_date_time(&raw.expiration, FieldPath::new("expiration"))?;
    Ok(ParsedFxPrepare {
        commit_request_id,
        determining_transfer_id,
        initiating_fsp,
        counter_party_fsp,
        source,
        target,
        condition,
        expiration_ms,
        request_hash: RequestHash::of(body),
    })
}

/// A checked `PUT /fxTransfers/{ID}` body: the FXP's answer to a
/// conversion's prepare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxFulfil {
    /// As sent. FSPIOP expects RESERVED (or COMMITTED) with a fulfilment;
    /// an FXP refusing should use `…/error`, and what the hub does with
    /// an ABORTED here is its rule, not the schema's.
    pub conversion_state: WireState,
    /// `None` when the body has none (the schema makes it optional; kasi
    /// does not take a conversion as fulfilled without one).
    pub fulfilment: Option<Fulfilment>,
    pub completed_ms: Option<i64>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `PUT /fxTransfers/{ID}` body
/// (FxTransfersIDPutResponse), as the schema does and no further.
/// Required: `conversionState` (a TransferState); optional: `fulfilment`
/// (43 base64url characters, judged by its 32 bytes as for transfers),
/// `completedTimestamp` (DateTime), `extensionList`. Checked in the order
/// state, fulfilment, timestamp, as for transfers. Unknown properties
/// are ignored.
pub fn parse_fx_transfer_fulfil(body: &[u8]) -> Result<ParsedFxFulfil, FspiopError> {
    let raw: FxStateRaw<'_> = parse_object(body)?;
    let conversion_state = wire_state(&raw.conversion_state, "conversionState")?;
    let fulfilment = optional_fulfilment(&raw.fulfilment, FieldPath::new("fulfilment"))?;
    let completed_ms = optional_date_time(
        &raw.completed_timestamp,
        FieldPath::new("completedTimestamp"),
    )?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;
    Ok(ParsedFxFulfil {
        conversion_state,
        fulfilment,
        completed_ms,
        request_hash: RequestHash::of(body),
    })
}

/// A checked `PATCH /fxTransfers/{ID}` body (what the hub tells the FXP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedFxPatch {
    pub conversion_state: WireState,
    pub completed_ms: Option<i64>,
    /// SHA-256 of the raw body bytes.
    pub request_hash: RequestHash,
}

/// Parses and checks a `PATCH /fxTransfers/{ID}` body
/// (FxTransfersIDPatchResponse): required `conversionState`, optional
/// `completedTimestamp` and `extensionList` (unlike a transfer's PATCH,
/// whose timestamp is required). A `fulfilment` is not part of it and is
/// ignored like any unknown property.
pub fn parse_fx_transfer_patch(body: &[u8]) -> Result<ParsedFxPatch, FspiopError> {
    let raw: FxStateRaw<'_> = parse_object(body)?;
    let conversion_state = wire_state(&raw.conversion_state, "conversionState")?;
    let completed_ms = optional_date_time(
        &raw.completed_timestamp,
        FieldPath::new("completedTimestamp"),
    )?;
    check_extension_list(&raw.extension_list, FieldPath::new("extensionList"))?;
    Ok(ParsedFxPatch {
        conversion_state,
        completed_ms,
        request_hash: RequestHash::of(body),
    })
}

// ------------------------------------------------------------ services

/// A checked `PUT /services/FXP[/{SourceCurrency}/{TargetCurrency}]` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedServicesFxpPut {
    /// The FXPs, in the order given.
    pub providers: Vec<FspName>,
}

/// Parses and checks a `PUT /services/FXP…` body (ServicesFXPPutResponse,
/// the same shape for the corridor's path): required `providers`, an
/// array of 0-16 FspIds. Unknown properties are ignored.
pub fn parse_services_fxp_put(body: &[u8]) -> Result<ParsedServicesFxpPut, FspiopError> {
    let raw: ServicesFxpPutRaw<'_> = parse_object(body)?;
    let path = FieldPath::new("providers");
    let (items, len) = match &raw.providers {
        JsonArr::Items { items, len } => (items, *len),
        JsonArr::Absent => return Err(FspiopError::missing(path)),
        JsonArr::Wrong(kind) => {
            return Err(FspiopError::malformed(
                path,
                format_args!("expected an array, found {kind}"),
            ))
        }
    };
    if len > FXP_PROVIDERS_MAX_ITEMS {
        return Err(FspiopError::invalid(
            path,
            format_args!("must have at most {FXP_PROVIDERS_MAX_ITEMS} items, has {len}"),
        ));
    }
    let providers = items
        .iter()
        .enumerate()
        .map(|(index, item)| fsp_id(item, Item(path, index)))
        .collect::<Result<_, _>>()?;
    Ok(ParsedServicesFxpPut { providers })
}

// ------------------------------------------------------- callback bodies

/// The `PUT /fxTransfers/{ID}` body the hub sends (FxTransfersIDPutResponse):
/// `{"fulfilment":..,"completedTimestamp":..,"conversionState":..}`,
/// leaving out the optional properties given as `None`.
pub fn fx_transfer_put_body(
    state: WireState,
    fulfilment: Option<&Fulfilment>,
    completed_ms: Option<i64>,
) -> Vec<u8> {
    state_body(
        "conversionState",
        state.as_str(),
        fulfilment,
        completed_ms,
        &[],
    )
}

/// The `PATCH /fxTransfers/{ID}` body the hub sends the FXP at the
/// conversion's final state (FxTransfersIDPatchResponse):
/// `{"completedTimestamp":..,"conversionState":..}`, the timestamp left
/// out when `None` (it is optional here, unlike a transfer's PATCH).
pub fn fx_transfer_patch_body(state: WireState, completed_ms: Option<i64>) -> Vec<u8> {
    fx_transfer_put_body(state, None, completed_ms)
}

/// The `PUT /services/FXP…` body the hub sends (ServicesFXPPutResponse):
/// `{"providers":[..]}`. The schema allows at most 16: only the first 16
/// are written, so the caller puts the ones to offer first.
pub fn services_fxp_put_body(providers: &[FspName]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + providers.len().min(FXP_PROVIDERS_MAX_ITEMS) * 12);
    out.extend_from_slice(b"{\"providers\":[");
    for (index, provider) in providers.iter().take(FXP_PROVIDERS_MAX_ITEMS).enumerate() {
        if index > 0 {
            out.push(b',');
        }
        json::push_str(&mut out, provider.as_str());
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_error, bytes, remove, set};
    use serde_json::{json, Value};

    const REQUEST_ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";
    const CONVERSION_ID: &str = "a8323bc6-c228-4df2-ae82-e5a997baf899";
    const TRANSFER_ID: &str = "c5d8fc5f-4c0b-4fc6-8d1e-4d4d7a3f6b21";
    const ULID: &str = "01HZX3Y8Q6V9W2K4M7N0P5R3ST";
    const CONDITION: &str = "GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM";
    const FULFILMENT: &str = "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA";
    const EXPIRATION: &str = "2016-05-24T08:38:08.699-04:00";
    const EXPIRATION_MS: i64 = 1_464_079_088_699 + 4 * 3_600_000;

    fn id(text: &str) -> TransferId {
        TransferId::parse(text).unwrap()
    }

    fn fsp(name: &str) -> FspName {
        FspName::new(name).unwrap()
    }

    fn ccy(code: &str) -> Currency {
        Currency::parse(code).unwrap()
    }

    /// What a payer DFSP asks an FXP (Mojaloop's SDK, SEND: the source
    /// amount known, the target left to the FXP).
    fn terms_json() -> Value {
        json!({
            "conversionId": CONVERSION_ID,
            "determiningTransferId": TRANSFER_ID,
            "initiatingFsp": "payerfsp",
            "counterPartyFsp": "fxp",
            "amountType": "SEND",
            "sourceAmount": {"currency": "BWP", "amount": "300"},
            "targetAmount": {"currency": "TZS"},
            "expiration": EXPIRATION
        })
    }

    /// Every optional property of FxConversion, valid.
    fn full_terms_json() -> Value {
        let mut value = terms_json();
        value["targetAmount"]["amount"] = json!("48000");
        value["charges"] = json!([
            {"chargeType": "Conversion fee", "sourceAmount": {"currency": "BWP", "amount": "3"}},
            {"chargeType": "Tax", "targetAmount": {"currency": "TZS", "amount": "0.5"}}
        ]);
        value["extensionList"] = json!({"extension": [{"key": "k", "value": "v"}]});
        value
    }

    fn quote_post_json() -> Value {
        json!({"conversionRequestId": REQUEST_ID, "conversionTerms": terms_json()})
    }

    fn full_quote_post_json() -> Value {
        json!({"conversionRequestId": REQUEST_ID, "conversionTerms": full_terms_json()})
    }

    fn quote_post_error(value: &Value) -> FspiopError {
        parse_fx_quote_post(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn an_fx_quote_request_parses() {
        let body = bytes(&quote_post_json());
        let parsed = parse_fx_quote_post(&body).unwrap();
        assert_eq!(parsed.conversion_request_id, id(REQUEST_ID));
        assert_eq!(
            parsed.conversion_terms,
            ParsedFxConversion {
                conversion_id: id(CONVERSION_ID),
                determining_transfer_id: Some(id(TRANSFER_ID)),
                initiating_fsp: fsp("payerfsp"),
                counter_party_fsp: fsp("fxp"),
                amount_type: AmountType::Send,
                source: FxMoney {
                    currency: ccy("BWP"),
                    amount: Some(Amount::from_whole(300))
                },
                target: FxMoney {
                    currency: ccy("TZS"),
                    amount: None
                },
                expiration_ms: EXPIRATION_MS,
            }
        );
        assert_eq!(parsed.request_hash, RequestHash::of(&body));

        let parsed = parse_fx_quote_post(&bytes(&full_quote_post_json())).unwrap();
        assert_eq!(
            parsed.conversion_terms.target.amount,
            Some(Amount::from_whole(48_000))
        );

        // RECEIVE: the target known, the source left to the FXP; no
        // determining transfer (a bulk purchase); ULIDs for ids.
        let mut value = quote_post_json();
        value["conversionRequestId"] = json!(ULID);
        value["conversionTerms"]["amountType"] = json!("RECEIVE");
        remove(&mut value, "conversionTerms.determiningTransferId");
        remove(&mut value, "conversionTerms.sourceAmount.amount");
        value["conversionTerms"]["targetAmount"]["amount"] = json!("48000");
        let parsed = parse_fx_quote_post(&bytes(&value)).unwrap();
        assert_eq!(parsed.conversion_request_id, id(ULID));
        let terms = parsed.conversion_terms;
        assert_eq!(terms.amount_type, AmountType::Receive);
        assert_eq!(terms.determining_transfer_id, None);
        assert_eq!(terms.source.amount, None);
        assert_eq!(terms.target.amount, Some(Amount::from_whole(48_000)));
    }

    #[test]
    fn unknown_fx_quote_properties_are_ignored() {
        let mut value = full_quote_post_json();
        value["note"] = json!({"deep": [1, {"x": null}]});
        value["conversionTerms"]["rate"] = json!(160);
        value["conversionTerms"]["sourceAmount"]["x"] = json!(false);
        value["conversionTerms"]["charges"][0]["x"] = json!([]);
        value["conversionTerms"]["extensionList"]["x"] = json!(1);
        assert!(parse_fx_quote_post(&bytes(&value)).is_ok());
    }

    #[test]
    fn each_missing_fx_quote_field_is_3102_naming_it() {
        for path in [
            "conversionRequestId",
            "conversionTerms",
            "conversionTerms.conversionId",
            "conversionTerms.initiatingFsp",
            "conversionTerms.counterPartyFsp",
            "conversionTerms.amountType",
            "conversionTerms.sourceAmount",
            "conversionTerms.targetAmount",
            "conversionTerms.sourceAmount.currency",
            "conversionTerms.targetAmount.currency",
            "conversionTerms.expiration",
        ] {
            let mut value = quote_post_json();
            remove(&mut value, path);
            let error = quote_post_error(&value);
            assert_error(&error, 3102, path);
            assert_eq!(
                error.description,
                format!("Missing mandatory element - {path}")
            );
        }
        for path in [
            "conversionTerms.charges.0.chargeType",
            "conversionTerms.charges.0.sourceAmount.amount",
            "conversionTerms.charges.1.targetAmount.currency",
            "conversionTerms.extensionList.extension",
        ] {
            let mut value = full_quote_post_json();
            remove(&mut value, path);
            let path = path.replace(".0.", "[0].").replace(".1.", "[1].");
            assert_error(&quote_post_error(&value), 3102, &path);
        }
    }

    #[test]
    fn each_wrong_json_type_in_an_fx_quote_is_3101_naming_it() {
        for path in [
            "conversionRequestId",
            "conversionTerms",
            "conversionTerms.conversionId",
            "conversionTerms.determiningTransferId",
            "conversionTerms.initiatingFsp",
            "conversionTerms.counterPartyFsp",
            "conversionTerms.amountType",
            "conversionTerms.sourceAmount",
            "conversionTerms.sourceAmount.amount",
            "conversionTerms.targetAmount.currency",
            "conversionTerms.expiration",
            "conversionTerms.charges",
            "conversionTerms.extensionList",
        ] {
            for wrong in [json!(null), json!(1), json!(true)] {
                let mut value = full_quote_post_json();
                set(&mut value, path, wrong.clone());
                assert_error(&quote_post_error(&value), 3101, path);
            }
        }
        let mut value = full_quote_post_json();
        value["conversionTerms"]["charges"] = json!([5]);
        assert_error(
            &quote_post_error(&value),
            3101,
            "conversionTerms.charges[0]",
        );
        let mut value = full_quote_post_json();
        value["conversionTerms"]["charges"] = json!({"chargeType": "x"});
        assert_error(&quote_post_error(&value), 3101, "conversionTerms.charges");
    }

    #[test]
    fn each_fx_quote_rule_violation_is_3100_naming_it() {
        let too_many: Vec<Value> = (0..17).map(|_| json!({"chargeType": "fee"})).collect();
        let cases: Vec<(&str, Value)> = vec![
            ("conversionRequestId", json!("not-a-uuid")),
            (
                "conversionRequestId",
                json!("B51EC534-EE48-4575-B6A9-EAD2955B8069"),
            ),
            ("conversionTerms.conversionId", json!("")),
            ("conversionTerms.determiningTransferId", json!("x")),
            ("conversionTerms.initiatingFsp", json!("")),
            ("conversionTerms.initiatingFsp", json!("x".repeat(33))),
            ("conversionTerms.counterPartyFsp", json!("has space")),
            ("conversionTerms.amountType", json!("send")),
            ("conversionTerms.sourceAmount.currency", json!("ZZZ")),
            ("conversionTerms.sourceAmount.amount", json!("300.00")),
            ("conversionTerms.targetAmount.amount", json!("-1")),
            ("conversionTerms.targetAmount.currency", json!("tzs")),
            ("conversionTerms.expiration", json!("2016-05-24T08:38:08Z")),
            ("conversionTerms.charges", json!(too_many)),
            ("conversionTerms.charges.0.chargeType", json!("")),
            (
                "conversionTerms.charges.0.chargeType",
                json!("c".repeat(33)),
            ),
            ("conversionTerms.charges.0.sourceAmount.amount", json!("1.")),
            (
                "conversionTerms.extensionList.extension",
                json!([{"key": "", "value": "v"}]),
            ),
        ];
        for (path, bad) in cases {
            let mut value = full_quote_post_json();
            set(&mut value, path, bad.clone());
            let path = match path.strip_suffix(".extension") {
                Some(list) => format!("{list}.extension[0].key"),
                None => path.replace(".0.", "[0]."),
            };
            let error = quote_post_error(&value);
            assert_error(&error, 3100, &path);
            assert!(
                error.description.starts_with("Generic validation error - "),
                "{bad}"
            );
        }
        // Sixteen charges and an empty list are within the schema.
        let mut value = full_quote_post_json();
        let sixteen: Vec<Value> = (0..16).map(|_| json!({"chargeType": "fee"})).collect();
        value["conversionTerms"]["charges"] = json!(sixteen);
        assert!(parse_fx_quote_post(&bytes(&value)).is_ok());
        value["conversionTerms"]["charges"] = json!([]);
        assert!(parse_fx_quote_post(&bytes(&value)).is_ok());
    }

    #[test]
    fn fx_quote_bodies_that_are_not_one_object() {
        for (body, code) in [
            (&b""[..], 3102),
            (b"{", 3101),
            (b"[]", 3101),
            (b"null", 3101),
            (
                b"{\"conversionRequestId\":\"a\",\"conversionRequestId\":\"b\"}",
                3101,
            ),
        ] {
            assert_error(&parse_fx_quote_post(body).unwrap_err(), code, "body");
        }
        for (body, code) in [
            (&b" "[..], 3102),
            (b"\"x\"", 3101),
            (b"{\"condition\":\"a\",\"condition\":\"b\"}", 3101),
        ] {
            assert_error(&parse_fx_quote_put(body).unwrap_err(), code, "body");
        }
        assert_error(
            &parse_fx_quote_post(b"{}").unwrap_err(),
            3102,
            "conversionRequestId",
        );
    }

    fn quote_put_json() -> Value {
        json!({"condition": CONDITION, "conversionTerms": full_terms_json()})
    }

    fn quote_put_error(value: &Value) -> FspiopError {
        parse_fx_quote_put(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn an_fx_quote_answer_parses() {
        let body = bytes(&quote_put_json());
        let parsed = parse_fx_quote_put(&body).unwrap();
        assert_eq!(parsed.condition, Condition::from_base64url(CONDITION));
        assert_eq!(parsed.conversion_terms.conversion_id, id(CONVERSION_ID));
        assert_eq!(
            parsed.conversion_terms.target.amount,
            Some(Amount::from_whole(48_000))
        );
        assert_eq!(parsed.request_hash, RequestHash::of(&body));

        let mut value = quote_put_json();
        remove(&mut value, "condition");
        value["unknown"] = json!({"x": [1]});
        assert_eq!(parse_fx_quote_put(&bytes(&value)).unwrap().condition, None);
    }

    #[test]
    fn fx_quote_answer_faults() {
        for path in [
            "conversionTerms",
            "conversionTerms.conversionId",
            "conversionTerms.expiration",
        ] {
            let mut value = quote_put_json();
            remove(&mut value, path);
            assert_error(&quote_put_error(&value), 3102, path);
        }
        for path in ["condition", "conversionTerms", "conversionTerms.amountType"] {
            for wrong in [json!(null), json!(5), json!([])] {
                let mut value = quote_put_json();
                set(&mut value, path, wrong.clone());
                assert_error(&quote_put_error(&value), 3101, path);
            }
        }
        for (path, bad) in [
            ("condition", json!("short")),
            ("condition", json!(format!("{CONDITION}A"))),
            (
                "condition",
                json!("GRzLaTP7DJ9t4P+a/BA0WA9wzzlsugf00+Tn6kESAfM"),
            ),
            ("conversionTerms.sourceAmount.amount", json!("1e2")),
        ] {
            let mut value = quote_put_json();
            set(&mut value, path, bad.clone());
            assert_error(&quote_put_error(&value), 3100, path);
        }
        // Schema order: condition before conversionTerms.
        let mut value = quote_put_json();
        value["condition"] = json!("x");
        remove(&mut value, "conversionTerms");
        assert_error(&quote_put_error(&value), 3100, "condition");
    }

    fn prepare_json() -> Value {
        json!({
            "commitRequestId": REQUEST_ID,
            "determiningTransferId": TRANSFER_ID,
            "initiatingFsp": "payerfsp",
            "counterPartyFsp": "fxp",
            "sourceAmount": {"currency": "BWP", "amount": "300"},
            "targetAmount": {"currency": "TZS", "amount": "48000.5"},
            "condition": CONDITION,
            "expiration": EXPIRATION
        })
    }

    fn prepare_error(value: &Value) -> FspiopError {
        parse_fx_transfer_prepare(&bytes(value)).expect_err("expected an error")
    }

    #[test]
    fn an_fx_transfer_prepare_parses() {
        let body = bytes(&prepare_json());
        let parsed = parse_fx_transfer_prepare(&body).unwrap();
        assert_eq!(
            parsed,
            ParsedFxPrepare {
                commit_request_id: id(REQUEST_ID),
                determining_transfer_id: Some(id(TRANSFER_ID)),
                initiating_fsp: fsp("payerfsp"),
                counter_party_fsp: fsp("fxp"),
                source: Money {
                    amount: Amount::from_whole(300),
                    currency: ccy("BWP")
                },
                target: Money {
                    amount: Amount::from_units(480_005_000),
                    currency: ccy("TZS")
                },
                condition: Condition::from_base64url(CONDITION).unwrap(),
                expiration_ms: Some(EXPIRATION_MS),
                request_hash: RequestHash::of(&body),
            }
        );
        assert_eq!(
            parsed.check_payer_conversion(),
            Ok((id(TRANSFER_ID), EXPIRATION_MS))
        );
        assert_eq!(parsed.check_source(&fsp("payerfsp")), Ok(()));
        assert_error(
            &parsed.check_source(&fsp("fxp")).unwrap_err(),
            3100,
            "FSPIOP-Source",
        );

        // The schema's optional properties left out; ULIDs; an extension
        // list the schema does not name, and other unknown properties.
        let mut value = prepare_json();
        remove(&mut value, "determiningTransferId");
        remove(&mut value, "expiration");
        value["commitRequestId"] = json!(ULID);
        value["extensionList"] = json!({"anything": [1]});
        value["sourceAmount"]["x"] = json!(null);
        value["ilpPacket"] = json!(7);
        let parsed = parse_fx_transfer_prepare(&bytes(&value)).unwrap();
        assert_eq!(parsed.commit_request_id, id(ULID));
        assert_eq!(parsed.determining_transfer_id, None);
        assert_eq!(parsed.expiration_ms, None);
    }

    #[test]
    fn the_fx_prepare_hash_is_of_the_raw_bytes() {
        let compact = bytes(&prepare_json());
        let pretty = serde_json::to_vec_pretty(&prepare_json()).unwrap();
        let a = parse_fx_transfer_prepare(&compact).unwrap();
        let b = parse_fx_transfer_prepare(&pretty).unwrap();
        assert_ne!(a.request_hash, b.request_hash);
        assert_eq!(a.commit_request_id, b.commit_request_id);
    }

    #[test]
    fn payer_conversion_requires_what_the_schema_leaves_optional() {
        let mut value = prepare_json();
        remove(&mut value, "determiningTransferId");
        remove(&mut value, "expiration");
        let parsed = parse_fx_transfer_prepare(&bytes(&value)).unwrap();
        let error = parsed.check_payer_conversion().unwrap_err();
        assert_error(&error, 3102, "determiningTransferId");
        assert_eq!(
            error.description,
            "Missing mandatory element - determiningTransferId"
        );
        let mut value = prepare_json();
        remove(&mut value, "expiration");
        let parsed = parse_fx_transfer_prepare(&bytes(&value)).unwrap();
        assert_error(
            &parsed.check_payer_conversion().unwrap_err(),
            3102,
            "expiration",
        );
        let mut value = prepare_json();
        value["targetAmount"]["currency"] = json!("BWP");
        let parsed = parse_fx_transfer_prepare(&bytes(&value)).unwrap();
        assert_error(
            &parsed.check_payer_conversion().unwrap_err(),
            3100,
            "targetAmount.currency",
        );
    }

    #[test]
    fn fx_prepare_faults() {
        for path in [
            "commitRequestId",
            "initiatingFsp",
            "counterPartyFsp",
            "sourceAmount",
            "targetAmount",
            "condition",
            "sourceAmount.currency",
            "sourceAmount.amount",
            "targetAmount.currency",
            "targetAmount.amount",
        ] {
            let mut value = prepare_json();
            remove(&mut value, path);
            let error = prepare_error(&value);
            assert_error(&error, 3102, path);
            assert_eq!(
                error.description,
                format!("Missing mandatory element - {path}")
            );
        }
        for path in [
            "commitRequestId",
            "determiningTransferId",
            "initiatingFsp",
            "counterPartyFsp",
            "sourceAmount",
            "targetAmount",
            "sourceAmount.amount",
            "targetAmount.currency",
            "condition",
            "expiration",
        ] {
            for wrong in [json!(null), json!(1), json!(true), json!([])] {
                let mut value = prepare_json();
                set(&mut value, path, wrong.clone());
                assert_error(&prepare_error(&value), 3101, path);
            }
        }
        for (path, bad) in [
            ("commitRequestId", json!("b51ec534-ee48-4575-b6a9")),
            ("determiningTransferId", json!("")),
            ("initiatingFsp", json!("")),
            ("counterPartyFsp", json!("a/b")),
            ("sourceAmount.currency", json!("XXY")),
            ("sourceAmount.amount", json!("0")),
            ("sourceAmount.amount", json!("1.23456")),
            ("targetAmount.amount", json!("0")),
            ("targetAmount.amount", json!("01")),
            ("condition", json!("")),
            ("condition", json!(FULFILMENT.replace('U', "+"))),
            ("expiration", json!("2016-02-30T08:38:08.699Z")),
        ] {
            let mut value = prepare_json();
            set(&mut value, path, bad.clone());
            assert_error(&prepare_error(&value), 3100, path);
        }
        for (body, code) in [(&b" "[..], 3102), (b"1", 3101), (b"{\"a\":1}x", 3101)] {
            assert_error(&parse_fx_transfer_prepare(body).unwrap_err(), code, "body");
        }
        // The first fault in schema order wins.
        let mut value = prepare_json();
        value["condition"] = json!("x");
        remove(&mut value, "counterPartyFsp");
        assert_error(&prepare_error(&value), 3102, "counterPartyFsp");
    }

    fn fulfil_json() -> Value {
        json!({
            "fulfilment": FULFILMENT,
            "completedTimestamp": EXPIRATION,
            "conversionState": "RESERVED",
            "extensionList": {"extension": [{"key": "k", "value": "v"}]}
        })
    }

    #[test]
    fn an_fx_fulfil_parses() {
        let body = bytes(&fulfil_json());
        let parsed = parse_fx_transfer_fulfil(&body).unwrap();
        assert_eq!(
            parsed,
            ParsedFxFulfil {
                conversion_state: WireState::Reserved,
                fulfilment: Fulfilment::from_base64url(FULFILMENT),
                completed_ms: Some(EXPIRATION_MS),
                request_hash: RequestHash::of(&body),
            }
        );
        for state in ["RECEIVED", "COMMITTED", "ABORTED"] {
            let value = json!({"conversionState": state, "transferState": 1});
            let parsed = parse_fx_transfer_fulfil(&bytes(&value)).unwrap();
            assert_eq!(parsed.conversion_state.as_str(), state);
            assert_eq!(parsed.fulfilment, None);
            assert_eq!(parsed.completed_ms, None);
        }
    }

    #[test]
    fn fx_fulfil_faults() {
        let mut value = fulfil_json();
        remove(&mut value, "conversionState");
        assert_error(
            &parse_fx_transfer_fulfil(&bytes(&value)).unwrap_err(),
            3102,
            "conversionState",
        );
        let mut value = fulfil_json();
        remove(&mut value, "extensionList.extension");
        assert_error(
            &parse_fx_transfer_fulfil(&bytes(&value)).unwrap_err(),
            3102,
            "extensionList.extension",
        );
        for path in [
            "fulfilment",
            "completedTimestamp",
            "conversionState",
            "extensionList",
        ] {
            for wrong in [json!(null), json!(1), json!({})] {
                let mut value = fulfil_json();
                set(&mut value, path, wrong.clone());
                if path == "extensionList" && wrong.is_object() {
                    continue; // an object, but without its extension: 3102
                }
                assert_error(
                    &parse_fx_transfer_fulfil(&bytes(&value)).unwrap_err(),
                    3101,
                    path,
                );
            }
        }
        for (path, bad) in [
            ("conversionState", json!("reserved")),
            ("conversionState", json!("FULFILLED")),
            ("fulfilment", json!("short")),
            ("fulfilment", json!(format!("{FULFILMENT}=="))),
            ("completedTimestamp", json!("2016-05-24 08:38:08.699Z")),
        ] {
            let mut value = fulfil_json();
            set(&mut value, path, bad.clone());
            assert_error(
                &parse_fx_transfer_fulfil(&bytes(&value)).unwrap_err(),
                3100,
                path,
            );
        }
        // The state first, as for transfers.
        let value = json!({"fulfilment": "x", "conversionState": "NO"});
        assert_error(
            &parse_fx_transfer_fulfil(&bytes(&value)).unwrap_err(),
            3100,
            "conversionState",
        );
        assert_error(&parse_fx_transfer_fulfil(b"").unwrap_err(), 3102, "body");
    }

    #[test]
    fn an_fx_patch_parses() {
        let value = json!({
            "completedTimestamp": EXPIRATION,
            "conversionState": "COMMITTED",
            "fulfilment": "ignored: not part of the PATCH"
        });
        let body = bytes(&value);
        let parsed = parse_fx_transfer_patch(&body).unwrap();
        assert_eq!(
            parsed,
            ParsedFxPatch {
                conversion_state: WireState::Committed,
                completed_ms: Some(EXPIRATION_MS),
                request_hash: RequestHash::of(&body),
            }
        );
        let parsed = parse_fx_transfer_patch(br#"{"conversionState":"ABORTED"}"#).unwrap();
        assert_eq!(parsed.conversion_state, WireState::Aborted);
        assert_eq!(parsed.completed_ms, None);

        assert_error(
            &parse_fx_transfer_patch(br#"{"completedTimestamp":"2016-05-24T08:38:08.699Z"}"#)
                .unwrap_err(),
            3102,
            "conversionState",
        );
        assert_error(
            &parse_fx_transfer_patch(br#"{"conversionState":7}"#).unwrap_err(),
            3101,
            "conversionState",
        );
        assert_error(
            &parse_fx_transfer_patch(br#"{"conversionState":"DONE"}"#).unwrap_err(),
            3100,
            "conversionState",
        );
        assert_error(
            &parse_fx_transfer_patch(br#"{"conversionState":"ABORTED","completedTimestamp":"x"}"#)
                .unwrap_err(),
            3100,
            "completedTimestamp",
        );
        assert_error(
            &parse_fx_transfer_patch(
                br#"{"conversionState":"ABORTED","extensionList":{"extension":[]}}"#,
            )
            .unwrap_err(),
            3100,
            "extensionList.extension",
        );
    }

    #[test]
    fn the_hubs_fx_bodies_parse_back() {
        let fulfilment = Fulfilment::from_base64url(FULFILMENT).unwrap();
        let body =
            fx_transfer_put_body(WireState::Committed, Some(&fulfilment), Some(EXPIRATION_MS));
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            format!(
                r#"{{"fulfilment":"{FULFILMENT}","completedTimestamp":"2016-05-24T12:38:08.699Z","conversionState":"COMMITTED"}}"#
            )
        );
        let parsed = parse_fx_transfer_fulfil(&body).unwrap();
        assert_eq!(parsed.conversion_state, WireState::Committed);
        assert_eq!(parsed.fulfilment, Some(fulfilment));
        assert_eq!(parsed.completed_ms, Some(EXPIRATION_MS));
        assert_eq!(
            fx_transfer_put_body(WireState::Reserved, None, None),
            br#"{"conversionState":"RESERVED"}"#
        );

        let body = fx_transfer_patch_body(WireState::Committed, Some(EXPIRATION_MS));
        assert_eq!(
            body,
            br#"{"completedTimestamp":"2016-05-24T12:38:08.699Z","conversionState":"COMMITTED"}"#
        );
        let parsed = parse_fx_transfer_patch(&body).unwrap();
        assert_eq!(parsed.completed_ms, Some(EXPIRATION_MS));
        assert_eq!(
            fx_transfer_patch_body(WireState::Aborted, None),
            br#"{"conversionState":"ABORTED"}"#
        );

        let providers = [fsp("fxp-a"), fsp("fxp\"b")];
        let body = services_fxp_put_body(&providers);
        assert_eq!(body, br#"{"providers":["fxp-a","fxp\"b"]}"#);
        assert_eq!(
            parse_services_fxp_put(&body).unwrap().providers,
            providers.to_vec()
        );
        assert_eq!(services_fxp_put_body(&[]), br#"{"providers":[]}"#);
        let many: Vec<FspName> = (0..20).map(|i| fsp(&format!("fxp{i}"))).collect();
        let parsed = parse_services_fxp_put(&services_fxp_put_body(&many)).unwrap();
        assert_eq!(parsed.providers, many[..FXP_PROVIDERS_MAX_ITEMS].to_vec());
    }

    #[test]
    fn services_fxp_faults() {
        assert_eq!(
            parse_services_fxp_put(br#"{"providers":["fxp"],"other":1}"#)
                .unwrap()
                .providers,
            vec![fsp("fxp")]
        );
        assert_error(
            &parse_services_fxp_put(b"{}").unwrap_err(),
            3102,
            "providers",
        );
        for wrong in ["null", "1", "\"fxp\"", "{}"] {
            let body = format!(r#"{{"providers":{wrong}}}"#);
            assert_error(
                &parse_services_fxp_put(body.as_bytes()).unwrap_err(),
                3101,
                "providers",
            );
        }
        assert_error(
            &parse_services_fxp_put(br#"{"providers":["fxp",2]}"#).unwrap_err(),
            3101,
            "providers[1]",
        );
        assert_error(
            &parse_services_fxp_put(br#"{"providers":[""]}"#).unwrap_err(),
            3100,
            "providers[0]",
        );
        let seventeen: Vec<String> = (0..17).map(|i| format!("fxp{i}")).collect();
        let body = serde_json::to_vec(&json!({ "providers": seventeen })).unwrap();
        assert_error(
            &parse_services_fxp_put(&body).unwrap_err(),
            3100,
            "providers",
        );
    }
}
