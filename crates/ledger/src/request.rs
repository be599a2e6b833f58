//! Typed requests: every command has a request type whose reply type
//! holds only what that command can come to, so a handler matches exactly
//! those cases and a mismatched reply does not compile.
//!
//! The pipeline still carries the flat [`Command`] and [`Outcome`] (one
//! batch mixes every kind). An outcome becomes its request's reply in one
//! place, [`Request::reply`]; that it never fails is the ledger's promise,
//! checked by `tests/requests.rs`, which applies every kind of command.

use crate::error::Rejection;
use crate::ids::{AccountId, Currency, FspName, TransferId};
use crate::model::*;
use crate::{Amount, RequestHash};

/// An outcome its request cannot come to (a ledger bug), as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexpected(pub Box<Outcome>);

fn unexpected(outcome: Outcome) -> Unexpected {
    Unexpected(Box::new(outcome))
}

/// A command with a typed reply.
pub trait Request {
    type Reply;
    fn into_command(self) -> Command;
    /// The reply, or the outcome as it came when it is not one this
    /// request can come to (a ledger bug).
    fn reply(outcome: Outcome) -> Result<Self::Reply, Unexpected>;
}

/// What a transfer message (prepare, fulfil, abort, GET) or a funds
/// movement comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferReply {
    /// Its state after the request (RESERVED, COMMITTED, ABORTED), or now
    /// for a GET.
    Done(TransferView),
    /// Seen before with the same body: nothing changed; its state now.
    Duplicate(TransferView),
    /// Refused, and that refusal is the transfer's final state (REJECTED,
    /// ABORTED by the hub, EXPIRED): balances as before the transfer.
    Failed {
        transfer: TransferView,
        error: Rejection,
    },
    /// Refused; nothing changed.
    Refused(Rejection),
}

/// What recording a quote or its answer comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuoteReply {
    Recorded,
    /// Seen before with the same body: nothing changed; the known answer,
    /// if any, to resend.
    Duplicate(QuoteView),
    Refused(Rejection),
}

/// Where a transfer read by [`ReadTransfer`] was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    InMemory,
    /// Past the retention horizon: the store's copy (prefetched).
    InStore,
}

/// An account-transition update of a settlement: the settlement after it,
/// how each asked change went, and the windows whose state changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementUpdate {
    pub settlement: SettlementView,
    pub results: Vec<AccountChangeResult>,
    pub changed_windows: Vec<u32>,
}

fn transfer(outcome: Outcome) -> Result<TransferReply, Unexpected> {
    Ok(match outcome {
        Outcome::Transfer(view) => TransferReply::Done(view),
        Outcome::Duplicate(view) => TransferReply::Duplicate(view),
        Outcome::Failed { transfer, error } => TransferReply::Failed { transfer, error },
        Outcome::Rejected(rejection) => TransferReply::Refused(rejection),
        other => return Err(unexpected(other)),
    })
}

fn quote(outcome: Outcome) -> Result<QuoteReply, Unexpected> {
    Ok(match outcome {
        Outcome::Done => QuoteReply::Recorded,
        Outcome::QuoteDuplicate(view) => QuoteReply::Duplicate(view),
        Outcome::Rejected(rejection) => QuoteReply::Refused(rejection),
        other => return Err(unexpected(other)),
    })
}

/// A reply that is an answer or a refusal: `answer` picks the one outcome
/// that is the answer.
fn answer<T>(
    outcome: Outcome,
    answer: impl FnOnce(Outcome) -> Result<T, Unexpected>,
) -> Result<Result<T, Rejection>, Unexpected> {
    match outcome {
        Outcome::Rejected(rejection) => Ok(Err(rejection)),
        other => answer(other).map(Ok),
    }
}

type Answer<T> = Result<Result<T, Rejection>, Unexpected>;

fn done(outcome: Outcome) -> Answer<()> {
    answer(outcome, |o| match o {
        Outcome::Done => Ok(()),
        other => Err(unexpected(other)),
    })
}

