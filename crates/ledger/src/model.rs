//! The ledger's vocabulary: commands in, outcomes out, records to the store.

use crate::amount::Amount;
use crate::crypto::{Condition, Fulfilment, RequestHash};
use crate::error::{ErrorCode, Rejection};
use crate::ids::{AccountId, Currency, FspName, ParticipantId, TransferId};
pub use crate::modes::ParticipantMode;
pub use crate::settlement_model::*;

/// Mojaloop's ledger account types (central-ledger `seeds/ledgerAccountType.js`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccountKind {
    /// A DFSP's net position: what it owes the scheme (positive) or is owed.
    Position,
    /// A DFSP's settlement account: negative when it has deposited funds.
    Settlement,
    HubMultilateralSettlement,
    HubReconciliation,
}

impl AccountKind {
    pub const ALL: [AccountKind; 4] = [
        AccountKind::Position,
        AccountKind::Settlement,
        AccountKind::HubMultilateralSettlement,
        AccountKind::HubReconciliation,
    ];

    /// Mojaloop's name for the type, as the admin API and the store spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKind::Position => "POSITION",
            AccountKind::Settlement => "SETTLEMENT",
            AccountKind::HubMultilateralSettlement => "HUB_MULTILATERAL_SETTLEMENT",
            AccountKind::HubReconciliation => "HUB_RECONCILIATION",
        }
    }

    pub fn parse(text: &str) -> Option<AccountKind> {
        AccountKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    pub fn is_hub(self) -> bool {
        matches!(
            self,
            AccountKind::HubMultilateralSettlement | AccountKind::HubReconciliation
        )
    }
}

/// What a transfer moves: an FSPIOP transfer between two DFSPs' positions,
/// or an operator's funds movement on a DFSP's settlement account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferKind {
    Fspiop,
    FundsIn,
    FundsOut,
    /// An FSPIOP v2.0 conversion (an fxTransfer): the initiating DFSP's
    /// source-currency position to the FXP's, by the source amount. Its
    /// terms are in [`FxLink::Conversion`].
    FxConversion,
}

impl TransferKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Fspiop => "TRANSFER",
            TransferKind::FundsIn => "FUNDS_IN",
            TransferKind::FundsOut => "FUNDS_OUT",
            TransferKind::FxConversion => "FX_CONVERSION",
        }
    }

    pub fn parse(text: &str) -> Option<TransferKind> {
        [
            TransferKind::Fspiop,
            TransferKind::FundsIn,
            TransferKind::FundsOut,
            TransferKind::FxConversion,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }

    /// A movement between two DFSPs' positions (a transfer or a
    /// conversion), as opposed to an operator's funds movement: it
    /// settles in windows, and leaves memory past the retention horizon.
    pub fn is_between_positions(self) -> bool {
        matches!(self, TransferKind::Fspiop | TransferKind::FxConversion)
    }
}

/// A transfer's state. Every transfer ends in exactly one of the final ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferState {
    /// Amount held on the debit account; waiting for fulfil, abort or expiry.
    Reserved,
    /// Final: value moved from credit to debit account.
    Committed,
    /// Final: the payee (or the operator) aborted it, or the fulfilment was wrong.
    Aborted,
    /// Final: it was still reserved at its expiration instant.
    Expired,
    /// Final: refused by the liquidity or limit check at prepare; nothing moved.
    Rejected,
}

impl TransferState {
    pub fn is_final(self) -> bool {
        self != TransferState::Reserved
    }

    /// The state as FSPIOP's four-valued `TransferState` shows it.
    pub fn fspiop(self) -> &'static str {
        match self {
            TransferState::Reserved => "RESERVED",
            TransferState::Committed => "COMMITTED",
            TransferState::Aborted | TransferState::Expired | TransferState::Rejected => "ABORTED",
        }
    }

    /// The store's spelling (Mojaloop's internal state names).
    pub fn as_str(self) -> &'static str {
        match self {
            TransferState::Reserved => "RESERVED",
            TransferState::Committed => "COMMITTED",
            TransferState::Aborted => "ABORTED",
            TransferState::Expired => "EXPIRED_RESERVED",
            TransferState::Rejected => "ABORTED_REJECTED",
        }
    }

    pub fn parse(text: &str) -> Option<TransferState> {
        [
            TransferState::Reserved,
            TransferState::Committed,
            TransferState::Aborted,
            TransferState::Expired,
            TransferState::Rejected,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// Which request finished a reserved transfer. Duplicates are detected per
/// kind, as Mojaloop keeps separate fulfil and error duplicate checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishKind {
    /// The payee's `PUT /transfers/{id}` (or `recordFundsOutCommit`).
    Fulfil,
    /// The payee's `PUT /transfers/{id}/error` (or `recordFundsOutAbort`).
    Abort,
    /// The expiration instant passed.
    Expiry,
    /// Its linked partner finished in the same step: a conversion with its
    /// dependent transfer, or the dependent transfer with its conversion
    /// (committed together, or aborted or expired together).
    Linked,
}

impl FinishKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishKind::Fulfil => "FULFIL",
            FinishKind::Abort => "ABORT",
            FinishKind::Expiry => "EXPIRY",
            FinishKind::Linked => "LINKED",
        }
    }

    pub fn parse(text: &str) -> Option<FinishKind> {
        [
            FinishKind::Fulfil,
            FinishKind::Abort,
            FinishKind::Expiry,
            FinishKind::Linked,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// Why the hub aborted a transfer on the payee's message, beyond the error
/// code: what a later `GET` repeats in its `cause` extension, in Mojaloop's
/// words (`3100: Generic validation error - invalid fulfilment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortCause {
    /// The fulfil carried no fulfilment, or one that does not match the
    /// condition.
    InvalidFulfilment,
    /// The payee's fulfil or error named an FSPIOP-Destination other than
    /// the transfer's payer (central-ledger's ABORT_VALIDATION).
    DestinationNotPayer,
}

impl AbortCause {
    /// The store's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AbortCause::InvalidFulfilment => "INVALID_FULFILMENT",
            AbortCause::DestinationNotPayer => "DESTINATION_NOT_PAYER",
        }
    }

    pub fn parse(text: &str) -> Option<AbortCause> {
        [
            AbortCause::InvalidFulfilment,
            AbortCause::DestinationNotPayer,
        ]
        .into_iter()
        .find(|cause| cause.as_str() == text)
    }

    /// What follows the code's own wording, as central-ledger writes it.
    pub fn description(self) -> &'static str {
        match self {
            AbortCause::InvalidFulfilment => "invalid fulfilment",
            AbortCause::DestinationNotPayer => {
                "fspiop-destination does not match payer fsp on the Fulfil callback response"
            }
        }
    }
}

