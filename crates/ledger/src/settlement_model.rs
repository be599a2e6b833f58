//! Settlement's vocabulary: models' rules, windows, their frozen content,
//! settlements and their accounts, and the ledger entries settlement posts.
//! Names and states are Mojaloop's central-settlement's (see
//! `shared/MOJALOOP-SETTLEMENT.md`).

use crate::amount::Amount;
use crate::ids::{AccountId, Currency, ParticipantId, TransferId};
use crate::model::AccountKind;

macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Mojaloop's spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Exactly Mojaloop's spelling (case-sensitive).
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }
    };
}

wire_enum!(
    /// Whether each transfer settles on its own or the net of many does.
    Granularity { Gross => "GROSS", Net => "NET" }
);
wire_enum!(
    /// Between pairs of DFSPs, or each DFSP against the hub.
    Interchange { Bilateral => "BILATERAL", Multilateral => "MULTILATERAL" }
);
wire_enum!(
    /// At commit, or later in a settlement.
    Delay { Immediate => "IMMEDIATE", Deferred => "DEFERRED" }
);
wire_enum!(
    /// A settlement window's state. (Mojaloop's PROCESSING and FAILED never
    /// occur: kasi closes a window in one ledger step.)
    WindowState {
        Open => "OPEN",
        Closed => "CLOSED",
        PendingSettlement => "PENDING_SETTLEMENT",
        Settled => "SETTLED",
        Aborted => "ABORTED",
    }
);
wire_enum!(
    /// A settlement's state, and its accounts' (all but SETTLING).
    SettlementState {
        PendingSettlement => "PENDING_SETTLEMENT",
        PsTransfersRecorded => "PS_TRANSFERS_RECORDED",
        PsTransfersReserved => "PS_TRANSFERS_RESERVED",
        PsTransfersCommitted => "PS_TRANSFERS_COMMITTED",
        Settling => "SETTLING",
        Settled => "SETTLED",
        Aborted => "ABORTED",
    }
);
wire_enum!(
    /// Why the ledger posted an entry outside any FSPIOP transfer.
    EntryKind {
        /// A net recipient's POSITION reset against the hub's
        /// HUB_MULTILATERAL_SETTLEMENT (at PS_TRANSFERS_RESERVED).
        RecipientReset => "SETTLEMENT_NET_RECIPIENT",
        /// A net sender's POSITION reset (at PS_TRANSFERS_COMMITTED).
        SenderReset => "SETTLEMENT_NET_SENDER",
        /// An aborted settlement gives a recipient's reset back.
        ResetReversal => "SETTLEMENT_REVERSAL",
        /// A committed transfer under a GROSS model moves the payer's and
        /// the payee's SETTLEMENT accounts at once (two entries).
        GrossSettlement => "GROSS_SETTLEMENT",
        /// Finalize: a net recipient's liquidity grows by its net.
        FinalizeFundsIn => "SETTLEMENT_FUNDS_IN",
        /// Finalize: a net sender's liquidity shrinks by its net.
        FinalizeFundsOut => "SETTLEMENT_FUNDS_OUT",
    }
);

impl SettlementState {
    /// The stage an account must be at before moving to `self`, in the
    /// lock-step order; `None` for states no request may ask for.
    pub fn stage(self) -> Option<u8> {
        match self {
            SettlementState::PendingSettlement => Some(0),
            SettlementState::PsTransfersRecorded => Some(1),
            SettlementState::PsTransfersReserved => Some(2),
            SettlementState::PsTransfersCommitted => Some(3),
            SettlementState::Settling => None,
            SettlementState::Settled => Some(4),
            SettlementState::Aborted => None,
        }
    }
}

/// What a settlement model means (central-ledger's model fields). A model
/// whose stored definition kasi could not read (one accepted before kasi
/// understood models) has none and takes no part in settlement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRules {
    pub granularity: Granularity,
    pub interchange: Interchange,
    pub delay: Delay,
    /// `None`: the default model, for currencies no model names.
    pub currency: Option<Currency>,
    /// The accounts whose movements it settles (kasi's transfers move
    /// POSITION accounts).
    pub ledger_account_type: AccountKind,
    /// Where liquidity moves (SETTLEMENT).
    pub settlement_account_type: AccountKind,
    pub auto_position_reset: bool,
    pub require_liquidity_check: bool,
}

impl ModelRules {
    /// Mojaloop's valid (delay, granularity, interchange) combinations
    /// (central-services-shared `ValidSettlementModels`).
    pub fn is_valid_combination(&self) -> bool {
        matches!(
            (self.delay, self.granularity, self.interchange),
            (Delay::Immediate, Granularity::Gross, Interchange::Bilateral)
                | (Delay::Deferred, Granularity::Gross, Interchange::Bilateral)
                | (Delay::Deferred, Granularity::Net, Interchange::Bilateral)
                | (Delay::Deferred, Granularity::Net, Interchange::Multilateral)
        )
    }

