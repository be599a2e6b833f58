//! FSPIOP v2.0 FX quotes (payer conversion), routed payer DFSP ↔ FXP as
//! Mojaloop's quoting-service routes them (`src/model/fxQuotes.js`): the
//! same handler as quotes ([`crate::quotes::Quoting`]), over the FX
//! resource, its endpoint and its bodies.
//!
//! | Request | Answer | Forwarded to the destination's |
//! |---|---|---|
//! | `POST /fxQuotes` | 202 | `POST {base}/fxQuotes` |
//! | `PUT /fxQuotes/{ID}` | 200 | `PUT {base}/fxQuotes/{ID}` |
//! | `PUT /fxQuotes/{ID}/error` | 200 | `PUT {base}/fxQuotes/{ID}/error` |
//! | `GET /fxQuotes/{ID}` | 202 | `GET {base}/fxQuotes/{ID}` |
//!
//! `{base}` is the destination's `FSPIOP_CALLBACK_URL_FX_QUOTES`, a bare
//! base URL; without one the sender gets 3201 from the hub. `{ID}` is the
//! `conversionRequestId`. Only the FXP asked answers, only to the DFSP
//! that asked, while the question is pending ([`crate::answers`]). The
//! hub does not judge the terms (amounts, rate, charges), nor link an FX
//! quote to a conversion: neither does Mojaloop.
//!
//! With `--quotes-persistent` the requests and answers are recorded with
//! the ledger's quote requests under the `conversionRequestId`: quote ids
//! and conversion request ids share one id space (both are UUIDs or
//! ULIDs, unique by construction), so the duplicate rules — 3106 for a
//! modified resend, the known answer again for a resend — are the quotes'
//! own, in the ledger's words for quotes.
//!
//! The pause rule refuses one whose requester's source-currency account,
//! or the FXP's account in the source or the target currency, is disabled
//! (3202 / 3201, `ledger::accounts_refusal`), from the hub's copy of the
//! disabled POSITION accounts (`references.rs`).
//!
//! Not done: quoting-service also refuses a `POST /fxQuotes` whose
//! destination holds no POSITION account in the source or the target
//! currency. The hub's in-memory reference copies know which accounts are
//! disabled, not which exist, and asking the ledger would put a pipeline
//! round trip on a request that otherwise needs none; the FXP's accounts
//! in both currencies are checked where they move, at `POST /fxTransfers`.

use std::sync::Arc;

use axum::Router;
use fspiop::Resource;

use crate::quotes::{Posted, Quoting};
use crate::routing::Service;
use crate::Hub;

/// The endpoint type holding a participant's FX quotes base URL.
pub const FX_QUOTES_ENDPOINT: &str = "FSPIOP_CALLBACK_URL_FX_QUOTES";

static FX_QUOTES: Quoting = Quoting {
    service: Service {
        resource: Resource::FxQuotes,
        endpoint_type: FX_QUOTES_ENDPOINT,
    },
    post: |body| {
        let parsed = fspiop::parse_fx_quote_post(body)?;
        Ok(Posted {
            id: parsed.conversion_request_id,
            request_hash: parsed.request_hash,
            currency: parsed.conversion_terms.source.currency,
            target: Some(parsed.conversion_terms.target.currency),
        })
    },
    put: |body| Ok(fspiop::parse_fx_quote_put(body)?.request_hash),
    noun: "FX quote",
    // The FXP takes the source currency and pays the target: one that may
    // not do both (by its mode, or either currency's account) could never
    // complete the conversion it would quote for.
    pause_rule: ledger::conversion_refusal,
};

pub fn routes() -> Router<Arc<Hub>> {
    FX_QUOTES.routes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Target;

    const ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";

    #[test]
    fn urls_hang_off_the_fx_base() {
        for base in ["http://fxp:4000", "http://fxp:4000/"] {
            assert_eq!(
                FX_QUOTES.service.url(base, Target::Collection),
                "http://fxp:4000/fxQuotes"
            );
            assert_eq!(
                FX_QUOTES.service.url(base, Target::Item(ID)),
                format!("http://fxp:4000/fxQuotes/{ID}")
            );
            assert_eq!(
                FX_QUOTES.service.url(base, Target::Error(ID)),
                format!("http://fxp:4000/fxQuotes/{ID}/error")
            );
        }
    }

    #[test]
    fn the_fx_endpoint_type_can_be_registered() {
        crate::endpoints::check_endpoint(FX_QUOTES_ENDPOINT, "http://fxp:4000").unwrap();
    }
}