/// Operator's notes on a funds movement (Mojaloop's `reason` and
/// `externalReference`); kept with the transfer, never interpreted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FundsMemo {
    pub external_reference: String,
    pub reason: String,
}

/// FSPIOP `POST /transfers`, parsed.
#[derive(Clone, Debug)]
pub struct Prepare {
    pub transfer_id: TransferId,
    pub payer: FspName,
    pub payee: FspName,
    pub amount: Amount,
    pub currency: Currency,
    pub condition: Condition,
    pub expiration_ms: i64,
    pub request_hash: RequestHash,
    /// The FSPIOP version the prepare came in (the hub's own packing),
    /// kept verbatim for callbacks the hub sends later on its own, such as
    /// the expiry's. Opaque to the ledger; 0 when not known.
    pub wire_version: u8,
    /// The parties the prepare's ILP packet names, if it could be read:
    /// handed to the store with the transfer's row, for search, and kept
    /// nowhere in the ledger.
    pub parties: Option<std::sync::Arc<PartyIds>>,
}

/// A transfer's payer and payee as the payer's ILP packet names them,
/// each `TYPE/identifier` or `TYPE/identifier/subId` (the party registry's
/// key form). What the payer said, not what the hub checked: for finding
/// a transfer, never for deciding one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartyIds {
    pub payer: Box<str>,
    pub payee: Box<str>,
}

/// FSPIOP `PUT /transfers/{id}` from the payee.
#[derive(Clone, Debug)]
pub struct Fulfil {
    pub transfer_id: TransferId,
    /// The FSP that sent it (`FSPIOP-Source`); must be the payee.
    pub caller: FspName,
    /// `None` when the payee sent none: like a wrong one, it aborts the
    /// transfer (3100), as central-ledger does.
    pub fulfilment: Option<Fulfilment>,
    /// The message's `FSPIOP-Destination`, if it had one: anyone but the
    /// payer aborts the transfer (3100), as central-ledger does.
    pub destination: Option<FspName>,
    pub request_hash: RequestHash,
}

/// FSPIOP `PUT /transfers/{id}/error` from the payee.
#[derive(Clone, Debug)]
pub struct Abort {
    pub transfer_id: TransferId,
    pub caller: FspName,
    /// The payee's error code, kept as the transfer's reason.
    pub error_code: ErrorCode,
    /// As [`Fulfil::destination`]: anyone but the payer aborts the
    /// transfer with 3100 instead of the payee's code.
    pub destination: Option<FspName>,
    pub request_hash: RequestHash,
}

/// FSPIOP v2.0 `POST /fxTransfers` (payer conversion), parsed: the
/// initiating DFSP asks the FXP to convert `source` into `target` for the
/// transfer `determining_transfer_id`.
#[derive(Clone, Debug)]
pub struct PrepareConversion {
    pub commit_request_id: TransferId,
    /// The initiating DFSP (the payer); the caller.
    pub initiating: FspName,
    /// The FXP (`counterPartyFsp`).
    pub fxp: FspName,
    pub source_amount: Amount,
    pub source_currency: Currency,
    pub terms: ConversionTerms,
    pub condition: Condition,
    pub expiration_ms: i64,
    pub request_hash: RequestHash,
    /// As [`Prepare::wire_version`].
    pub wire_version: u8,
}

/// FSPIOP v2.0 `PUT /fxTransfers/{ID}` from the FXP (conversionState
/// RESERVED or COMMITTED): it will convert once the dependent transfer
/// commits. Moves no position.
#[derive(Clone, Debug)]
pub struct FulfilConversion {
    pub commit_request_id: TransferId,
    /// `FSPIOP-Source`; must be the FXP.
    pub caller: FspName,
    /// `None` or one that does not match the condition aborts the
    /// conversion (3100): a conversion without the FXP's fulfilment is
    /// not one it agreed to (central-ledger accepts it, fx-research §10.3).
    pub fulfilment: Option<Fulfilment>,
    /// As [`Fulfil::destination`]: anyone but the initiating DFSP aborts
    /// the conversion (3100).
    pub destination: Option<FspName>,
    pub request_hash: RequestHash,
}

