//! `kasi sim`'s foreign exchange (FSPIOP v2.0 payer conversion): the FXP
//! the sim can play (`--fxp NAME --fx-rate SOURCE:TARGET=RATE`), and the
//! payer's conversion steps of `kasi sim send` when the payee is paid in
//! another currency.
//!
//! | The hub sends the FXP | The FXP answers |
//! |---|---|
//! | `POST /fxQuotes` | `PUT /fxQuotes/{ID}`: the terms asked, both amounts filled in at its rate, no charges, a condition of its own |
//! | `POST /fxTransfers` | `PUT /fxTransfers/{ID}`: RESERVED with the fulfilment of the condition it quoted |
//! | `PATCH /fxTransfers/{ID}` | (printed: COMMITTED or ABORTED, once the transfer the conversion depends on ends) |
//!
//! Amounts are exact: a SEND amount converts to the target rounded down,
//! a RECEIVE amount from the source rounded up, both at kasi's scale of 4
//! decimals — the FXP never gives more than its rate.
//!
//! The fulfilment of a conversion is SHA-256 of a secret drawn when the
//! sim starts, the FXP's name and the conversion id: the FXP keeps nothing
//! between its quote and the conversion, since the payer converts under
//! the quote's `conversionId` (its `commitRequestId`, as Mojaloop's SDK
//! does). A conversion quoted by an earlier run of the sim, or whose terms
//! give more than the rate, is refused with 5105.

use std::fmt;
use std::str::FromStr;

use http::Method;
use ledger::{Amount, Currency, Fulfilment, RequestHash};
use serde_json::{json, Value};

use bench::dfsp::{error_body, Api};

use super::{ask, clock, now_ms, Progress, Sim, STEP_TIMEOUT, TRANSFER_EXPIRY_MS};

/// Significant digits and decimals a rate may have: enough for any
/// exchange rate, and small enough that `amount × rate` is exact in
/// `u128` (22 digits of an amount's ten-thousandths times 16).
const RATE_MAX_DIGITS: usize = 16;
const RATE_MAX_DECIMALS: usize = 12;

/// `--fx-rate SOURCE:TARGET=RATE`: one unit of the source currency buys
/// RATE units of the target currency, in that direction only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FxRate {
    pub source: Currency,
    pub target: Currency,
    /// The rate is `digits / 10^decimals`.
    digits: u128,
    decimals: u32,
}

impl FromStr for FxRate {
    type Err = String;

    fn from_str(text: &str) -> Result<FxRate, String> {
        let usage = "write SOURCE:TARGET=RATE, e.g. USD:TZS=2500 (1 USD buys 2500 TZS)";
        let (corridor, rate) = text
            .split_once('=')
            .ok_or_else(|| format!("{text}: {usage}"))?;
        let (source, target) = corridor
            .split_once(':')
            .ok_or_else(|| format!("{text}: {usage}"))?;
        let currency = |code: &str| {
            Currency::parse(code)
                .ok_or_else(|| format!("{text}: {code} is not an ISO 4217 currency FSPIOP knows"))
        };
        let (source, target) = (currency(source)?, currency(target)?);
        if source == target {
            return Err(format!("{text}: a conversion is between two currencies"));
        }
        let (whole, fraction) = rate.split_once('.').unwrap_or((rate, ""));
        let digits_only = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) {
            return Err(format!("{text}: the rate {rate} is not a decimal number"));
        }
        let fraction = fraction.trim_end_matches('0');
        let significant = format!("{whole}{fraction}");
        let significant = significant.trim_start_matches('0');
        if significant.is_empty() {
            return Err(format!("{text}: the rate must be more than 0"));
        }
        if significant.len() > RATE_MAX_DIGITS || fraction.len() > RATE_MAX_DECIMALS {
            return Err(format!(
                "{text}: the rate may have at most {RATE_MAX_DIGITS} significant digits and {RATE_MAX_DECIMALS} decimals"
            ));
        }
        Ok(FxRate {
            source,
            target,
            digits: significant
                .parse()
                .map_err(|_| format!("{text}: {usage}"))?,
            decimals: fraction.len() as u32,
        })
    }
}

impl fmt::Display for FxRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}={}", self.source, self.target, self.rate())
    }
}