    /// Settled in settlements (windows' content), rather than at commit.
    pub fn is_deferred_net(&self) -> bool {
        self.granularity == Granularity::Net && self.delay == Delay::Deferred
    }
}

/// A settlement window as stored (upserted on every change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowRow {
    pub id: u32,
    pub state: WindowState,
    pub reason: String,
    pub created_at_ms: i64,
    pub changed_at_ms: i64,
}

/// One (window, ledger account type, currency) of a closed window, with the
/// NET model that settles it (Mojaloop's `settlementWindowContent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentRow {
    pub id: u32,
    pub window: u32,
    pub ledger_account_type: AccountKind,
    pub currency: Currency,
    pub model: u32,
    /// CLOSED, PENDING_SETTLEMENT, SETTLED or ABORTED.
    pub state: WindowState,
    /// The settlement that holds it, while one does.
    pub settlement: Option<u32>,
    pub created_at_ms: i64,
    pub changed_at_ms: i64,
}

/// An account's committed movements within one content row, frozen at the
/// close (Mojaloop's `settlementContentAggregation`, both signs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentAccountRow {
    pub content: u32,
    pub account: AccountId,
    /// Sum of committed transfers it paid, and how many.
    pub sent: Amount,
    pub sent_count: u32,
    /// Sum of committed transfers it received, and how many.
    pub received: Amount,
    pub received_count: u32,
}

/// What one payer paid one payee within one content row (for bilateral
/// reports).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentPairRow {
    pub content: u32,
    pub payer: AccountId,
    pub payee: AccountId,
    pub amount: Amount,
    pub count: u32,
}

/// An account in a settlement (Mojaloop's `settlementParticipantCurrency`):
/// the DFSP's POSITION account and what it owes (+) or is owed (−).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementAccountRow {
    pub account: AccountId,
    pub participant: ParticipantId,
    pub currency: Currency,
    pub net: Amount,
    pub state: SettlementState,
    pub reason: String,
    pub external_reference: Option<String>,
    pub changed_at_ms: i64,
}

/// A settlement as stored (upserted on every change, accounts included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementRow {
    pub id: u32,
    pub model: u32,
    pub state: SettlementState,
    pub reason: String,
    pub external_reference: Option<String>,
    pub created_at_ms: i64,
    pub changed_at_ms: i64,
    /// The windows it covers, in the order asked.
    pub windows: Vec<u32>,
    /// In account id order.
    pub accounts: Vec<SettlementAccountRow>,
}

/// A movement the ledger posts on its own (settlement), outside any FSPIOP
/// transfer: debit one account, credit another, at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRow {
    /// Order of posting, from 1.
    pub seq: u64,
    pub kind: EntryKind,
    pub debit: AccountId,
    pub credit: AccountId,
    pub amount: Amount,
    pub at_ms: i64,
    pub settlement: Option<u32>,
    /// The committed transfer a gross settlement entry settles.
    pub transfer: Option<TransferId>,
}

/// A window as the API shows it: its row, its content and who it touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowView {
    pub row: WindowRow,
    pub content: Vec<ContentRow>,
    /// Participants and currencies with committed transfers in it.
    pub participants: Vec<ParticipantId>,
    pub currencies: Vec<Currency>,
}

/// A settlement as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementView {
    pub row: SettlementRow,
    pub model_name: String,
    pub windows: Vec<WindowView>,
}

/// One account transition asked for in a settlement update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountChange {
    pub participant: u32,
    pub account: u32,
    /// As sent; anything but a reachable account state is refused for
    /// this account alone.
    pub state: String,
    pub reason: String,
    pub external_reference: Option<String>,
}

/// How one [`AccountChange`] went: `None`, or Mojaloop's per-account
/// error description (code 3000).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountChangeResult {
    pub participant: u32,
    pub account: u32,
    pub error: Option<String>,
}

/// One account's line of a settlement report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportLine {
    pub participant: ParticipantId,
    pub account: AccountId,
    pub currency: Currency,
    pub net: Amount,
    pub sent: Amount,
    pub sent_count: u32,
    pub received: Amount,
    pub received_count: u32,
    pub state: SettlementState,
}

/// What one DFSP paid another within a settlement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BilateralLine {
    pub currency: Currency,
    pub payer: ParticipantId,
    pub payee: ParticipantId,
    pub amount: Amount,
    pub count: u32,
}

/// A settlement's figures for the settlement bank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementReport {
    /// In account order.
    pub accounts: Vec<ReportLine>,
    /// In (currency, payer, payee) order.
    pub bilateral: Vec<BilateralLine>,
}