/// What a conversion converts into, beyond what a transfer row holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConversionTerms {
    /// The transfer whose commit this conversion depends on (payer
    /// conversion): its `transferId`.
    pub determining_transfer_id: TransferId,
    pub target_currency: Currency,
    pub target_amount: Amount,
}

/// How an FX transfer is linked to its partner, kept with its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FxLink {
    /// The row is a conversion ([`TransferKind::FxConversion`]).
    Conversion(ConversionTerms),
    /// The row is the transfer a conversion depends on: its debit is the
    /// FXP's target-currency position, and its FSPIOP payer is `payer`,
    /// the conversion's initiating DFSP.
    Dependent {
        commit_request_id: TransferId,
        payer: ParticipantId,
    },
}

/// A currency pair an FXP converts: from `source` into `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Corridor {
    pub source: Currency,
    pub target: Currency,
}

/// Most corridors one FXP declares.
pub const CORRIDORS_PER_FXP_MAX: usize = 256;

/// An FXP as the operator declared it, as stored (an upsert; no corridors
/// means it is no longer offered as an FXP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FxpRow {
    pub participant: ParticipantId,
    /// Sorted, without repeats.
    pub corridors: Vec<Corridor>,
}

/// An FXP as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FxpView {
    pub fsp: FspName,
    /// Its mode lets it convert (take one currency and pay another).
    pub active: bool,
    /// The corridors the operator declared.
    pub corridors: Vec<Corridor>,
    /// Of those, the ones whose two currencies' position accounts exist
    /// and are enabled: with `active`, what it could convert now.
    pub convertible: Vec<Corridor>,
}

/// The FXP's acceptance of a conversion (`PUT /fxTransfers/{ID}`), as
/// stored: the conversion stays RESERVED (Mojaloop's
/// RECEIVED_FULFIL_DEPENDENT) until its dependent transfer finishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionFulfilRow {
    /// The conversion's transfer seq.
    pub seq: u64,
    pub fulfilment: Fulfilment,
    pub request_hash: RequestHash,
    pub at_ms: i64,
}

/// Operator's `recordFundsIn` / `recordFundsOutPrepareReserve`.
#[derive(Clone, Debug)]
pub struct Funds {
    pub transfer_id: TransferId,
    pub participant: FspName,
    /// The participant's SETTLEMENT account, as named in the admin path.
    pub account: AccountId,
    pub amount: Amount,
    pub currency: Currency,
    pub memo: FundsMemo,
    pub request_hash: RequestHash,
}

/// Operator's `recordFundsOutCommit` / `recordFundsOutAbort`.
#[derive(Clone, Debug)]
pub struct FundsFinish {
    pub transfer_id: TransferId,
    pub participant: FspName,
    pub account: AccountId,
    pub request_hash: RequestHash,
}

