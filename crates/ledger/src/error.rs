//! FSPIOP error codes (API Definition v1.1 §7.6) and the ledger's rejection.

use std::fmt;

use crate::modes::PauseRefusal;

/// A four-digit FSPIOP error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    pub const INTERNAL_SERVER_ERROR: ErrorCode = ErrorCode(2001);
    /// Nothing was done and the request may be sent again later (a store
    /// that cannot be read or written for now, a full queue).
    pub const SERVICE_UNAVAILABLE: ErrorCode = ErrorCode(2003);
    pub const GENERIC_CLIENT_ERROR: ErrorCode = ErrorCode(3000);
    pub const UNACCEPTABLE_VERSION: ErrorCode = ErrorCode(3001);
    pub const ADD_PARTY_INFORMATION_ERROR: ErrorCode = ErrorCode(3003);
    pub const GENERIC_VALIDATION_ERROR: ErrorCode = ErrorCode(3100);
    pub const MALFORMED_SYNTAX: ErrorCode = ErrorCode(3101);
    pub const MISSING_MANDATORY_ELEMENT: ErrorCode = ErrorCode(3102);
    pub const MODIFIED_REQUEST: ErrorCode = ErrorCode(3106);
    pub const ID_NOT_FOUND: ErrorCode = ErrorCode(3200);
    pub const DESTINATION_FSP_ERROR: ErrorCode = ErrorCode(3201);
    pub const PAYER_FSP_ID_NOT_FOUND: ErrorCode = ErrorCode(3202);
    pub const TRANSFER_ID_NOT_FOUND: ErrorCode = ErrorCode(3208);
    pub const TRANSFER_EXPIRED: ErrorCode = ErrorCode(3303);
    pub const PAYER_FSP_INSUFFICIENT_LIQUIDITY: ErrorCode = ErrorCode(4001);
    pub const PAYER_LIMIT_ERROR: ErrorCode = ErrorCode(4200);

    /// FSPIOP's standard wording for the code, or a generic one by class.
    // The specific codes come first on purpose; the ranges catch the rest.
    #[allow(clippy::match_overlapping_arm)]
    pub fn description(self) -> &'static str {
        match self.0 {
            2001 => "Internal server error",
            2003 => "Service currently unavailable",
            3000 => "Generic client error",
            3001 => "Unacceptable version requested",
            3003 => "Add Party information error",
            3100 => "Generic validation error",
            3101 => "Malformed syntax",
            3102 => "Missing mandatory element",
            3106 => "Modified request",
            3200 => "Generic ID not found",
            3201 => "Destination FSP Error",
            3202 => "Payer FSP ID not found",
            3208 => "Transfer ID not found",
            3303 => "Transfer expired",
            4001 => "Payer FSP insufficient liquidity",
            4200 => "Payer limit error",
            1000..=1999 => "Communication error",
            2000..=2999 => "Server error",
            3000..=3999 => "Client error",
            4000..=4999 => "Payer error",
            5000..=5999 => "Payee error",
            _ => "Error",
        }
    }

    /// FSPIOP codes are four digits, 1000–5999 (§7.6).
    pub fn is_valid(self) -> bool {
        (1000..=5999).contains(&self.0)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}", self.0)
    }
}

/// Why a command was refused: an FSPIOP error code and a description an
/// operator or DFSP engineer can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub description: String,
    /// The caller is not the party the command needs (not the payee of a
    /// fulfil or abort, neither payer nor payee of a read): a DFSP reaching
    /// for another's transfer, which the hub counts as such.
    pub not_party: bool,
    /// Refused by the pause rule (`modes.rs`): a participant's mode or a
    /// disabled currency account forbids a new payment, which the hub
    /// counts by this reason.
    pub paused: Option<PauseRefusal>,
}

impl Rejection {
    pub fn new(code: ErrorCode, description: impl Into<String>) -> Rejection {
        Rejection {
            code,
            description: description.into(),
            not_party: false,
            paused: None,
        }
    }

    /// A refusal by the pause rule, for `reason`.
    pub fn paused(
        code: ErrorCode,
        description: impl Into<String>,
        reason: PauseRefusal,
    ) -> Rejection {
        Rejection {
            paused: Some(reason),
            ..Rejection::new(code, description)
        }
    }

    /// A refusal because the caller is not a party the command needs.
    pub fn not_party(code: ErrorCode, description: impl Into<String>) -> Rejection {
        Rejection {
            not_party: true,
            ..Rejection::new(code, description)
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.code,
            self.code.description(),
            self.description
        )
    }
}
