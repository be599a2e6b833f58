//! The DFSPs in the hub: onboarding and party registration before the
//! load, the positions check after it (admin API and FSPIOP only).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use http::{Method, StatusCode};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::dfsp::{
    self, admin_call, batch_answer_problem, describe_error_body, fspiop_request,
    participants_batch_body, Api,
};
use crate::ids::PartyRef;
use crate::run::{Shared, CURRENCY, FX_RATE, TARGET_CURRENCY};

/// How long the run waits for the hub to settle positions that do not net
/// to zero yet (a transfer the driver gave up on may still be committing).
pub(crate) const POSITIONS_SETTLE: Duration = Duration::from_secs(2);
/// How long a DFSP waits for the answer to its batch party registration.
pub(crate) const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The currencies the run's participants hold: [`CURRENCY`], and for the
/// `fx` flow [`TARGET_CURRENCY`] too.
pub(crate) fn currencies(shared: &Shared) -> &'static [&'static str] {
    if shared.flow.converts() {
        &[CURRENCY, TARGET_CURRENCY]
    } else {
        &[CURRENCY]
    }
}

pub(crate) async fn onboard(
    shared: &Arc<Shared>,
    admin: &str,
    hub_name: &str,
    callback_root: &str,
) -> anyhow::Result<()> {
    for currency in currencies(shared) {
        dfsp::onboard_hub(&shared.identities.admin, admin, hub_name, currency).await?;
    }

    // A few DFSPs at a time: each step waits for the hub's durable commit.
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for name in shared.names.clone() {
        let shared = shared.clone();
        let admin = admin.to_string();
        let permits = permits.clone();
        let callback_root = callback_root.to_string();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            onboard_dfsp(&shared, &admin, &name, &callback_root).await
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.context("onboarding panicked")??;
    }
    Ok(())
}

/// Onboards one of the run's participants in each of its currencies: a
/// DFSP (with its parties, for flows that discover), or an FXP (of the
/// `fx` flow: positions, net debit caps and liquidity in both currencies,
/// no parties). For `fx` every participant also has the FX endpoints: the
/// payers receive the FXPs' answers, the FXPs the requests and the hub's
/// `PATCH`.
pub(crate) async fn onboard_dfsp(
    shared: &Shared,
    admin: &str,
    name: &str,
    callback_root: &str,
) -> anyhow::Result<()> {
    let is_fxp = shared.dfsp(name).is_some_and(|index| index >= shared.dfsps);
    let discovers = shared.flow.discovers() && !is_fxp;
    for currency in currencies(shared) {
        let funds_id = shared.ids.format(shared.ids.next());
        dfsp::onboard_dfsp(
            &shared.identities.admin,
            &dfsp::Onboarding {
                admin,
                name,
                currency,
                callback_root,
                discovers,
                funds_id: &funds_id,
                existing_ok: false,
            },
        )
        .await
        .with_context(|| format!("onboarding {name} in {currency}"))?;
    }
    if shared.flow.converts() {
        for (kind, path) in fspiop::FX_CALLBACKS {
            admin_call(
                &shared.identities.admin,
                Method::POST,
                &format!("{admin}/participants/{name}/endpoints"),
                Some(serde_json::json!({
                    "type": kind,
                    "value": format!("{callback_root}/{name}{path}"),
                })),
                false,
            )
            .await
            .with_context(|| format!("registering {name}'s FX endpoints"))?;
        }
    }
    // Before the DFSP's first FSPIOP request: a hub that verifies
    // signatures refuses a DFSP without a key.
    if let Some(public_key) = shared
        .dfsp(name)
        .and_then(|index| shared.identities.public_key(index as usize))
    {
        admin_call(
            &shared.identities.admin,
            Method::PUT,
            &format!("{admin}/participants/{name}/jwsKey"),
            Some(serde_json::json!({ "publicKey": public_key })),
            false,
        )
        .await
        .with_context(|| format!("installing {name}'s JWS public key"))?;
    }
    if discovers {
        register_parties(shared, name).await?;
    }
    Ok(())
}