/// One input to the ledger. A batch is applied in order, each command
/// atomically: a rejected command changes nothing.
#[derive(Clone, Debug)]
pub enum Command {
    /// Creates the hub participant (once, at first start).
    CreateHub {
        name: FspName,
    },
    /// `POST /participants/Hub/accounts`.
    CreateHubAccount {
        currency: Currency,
        kind: AccountKind,
    },
    /// `POST /participants`: creates the DFSP if new and its POSITION and
    /// SETTLEMENT accounts in `currency`.
    CreateParticipant {
        name: FspName,
        currency: Currency,
    },
    /// `POST /participants` with `"isProxy": true`: as
    /// [`Command::CreateParticipant`], the participant created a proxy
    /// (a currency added to an existing participant keeps what it is).
    CreateProxy {
        name: FspName,
        currency: Currency,
    },
    /// The proxy map: the DFSP `dfsp` of another scheme is reached through
    /// the proxy participant `proxy`. `by_operator`: set through the admin
    /// API, replacing any entry; otherwise learnt from a proxy's answer to
    /// a discovery this hub asked, kept only where `dfsp` has no entry (an
    /// operator's entry, or the first proxy that answered, stays).
    MapProxy {
        dfsp: FspName,
        proxy: FspName,
        by_operator: bool,
    },
    /// Drops `dfsp`'s proxy map entry. `learnt_via: None` is the
    /// operator's delete (the entry must exist); `Some(proxy)` heals a
    /// route that failed through `proxy`: the entry goes only if it is a
    /// learnt one through that proxy (an operator's entry stays).
    UnmapProxy {
        dfsp: FspName,
        learnt_via: Option<FspName>,
    },
    /// The proxy map, in DFSP name order.
    ReadProxyMap,
    /// `PUT /participants/{name}` `{"isActive": …}`: `true` is the
    /// `active` mode, `false` `suspended`.
    SetParticipantActive {
        name: FspName,
        active: bool,
    },
    /// `PUT /participants/{name}` `{"mode": …}` (kasi's extension): what
    /// it may do in new payments from the next batch on (`modes.rs`).
    SetParticipantMode {
        name: FspName,
        mode: ParticipantMode,
    },
    /// `PUT /participants/{name}/accounts/{id}`.
    SetAccountActive {
        name: FspName,
        account: AccountId,
        active: bool,
    },
    /// `POST /participants/{name}/initialPositionAndLimits`: the first cap.
    InitNetDebitCap {
        name: FspName,
        currency: Currency,
        net_debit_cap: Amount,
    },
    /// `PUT /participants/{name}/limits`: changes an existing cap.
    SetNetDebitCap {
        name: FspName,
        currency: Currency,
        net_debit_cap: Amount,
    },
    Prepare(Prepare),
    Fulfil(Fulfil),
    Abort(Abort),
    FundsIn(Funds),
    FundsOutReserve(Funds),
    FundsOutCommit(FundsFinish),
    FundsOutAbort(FundsFinish),
    /// `POST /fxTransfers`.
    PrepareConversion(PrepareConversion),
    /// `PUT /fxTransfers/{ID}` from the FXP.
    FulfilConversion(FulfilConversion),
    /// `PUT /fxTransfers/{ID}/error` from the FXP (`transfer_id` is the
    /// commitRequestId): aborts the conversion and its dependent transfer.
    AbortConversion(Abort),
    /// `GET /fxTransfers/{ID}`: only the initiating DFSP or the FXP may ask.
    GetConversion {
        commit_request_id: TransferId,
        caller: FspName,
    },
    /// The admin API's `PUT /fxps/{name}`: the corridors an FXP serves
    /// (replacing any before; none withdraws it), for `GET /services/FXP`.
    SetFxpCorridors {
        name: FspName,
        corridors: Vec<Corridor>,
    },
    /// Every declared FXP, in name order.
    ReadFxps,
    /// `POST /participants/{name}/endpoints`: sets (or replaces) one endpoint.
    SetEndpoint {
        name: FspName,
        endpoint_type: String,
        value: String,
    },
    /// `POST /settlementModels`: keeps the model under a unique name.
    CreateSettlementModel {
        name: String,
        /// The request's JSON, kept to show back as it came.
        definition: String,
        /// `None` for a model over accounts kasi's transfers do not move
        /// (Mojaloop's INTERCHANGE_FEE): kept, shown, settling nothing.
        rules: Option<ModelRules>,
    },
    /// Reads one participant (or all) with accounts and endpoints.
    ReadParticipants {
        name: Option<FspName>,
    },
    /// `POST /participants/{Type}/{ID}[/{SubId}]`: `fsp` (the caller) holds
    /// the party. Registering again by the same FSP updates the currency.
    RegisterParty {
        key: PartyKey,
        fsp: FspName,
        currency: Option<Currency>,
    },
    /// `DELETE /participants/{Type}/{ID}[/{SubId}]` by the FSP holding it.
    DeleteParty {
        key: PartyKey,
        caller: FspName,
    },
    /// Every registered party (to load the hub's lookup table).
    /// `POST /quotes` in persistent mode: `payer` (the caller) asks `payee`.
    RecordQuote {
        quote_id: TransferId,
        payer: FspName,
        payee: FspName,
        request_hash: RequestHash,
    },
    /// `PUT /quotes/{ID}` (or `/error`) in persistent mode, from the payee.
    AnswerQuote {
        quote_id: TransferId,
        caller: FspName,
        is_error: bool,
        body: String,
        request_hash: RequestHash,
    },
    ReadParties,
    /// Reads every settlement model.
    ReadSettlementModels,
    /// `POST /oracles`: an external oracle for a party id type (and
    /// optionally one currency). At most one live oracle per (type,
    /// currency), and one default per type.
    CreateOracle {
        id_type: String,
        endpoint: String,
        currency: Option<Currency>,
        is_default: bool,
    },
    /// `PUT /oracles/{ID}`: replaces a live oracle's configuration.
    UpdateOracle {
        id: u32,
        id_type: String,
        endpoint: String,
        currency: Option<Currency>,
        is_default: bool,
    },
    /// `DELETE /oracles/{ID}`: the oracle stops being used; its id is never
    /// given to another one.
    DeleteOracle {
        id: u32,
    },
    /// Every live oracle, in id order.
    ReadOracles,
    GetTransfer {
        transfer_id: TransferId,
        caller: FspName,
    },
    /// The admin API's read of any transfer in memory, FSPIOP transfer or
    /// funds movement, whoever its parties (the operator is neither).
    ReadTransfer {
        transfer_id: TransferId,
    },
    /// Expires every reserved transfer whose expiration is at or before the
    /// batch's time. The pipeline issues it when the next expiry is due.
    Expire,
    /// `POST /v2/settlementWindows/{id}`: freezes the open window's sums into
    /// its content and opens the next window, in one step.
    CloseSettlementWindow {
        id: u32,
        reason: String,
    },
    /// `POST /v2/settlements`: nets the windows' content of a deferred NET
    /// model into a settlement.
    CreateSettlement {
        model: String,
        reason: String,
        windows: Vec<u32>,
    },
    /// `PUT /v2/settlements/{id}` with `participants`: account transitions.
    UpdateSettlement {
        settlement: u32,
        changes: Vec<AccountChange>,
    },
    /// `PUT /v2/settlements/{id}` with `state: ABORTED`.
    AbortSettlement {
        settlement: u32,
        reason: String,
        external_reference: Option<String>,
    },
    /// `POST /v2/settlements/{id}/finalize` (kasi's): every remaining stage
    /// and the liquidity movements, all or nothing.
    FinalizeSettlement {
        settlement: u32,
        reason: String,
        external_reference: Option<String>,
    },
    /// Every window, oldest first.
    ReadSettlementWindows,
    /// Every settlement, oldest first.
    ReadSettlements,
    /// A settlement's figures: per account, and who paid whom.
    ReadSettlementReport {
        settlement: u32,
    },
    /// An admin change with who made it: `command` is applied as it is and,
    /// if it changed something, an audit event is recorded in the same
    /// batch (so in the same store transaction).
    Audited {
        command: Box<Command>,
        tag: Box<AuditTag>,
    },
    /// The newest audit events kept in memory that match, newest first.
    ReadAuditEvents(AuditQuery),
    /// Keeps a four-eyes pending change as it now stands (an upsert of the
    /// whole row: requested, then decided). The hub decides what it holds;
    /// the ledger only makes it durable in order with the changes it
    /// governs.
    KeepPendingChange(Box<PendingChangeRow>),
    /// Every pending change the hub has kept, in id order.
    ReadPendingChanges,
    /// `POST /participants/{name}/certificates`: a client certificate
    /// (its SHA-256) that may act as the participant on the FSPIOP API.
    PinCertificate {
        name: FspName,
        fingerprint: [u8; 32],
    },
    /// `DELETE /participants/{name}/certificates/{fingerprint}`.
    UnpinCertificate {
        name: FspName,
        fingerprint: [u8; 32],
    },
    /// Every pinned certificate, in fingerprint order.
    ReadCertificatePins,
    /// A change made outside the ledger (a DFSP's JWS public key, kept as a
    /// file), submitted inside [`Command::Audited`] only to record its
    /// event: `before` and `after` are the event's JSON. Alone, it changes
    /// nothing.
    NoteExternalChange {
        before: String,
        after: String,
    },
    /// An admin request refused before it reached the ledger (no valid
    /// credential, a role that may not write, a body the hub could not
    /// read), submitted inside [`Command::Audited`] only to record its
    /// event: `outcome` (e.g. `UNAUTHENTICATED`) and `detail`, the event's
    /// `after` JSON. Alone, it changes nothing.
    NoteRefused {
        outcome: String,
        detail: String,
    },
}

