//! Requests that used to get a 202 and then silence are now answered at
//! once: a sender that is not a participant, a payee the hub
//! cannot reach, an amount of zero. The real binary, real DFSP stubs.

mod support;

use serde_json::json;
use support::*;

#[test]
fn an_unknown_sender_is_refused_at_once_and_nothing_is_sent() {
    let scenario = Scenario::new();
    let hub = &scenario.hub;

    let body = prepare_body(&new_id(), "strangerfsp", PAYEE, "10", far_future());
    let response = hub.prepare("strangerfsp", PAYEE, &body);
    assert_error_response(&response, 400, "3200");
    assert!(
        response.text().contains("not a participant"),
        "{response:?}"
    );
    let lookup = hub.api(
        "GET",
        "/parties/MSISDN/255700000001",
        &resource_headers("parties", "1.1", "strangerfsp", None, true),
        b"",
    );
    assert_error_response(&lookup, 400, "3200");

    scenario.payee.assert_quiet(QUIET_WAIT);
    scenario.payer.assert_nothing_pending();
    // (An inactive participant still has endpoints: it is told by callback,
    // as Mojaloop tells it; transfers.rs, an_inactive_payer_is_refused_with_3100.)
    scenario.reserve("10", far_future());
    assert_eq!(hub.position(PAYER), 10.0);
}

#[test]
fn a_prepare_to_a_payee_without_a_transfer_endpoint_is_answered_to_the_payer_at_once() {
    let scenario = Scenario::new();
    let hub = &scenario.hub;
    // A participant with a net debit cap but no callback endpoints yet.
    hub.admin_expect(
        "POST",
        "/participants",
        Some(json!({"name": "mutefsp", "currency": "USD"})),
        201,
    );
    hub.admin_expect(
        "POST",
        "/participants/mutefsp/initialPositionAndLimits",
        Some(json!({
            "currency": "USD",
            "limit": {"type": "NET_DEBIT_CAP", "value": 1000},
            "initialPosition": 0
        })),
        201,
    );
    let id = new_id();
    let body = prepare_body(&id, PAYER, "mutefsp", "10", far_future());
    let response = hub.prepare(PAYER, "mutefsp", &body);
    assert_eq!(response.status, 202, "{response:?}");
    let error = scenario.payer.expect_error(&id, "3201");
    assert!(error.text().contains("mutefsp"), "{error:?}");
    assert_eq!(hub.position(PAYER), 0.0, "nothing reserved");
}

#[test]
fn every_amount_that_cannot_move_is_refused_the_same_way() {
    let scenario = Scenario::new();
    for amount in ["0", "0.0", "-5", "1.23456", "abc"] {
        let body = prepare_body(&new_id(), PAYER, PAYEE, amount, far_future());
        let response = scenario.hub.prepare(PAYER, PAYEE, &body);
        assert_error_response(&response, 400, "3100");
        assert!(
            response.text().contains("amount.amount"),
            "{amount}: {response:?}"
        );
    }
    scenario.payee.assert_quiet(QUIET_WAIT);
    scenario.payer.assert_nothing_pending();
}