impl FxRate {
    /// The rate alone, as a decimal (`2500`, `0.0004`).
    pub fn rate(&self) -> String {
        let text = format!(
            "{:0>width$}",
            self.digits,
            width = self.decimals as usize + 1
        );
        let (whole, fraction) = text.split_at(text.len() - self.decimals as usize);
        if fraction.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{fraction}")
        }
    }

    fn scale(&self) -> u128 {
        10u128.pow(self.decimals)
    }

    /// What `source` buys, rounded down to kasi's 4 decimals; `None` when
    /// that is nothing or more than a transfer may carry.
    pub fn target_for(&self, source: Amount) -> Option<Amount> {
        let units = u128::try_from(source.units()).ok()?;
        let target = units.checked_mul(self.digits)? / self.scale();
        movable(target)
    }

    /// What buys `target`, rounded up to kasi's 4 decimals; `None` when
    /// that is more than a transfer may carry.
    pub fn source_for(&self, target: Amount) -> Option<Amount> {
        let units = u128::try_from(target.units()).ok()?;
        movable(units.checked_mul(self.scale())?.div_ceil(self.digits))
    }
}

fn movable(units: u128) -> Option<Amount> {
    let amount = Amount::from_units(i128::try_from(units).ok()?);
    amount.is_valid_transfer_amount().then_some(amount)
}

/// The FXP the sim plays.
pub struct Fxp {
    pub name: String,
    pub rates: Vec<FxRate>,
    /// Drawn at start: the fulfilments are this run's.
    secret: u64,
}

impl Fxp {
    pub fn new(name: String, rates: Vec<FxRate>, secret: u64) -> Fxp {
        Fxp {
            name,
            rates,
            secret,
        }
    }

    fn rate(&self, source: Currency, target: Currency) -> Option<&FxRate> {
        self.rates
            .iter()
            .find(|rate| rate.source == source && rate.target == target)
    }

    /// The currencies it holds accounts in, each once, in the order named.
    pub fn currencies(&self) -> Vec<Currency> {
        let mut currencies = Vec::new();
        for rate in &self.rates {
            for currency in [rate.source, rate.target] {
                if !currencies.contains(&currency) {
                    currencies.push(currency);
                }
            }
        }
        currencies
    }

    /// `PUT /participants/{name}/fxCorridors`'s body: its corridors.
    pub fn corridors_body(&self) -> Value {
        let corridors: Vec<Value> = self
            .rates
            .iter()
            .map(|rate| json!({"sourceCurrency": rate.source.as_str(), "targetCurrency": rate.target.as_str()}))
            .collect();
        json!({ "corridors": corridors })
    }

    /// The fulfilment of conversion `id` (its canonical form).
    fn fulfilment(&self, id: &ledger::TransferId) -> Fulfilment {
        let seed = format!("kasi sim FXP {} {:016x} {id}", self.name, self.secret);
        Fulfilment::from_preimage(RequestHash::of(seed.as_bytes()).0)
    }
}

// ------------------------------------------------------------- the FXP

/// An FXP's refusal: `PUT {path}/error` with `code`.
fn refusal(path: &str, code: &str, description: &str) -> (String, String) {
    (format!("{path}/error"), error_body(code, description))
}