/// Renders what an audit event shows of the changed resource: the outcome
/// of [`AuditTag::view`] (before and after the change) or, without a view,
/// the change's own outcome (after). Supplied by the HTTP side, so that
/// the ledger knows no JSON; it must be a pure function.
#[derive(Clone, Copy)]
pub struct AuditRender(pub fn(target: &str, outcome: &Outcome) -> String);

impl std::fmt::Debug for AuditRender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditRender")
    }
}

/// Who makes an admin change and what it is, as the HTTP side knows it.
#[derive(Clone, Debug)]
pub struct AuditTag {
    /// The credential's name (a token's or certificate's), `loopback` on
    /// an open admin address, `kasi` for the hub's own clockwork.
    pub actor: String,
    pub role: String,
    /// How the actor signed in: `tokens-file`, `certificate`,
    /// `identity-provider`, `open` or `hub` (so a break-glass token's use
    /// stands out in the trail).
    pub source: String,
    /// E.g. `participant.create`, `funds.in`.
    pub action: String,
    /// The participant, or the resource (`oracle/3`, `settlement/2`).
    pub target: String,
    /// A read command showing the target, applied just before and just
    /// after the change (in the same batch, so nothing comes between).
    pub view: Option<Box<Command>>,
    pub render: AuditRender,
}

/// Audit events kept in memory (and loaded at start); older ones stay in
/// the store's `audit_events` table.
pub const AUDIT_EVENTS_IN_MEMORY: usize = 10_000;

/// A four-eyes (maker/checker) pending change: an admin change one person
/// asked for, kept until a different person approves or rejects it or it
/// expires. Kept whole and replaced whole at each step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChangeRow {
    /// The hub's id for it (a UUID).
    pub id: String,
    /// The four-eyes action (`funds-out`, `net-debit-cap`, …).
    pub action: String,
    /// What it changes (a participant's name, `settlement/3`).
    pub target: String,
    /// The admin request as asked: method, path (with query) and the exact
    /// body, run as it is at approval.
    pub method: String,
    pub path: String,
    pub body: String,
    /// Who asked: name, role (`operator`, `finance`) and how they signed
    /// in (`token`, `oidc`).
    pub maker: String,
    pub maker_role: String,
    pub maker_source: String,
    pub reason: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    /// `pending`, `applied`, `failed`, `rejected` or `expired`.
    pub state: String,
    /// Who decided (empty while pending, or for an expiry), their role,
    /// why, and when (0 while pending).
    pub checker: String,
    pub checker_role: String,
    pub decision_reason: String,
    pub decided_at_ms: i64,
}

/// A durable record of one admin change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEventRow {
    /// From 1, in order.
    pub id: u64,
    pub at_ms: i64,
    pub actor: String,
    pub role: String,
    /// How the actor signed in ([`AuditTag::source`]); empty for events
    /// recorded before kasi kept it (store schema 9).
    pub source: String,
    pub action: String,
    pub target: String,
    /// JSON text of the target before and after (`null` if none).
    pub before: String,
    pub after: String,
    /// What the change answered (e.g. `DONE`, `COMMITTED`, `CREATED`), or
    /// why nothing changed: `REFUSED <code>: <description>` for a change
    /// the ledger refused, `UNAUTHENTICATED`, `FORBIDDEN` or `REFUSED …`
    /// for a request refused before it (see [`Command::NoteRefused`]).
    pub outcome: String,
}

/// A filter of audit events; `None` matches anything.
#[derive(Clone, Debug, Default)]
pub struct AuditQuery {
    /// The event's target is this participant.
    pub participant: Option<String>,
    pub action: Option<String>,
    pub actor: Option<String>,
    /// How the actor signed in (`tokens-file` lists break-glass use).
    pub source: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub limit: usize,
}

