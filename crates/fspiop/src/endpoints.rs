//! The callback endpoints a DFSP registers with a hub, as Mojaloop's
//! onboarding collections and SDKs lay them out under one base URL:
//! (endpoint type, path under the base). `{{…}}` is filled in by the hub.

/// The transfer callbacks.
pub const TRANSFER_CALLBACKS: &[(&str, &str)] = &[
    ("FSPIOP_CALLBACK_URL_TRANSFER_POST", "/transfers"),
    (
        "FSPIOP_CALLBACK_URL_TRANSFER_PUT",
        "/transfers/{{transferId}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_TRANSFER_ERROR",
        "/transfers/{{transferId}}/error",
    ),
];

/// Account lookup (participants, parties), quotes, request-to-pay and
/// bulk quotes.
pub const DISCOVERY_CALLBACKS: &[(&str, &str)] = &[
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT",
        "/participants/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT_ERROR",
        "/participants/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT",
        "/participants/{{requestId}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTICIPANT_BATCH_PUT_ERROR",
        "/participants/{{requestId}}/error",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_GET",
        "/parties/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_PUT",
        "/parties/{{partyIdType}}/{{partyIdentifier}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR",
        "/parties/{{partyIdType}}/{{partyIdentifier}}/error",
    ),
    // Bare base URLs: the hub appends `/quotes[/{ID}[/error]]` and the like.
    ("FSPIOP_CALLBACK_URL_QUOTES", ""),
    ("FSPIOP_CALLBACK_URL_TRX_REQ_SERVICE", ""),
    ("FSPIOP_CALLBACK_URL_AUTHORIZATIONS", ""),
    ("FSPIOP_CALLBACK_URL_BULK_QUOTES", ""),
];

/// Foreign exchange (FSPIOP v2.0): what a payer DFSP needs to convert
/// (the FXP's answers to its FX quotes and conversions, the hub's FXP
/// lists) and what an FXP needs to be asked. The FX quotes entry is a bare
/// base URL, as for quotes: the hub appends `/fxQuotes[/{ID}[/error]]`,
/// and `/services/FXP[/{Source}/{Target}]` for its FXP lists. The PUT
/// endpoint also takes the hub's `PATCH /fxTransfers/{ID}` to the FXP
/// (FSPIOP names no endpoint type for it).
pub const FX_CALLBACKS: &[(&str, &str)] = &[
    ("FSPIOP_CALLBACK_URL_FX_QUOTES", ""),
    ("FSPIOP_CALLBACK_URL_FX_TRANSFER_POST", "/fxTransfers"),
    (
        "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT",
        "/fxTransfers/{{commitRequestId}}",
    ),
    (
        "FSPIOP_CALLBACK_URL_FX_TRANSFER_ERROR",
        "/fxTransfers/{{commitRequestId}}/error",
    ),
];