/// The FXP's answer to a `POST /fxQuotes` body: the path and body of its
/// `PUT /fxQuotes/{ID}[/error]`.
fn fx_quote_answer(fxp: &Fxp, body: &[u8]) -> (String, String) {
    let raw: Value = serde_json::from_slice(body).unwrap_or_default();
    let path = format!(
        "/fxQuotes/{}",
        raw["conversionRequestId"].as_str().unwrap_or_default()
    );
    let request = match fspiop::parse_fx_quote_post(body) {
        Ok(request) => request,
        Err(error) => return refusal(&path, &error.code.to_string(), &error.description),
    };
    let terms = &request.conversion_terms;
    let (source, target) = (terms.source.currency, terms.target.currency);
    let Some(rate) = fxp.rate(source, target) else {
        return refusal(
            &path,
            "5106",
            &format!(
                "Payee unsupported currency: {} does not convert {source} to {target}",
                fxp.name
            ),
        );
    };
    let amounts = match terms.amount_type {
        fspiop::AmountType::Send => terms
            .source
            .amount
            .map(|amount| (amount, rate.target_for(amount))),
        fspiop::AmountType::Receive => terms
            .target
            .amount
            .map(|amount| (amount, rate.source_for(amount))),
    };
    let (source_amount, target_amount) = match (terms.amount_type, amounts) {
        (fspiop::AmountType::Send, Some((source_amount, Some(target_amount)))) => {
            (source_amount, target_amount)
        }
        (fspiop::AmountType::Receive, Some((target_amount, Some(source_amount)))) => {
            (source_amount, target_amount)
        }
        (kind, Some((amount, None))) => {
            let currency = match kind {
                fspiop::AmountType::Send => source,
                fspiop::AmountType::Receive => target,
            };
            return refusal(
                &path,
                "5100",
                &format!("Generic Payee rejection: {amount} {currency} at {rate} converts to no amount a transfer can carry"),
            );
        }
        (kind, None) => {
            let side = match kind {
                fspiop::AmountType::Send => "sourceAmount",
                fspiop::AmountType::Receive => "targetAmount",
            };
            return refusal(
                &path,
                "3102",
                &format!(
                    "Missing mandatory element - conversionTerms.{side}.amount (amountType {kind})"
                ),
            );
        }
    };
    let condition = fxp.fulfilment(&terms.conversion_id).condition();
    let mut offered = raw["conversionTerms"].clone();
    offered["sourceAmount"] =
        json!({"currency": source.as_str(), "amount": source_amount.to_string()});
    offered["targetAmount"] =
        json!({"currency": target.as_str(), "amount": target_amount.to_string()});
    offered["charges"] = json!([]);
    let answer = json!({ "condition": condition.to_base64url(), "conversionTerms": offered });
    (path, answer.to_string())
}

/// The FXP's answer to a `POST /fxTransfers` body: the path and body of
/// its `PUT /fxTransfers/{ID}[/error]`.
fn conversion_answer(fxp: &Fxp, body: &[u8], now_ms: i64) -> (String, String) {
    let raw: Value = serde_json::from_slice(body).unwrap_or_default();
    let path = format!(
        "/fxTransfers/{}",
        raw["commitRequestId"].as_str().unwrap_or_default()
    );
    let conversion = match fspiop::parse_fx_transfer_prepare(body) {
        Ok(conversion) => conversion,
        Err(error) => return refusal(&path, &error.code.to_string(), &error.description),
    };
    let fulfilment = fxp.fulfilment(&conversion.commit_request_id);
    if fulfilment.condition() != conversion.condition {
        return refusal(
            &path,
            "5105",
            &format!(
                "Payee FSP rejected transaction: not a condition {} quoted (in this run)",
                fxp.name
            ),
        );
    }
    let (source, target) = (conversion.source, conversion.target);
    let gives = fxp
        .rate(source.currency, target.currency)
        .and_then(|rate| rate.target_for(source.amount).map(|gives| (rate, gives)));
    match gives {
        Some((_, gives)) if target.amount <= gives => {}
        Some((rate, gives)) => {
            return refusal(
                &path,
                "5105",
                &format!(
                    "Payee FSP rejected transaction: {} {} asked for {} {}, more than {} gives at {rate} ({gives})",
                    target.amount, target.currency, source.amount, source.currency, fxp.name
                ),
            )
        }
        None => {
            return refusal(
                &path,
                "5106",
                &format!(
                    "Payee unsupported currency: {} does not convert {} to {}",
                    fxp.name, source.currency, target.currency
                ),
            )
        }
    }
    let accepted =
        fspiop::fx_transfer_put_body(fspiop::WireState::Reserved, Some(&fulfilment), Some(now_ms));
    (path, String::from_utf8_lossy(&accepted).into_owned())
}

/// `POST /fxQuotes` to the FXP, from `source`.
pub(super) async fn answer_fx_quote(sim: &Sim, fxp: &Fxp, source: &str, body: &[u8]) {
    let (path, answer) = fx_quote_answer(fxp, body);
    if let Err(error) = sim
        .to_hub(
            Method::PUT,
            &path,
            Api::FxQuotes,
            &fxp.name,
            Some(source),
            answer,
        )
        .await
    {
        println!("{} {}: {error}", clock(), fxp.name);
    }
}

