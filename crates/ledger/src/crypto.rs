//! ILP condition and fulfilment (FSPIOP §4.4): the condition is the SHA-256
//! of a 32-byte preimage, the fulfilment is that preimage. Both travel as 43
//! base64url characters without padding.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::fmt;

/// Length of a condition and of a fulfilment's preimage, in bytes.
pub const PREIMAGE_LEN: usize = 32;
/// Length of their base64url text, in characters.
pub const BASE64URL_LEN: usize = 43;

/// base64url without padding that keeps only the bits that make whole bytes.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// The SHA-256 condition a transfer is locked with.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Condition(pub [u8; PREIMAGE_LEN]);

/// A fulfilment: the preimage and its SHA-256, computed once where the
/// fulfilment is decoded (on a request thread), so that the ledger thread
/// only compares 32 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fulfilment {
    preimage: [u8; PREIMAGE_LEN],
    digest: [u8; PREIMAGE_LEN],
}

/// A hash of a request's body, used to tell a resend from a modified request
/// (FSPIOP §3.2.5.1). The API computes it; the ledger only compares.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestHash(pub [u8; 32]);

fn decode_32(text: &str) -> Option<[u8; PREIMAGE_LEN]> {
    if text.len() != BASE64URL_LEN {
        return None;
    }
    let mut out = [0u8; PREIMAGE_LEN];
    // The strict engine refuses non-zero trailing bits, so each 32-byte value
    // has exactly one accepted text.
    match URL_SAFE_NO_PAD.decode_slice(text, &mut out) {
        Ok(PREIMAGE_LEN) => Some(out),
        _ => None,
    }
}

fn encode_32(bytes: &[u8; PREIMAGE_LEN]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Condition {
    /// Decodes FSPIOP's `IlpCondition`: 43 base64url characters, 32 bytes.
    pub fn from_base64url(text: &str) -> Option<Condition> {
        decode_32(text).map(Condition)
    }

    pub fn to_base64url(&self) -> String {
        encode_32(&self.0)
    }
}

impl Fulfilment {
    pub fn from_preimage(preimage: [u8; PREIMAGE_LEN]) -> Fulfilment {
        let digest: [u8; PREIMAGE_LEN] = Sha256::digest(preimage).into();
        Fulfilment { preimage, digest }
    }

    /// Decodes FSPIOP's `IlpFulfilment`: 43 base64url characters, 32 bytes.
    pub fn from_base64url(text: &str) -> Option<Fulfilment> {
        decode_32(text).map(Fulfilment::from_preimage)
    }

    /// Like [`Fulfilment::from_base64url`], but ignoring the last
    /// character's two bits beyond the 32 bytes, as central-ledger's
    /// decoder (Node's) does: a fulfilment that matches the schema pattern
    /// is judged by its preimage, not refused for its spelling.
    pub fn from_base64url_lenient(text: &str) -> Option<Fulfilment> {
        if text.len() != BASE64URL_LEN {
            return None;
        }
        let mut out = [0u8; PREIMAGE_LEN];
        match LENIENT.decode_slice(text, &mut out) {
            Ok(PREIMAGE_LEN) => Some(Fulfilment::from_preimage(out)),
            _ => None,
        }
    }

    pub fn preimage(&self) -> &[u8; PREIMAGE_LEN] {
        &self.preimage
    }

    /// The condition this fulfilment satisfies.
    pub fn condition(&self) -> Condition {
        Condition(self.digest)
    }

    pub fn to_base64url(&self) -> String {
        encode_32(&self.preimage)
    }
}

impl RequestHash {
    /// SHA-256 of a request body's bytes.
    pub fn of(body: &[u8]) -> RequestHash {
        RequestHash(Sha256::digest(body).into())
    }
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Condition({})", self.to_base64url())
    }
}

impl fmt::Debug for Fulfilment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fulfilment({})", self.to_base64url())
    }
}

impl fmt::Debug for RequestHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestHash({})", encode_32(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fulfilment_matches_its_condition() {
        // A known pair from Mojaloop's documentation examples.
        let fulfilment =
            Fulfilment::from_base64url("UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA").unwrap();
        let condition =
            Condition::from_base64url("GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM").unwrap();
        assert_eq!(fulfilment.condition(), condition);
        assert_eq!(
            fulfilment.to_base64url(),
            "UNlJ98hZTY_dsw0cAqw4i_UN3v4utt7CZFB4yfLbVFA"
        );
    }

    #[test]
    fn only_43_char_canonical_base64url_decodes() {
        assert!(Condition::from_base64url("GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAf").is_none());
        assert!(
            Condition::from_base64url("GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfM=").is_none()
        );
        assert!(Condition::from_base64url("GRzLaTP7DJ9t4P+a/BA0WA9wzzlsugf00-Tn6kESAfM").is_none());
        // Non-zero trailing bits in the last character.
        assert!(Condition::from_base64url("GRzLaTP7DJ9t4P-a_BA0WA9wzzlsugf00-Tn6kESAfN").is_none());
    }
}