impl AuditQuery {
    pub fn matches(&self, event: &AuditEventRow) -> bool {
        self.participant.as_ref().is_none_or(|p| *p == event.target)
            && self.action.as_ref().is_none_or(|a| *a == event.action)
            && self.actor.as_ref().is_none_or(|a| *a == event.actor)
            && self.source.as_ref().is_none_or(|s| *s == event.source)
            && self.from_ms.is_none_or(|from| event.at_ms >= from)
            && self.to_ms.is_none_or(|to| event.at_ms <= to)
    }
}

/// A client certificate pinned to a participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinRow {
    pub fingerprint: [u8; 32],
    pub participant: ParticipantId,
    pub pinned_at_ms: i64,
}

/// A pinned certificate as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinView {
    pub fingerprint: [u8; 32],
    pub fsp: FspName,
    pub pinned_at_ms: i64,
}

/// Most certificates pinned to one participant.
pub const PINS_PER_PARTICIPANT_MAX: usize = 16;

/// A transfer as the API needs it to answer and to route callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferView {
    pub transfer_id: TransferId,
    pub kind: TransferKind,
    pub payer: FspName,
    pub payee: FspName,
    pub amount: Amount,
    pub currency: Currency,
    pub state: TransferState,
    /// Why it did not commit: 4001/4200 for a rejection, 3100 for a wrong
    /// fulfilment, 3303 for expiry, or the payee's own error code.
    pub reason: Option<ErrorCode>,
    /// Why the hub aborted it on the payee's message, if it did.
    pub cause: Option<AbortCause>,
    pub expiration_ms: i64,
    pub prepared_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    pub fulfilment: Option<Fulfilment>,
    /// [`Prepare::wire_version`] (0 for funds movements).
    pub wire_version: u8,
    /// A conversion's terms, or a dependent transfer's conversion, with
    /// the partner's state.
    pub fx: Option<FxView>,
    /// The settlement window its commit fell in (the finish's
    /// `settlement_window`): `None` until it commits, for one that did
    /// not commit, and for a funds movement (no window holds those).
    pub settlement_window: Option<u32>,
}

/// The FX side of a [`TransferView`]: what the transfer's own rows say, so
/// that a view read back from the store is the view memory gave. A linked
/// pair ends together, so a dependent transfer's state says its
/// conversion's ([`FxView::conversion_state`]); the other leg is read by
/// its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FxView {
    /// The view is of a conversion.
    Conversion {
        terms: ConversionTerms,
        /// When the FXP accepted it (its fulfilment is the view's).
        fxp_fulfilled_at_ms: Option<i64>,
    },
    /// The view is of the transfer a conversion depends on.
    Dependent {
        commit_request_id: TransferId,
        fxp: FspName,
    },
}

impl FxView {
    /// The state of the conversion a dependent transfer in `state` depends
    /// on: the same, but for a transfer refused on the FXP's limits, whose
    /// conversion was aborted.
    pub fn conversion_state(state: TransferState) -> TransferState {
        match state {
            TransferState::Rejected => TransferState::Aborted,
            state => state,
        }
    }
}

/// The result of one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An admin command took effect.
    Done,
    /// A participant was created or gained a currency; its new accounts.
    AccountsCreated(Vec<AccountId>),
    /// The transfer's state after the command (RESERVED, COMMITTED, ABORTED
    /// by the payee or operator), or its current state for `GetTransfer`.
    Transfer(TransferView),
    /// `ReadTransfer` of a transfer that left memory (past the retention
    /// horizon): the store's copy, as prefetched.
    StoredTransfer(TransferView),
    /// The same request was seen before: nothing changed; the current state
    /// is here so that the API can resend it.
    Duplicate(TransferView),
    /// The command was refused and changed nothing.
    Rejected(Rejection),
    /// The command was refused and that refusal is the transfer's final
    /// state: a prepare over the liquidity cover or the net debit cap
    /// (REJECTED), a wrong fulfilment (ABORTED), a fulfil after expiration
    /// (EXPIRED). Balances are as before the transfer.
    Failed {
        transfer: TransferView,
        error: Rejection,
    },
    /// Transfers that `Expire` moved from RESERVED to EXPIRED.
    Expired(Vec<TransferView>),
    Participants(Vec<ParticipantView>),
    SettlementModels(Vec<SettlementModelRow>),
    Parties(Vec<PartyView>),
    /// A quote request or answer seen before with the same body: nothing
    /// changed; the known answer, if any, is here to resend.
    QuoteDuplicate(QuoteView),
    /// `CreateOracle` took effect; the new oracle's id.
    OracleCreated(u32),
    /// Live oracles, in id order.
    Oracles(Vec<OracleRow>),
    /// A proxy map change: whether it changed the map (a learnt entry
    /// where one exists, or a heal of another entry, changes nothing).
    ProxyMapChanged(bool),
    /// The proxy map, in DFSP name order.
    ProxyMap(Vec<ProxyMapView>),
    /// A window: the new open one after a close.
    Window(WindowView),
    SettlementWindows(Vec<WindowView>),
    Settlement(SettlementView),
    Settlements(Vec<SettlementView>),
    /// An account-transition update: the settlement after it, how each
    /// asked change went, and the windows whose state changed.
    SettlementUpdated {
        settlement: SettlementView,
        results: Vec<AccountChangeResult>,
        changed_windows: Vec<u32>,
    },
    SettlementReport(SettlementReport),
    /// Newest first.
    AuditEvents(Vec<AuditEventRow>),
    CertificatePins(Vec<PinView>),
    /// Declared FXPs, in name order.
    Fxps(Vec<FxpView>),
    /// Four-eyes pending changes, in id order.
    PendingChanges(Vec<PendingChangeRow>),
}