/// `POST /fxTransfers` to the FXP, from `source`.
pub(super) async fn answer_conversion(sim: &Sim, fxp: &Fxp, source: &str, body: &[u8]) {
    let (path, answer) = conversion_answer(fxp, body, now_ms());
    if let Err(error) = sim
        .to_hub(
            Method::PUT,
            &path,
            Api::FxTransfers,
            &fxp.name,
            Some(source),
            answer,
        )
        .await
    {
        println!("{} {}: {error}", clock(), fxp.name);
    }
}

/// A DFSP the sim plays that is not its FXP, asked to convert: refused,
/// so the asker is not left waiting.
pub(super) async fn refuse_as_no_fxp(sim: &Sim, dfsp: &str, source: &str, path: &str, body: &[u8]) {
    let raw: Value = serde_json::from_slice(body).unwrap_or_default();
    let (id, api) = match path {
        "/fxQuotes" => (&raw["conversionRequestId"], Api::FxQuotes),
        _ => (&raw["commitRequestId"], Api::FxTransfers),
    };
    let path = format!("{path}/{}/error", id.as_str().unwrap_or_default());
    let body = error_body(
        "5100",
        &format!("Generic Payee rejection: {dfsp} is not an FXP"),
    );
    if let Err(error) = sim
        .to_hub(Method::PUT, &path, api, dfsp, Some(source), body)
        .await
    {
        println!("{} {dfsp}: {error}", clock());
    }
}

// ----------------------------------------------------------- the payer

/// An FXP's offer, as the payer took it from `PUT /fxQuotes/{ID}`.
pub(super) struct Offer {
    pub fxp: String,
    /// Also the conversion's `commitRequestId`.
    pub conversion_id: String,
    pub source: (String, String),
    pub target: (String, String),
    pub condition: String,
}

/// Steps `first` and `first + 1` of a cross-currency send: which FXPs
/// convert (`GET /services/FXP/{source}/{target}`), and the first one's
/// terms for converting `amount` (`POST /fxQuotes`) for transfer
/// `transfer_id`.
pub(super) async fn find_and_quote(
    sim: &Sim,
    progress: &mut Progress<'_>,
    first: u32,
    payer: &str,
    transfer_id: &str,
    (amount, source): (&str, &str),
    target: &str,
) -> Result<Offer, String> {
    let path = format!("/services/FXP/{source}/{target}");
    progress.step(format!(
        "{first}. FXPs: {payer} asks the hub who converts {source} to {target} (GET {path})"
    ));
    let sent = sim.to_hub(
        Method::GET,
        &path,
        Api::Services,
        payer,
        None,
        String::new(),
    );
    let listed = ask(
        sim,
        format!("services:{payer}:{source}/{target}"),
        sent,
        STEP_TIMEOUT,
    )
    .await
    .map_err(|error| format!("FXPs for {source} to {target}: {error}"))?;
    let providers: Vec<&str> = listed["providers"]
        .as_array()
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(fxp) = providers.first().map(|fxp| fxp.to_string()) else {
        return Err(format!(
            "no FXP converts {source} to {target}: the operator declares an FXP's corridors (PUT /participants/{{name}}/fxCorridors), as `kasi sim --onboard --fxp NAME --fx-rate {source}:{target}=RATE` does"
        ));
    };
    progress.step(format!("   offered: {}", providers.join(", ")));

    let request_id = sim.uuid();
    let conversion_id = sim.uuid();
    progress.step(format!(
        "{}. FX quote: {payer} asks {fxp} to convert {amount} {source} to {target} for transfer {transfer_id} (POST /fxQuotes {request_id})",
        first + 1
    ));
    let body = json!({
        "conversionRequestId": request_id,
        "conversionTerms": {
            "conversionId": conversion_id,
            "determiningTransferId": transfer_id,
            "initiatingFsp": payer,
            "counterPartyFsp": fxp,
            "amountType": "SEND",
            "sourceAmount": {"currency": source, "amount": amount},
            "targetAmount": {"currency": target},
            "expiration": fspiop::format_date_time(now_ms() + TRANSFER_EXPIRY_MS),
        },
    })
    .to_string();
    let sent = sim.to_hub(
        Method::POST,
        "/fxQuotes",
        Api::FxQuotes,
        payer,
        Some(&fxp),
        body,
    );
    let answer = ask(
        sim,
        format!("fxquote:{payer}:{request_id}"),
        sent,
        STEP_TIMEOUT,
    )
    .await
    .map_err(|error| format!("FX quote {request_id}: {error}"))?;
    let offer = fspiop::parse_fx_quote_put(answer.to_string().as_bytes()).map_err(|error| {
        format!(
            "FX quote {request_id}: {fxp}'s answer: {} {}",
            error.code, error.description
        )
    })?;
    let terms = &offer.conversion_terms;
    let (Some(source_amount), Some(target_amount), Some(condition)) =
        (terms.source.amount, terms.target.amount, offer.condition)
    else {
        return Err(format!(
            "FX quote {request_id}: {fxp}'s answer leaves out an amount or the condition"
        ));
    };
    let offer = Offer {
        fxp,
        conversion_id: terms.conversion_id.to_string(),
        source: (source_amount.to_string(), terms.source.currency.to_string()),
        target: (target_amount.to_string(), terms.target.currency.to_string()),
        condition: condition.to_base64url(),
    };
    progress.step(format!(
        "   {} offers {} {} for {} {}, condition {}",
        offer.fxp, offer.target.0, offer.target.1, offer.source.0, offer.source.1, offer.condition
    ));
    Ok(offer)
}

