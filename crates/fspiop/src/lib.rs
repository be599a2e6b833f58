//! The FSPIOP v1.1 wire format, and v2.0's foreign exchange, as a pure
//! library: request headers and version negotiation, transfer, quote, bulk
//! quote, transaction request, authorization and participant-registry
//! bodies with schema validation, v2.0's fxQuotes, fxTransfers and
//! `/services/FXP` bodies (`fx.rs`),
//! the query of `GET /authorizations/{ID}`, party path parameters, the bodies the hub sends
//! back, error answers, FSPIOP's `DateTime`, and the payer and payee read
//! out of a transfer's `ilpPacket` ([`ilp`]).
//!
//! No I/O, no async, no HTTP types: header values come in as
//! `Option<&str>` (see [`header_str`] for raw bytes) and bodies as `&[u8]`;
//! the caller adapts its HTTP library. Bodies are read with serde_json into
//! borrowed structs (no copy of strings without escapes), everything else
//! is parsed by hand.
//!
//! # Which error code a fault gets
//!
//! Every description names the header or field at fault, with its JSON path
//! (`amount.currency`, `extensionList.extension[2].key`):
//!
//! * **3102 Missing mandatory element**: a required header is absent or
//!   empty; the body is empty; a required property or query parameter is
//!   absent.
//! * **3101 Malformed syntax**: a header that does not parse (Content-Type,
//!   Accept, Date, an FSP header, a path `{ID}`, `{Type}` or `{SubId}`); a body that is not one
//!   JSON object (bad syntax or UTF-8, trailing data, a duplicate key); a
//!   property of the wrong JSON type, including
//!   `null` (`"amount": 5` where an object is expected); a query string
//!   that does not decode, a query parameter given twice or not of its
//!   type (`retriesLeft` not an integer).
//! * **3100 Generic validation error**: a property of the right JSON type
//!   whose value breaks a schema rule: a pattern (CorrelationId, Amount,
//!   IlpPacket, IlpCondition, DateTime, Date, ErrorCode, Latitude/Longitude,
//!   Name, MerchantClassificationCode, ...), a length (FspId,
//!   PartyIdentifier, Note, ExtensionKey/Value, ErrorDescription, ExtensionList
//!   and partyList items), an enumeration (Currency, TransferState,
//!   PartyIdType, AmountType, TransactionScenario, TransactionRequestState,
//!   AuthenticationType, AuthorizationResponse, ...), or a hub rule on a valid value
//!   (a fulfil's ABORTED/RECEIVED state, an FspId that is not a usable
//!   [`ledger::FspName`], an errorCode outside 1000-5999).
//! * **3001 Unacceptable version requested** (HTTP 406): Content-Type or
//!   Accept asks for a version other than 1.0, 1.1 and 2.0.
//!
//! Header faults are described in Mojaloop's exact words (its header
//! validation plugin's: `Missing mandatory element - Accept is required`,
//! `Malformed syntax - Invalid content-type header`, ...), since a scheme's
//! conformance suite compares descriptions; body faults name the field.
//!
//! Unknown JSON properties are ignored at every level, as Mojaloop's hub
//! does. The first fault in schema property order is reported.

mod bulk_quotes;
mod datetime;
mod endpoints;
mod error;
mod fx;
mod headers;
pub mod ilp;
mod json;
pub mod jws;
mod participants;
mod party;
mod quotes;
mod schema;
#[cfg(test)]
mod test_support;
mod transaction_requests;
mod transfers;

pub use bulk_quotes::{
    parse_bulk_quote_post, parse_bulk_quote_put, ParsedBulkQuotePost, ParsedBulkQuotePut,
    BULK_QUOTE_MAX_ITEMS,
};
pub use datetime::{format_date_time, parse_date_time};
pub use endpoints::{DISCOVERY_CALLBACKS, FX_CALLBACKS, TRANSFER_CALLBACKS};
pub use error::{
    answer_body, error_body, error_body_with_extensions, http_status_for, FspiopError,
    ERROR_DESCRIPTION_MAX_CHARS,
};
pub use fx::{
    fx_transfer_patch_body, fx_transfer_put_body, parse_fx_quote_post, parse_fx_quote_put,
    parse_fx_transfer_fulfil, parse_fx_transfer_patch, parse_fx_transfer_prepare,
    parse_services_fxp_put, services_fxp_put_body, FxMoney, ParsedFxConversion, ParsedFxFulfil,
    ParsedFxPatch, ParsedFxPrepare, ParsedFxQuotePost, ParsedFxQuotePut, ParsedServicesFxpPut,
    FXP_PROVIDERS_MAX_ITEMS, FX_CHARGES_MAX_ITEMS, FX_CHARGE_TYPE_MAX_CHARS,
};
pub(crate) use headers::SUPPORTED_VERSION_EXTENSIONS;
pub use headers::{
    check_content_type, check_date, check_fsp_header, content_type_for, header_str,
    negotiate_accept, negotiate_accept_preferring, CheckedHeaders, RequestHeaders, Resource,
    Version, ACCEPT, ACCEPT_INVALID, ACCEPT_REQUIRED, ACCEPT_VERSION_UNSUPPORTED, CONTENT_TYPE,
    CONTENT_TYPE_INVALID, CONTENT_TYPE_REQUIRED, CONTENT_VERSION_UNSUPPORTED, DATE, DATE_INVALID,
    DATE_REQUIRED, FSPIOP_DESTINATION, FSPIOP_PROXY, FSPIOP_SOURCE,
};
pub use json::{
    push_extension_list, EXTENSION_KEY_MAX_CHARS, EXTENSION_LIST_MAX_ITEMS,
    EXTENSION_VALUE_MAX_CHARS,
};
/// The registry's key of a party (`{Type}/{ID}[/{SubId}]`), the ledger's
/// type, re-exported: see [`parse_party_key`].
pub use ledger::PartyKey;
pub use participants::{
    parse_participant_post, parse_participants_batch, participant_put_body,
    participants_batch_put_body, participants_batch_put_body_with_fsp, ParsedParticipantPost,
    ParsedParticipantsBatch, PARTY_LIST_MAX_ITEMS,
};
pub use party::{
    check_party_identifier, check_party_put, check_party_sub_id, is_url_syntax,
    parse_party_id_type, parse_party_key, ParsedPartyIdInfo, PartyIdType,
    PARTY_IDENTIFIER_MAX_CHARS, PARTY_SUB_ID_MAX_CHARS,
};
pub use quotes::{parse_quote_post, parse_quote_put, AmountType, ParsedQuotePost, ParsedQuotePut};
pub use schema::Money;
pub use transaction_requests::{
    parse_authorization_put, parse_authorization_query, parse_transaction_request_post,
    parse_transaction_request_put, ParsedAuthorizationPut, ParsedAuthorizationQuery,
    ParsedTransactionRequestPost, ParsedTransactionRequestPut,
};
pub use transfers::{
    check_completed_timestamp, is_correlation_id, parse_correlation_id, parse_error_information,
    parse_transfer_fulfil, parse_transfer_prepare, transfer_patch_body,
    transfer_patch_body_with_extensions, transfer_put_body, transfer_put_body_with_extensions,
    ParsedError, ParsedFulfil, ParsedPrepare, WireState, COMPLETED_TIMESTAMP_MAX_FUTURE_MS,
    COMPLETED_TIMESTAMP_MAX_PAST_MS, ILP_PACKET_MAX_CHARS,
};
