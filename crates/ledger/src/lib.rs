//! kasi's ledger: the hub's accounts, limits and transfers as a pure,
//! deterministic state machine.
//!
//! [`Ledger::apply_batch`] takes a batch of [`Command`]s and the batch's time,
//! and returns one [`Outcome`] per command, in order, plus the [`Record`]s the
//! store must make durable before any of those outcomes is released. The
//! ledger does no I/O, reads no clock and spawns nothing; replaying the same
//! batches gives the same state.
//!
//! Money follows Mojaloop's central-ledger: a DFSP's POSITION account holds
//! its net position (what it owes the scheme), its SETTLEMENT account is
//! negative by the funds it deposited, and a prepare is checked against both
//! (liquidity cover, 4001) and the net debit cap (4200). Every posted movement
//! debits one account and credits another, so the values of a currency's
//! accounts sum to zero; a reserved transfer only holds its amount on the
//! payer's `reserved` until it commits, aborts or expires.

mod amount;
mod audit;
mod compact;
mod crypto;
mod error;
mod funds;
mod fx;
mod ids;
mod ledger;
mod model;
mod modes;
mod participants;
mod prefetch;
mod proxies;
mod quotes;
mod registry;
pub mod request;
mod restore;
mod retention;
mod settlement;
mod settlement_model;
mod snapshot;
mod transfer_map;
mod transfers;

pub use amount::{Amount, AmountError, MAX_INTEGER_DIGITS, SCALE};
pub use crypto::{Condition, Fulfilment, RequestHash, BASE64URL_LEN, PREIMAGE_LEN};
pub use error::{ErrorCode, Rejection};
pub use ids::{
    AccountId, Currency, FspName, IdBlob, IdForm, ParticipantId, TransferId, FSP_NAME_MAX_LEN,
    ULID_LEN, UUID_LEN,
};
pub use ledger::{BatchResult, Ledger, Limits};
pub use model::*;
pub use modes::{
    accounts_refusal, conversion_refusal, may_convert, payment_refusal, side_refusal,
    ParticipantMode, PauseRefusal, Side,
};
pub use prefetch::{Lookup, PrefetchIds, Prefetched, StoredParties, StoredTransfer};
pub use request::{Held, QuoteReply, Request, SettlementUpdate, TransferReply, Unexpected};
pub use snapshot::{Archived, Snapshot, WindowPairSum};