fn accounts(outcome: Outcome) -> Answer<Vec<AccountId>> {
    answer(outcome, |o| match o {
        Outcome::AccountsCreated(ids) => Ok(ids),
        other => Err(unexpected(other)),
    })
}

fn oracle_created(outcome: Outcome) -> Answer<u32> {
    answer(outcome, |o| match o {
        Outcome::OracleCreated(id) => Ok(id),
        other => Err(unexpected(other)),
    })
}

fn participants(outcome: Outcome) -> Answer<Vec<ParticipantView>> {
    answer(outcome, |o| match o {
        Outcome::Participants(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

fn parties(outcome: Outcome) -> Answer<Vec<PartyView>> {
    answer(outcome, |o| match o {
        Outcome::Parties(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

fn settlement_models(outcome: Outcome) -> Answer<Vec<SettlementModelRow>> {
    answer(outcome, |o| match o {
        Outcome::SettlementModels(models) => Ok(models),
        other => Err(unexpected(other)),
    })
}

fn proxy_map_changed(outcome: Outcome) -> Answer<bool> {
    answer(outcome, |o| match o {
        Outcome::ProxyMapChanged(changed) => Ok(changed),
        other => Err(unexpected(other)),
    })
}

fn proxy_map(outcome: Outcome) -> Answer<Vec<ProxyMapView>> {
    answer(outcome, |o| match o {
        Outcome::ProxyMap(rows) => Ok(rows),
        other => Err(unexpected(other)),
    })
}

fn oracles(outcome: Outcome) -> Answer<Vec<OracleRow>> {
    answer(outcome, |o| match o {
        Outcome::Oracles(rows) => Ok(rows),
        other => Err(unexpected(other)),
    })
}

fn transfer_view(outcome: Outcome) -> Answer<TransferView> {
    answer(outcome, |o| match o {
        Outcome::Transfer(view) => Ok(view),
        other => Err(unexpected(other)),
    })
}

fn transfer_read(outcome: Outcome) -> Answer<(TransferView, Held)> {
    answer(outcome, |o| match o {
        Outcome::Transfer(view) => Ok((view, Held::InMemory)),
        Outcome::StoredTransfer(view) => Ok((view, Held::InStore)),
        other => Err(unexpected(other)),
    })
}

fn window(outcome: Outcome) -> Answer<WindowView> {
    answer(outcome, |o| match o {
        Outcome::Window(view) => Ok(view),
        other => Err(unexpected(other)),
    })
}

fn windows(outcome: Outcome) -> Answer<Vec<WindowView>> {
    answer(outcome, |o| match o {
        Outcome::SettlementWindows(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

fn settlement(outcome: Outcome) -> Answer<SettlementView> {
    answer(outcome, |o| match o {
        Outcome::Settlement(view) => Ok(view),
        other => Err(unexpected(other)),
    })
}

fn settlements(outcome: Outcome) -> Answer<Vec<SettlementView>> {
    answer(outcome, |o| match o {
        Outcome::Settlements(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

fn settlement_updated(outcome: Outcome) -> Answer<SettlementUpdate> {
    answer(outcome, |o| match o {
        Outcome::SettlementUpdated {
            settlement,
            results,
            changed_windows,
        } => Ok(SettlementUpdate {
            settlement,
            results,
            changed_windows,
        }),
        other => Err(unexpected(other)),
    })
}

fn settlement_report(outcome: Outcome) -> Answer<SettlementReport> {
    answer(outcome, |o| match o {
        Outcome::SettlementReport(report) => Ok(report),
        other => Err(unexpected(other)),
    })
}

fn audit_events(outcome: Outcome) -> Answer<Vec<AuditEventRow>> {
    answer(outcome, |o| match o {
        Outcome::AuditEvents(events) => Ok(events),
        other => Err(unexpected(other)),
    })
}

fn pending_changes(outcome: Outcome) -> Answer<Vec<PendingChangeRow>> {
    answer(outcome, |o| match o {
        Outcome::PendingChanges(rows) => Ok(rows),
        other => Err(unexpected(other)),
    })
}

fn fxps(outcome: Outcome) -> Answer<Vec<FxpView>> {
    answer(outcome, |o| match o {
        Outcome::Fxps(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

fn certificate_pins(outcome: Outcome) -> Answer<Vec<PinView>> {
    answer(outcome, |o| match o {
        Outcome::CertificatePins(views) => Ok(views),
        other => Err(unexpected(other)),
    })
}

/// A request type per command with named fields (or none), named like
/// its [`Command`] variant, and its reply.
macro_rules! requests {
    ($(
        $(#[$doc:meta])*
        $name:ident { $($field:ident : $ty:ty),* $(,)? } => $reply:ty = $convert:ident;
    )*) => {$(
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name { $(pub $field: $ty),* }

        impl Request for $name {
            type Reply = $reply;

            fn into_command(self) -> Command {
                Command::$name { $($field: self.$field),* }
            }

            fn reply(outcome: Outcome) -> Result<$reply, Unexpected> {
                $convert(outcome)
            }
        }
    )*};
}

type Changed<T> = Result<T, Rejection>;

requests! {
    CreateHub { name: FspName } => Changed<()> = done;
    CreateHubAccount { currency: Currency, kind: AccountKind } => Changed<Vec<AccountId>> = accounts;
    CreateParticipant { name: FspName, currency: Currency } => Changed<Vec<AccountId>> = accounts;
    CreateProxy { name: FspName, currency: Currency } => Changed<Vec<AccountId>> = accounts;
    /// Whether the map changed (see [`Command::MapProxy`]).
    MapProxy { dfsp: FspName, proxy: FspName, by_operator: bool } => Changed<bool> = proxy_map_changed;
    /// Whether the map changed (see [`Command::UnmapProxy`]).
    UnmapProxy { dfsp: FspName, learnt_via: Option<FspName> } => Changed<bool> = proxy_map_changed;
    SetParticipantActive { name: FspName, active: bool } => Changed<()> = done;
    SetParticipantMode { name: FspName, mode: ParticipantMode } => Changed<()> = done;
    SetAccountActive { name: FspName, account: AccountId, active: bool } => Changed<()> = done;
    InitNetDebitCap { name: FspName, currency: Currency, net_debit_cap: Amount } => Changed<()> = done;
    SetNetDebitCap { name: FspName, currency: Currency, net_debit_cap: Amount } => Changed<()> = done;
    SetEndpoint { name: FspName, endpoint_type: String, value: String } => Changed<()> = done;
    CreateSettlementModel { name: String, definition: String, rules: Option<ModelRules> } => Changed<()> = done;
    RegisterParty { key: PartyKey, fsp: FspName, currency: Option<Currency> } => Changed<()> = done;
    DeleteParty { key: PartyKey, caller: FspName } => Changed<()> = done;
    CreateOracle { id_type: String, endpoint: String, currency: Option<Currency>, is_default: bool } => Changed<u32> = oracle_created;
    UpdateOracle { id: u32, id_type: String, endpoint: String, currency: Option<Currency>, is_default: bool } => Changed<()> = done;
    DeleteOracle { id: u32 } => Changed<()> = done;
    PinCertificate { name: FspName, fingerprint: [u8; 32] } => Changed<()> = done;
    UnpinCertificate { name: FspName, fingerprint: [u8; 32] } => Changed<()> = done;
    /// Recorded only for its audit event (see [`Command::NoteExternalChange`]).
    NoteExternalChange { before: String, after: String } => Changed<()> = done;
    /// Recorded only for its audit event (see [`Command::NoteRefused`]).
    NoteRefused { outcome: String, detail: String } => Changed<()> = done;

    RecordQuote { quote_id: TransferId, payer: FspName, payee: FspName, request_hash: RequestHash } => QuoteReply = quote;
    AnswerQuote { quote_id: TransferId, caller: FspName, is_error: bool, body: String, request_hash: RequestHash } => QuoteReply = quote;

    /// `GET /transfers/{ID}`: only the payer or the payee may ask.
    GetTransfer { transfer_id: TransferId, caller: FspName } => Changed<TransferView> = transfer_view;
    ReadTransfer { transfer_id: TransferId } => Changed<(TransferView, Held)> = transfer_read;
    /// `GET /fxTransfers/{ID}`: only the initiating DFSP or the FXP may ask.
    GetConversion { commit_request_id: TransferId, caller: FspName } => Changed<TransferView> = transfer_view;
    SetFxpCorridors { name: FspName, corridors: Vec<Corridor> } => Changed<()> = done;
    ReadFxps {} => Changed<Vec<FxpView>> = fxps;

    CloseSettlementWindow { id: u32, reason: String } => Changed<WindowView> = window;
    CreateSettlement { model: String, reason: String, windows: Vec<u32> } => Changed<SettlementView> = settlement;
    UpdateSettlement { settlement: u32, changes: Vec<AccountChange> } => Changed<SettlementUpdate> = settlement_updated;
    AbortSettlement { settlement: u32, reason: String, external_reference: Option<String> } => Changed<SettlementView> = settlement;
    FinalizeSettlement { settlement: u32, reason: String, external_reference: Option<String> } => Changed<SettlementView> = settlement;

    ReadParticipants { name: Option<FspName> } => Changed<Vec<ParticipantView>> = participants;
    ReadParties {} => Changed<Vec<PartyView>> = parties;
    ReadSettlementModels {} => Changed<Vec<SettlementModelRow>> = settlement_models;
    ReadOracles {} => Changed<Vec<OracleRow>> = oracles;
    ReadProxyMap {} => Changed<Vec<ProxyMapView>> = proxy_map;
    ReadSettlementWindows {} => Changed<Vec<WindowView>> = windows;
    ReadSettlements {} => Changed<Vec<SettlementView>> = settlements;
    ReadSettlementReport { settlement: u32 } => Changed<SettlementReport> = settlement_report;
    ReadCertificatePins {} => Changed<Vec<PinView>> = certificate_pins;
    ReadPendingChanges {} => Changed<Vec<PendingChangeRow>> = pending_changes;
}

/// A request whose command wraps one value.
macro_rules! wrapped {
    ($($(#[$doc:meta])* $name:ident($ty:ty) => $reply:ty = $convert:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name(pub $ty);

        impl Request for $name {
            type Reply = $reply;

            fn into_command(self) -> Command {
                Command::$name(self.0)
            }

            fn reply(outcome: Outcome) -> Result<$reply, Unexpected> {
                $convert(outcome)
            }
        }
    )*};
}

wrapped! {
    /// `recordFundsIn`.
    FundsIn(Funds) => TransferReply = transfer;
    /// `recordFundsOutPrepareReserve`.
    FundsOutReserve(Funds) => TransferReply = transfer;
    /// `recordFundsOutCommit`.
    FundsOutCommit(FundsFinish) => TransferReply = transfer;
    /// `recordFundsOutAbort`.
    FundsOutAbort(FundsFinish) => TransferReply = transfer;
    ReadAuditEvents(AuditQuery) => Changed<Vec<AuditEventRow>> = audit_events;
    KeepPendingChange(Box<PendingChangeRow>) => Changed<()> = done;
    /// `PUT /fxTransfers/{ID}/error` from the FXP.
    AbortConversion(Abort) => TransferReply = transfer;
}

/// The FSPIOP transfer messages are their own requests.
macro_rules! message {
    ($($name:ident),*) => {$(
        impl Request for $name {
            type Reply = TransferReply;

            fn into_command(self) -> Command {
                Command::$name(self)
            }

            fn reply(outcome: Outcome) -> Result<TransferReply, Unexpected> {
                transfer(outcome)
            }
        }
    )*};
}

message!(Prepare, Fulfil, Abort, PrepareConversion, FulfilConversion);