/// `name` registers its `--parties` MSISDNs with one batch
/// `POST /participants` and waits for `PUT /participants/{requestId}`,
/// which must register every one.
pub(crate) async fn register_parties(shared: &Shared, name: &str) -> anyhow::Result<()> {
    let dfsp = shared.dfsp(name).context("not one of our DFSPs")?;
    let identifiers: Vec<String> = (0..shared.parties)
        .map(|index| shared.party_id(PartyRef { dfsp, index }))
        .collect();
    let counter = shared.ids.next();
    let request_id = shared.ids.format(counter);
    let url = format!("{}/participants", shared.api);
    let request = fspiop_request(
        Method::POST,
        &url,
        Api::Participants,
        name,
        None,
        participants_batch_body(&request_id, name, &identifiers, CURRENCY),
    )
    .map_err(|error| anyhow::anyhow!("POST {url}: {error}"))?;
    let (done, answer) = oneshot::channel();
    shared.registrations().insert(counter, done);
    let sent = tokio::time::timeout(REGISTRATION_TIMEOUT, shared.send(request))
        .await
        .with_context(|| {
            format!(
                "POST {url} ({name}): no answer within {} s",
                REGISTRATION_TIMEOUT.as_secs()
            )
        })
        .and_then(|sent| {
            sent.map_err(|(_, description)| anyhow::anyhow!("POST {url} ({name}): {description}"))
        });
    let (status, body) = match sent {
        Ok(answer) => answer,
        Err(error) => {
            shared.registrations().remove(&counter);
            return Err(error);
        }
    };
    if status != StatusCode::ACCEPTED {
        shared.registrations().remove(&counter);
        bail!(
            "POST {url} ({name}): {} {}",
            status.as_u16(),
            describe_error_body(&body)
        );
    }
    let answer = match tokio::time::timeout(REGISTRATION_TIMEOUT, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => bail!("the registration of {name}'s parties was dropped"),
        Err(_) => {
            shared.registrations().remove(&counter);
            bail!(
                "{name} got no PUT /participants/{request_id} within {} s of registering its parties",
                REGISTRATION_TIMEOUT.as_secs()
            )
        }
    };
    match answer {
        Ok(body) => match batch_answer_problem(&body, identifiers.len()) {
            None => Ok(()),
            Some(problem) => bail!("registering {name}'s parties: {problem}"),
        },
        Err(error) => {
            bail!("registering {name}'s parties: PUT /participants/{request_id}/error: {error}")
        }
    }
}

/// Whether the run's participants' positions net to zero once every
/// transfer has ended: every transfer moves its amount from the payer's
/// position to the payee's, so anything else is money created, lost, or
/// still reserved. For the `fx` flow, in each currency, and the FXPs'
/// positions must be each other's at exactly [`FX_RATE`] (every
/// conversion committed with its transfer, or neither did).
#[derive(Debug, Default)]
pub(crate) struct PositionCheck {
    /// The sum of the participants' [`CURRENCY`] positions, exact.
    pub(crate) sum: Option<ledger::Amount>,
    /// Every currency's positions sum to zero (and, for `fx`, the FXPs'
    /// are at the rate).
    pub(crate) net_zero: bool,
    /// Per currency held: the sum of every participant's position, and of
    /// the FXPs' alone.
    pub(crate) by_currency: Vec<CurrencyPositions>,
    /// For `fx`: the FXPs' target-currency position is exactly
    /// −[`FX_RATE`] × their source-currency one.
    pub(crate) fxps_at_rate: Option<bool>,
    /// Why the positions could not be read.
    pub(crate) problem: Option<String>,
    /// No ledger to check (the null hub): neither net zero nor not.
    pub(crate) not_applicable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CurrencyPositions {
    pub(crate) currency: &'static str,
    pub(crate) sum: ledger::Amount,
    pub(crate) fxps: ledger::Amount,
}

#[derive(Deserialize)]
pub(crate) struct PositionRow {
    #[serde(default)]
    pub(crate) currency: Option<String>,
    /// Exact: a JSON number (or string) as the hub wrote it.
    pub(crate) value: Box<serde_json::value::RawValue>,
}

/// A position's `value` as an exact decimal: a JSON number or string,
/// possibly negative; no floats.
pub(crate) fn parse_position_value(raw: &str) -> Result<ledger::Amount, String> {
    let text = raw.trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    ledger::Amount::parse_signed(text).map_err(|error| format!("position {raw:?}: {error}"))
}

/// The exact sum of `values` (JSON position values).
pub(crate) fn sum_positions<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<ledger::Amount, String> {
    values
        .into_iter()
        .try_fold(ledger::Amount::ZERO, |sum, raw| {
            sum.checked_add(parse_position_value(raw)?)
                .ok_or_else(|| "the positions' sum overflows".to_string())
        })
}

/// Reads `GET /participants/{name}/positions` of every participant of the
/// run: per currency held, the sum of all and of the FXPs'.
pub(crate) async fn read_positions(
    shared: &Arc<Shared>,
    admin: &str,
) -> Result<Vec<CurrencyPositions>, String> {
    let held = currencies(shared);
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, name) in shared.names.clone().into_iter().enumerate() {
        let (shared, permits) = (shared.clone(), permits.clone());
        let url = format!("{admin}/participants/{name}/positions");
        let is_fxp = index as u32 >= shared.dfsps;
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let body = admin_call(&shared.identities.admin, Method::GET, &url, None, false)
                .await
                .map_err(|error| format!("{error:#}"))?;
            let rows: Vec<PositionRow> =
                serde_json::from_slice(&body).map_err(|error| format!("GET {url}: {error}"))?;
            let mut positions = Vec::with_capacity(held.len());
            for currency in held {
                // A row without a currency is the hub's only one (of a
                // hub of one currency).
                let values: Vec<String> = rows
                    .iter()
                    .filter(|row| row.currency.as_deref().is_none_or(|c| c == *currency))
                    .map(|row| row.value.get().to_string())
                    .collect();
                if values.is_empty() {
                    return Err(format!("GET {url}: no {currency} position"));
                }
                positions.push(sum_positions(values.iter().map(String::as_str))?);
            }
            Ok((is_fxp, positions))
        });
    }
    let mut sums: Vec<CurrencyPositions> = held
        .iter()
        .map(|currency| CurrencyPositions {
            currency,
            sum: ledger::Amount::ZERO,
            fxps: ledger::Amount::ZERO,
        })
        .collect();
    let overflow = || "the positions' sum overflows".to_string();
    while let Some(joined) = tasks.join_next().await {
        let (is_fxp, positions) = joined.map_err(|error| error.to_string())??;
        for (sums, position) in sums.iter_mut().zip(positions) {
            sums.sum = sums.sum.checked_add(position).ok_or_else(overflow)?;
            if is_fxp {
                sums.fxps = sums.fxps.checked_add(position).ok_or_else(overflow)?;
            }
        }
    }
    Ok(sums)
}