/// Step `number` of a cross-currency send: the conversion
/// (`POST /fxTransfers`) of `offer` for transfer `transfer_id`, awaited
/// until the FXP accepted it.
pub(super) async fn convert(
    sim: &Sim,
    progress: &mut Progress<'_>,
    number: u32,
    payer: &str,
    offer: &Offer,
    transfer_id: &str,
) -> Result<(), String> {
    let Offer {
        fxp,
        conversion_id,
        source,
        target,
        condition,
    } = offer;
    progress.step(format!(
        "{number}. conversion: {payer} asks {fxp} to convert {} {} into {} {} for transfer {transfer_id} (POST /fxTransfers {conversion_id})",
        source.0, source.1, target.0, target.1
    ));
    let body = json!({
        "commitRequestId": conversion_id,
        "determiningTransferId": transfer_id,
        "initiatingFsp": payer,
        "counterPartyFsp": fxp,
        "amountType": "SEND",
        "sourceAmount": {"currency": source.1, "amount": source.0},
        "targetAmount": {"currency": target.1, "amount": target.0},
        "condition": condition,
        "expiration": fspiop::format_date_time(now_ms() + TRANSFER_EXPIRY_MS),
    })
    .to_string();
    let sent = sim.to_hub(
        Method::POST,
        "/fxTransfers",
        Api::FxTransfers,
        payer,
        Some(fxp),
        body,
    );
    let answer = ask(
        sim,
        format!("conversion:{payer}:{conversion_id}"),
        sent,
        STEP_TIMEOUT,
    )
    .await
    .map_err(|error| format!("conversion {conversion_id}: {error}"))?;
    match answer["conversionState"].as_str() {
        Some("RESERVED") => {
            progress.step(format!(
                "   {fxp} accepted: RESERVED, fulfilment {}; {payer}'s {} is held until the transfer ends",
                answer["fulfilment"].as_str().unwrap_or("?"),
                source.1
            ));
            Ok(())
        }
        state => Err(format!(
            "conversion {conversion_id} is {}",
            state.unwrap_or("in no state")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> FxRate {
        text.parse().unwrap()
    }

    fn amount(text: &str) -> Amount {
        Amount::parse_fspiop(text).unwrap()
    }

    #[test]
    fn rates_parse_and_say_what_is_wrong() {
        let usd_tzs = rate("USD:TZS=2500");
        assert_eq!(usd_tzs.source.as_str(), "USD");
        assert_eq!(usd_tzs.target.as_str(), "TZS");
        assert_eq!(usd_tzs.rate(), "2500");
        assert_eq!(rate("TZS:USD=0.000400").rate(), "0.0004");
        assert_eq!(rate("USD:KES=129.5").to_string(), "USD:KES=129.5");
        assert_eq!(rate("USD:KES=0129.50").rate(), "129.5");
        for (text, says) in [
            ("USD-TZS=2500", "SOURCE:TARGET=RATE"),
            ("USD:TZS", "SOURCE:TARGET=RATE"),
            ("USD:ABC=1", "ABC is not an ISO 4217"),
            ("USD:USD=1", "between two currencies"),
            ("USD:TZS=0", "more than 0"),
            ("USD:TZS=0.000", "more than 0"),
            ("USD:TZS=-1", "not a decimal"),
            ("USD:TZS=1e3", "not a decimal"),
            ("USD:TZS=.5", "not a decimal"),
            ("USD:TZS=12345678901234567", "at most 16"),
            ("USD:TZS=0.0000000000001", "12 decimals"),
        ] {
            let error = text.parse::<FxRate>().unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn conversions_are_exact_and_never_give_more_than_the_rate() {
        let usd_tzs = rate("USD:TZS=2512.3456");
        assert_eq!(usd_tzs.target_for(amount("10")), Some(amount("25123.456")));
        // 0.0001 × 2512.3456 = 0.25123456: rounded down.
        assert_eq!(usd_tzs.target_for(amount("0.0001")), Some(amount("0.2512")));
        // What buys 0.2512 TZS is 0.000099987... USD: rounded up.
        assert_eq!(usd_tzs.source_for(amount("0.2512")), Some(amount("0.0001")));
        assert_eq!(usd_tzs.source_for(amount("25123.456")), Some(amount("10")));
        let tzs_usd = rate("TZS:USD=0.0004");
        assert_eq!(tzs_usd.target_for(amount("25000")), Some(amount("10")));
        assert_eq!(
            tzs_usd.target_for(amount("0.1")),
            None,
            "converts to nothing"
        );
        assert_eq!(tzs_usd.source_for(amount("0.0001")), Some(amount("0.25")));
        let huge = rate("USD:TZS=9999999999999999");
        assert_eq!(huge.target_for(amount("999999999999999999")), None);
        assert_eq!(
            rate("USD:TZS=1").target_for(Amount::MAX_TRANSFER),
            Some(Amount::MAX_TRANSFER)
        );
    }

    fn fxp() -> Fxp {
        Fxp::new(
            "fxp".into(),
            vec![
                rate("USD:TZS=2500"),
                rate("TZS:USD=0.0004"),
                rate("USD:KES=129.5"),
            ],
            7,
        )
    }

    const REQUEST_ID: &str = "b51ec534-ee48-4575-b6a9-ead2955b8069";
    const CONVERSION_ID: &str = "a8323bc6-c228-4df2-ae82-e5a997baf899";
    const TRANSFER_ID: &str = "c5d8fc5f-4c0b-4fc6-8d1e-4d4d7a3f6b21";

    fn fx_quote(amount_type: &str, source: Value, target: Value) -> Vec<u8> {
        json!({
            "conversionRequestId": REQUEST_ID,
            "conversionTerms": {
                "conversionId": CONVERSION_ID,
                "determiningTransferId": TRANSFER_ID,
                "initiatingFsp": "payerfsp",
                "counterPartyFsp": "fxp",
                "amountType": amount_type,
                "sourceAmount": source,
                "targetAmount": target,
                "expiration": "2030-01-01T00:00:00.000Z",
            }
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn the_fxp_quotes_both_amounts_and_a_condition_it_can_fulfil() {
        let fxp = fxp();
        let asked = fx_quote(
            "SEND",
            json!({"currency": "USD", "amount": "10"}),
            json!({"currency": "TZS"}),
        );
        let (path, body) = fx_quote_answer(&fxp, &asked);
        assert_eq!(path, format!("/fxQuotes/{REQUEST_ID}"));
        let answer = fspiop::parse_fx_quote_put(body.as_bytes()).unwrap();
        let terms = &answer.conversion_terms;
        assert_eq!(terms.source.amount, Some(amount("10")));
        assert_eq!(terms.target.amount, Some(amount("25000")));
        assert_eq!(terms.conversion_id.to_string(), CONVERSION_ID);
        assert_eq!(
            terms
                .determining_transfer_id
                .map(|id| id.to_string())
                .as_deref(),
            Some(TRANSFER_ID)
        );
        let value: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["conversionTerms"]["charges"], json!([]), "no charges");
        assert_eq!(
            value["conversionTerms"]["expiration"],
            json!("2030-01-01T00:00:00.000Z")
        );

        // The conversion under the quote's id and condition is accepted
        // with the fulfilment of that condition.
        let condition = answer.condition.unwrap();
        let conversion = |target: &str, condition: &str| {
            json!({
                "commitRequestId": CONVERSION_ID,
                "determiningTransferId": TRANSFER_ID,
                "initiatingFsp": "payerfsp",
                "counterPartyFsp": "fxp",
                "amountType": "SEND",
                "sourceAmount": {"currency": "USD", "amount": "10"},
                "targetAmount": {"currency": "TZS", "amount": target},
                "condition": condition,
                "expiration": "2030-01-01T00:00:00.000Z",
            })
            .to_string()
            .into_bytes()
        };
        let (path, body) =
            conversion_answer(&fxp, &conversion("25000", &condition.to_base64url()), 1_000);
        assert_eq!(path, format!("/fxTransfers/{CONVERSION_ID}"));
        let accepted = fspiop::parse_fx_transfer_fulfil(body.as_bytes()).unwrap();
        assert_eq!(accepted.conversion_state, fspiop::WireState::Reserved);
        assert!(accepted.fulfilment.unwrap().condition() == condition);

        // More than the rate gives, or a condition it did not quote: 5105.
        for (target, condition) in [
            ("25000.0001", condition.to_base64url()),
            ("25000", bench::dfsp::CONDITION.to_string()),
        ] {
            let (path, body) = conversion_answer(&fxp, &conversion(target, &condition), 1_000);
            assert_eq!(path, format!("/fxTransfers/{CONVERSION_ID}/error"));
            assert_eq!(bench::dfsp::error_of(body.as_bytes()).0, "5105", "{body}");
        }
        // Another run of the sim has another secret.
        let restarted = Fxp::new("fxp".into(), fxp.rates.clone(), 8);
        let (path, _) = conversion_answer(
            &restarted,
            &conversion("25000", &condition.to_base64url()),
            1_000,
        );
        assert!(path.ends_with("/error"));
    }

    #[test]
    fn a_receive_amount_is_bought_and_an_unknown_corridor_refused() {
        let fxp = fxp();
        let asked = fx_quote(
            "RECEIVE",
            json!({"currency": "USD"}),
            json!({"currency": "KES", "amount": "1000"}),
        );
        let (_, body) = fx_quote_answer(&fxp, &asked);
        let terms = fspiop::parse_fx_quote_put(body.as_bytes())
            .unwrap()
            .conversion_terms;
        // 1000 / 129.5 = 7.72200772...: rounded up.
        assert_eq!(terms.source.amount, Some(amount("7.7221")));
        assert_eq!(terms.target.amount, Some(amount("1000")));

        let asked = fx_quote(
            "SEND",
            json!({"currency": "KES", "amount": "10"}),
            json!({"currency": "USD"}),
        );
        let (path, body) = fx_quote_answer(&fxp, &asked);
        assert_eq!(path, format!("/fxQuotes/{REQUEST_ID}/error"));
        assert_eq!(bench::dfsp::error_of(body.as_bytes()).0, "5106");

        let asked = fx_quote(
            "SEND",
            json!({"currency": "USD"}),
            json!({"currency": "TZS"}),
        );
        let (_, body) = fx_quote_answer(&fxp, &asked);
        assert_eq!(bench::dfsp::error_of(body.as_bytes()).0, "3102", "{body}");
    }

    #[test]
    fn the_fxp_holds_each_currency_once_and_declares_its_corridors() {
        let fxp = fxp();
        let codes: Vec<String> = fxp.currencies().iter().map(Currency::to_string).collect();
        assert_eq!(codes, ["USD", "TZS", "KES"]);
        assert_eq!(
            fxp.corridors_body()["corridors"][1],
            json!({"sourceCurrency": "TZS", "targetCurrency": "USD"})
        );
    }
}