impl Outcome {
    /// The FSPIOP error code of a refusal, if this outcome is one.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Outcome::Rejected(rejection)
            | Outcome::Failed {
                error: rejection, ..
            } => Some(rejection.code),
            _ => None,
        }
    }
}

/// A participant as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParticipantRow {
    pub id: ParticipantId,
    pub name: FspName,
    pub is_hub: bool,
    /// Stands for the DFSPs of another scheme (central-ledger's `isProxy`):
    /// positions, caps, funds and settlement like a DFSP's; the DFSPs it
    /// represents are in the proxy map ([`ProxyMapRow`]). Set at creation.
    pub is_proxy: bool,
    /// What it may do in new payments (`modes.rs`); central-ledger's
    /// `isActive` is [`ParticipantMode::is_active`].
    pub mode: ParticipantMode,
    pub created_at_ms: i64,
}

/// An account as stored, with its balances after the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountRow {
    pub id: AccountId,
    pub participant: ParticipantId,
    pub currency: Currency,
    pub kind: AccountKind,
    pub active: bool,
    /// Posted balance: the sum of committed movements (debits positive).
    pub value: Amount,
    /// Held by reserved transfers that debit this account; never negative.
    pub reserved: Amount,
    /// POSITION accounts only, once set.
    pub net_debit_cap: Option<Amount>,
    pub created_at_ms: i64,
    /// When `value` or `reserved` last changed (the creation, at first).
    pub changed_at_ms: i64,
}

/// A transfer as first recorded (prepare, funds in, funds out reserve, or a
/// rejected prepare). Written once, never updated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferRow {
    /// Order of recording, from 1; the store's primary key.
    pub seq: u64,
    pub transfer_id: TransferId,
    pub kind: TransferKind,
    pub debit: AccountId,
    pub credit: AccountId,
    pub amount: Amount,
    pub condition: Condition,
    pub expiration_ms: i64,
    pub prepared_at_ms: i64,
    pub request_hash: RequestHash,
    /// RESERVED, or a state that is final at once (COMMITTED funds in,
    /// REJECTED prepare).
    pub state: TransferState,
    pub reason: Option<ErrorCode>,
    pub memo: Option<Box<FundsMemo>>,
    /// [`Prepare::wire_version`] (0 for funds movements).
    pub wire_version: u8,
    /// A conversion's terms or a dependent transfer's link.
    pub fx: Option<FxLink>,
}

/// How a reserved transfer finished. Written once per transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishRow {
    pub seq: u64,
    pub kind: FinishKind,
    pub state: TransferState,
    pub reason: Option<ErrorCode>,
    /// Why the hub aborted it on the payee's message, if it did.
    pub cause: Option<AbortCause>,
    pub finished_at_ms: i64,
    /// Zero for expiry.
    pub request_hash: RequestHash,
    pub fulfilment: Option<Fulfilment>,
    /// The settlement window a committed FSPIOP transfer belongs to: the one
    /// open when its commit was applied.
    pub settlement_window: Option<u32>,
}

/// What a batch changed, for the store to make durable in one transaction.
/// Participant and account rows carry their whole new value (upserts);
/// transfer and finish rows are inserts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Participant(ParticipantRow),
    Account(AccountRow),
    Transfer(TransferRow),
    Finish(FinishRow),
    Endpoint(EndpointRow),
    SettlementModel(SettlementModelRow),
    Party(PartyRow),
    PartyDeleted(PartyKey),
    /// An oracle as created or updated (an upsert of the whole row).
    Oracle(OracleRow),
    /// The oracle with this id was deleted (its row stays, inactive, so
    /// that the id is never reused).
    OracleDeleted(u32),
    /// A proxy map entry as set (an upsert by DFSP name).
    ProxyMapping(ProxyMapRow),
    /// The proxy map entry of this DFSP was dropped.
    ProxyUnmapped(FspName),
    /// A quote as recorded or answered (an upsert of the whole row).
    Quote(QuoteRow),
    /// A settlement window as created or changed (an upsert).
    Window(WindowRow),
    /// A window's content row as created or changed (an upsert).
    Content(ContentRow),
    /// The frozen sums of a content row (inserted once, at the close).
    ContentAccounts(Vec<ContentAccountRow>),
    ContentPairs(Vec<ContentPairRow>),
    /// A settlement and its accounts as created or changed (an upsert).
    Settlement(SettlementRow),
    /// A posted movement of settlement (an insert).
    Entry(EntryRow),
    /// An admin change's audit event (an insert).
    AuditEvent(AuditEventRow),
    /// A certificate pinned (an insert).
    CertificatePin(PinRow),
    /// The pin of this fingerprint removed.
    CertificateUnpinned([u8; 32]),
    /// The FXP accepted a conversion (an insert, once per conversion).
    ConversionFulfilled(ConversionFulfilRow),
    /// An FXP's corridors as declared (an upsert of the whole row).
    Fxp(FxpRow),
    /// A four-eyes pending change as it now stands (an upsert).
    PendingChange(PendingChangeRow),
    /// The parties of the transfer recorded with this seq, right after its
    /// `Transfer` record in the same batch ([`Prepare::parties`]): for
    /// search only; recovery never reads them back.
    TransferParties(u64, std::sync::Arc<PartyIds>),
}