/// Whether the FXPs' target-currency position is exactly −[`FX_RATE`] ×
/// their source-currency one; `None` when the run has no FXPs.
pub(crate) fn fxps_at_rate(by_currency: &[CurrencyPositions]) -> Option<bool> {
    let source = by_currency.iter().find(|c| c.currency == CURRENCY)?;
    let target = by_currency.iter().find(|c| c.currency == TARGET_CURRENCY)?;
    Some(
        source
            .fxps
            .units()
            .checked_mul(-FX_RATE)
            .is_some_and(|units| units == target.fxps.units()),
    )
}

/// Reads the positions, again for up to [`POSITIONS_SETTLE`] while they do
/// not net to zero (a transfer the driver timed out may still be settling
/// in the hub).
pub(crate) async fn check_positions(shared: &Arc<Shared>, admin: &str) -> PositionCheck {
    let deadline = Instant::now() + POSITIONS_SETTLE;
    loop {
        let check = match read_positions(shared, admin).await {
            Ok(by_currency) => {
                let fxps_at_rate = fxps_at_rate(&by_currency);
                PositionCheck {
                    sum: by_currency
                        .iter()
                        .find(|c| c.currency == CURRENCY)
                        .map(|c| c.sum),
                    net_zero: by_currency.iter().all(|c| c.sum == ledger::Amount::ZERO)
                        && fxps_at_rate != Some(false),
                    by_currency,
                    fxps_at_rate,
                    problem: None,
                    not_applicable: false,
                }
            }
            Err(problem) => PositionCheck {
                problem: Some(problem),
                ..PositionCheck::default()
            },
        };
        if check.net_zero || check.problem.is_some() || Instant::now() >= deadline {
            return check;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fxps_positions_are_checked_at_the_rate() {
        let amount = |text: &str| ledger::Amount::parse_signed(text).unwrap();
        let positions = |usd: &str, tzs: &str| {
            vec![
                CurrencyPositions {
                    currency: CURRENCY,
                    sum: ledger::Amount::ZERO,
                    fxps: amount(usd),
                },
                CurrencyPositions {
                    currency: TARGET_CURRENCY,
                    sum: ledger::Amount::ZERO,
                    fxps: amount(tzs),
                },
            ]
        };
        // The FXP is owed USD and owes TZS.
        assert_eq!(fxps_at_rate(&positions("-10.5", "26250")), Some(true));
        assert_eq!(fxps_at_rate(&positions("0", "0")), Some(true));
        // A conversion without its transfer, or the other way round.
        assert_eq!(fxps_at_rate(&positions("-10.5", "0")), Some(false));
        assert_eq!(fxps_at_rate(&positions("0", "2500")), Some(false));
        assert_eq!(fxps_at_rate(&positions("-10.5", "26250")[..1]), None);
    }

    #[test]
    fn positions_sum_exactly() {
        assert_eq!(
            sum_positions(["1922", "-565", "-1357"]),
            Ok(ledger::Amount::ZERO)
        );
        // 0.1 + 0.2 - 0.3 is not zero in floating point; it is here.
        assert_eq!(
            sum_positions(["0.1", "0.2", "-0.3", "\"0\""]),
            Ok(ledger::Amount::ZERO)
        );
        assert_eq!(
            sum_positions(["10.5", "-3.25"]).map(|sum| sum.to_string()),
            Ok("7.25".to_string())
        );
        assert_eq!(
            sum_positions(["999999999999999999.9999", "-999999999999999999.9998"])
                .map(|sum| sum.to_string()),
            Ok("0.0001".to_string())
        );
        assert!(sum_positions(["1e3"]).is_err());
        assert!(sum_positions(["null"]).is_err());
        assert_eq!(sum_positions([]), Ok(ledger::Amount::ZERO));
    }
}