/// Longest quote answer kept for resending (a `PUT /quotes/{ID}` body).
pub const QUOTE_ANSWER_MAX_BYTES: usize = 64 * 1024;

/// The payee's answer to a quote, kept to resend on a duplicate request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuoteAnswer {
    pub request_hash: RequestHash,
    /// `PUT /quotes/{ID}/error` rather than `PUT /quotes/{ID}`.
    pub is_error: bool,
    /// The answer's body as the payee sent it.
    pub body: String,
    pub answered_at_ms: i64,
}

/// A quote in the quoting service's persistent mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuoteRow {
    pub quote_id: TransferId,
    pub payer: ParticipantId,
    pub payee: ParticipantId,
    pub request_hash: RequestHash,
    pub received_at_ms: i64,
    pub answer: Option<QuoteAnswer>,
}

/// A recorded quote as the API needs it to resend an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuoteView {
    pub quote_id: TransferId,
    pub payer: FspName,
    pub payee: FspName,
    pub answer: Option<QuoteAnswer>,
}

/// Longest party identifier, sub-id or type name kept (FSPIOP: 128).
pub const PARTY_ID_MAX_LEN: usize = 128;

/// An FSPIOP party: `partyIdType`, `partyIdentifier` and the optional
/// `partySubIdOrType`, as the participant registry (the oracle) keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartyKey {
    pub id_type: String,
    pub identifier: String,
    pub sub_id: Option<String>,
}

impl std::fmt::Display for PartyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.id_type, self.identifier)?;
        match &self.sub_id {
            Some(sub_id) => write!(f, "/{sub_id}"),
            None => Ok(()),
        }
    }
}

/// Which FSP holds a party, as registered in the built-in oracle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartyRow {
    pub key: PartyKey,
    pub fsp: ParticipantId,
    pub currency: Option<Currency>,
    pub registered_at_ms: i64,
}

/// A registry entry as the API needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartyView {
    pub key: PartyKey,
    pub fsp: FspName,
    pub currency: Option<Currency>,
}

/// Longest endpoint type name the ledger keeps (Mojaloop's are < 64).
pub const ENDPOINT_TYPE_MAX_LEN: usize = 64;
/// Longest endpoint value (a URL template) the ledger keeps.
pub const ENDPOINT_VALUE_MAX_LEN: usize = 1024;
/// Longest settlement model name, and its definition as JSON.
pub const SETTLEMENT_MODEL_NAME_MAX_LEN: usize = 64;
pub const SETTLEMENT_MODEL_DEFINITION_MAX_LEN: usize = 4096;

/// A participant's callback endpoint (Mojaloop's `participantEndpoint`):
/// `endpoint_type` is e.g. `FSPIOP_CALLBACK_URL_TRANSFER_POST`, `value` a URL
/// template. The ledger keeps them; the HTTP side interprets them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointRow {
    pub participant: ParticipantId,
    pub endpoint_type: String,
    pub value: String,
}

/// A settlement model as the operator defined it, kept verbatim until
/// settlement is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementModelRow {
    pub id: u32,
    pub name: String,
    pub definition: String,
    /// What it means; `None` for a definition kasi could not read.
    pub rules: Option<ModelRules>,
}

/// Longest oracle party id type (FSPIOP's are at most 16 characters).
pub const ORACLE_ID_TYPE_MAX_LEN: usize = 32;
/// Longest oracle endpoint URL.
pub const ORACLE_ENDPOINT_MAX_LEN: usize = 1024;
/// Live oracles the ledger keeps at most.
pub const ORACLES_MAX: usize = 1_000;
/// Oracle ids the ledger gives out at most, deleted ones included (ids are
/// never reused, so a deleted oracle keeps its row).
pub const ORACLE_IDS_MAX: usize = 65_536;

/// An external oracle (Mojaloop ALS's `oracleEndpoint`): where to ask who
/// holds parties of `id_type` (`GET {endpoint}/participants/{Type}/{ID}`),
/// for one currency or any. The ledger keeps it; the HTTP side calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleRow {
    /// From 1, in creation order; never reused.
    pub id: u32,
    /// An FSPIOP `PartyIdType`, e.g. `MSISDN`.
    pub id_type: String,
    /// Base URL (`http://` or `https://`), without a trailing `/participants`.
    pub endpoint: String,
    pub currency: Option<Currency>,
    /// Used for lookups of `id_type` that name no currency.
    pub is_default: bool,
    /// False once deleted.
    pub active: bool,
}

/// DFSPs of other schemes the proxy map holds at most (a learnt entry
/// past it is refused; the operator can delete entries).
pub const PROXY_MAP_MAX: usize = 100_000;

/// A DFSP of another scheme and the proxy participant it is reached
/// through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyMapRow {
    /// Never a participant of this scheme (a participant's name wins).
    pub dfsp: FspName,
    /// A participant created as a proxy.
    pub proxy: ParticipantId,
    /// Set through the admin API (else learnt from a discovery answer).
    pub by_operator: bool,
    pub since_ms: i64,
}

/// A proxy map entry with its proxy's name, for the admin API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyMapView {
    pub dfsp: FspName,
    pub proxy: FspName,
    pub by_operator: bool,
    pub since_ms: i64,
}

/// A participant with its accounts and endpoints, for the admin API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParticipantView {
    pub participant: ParticipantRow,
    pub accounts: Vec<AccountRow>,
    pub endpoints: Vec<EndpointRow>,
}
