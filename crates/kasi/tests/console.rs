//! The operator console in a real browser: Debian's chromium, headless,
//! driven through chromedriver (WebDriver), against the real binary with
//! real DFSP stubs. Each test saves a screenshot of every page it looks at
//! under `target/tmp/console-screenshots/<test>/`, for a reviewer.
//!
//! Never skipped: without chromium and chromedriver the tests fail with the
//! command that installs them (`.ci/run` installs them when missing).

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use support::{
    far_future, fspiop_headers, fspiop_time, fulfil_body, http_date, new_id, now_ms, prepare_body,
    tokens_file, Hub, Stub, CONDITION, FULFILMENT, PAYEE, PAYER,
};

const INSTALL: &str = "apt-get install -y chromium chromium-driver";

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A headless chromium behind its chromedriver, killed (with the browser)
/// when dropped.
struct Browser {
    driver: Child,
    client: Client,
    admin: String,
    shots: PathBuf,
    shot_count: AtomicUsize,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver was made the leader of its own process group, so the
        // browser it started goes with it.
        unsafe {
            libc::killpg(self.driver.id() as i32, libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start(test: &str, hub: &Hub) -> Browser {
        let chromium = find_program(&["chromium", "chromium-browser"])
            .unwrap_or_else(|| panic!("chromium is not installed: {INSTALL}"));
        let chromedriver = find_program(&["chromedriver"])
            .unwrap_or_else(|| panic!("chromedriver is not installed: {INSTALL}"));
        let port = support::reserve_address().port();
        let mut driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start chromedriver: {error}"));
        // It says when it listens: wait for that line, not for a time.
        let mut out = BufReader::new(driver.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            let read = out.read_line(&mut line).unwrap();
            assert!(read > 0, "chromedriver exited before it listened");
            if line.contains("started successfully") {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let profile = tempfile::tempdir().unwrap();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_string(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1366,900", "--lang=en-US",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|error| panic!("chromedriver would not start chromium: {error}"));
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("console-screenshots")
            .join(test);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            driver,
            client,
            admin: format!("http://{}", hub.admin),
            shots,
            shot_count: AtomicUsize::new(0),
            _profile: profile,
        }
    }

    async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.admin))
            .await
            .unwrap();
    }

    async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Saves what the browser shows now as `NN-name.png`, after checking
    /// the page is usable by keyboard and screen reader: every field has a
    /// label, every button a name.
    async fn shot(&self, name: &str) {
        let unlabelled = self
            .client
            .execute(
                "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
                     .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label'))
                     .map(e => e.outerHTML)
                   .concat([...document.querySelectorAll('button, a')]
                     .filter(e => !e.textContent.trim() && !e.getAttribute('aria-label'))
                     .map(e => e.outerHTML));",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, json!([]), "{name}: fields without a label");
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        let n = self.shot_count.fetch_add(1, Ordering::Relaxed) + 1;
        std::fs::write(self.shots.join(format!("{n:02}-{name}.png")), png).unwrap();
    }

    async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    async fn select(&self, css: &str, value: &str) {
        let select = self.client.find(Locator::Css(css)).await.unwrap();
        select.select_by_value(value).await.unwrap();
    }

    /// Clicks and waits for the page it leads to (a new document: the old
    /// one is marked before the click).
    async fn click(&self, css: &str) {
        let element = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no {css}: {error}"));
        self.client
            .execute("document.documentElement.dataset.stale = '1';", vec![])
            .await
            .unwrap();
        element.click().await.unwrap();
        self.client
            .wait()
            .for_element(Locator::Css("html:not([data-stale]) body"))
            .await
            .unwrap();
    }

    async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no {css}: {error}"))
            .text()
            .await
            .unwrap()
    }

    async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no {css}: {error}"))
            .attr(name)
            .await
            .unwrap()
    }

    /// The payer's funds form, filled and sent: the confirmation page.
    async fn review_funds(&self, action: &str, amount: &str) {
        self.goto(&format!("/console/participants/{PAYER}")).await;
        self.select("#funds-action", action).await;
        self.fill("#funds-amount", amount).await;
        self.click("form[action$='/funds'] button[type=submit]")
            .await;
    }

    /// The page's first focusable element is the skip link, and it leads
    /// to the page's `<main>`.
    async fn assert_skip_link_first(&self, page: &str) {
        let first = self
            .client
            .execute(
                "const first = [...document.querySelectorAll(
                     'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex=\"-1\"])')][0];
                 const target = document.querySelector(first.getAttribute('href') || 'none');
                 return [first.textContent, target && target.tagName];",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(first, json!(["Skip to main content", "MAIN"]), "{page}");
    }

    async fn flash(&self) -> String {
        self.text(".flash").await
    }

    async fn sign_in(&self, token: &str) {
        self.goto("/console/").await;
        assert!(
            self.path().await.starts_with("/console/sign-in"),
            "a console page without a session leads to the sign-in: {}",
            self.path().await
        );
        self.fill("#token", token).await;
        self.click("form button[type=submit]").await;
    }

    /// The session cookie, for requests made beside the browser.
    async fn cookie(&self) -> String {
        let cookie = self
            .client
            .get_named_cookie(console::SESSION_COOKIE)
            .await
            .unwrap();
        assert_eq!(cookie.http_only(), Some(true));
        format!("{}={}", cookie.name(), cookie.value())
    }
}

/// Each item's `key`, of a JSON list.
fn strings<'a>(list: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .expect("a JSON list")
        .iter()
        .filter_map(|item| item[key].as_str())
        .collect()
}

/// A hub with an operator's and a viewer's token, its accounts and the
/// default settlement model set up through the admin API.
fn hub_with_tokens(dir: &std::path::Path) -> (Hub, support::Tokens) {
    let (file, tokens) = tokens_file(dir);
    let mut hub = Hub::start_with(
        &dir.join("data"),
        &["--admin-tokens", file.to_str().unwrap()],
    );
    hub.admin_bearer = Some(tokens.operator.clone());
    hub.setup();
    (hub, tokens)
}

/// Window 1 closed and a settlement (1) of it, by the operator.
fn settle_the_first_window(hub: &Hub) {
    hub.admin_expect(
        "POST",
        "/v2/settlementWindows/1",
        Some(json!({"state": "CLOSED", "reason": "test"})),
        200,
    );
    hub.admin_expect(
        "POST",
        "/v2/settlements",
        Some(json!({"settlementModel": "DEFAULTDEFERREDNET", "reason": "test", "settlementWindows": [{"id": 1}]})),
        200,
    );
}

fn transfer(hub: &Hub, payer: &Stub, payee: &Stub, amount: &str) -> String {
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, amount, far_future());
    let response = hub.prepare(PAYER, PAYEE, &body);
    assert_eq!(response.status, 202, "prepare: {response:?}");
    payee.expect("POST", "/transfers");
    let response = hub.fulfil(&id, PAYEE, PAYER, &fulfil_body(FULFILMENT, "COMMITTED"));
    assert_eq!(response.status, 200, "fulfil: {response:?}");
    payer.expect("PUT", &format!("/transfers/{id}"));
    // The payee is told of the commit too (Mojaloop's notification).
    payee.expect("PUT", &format!("/transfers/{id}"));
    id
}

/// A settlement's page: the reason it was created with, and all its facts.
async fn settlement_facts(browser: &Browser) -> (String, String) {
    (
        browser.text("dd.creation-reason").await,
        browser.text("dl.facts").await,
    )
}

/// The payer's first usage bar on the overview: its class and its text.
async fn payer_cap_usage(browser: &Browser) -> (String, String) {
    browser.goto("/console/").await;
    let row = format!("tr[data-dfsp='{PAYER}'] .usage");
    let class = browser.attribute(&row, "class").await.unwrap_or_default();
    let text = browser.text(&format!("{row} .pct")).await;
    (class, text)
}

/// The payer (whose callbacks go to `payer_address`, where nothing answers
/// yet) pays the payee 10; once the hub gives up on telling the payer of
/// the commit (`--callback-retry-for-s`), that notification is a dead
/// letter. The transfer's id and the fulfil the payer should have had.
async fn a_dead_letter(
    hub: &Hub,
    payee: &Stub,
    payer_address: std::net::SocketAddr,
    net_debit_cap: u64,
) -> (String, String) {
    hub.onboard(
        PAYER,
        &format!("http://{payer_address}"),
        net_debit_cap,
        500,
    );
    hub.onboard(PAYEE, &payee.base_url(), net_debit_cap, 500);
    let id = new_id();
    let body = prepare_body(&id, PAYER, PAYEE, "10", far_future());
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    assert_eq!(hub.fulfil(&id, PAYEE, PAYER, &fulfil).status, 200);
    payee.expect("PUT", &format!("/transfers/{id}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while hub
        .admin_expect("GET", "/callbacks/dead-letters", None, 200)
        .json()
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(std::time::Instant::now() < deadline, "no dead letter");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    (id, fulfil)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_onboards_funds_watches_positions_finds_a_transfer_and_settles() {
    let dir = tempfile::tempdir().unwrap();
    let (hub, tokens) = hub_with_tokens(dir.path());
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    let browser = Browser::start("operator", &hub).await;

    // Sign in: a wrong token is refused on the form, the right one lands on
    // the overview as the operator the tokens file names.
    browser.goto("/console/").await;
    browser.assert_skip_link_first("sign-in").await;
    browser.shot("sign-in").await;
    browser.fill("#token", "kasi_not-a-token").await;
    browser.click("form button[type=submit]").await;
    assert!(browser.flash().await.contains("not valid"));
    browser.sign_in(&tokens.operator).await;
    assert_eq!(browser.path().await, "/console/");
    assert!(browser.text(".who").await.contains("alice · operator"));
    browser.shot("overview-empty").await;

    // Onboard both DFSPs from the form. A mistake is answered with the
    // API's own validation message, and nothing is created.
    browser.goto("/console/participants").await;
    browser.fill("#onboard-name", "brokenfsp").await;
    browser.fill("#onboard-currency", "XX1").await;
    browser.fill("#onboard-cap", "1000").await;
    browser.click("#onboard button[type=submit]").await;
    let refused = browser.flash().await;
    assert!(
        refused.contains("not an ISO 4217 currency"),
        "the API's message: {refused}"
    );
    let participants = hub.admin_expect("GET", "/participants", None, 200).json();
    assert!(
        !participants.to_string().contains("brokenfsp"),
        "a refused onboarding creates nothing: {participants}"
    );
    for (stub, funds) in [(&payer, ""), (&payee, "5000")] {
        browser.goto("/console/participants").await;
        browser.fill("#onboard-name", &stub.name).await;
        browser.fill("#onboard-currency", "usd").await;
        browser.fill("#onboard-cap", "1000").await;
        browser.fill("#onboard-base", &stub.base_url()).await;
        browser.fill("#onboard-funds", funds).await;
        browser.click("#onboard button[type=submit]").await;
        assert_eq!(
            browser.path().await,
            format!("/console/participants/{}", stub.name)
        );
        let done = browser.flash().await;
        assert!(
            done.contains(&format!("{} onboarded in USD", stub.name)),
            "{done}"
        );
    }
    browser.shot("participant-onboarded").await;
    let endpoints = hub
        .admin_expect(
            "GET",
            &format!("/participants/{PAYER}/endpoints"),
            None,
            200,
        )
        .json();
    assert!(
        endpoints
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "FSPIOP_CALLBACK_URL_TRANSFER_POST"
                && e["value"] == format!("{}/transfers", payer.base_url())),
        "{endpoints}"
    );
    assert_eq!(hub.account_value(PAYEE, "SETTLEMENT"), -5000.0);

    // Fund the payer: a confirmation shows the effect on its liquidity
    // before anything moves.
    browser
        .goto(&format!("/console/participants/{PAYER}"))
        .await;
    browser.select("#funds-action", "in").await;
    browser.fill("#funds-amount", "2000").await;
    browser.fill("#funds-reason", "deposit 2026-11-23").await;
    browser
        .click("form[action$='/funds'] button[type=submit]")
        .await;
    let effect = browser.text("dl.effect").await;
    assert!(effect.contains("Liquidity cover now\n0 USD"), "{effect}");
    assert!(
        effect.contains("Liquidity cover after\n2,000 USD"),
        "{effect}"
    );
    assert_eq!(
        hub.account_value(PAYER, "SETTLEMENT"),
        0.0,
        "nothing moves before the confirmation"
    );
    browser.shot("funds-in-confirm").await;
    let confirmation = browser
        .client
        .execute(
            "return [...document.querySelectorAll(\"form[action$='/funds/confirm'] input\")]
                 .map(i => encodeURIComponent(i.name) + '=' + encodeURIComponent(i.value)).join('&');",
            vec![],
        )
        .await
        .unwrap();
    browser
        .click("form[action$='/funds/confirm'] button[type=submit]")
        .await;
    assert!(browser
        .flash()
        .await
        .contains("Funds in of 2000 USD recorded"));
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), -2000.0);
    // The same confirmation sent again (a double click, a resend) is the
    // same movement: its id was chosen with the page.
    let again = support::http(
        hub.admin,
        "POST",
        &format!("/console/participants/{PAYER}/funds/confirm"),
        &[
            ("Cookie".to_string(), browser.cookie().await),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        confirmation.as_str().unwrap().as_bytes(),
    );
    assert_eq!(again.status, 303, "{again:?}");
    assert_eq!(
        hub.account_value(PAYER, "SETTLEMENT"),
        -2000.0,
        "one movement, not two"
    );
    browser.shot("participant-funded").await;

    // Positions move with the transfers the test drives: 0 %, then 80 %
    // of the net debit cap (amber), then 95 % (red).
    let (class, text) = payer_cap_usage(&browser).await;
    assert_eq!((class.as_str(), text.as_str()), ("usage ok", "0 %"));
    let first = transfer(&hub, &payer, &payee, "400");
    transfer(&hub, &payer, &payee, "400");
    let (class, text) = payer_cap_usage(&browser).await;
    assert_eq!((class.as_str(), text.as_str()), ("usage warn", "80 %"));
    browser.shot("overview-amber").await;
    transfer(&hub, &payer, &payee, "150");
    let (class, text) = payer_cap_usage(&browser).await;
    assert_eq!((class.as_str(), text.as_str()), ("usage alarm", "95 %"));
    let row = browser.text(&format!("tr[data-dfsp='{PAYER}']")).await;
    assert!(
        row.contains("950 USD") && row.contains("2,000 USD") && row.contains("48 %"),
        "position 950 against a liquidity cover of 2,000: {row}"
    );
    browser.shot("overview-red").await;
    // A screen reader hears one short line, not the table: the live region
    // is the summary alone, and it names the red position.
    assert_eq!(browser.attribute("#live", "aria-live").await, None);
    assert_eq!(
        browser
            .attribute("#live-summary", "aria-live")
            .await
            .as_deref(),
        Some("polite")
    );
    let summary = browser.text("#live-summary").await;
    assert!(
        summary.contains("1 position red") && summary.starts_with("Hub OK"),
        "{summary}"
    );
    browser
        .client
        .execute(
            "document.getElementById('live-summary').dataset.before = 'refresh';",
            vec![],
        )
        .await
        .unwrap();
    // The page refreshes its live part in place (the console's script,
    // allowed by the page's own CSP): a later render replaces this one.
    let rendered = browser.attribute("#live", "data-rendered").await;
    browser
        .client
        .wait()
        .for_element(Locator::Css("#live[data-refreshed]"))
        .await
        .unwrap();
    let refreshed = browser.attribute("#live", "data-rendered").await;
    assert!(
        refreshed.is_some() && refreshed != rendered,
        "refreshed in place: {rendered:?} -> {refreshed:?}"
    );
    assert_eq!(browser.count("#stale-note").await, 0);
    // Nothing changed that the summary says: the same line, untouched (not
    // replaced, so not announced again).
    assert_eq!(
        browser
            .attribute("#live-summary", "data-before")
            .await
            .as_deref(),
        Some("refresh")
    );
    assert_eq!(browser.text("#live-summary").await, summary);

    // A withdrawal that leaves the cover under the position is accepted by
    // the hub, but stops the DFSP's prepares: the confirmation says which.
    browser.review_funds("out", "1500").await;
    assert!(browser
        .text(".flash.warn")
        .await
        .contains("refuses every prepare"));
    assert_eq!(
        browser.count(".flash.error").await,
        0,
        "the hub would take it"
    );
    browser.review_funds("in", "1").await;
    assert_eq!(
        browser.count(".flash").await,
        0,
        "a deposit is never refused"
    );
    // One more is over the cap: refused (4200), and counted as a failure.
    let refused_id = new_id();
    let response = hub.prepare(
        PAYER,
        PAYEE,
        &prepare_body(&refused_id, PAYER, PAYEE, "100", far_future()),
    );
    assert_eq!(response.status, 202);
    payer.expect("PUT", &format!("/transfers/{refused_id}/error"));

    // Find a transfer by id: its state, parties, amount and timeline.
    browser.goto("/console/transfers").await;
    browser.fill("#transfer-id", &first).await;
    browser.click("form.search button[type=submit]").await;
    let found = browser.text("section.transfer").await;
    for expected in ["COMMITTED", PAYER, PAYEE, "400 USD", "PREPARE", "COMMIT"] {
        assert!(found.contains(expected), "{expected} in {found}");
    }
    let failures = browser.text("table.codes").await;
    assert!(failures.contains("4200"), "{failures}");
    browser.shot("transfer-found").await;

    // Settle: close the window, create a settlement of it, finalize it in
    // one action; the positions go back to zero. A model for EUR exists
    // too: nothing of the windows is in EUR, so it is not offered.
    hub.admin_expect(
        "POST",
        "/settlementModels",
        Some(json!({
            "name": "DEFERREDNETEUR",
            "settlementGranularity": "NET",
            "settlementInterchange": "MULTILATERAL",
            "settlementDelay": "DEFERRED",
            "requireLiquidityCheck": true,
            "ledgerAccountType": "POSITION",
            "autoPositionReset": true,
            "currency": "EUR"
        })),
        201,
    );
    browser.goto("/console/settlement").await;
    assert_eq!(
        browser.count("#create-settlement form").await,
        0,
        "nothing to settle while the only window is open"
    );
    browser.shot("settlement-open").await;
    browser
        .click("tr[data-window='1'] form button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("Window 1 closed"));
    let offered = browser
        .client
        .execute(
            "return [...document.querySelectorAll('#create-settlement form')].map(f => f.dataset.model);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(offered, json!(["DEFAULTDEFERREDNET"]));
    let not_offered = browser.text("#create-settlement .hint").await;
    assert!(not_offered.contains("DEFERREDNETEUR"), "{not_offered}");
    let model_form = "#create-settlement form[data-model='DEFAULTDEFERREDNET']";
    assert_eq!(
        browser
            .count(&format!(
                "{model_form} input[name=window][value='1']:checked"
            ))
            .await,
        1
    );
    browser.shot("settlement-closed").await;
    browser
        .fill(
            &format!("{model_form} input[name=reason]"),
            "month end 2026-11",
        )
        .await;
    browser
        .click(&format!("{model_form} button[type=submit]"))
        .await;
    assert!(browser.flash().await.contains("Settlement 1 created"));
    let nets = browser.text("table.settlement").await;
    assert!(
        nets.contains("950 USD") && nets.contains("-950 USD"),
        "{nets}"
    );
    let (reason, facts) = settlement_facts(&browser).await;
    assert_eq!(reason, "month end 2026-11");
    assert!(facts.contains("DEFAULTDEFERREDNET"), "{facts}");
    browser.shot("settlement-created").await;
    // Finalize asks first, showing what each participant pays or is paid;
    // nothing moves before the confirmation.
    browser.click("form[action$='/finalize'] button").await;
    assert!(browser
        .text("h1")
        .await
        .contains("Confirm: finalize settlement 1"));
    let payer_net = browser
        .text(&format!("table.settlement tr[data-participant='{PAYER}']"))
        .await;
    assert!(
        payer_net.contains("950 USD") && payer_net.contains("pays"),
        "{payer_net}"
    );
    let payee_net = browser
        .text(&format!("table.settlement tr[data-participant='{PAYEE}']"))
        .await;
    assert!(
        payee_net.contains("-950 USD") && payee_net.contains("is paid"),
        "{payee_net}"
    );
    let pending = hub
        .admin_expect("GET", "/v2/settlements/1", None, 200)
        .json();
    assert_eq!(
        pending["state"], "PENDING_SETTLEMENT",
        "not before confirming"
    );
    browser.shot("settlement-finalize-confirm").await;
    browser
        .click("form[action$='/finalize/confirm'] button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("Settlement 1 finalized"));
    assert!(browser.text("h1").await.contains("SETTLED"));
    // The creation's reason stays, beside the finalize's.
    let (reason, facts) = settlement_facts(&browser).await;
    assert_eq!(reason, "month end 2026-11");
    assert!(facts.contains("finalized from the console"), "{facts}");
    browser.shot("settlement-finalized").await;
    assert_eq!(hub.position(PAYER), 0.0, "the payer's position is reset");
    let settlement = hub
        .admin_expect("GET", "/v2/settlements/1", None, 200)
        .json();
    assert_eq!(settlement["state"], "SETTLED");
    // The open window stays first in the list, above the one just settled
    // (which the API lists first: it changed last); nothing is left to
    // settle.
    browser.goto("/console/settlement").await;
    assert_eq!(
        browser
            .attribute("table.windows tbody tr", "data-window")
            .await
            .as_deref(),
        Some("2")
    );
    assert_eq!(browser.count("#create-settlement form").await, 0);

    // The lists narrow by state and creation day (the API's filters).
    let cookie = browser.cookie().await;
    let narrowed = |query: &str| {
        support::http(
            hub.admin,
            "GET",
            &format!("/console/settlement?{query}"),
            &[("Cookie".to_string(), cookie.clone())],
            b"",
        )
    };
    let settled = narrowed("windowState=SETTLED&settlementState=SETTLED");
    assert_eq!(settled.status, 200, "{settled:?}");
    let text = settled.text();
    assert!(
        text.contains(r#"data-window="1""#) && !text.contains(r#"data-window="2""#),
        "only the settled window: {text}"
    );
    assert!(text.contains("/console/settlement/settlements/1"), "{text}");
    let open = narrowed("windowState=OPEN&settlementState=ABORTED").text();
    assert!(
        open.contains(r#"data-window="2""#) && !open.contains(r#"data-window="1""#),
        "{open}"
    );
    assert!(open.contains("No settlement matches."), "{open}");
    let created = hub
        .admin_expect("GET", "/v2/settlements/1", None, 200)
        .json()["createdDate"]
        .as_str()
        .unwrap()[..10]
        .to_string();
    let that_day = narrowed(&format!("from={created}&to={created}")).text();
    assert!(
        that_day.contains(r#"data-window="1""#)
            && that_day.contains("/console/settlement/settlements/1"),
        "{that_day}"
    );
    let long_ago = narrowed("to=2001-01-01").text();
    assert!(
        long_ago.contains("No window matches.") && long_ago.contains("No settlement matches."),
        "{long_ago}"
    );
    let bad = narrowed("from=yesterday");
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.text().contains("is not a date"), "{}", bad.text());

    // The transfers page searches the stored transfers (`GET /transfers`).
    let search = |query: &str| {
        support::http(
            hub.admin,
            "GET",
            &format!("/console/transfers?searched=1&{query}"),
            &[("Cookie".to_string(), cookie.clone())],
            b"",
        )
        .text()
    };
    let committed = search(&format!("payer={PAYER}&state=COMMITTED&currency=USD"));
    assert!(committed.contains("data-transfer="), "{committed}");
    assert!(committed.contains("COMMITTED"), "{committed}");
    let nothing = search(&format!("payer={PAYER}&from=2001-01-01&to=2001-01-02"));
    assert!(nothing.contains("No transfer matches."), "{nothing}");
    let refused = search("state=DONE");
    assert!(
        refused.contains("state &#39;DONE&#39;") || refused.contains("state 'DONE'"),
        "{refused}"
    );

    // The report, downloaded with the session (beside the browser, which
    // would save it to disk).
    let report = support::http(
        hub.admin,
        "GET",
        "/console/settlement/settlements/1/report.csv",
        &[("Cookie".to_string(), cookie)],
        b"",
    );
    assert_eq!(report.status, 200);
    assert!(report
        .header("content-type")
        .unwrap()
        .starts_with("text/csv"));
    assert!(
        report.text().starts_with("settlementId,"),
        "{}",
        report.text()
    );
    assert!(report.text().contains(PAYER));

    // Every change above left the API's audit event, with the operator as
    // the actor.
    browser.goto("/console/audit?action=funds.in").await;
    let audit = browser.text("table.audit").await;
    assert!(
        audit.contains("alice") && audit.contains("funds.in"),
        "{audit}"
    );
    browser.shot("audit").await;
    let events = hub
        .admin_expect("GET", "/audit-events?actor=alice&limit=1000", None, 200)
        .json();
    let actions = strings(&events, "action");
    for action in [
        "participant.create",
        "limits.init",
        "endpoint.set",
        "funds.in",
        "settlementWindow.close",
        "settlement.create",
        "settlement.finalize",
    ] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }

    // After settlement the bar is back at 0 %.
    let (class, text) = payer_cap_usage(&browser).await;
    assert_eq!((class.as_str(), text.as_str()), ("usage ok", "0 %"));

    // Funds out: the settlement took the payer's 950 from its deposit, so
    // the confirmation starts from 1,050. Asking for more than is there is
    // refused by the API, with its reason, and nothing moves.
    browser.review_funds("out", "500").await;
    let effect = browser.text("dl.effect").await;
    assert!(
        effect.contains("Liquidity cover now\n1,050 USD"),
        "{effect}"
    );
    assert!(
        effect.contains("Liquidity cover after\n550 USD"),
        "{effect}"
    );
    browser.shot("funds-out-confirm").await;
    browser
        .click("form[action$='/funds/confirm'] button[type=submit]")
        .await;
    assert!(browser
        .flash()
        .await
        .contains("Funds out of 500 USD recorded"));
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), -550.0);
    browser.review_funds("out", "5000").await;
    assert!(browser
        .text(".flash.error")
        .await
        .contains("will refuse it"));
    browser
        .click("form[action$='/funds/confirm'] button[type=submit]")
        .await;
    let refused = browser.text(".flash.error").await;
    assert!(refused.contains("error 4"), "the API's refusal: {refused}");
    assert_eq!(hub.account_value(PAYER, "SETTLEMENT"), -550.0);

    // Limits, activation and endpoints from the participant's page.
    browser.fill("#limit-value", "2000").await;
    browser
        .click("form[action$='/limits'] button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("set to 2000"));
    let limits = hub
        .admin_expect("GET", &format!("/participants/{PAYER}/limits"), None, 200)
        .json();
    assert_eq!(support::number(&limits[0]["limit"]["value"]), 2000.0);
    browser.click("form[action$='/active'] button").await;
    assert!(browser.flash().await.contains("deactivated"));
    assert!(browser.text("h1").await.contains("inactive"));
    let participant = hub
        .admin_expect("GET", &format!("/participants/{PAYER}"), None, 200)
        .json();
    assert_eq!(participant["isActive"], 0);
    browser.click("form[action$='/active'] button").await;
    assert!(browser.flash().await.contains("activated"));
    // Pausing one way: the mode, set from the page, shown on it.
    browser.select("#mode", "receive-only").await;
    browser
        .click("form[action$='/mode'] button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("is now receive-only"));
    assert!(browser.text("h1").await.contains("receive-only"));
    assert!(browser
        .text("#mode-hint")
        .await
        .contains("new payments from it are refused"));
    let participant = hub
        .admin_expect("GET", &format!("/participants/{PAYER}"), None, 200)
        .json();
    assert_eq!(
        (participant["isActive"].clone(), participant["mode"].clone()),
        (json!(1), json!("receive-only"))
    );
    browser.select("#mode", "active").await;
    browser
        .click("form[action$='/mode'] button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("is now active"));
    browser
        .select("#endpoint-type", "FSPIOP_CALLBACK_URL_QUOTES")
        .await;
    browser.fill("#endpoint-value", &payer.base_url()).await;
    browser
        .click("form[action$='/endpoints'] button[type=submit]")
        .await;
    assert!(browser.flash().await.contains("FSPIOP_CALLBACK_URL_QUOTES"));
    // A URL the hub will not call is refused with the API's words.
    browser
        .select("#endpoint-type", "FSPIOP_CALLBACK_URL_QUOTES")
        .await;
    browser.fill("#endpoint-value", "ftp://nowhere").await;
    browser
        .click("form[action$='/endpoints'] button[type=submit]")
        .await;
    assert!(browser.text(".flash.error").await.contains("3100"));
    browser.shot("participant-changed").await;

    // On a phone's width the page itself does not scroll sideways (wide
    // tables scroll inside their frame).
    browser.client.set_window_size(390, 844).await.unwrap();
    browser.goto("/console/").await;
    let overflow = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await
        .unwrap();
    assert!(overflow.as_i64().unwrap() <= 0, "overflow {overflow}");
    browser.shot("overview-phone").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_controls_and_cannot_change_anything() {
    // Everything an operator could act on exists: a settlement of a closed
    // window, and a dead letter (the payer never answers its callbacks).
    let dir = tempfile::tempdir().unwrap();
    let (file, tokens) = tokens_file(dir.path());
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--admin-tokens",
            file.to_str().unwrap(),
            "--callback-retry-for-s",
            "1",
        ],
    );
    hub.admin_bearer = Some(tokens.operator.clone());
    hub.setup();
    let payee = Stub::start(PAYEE);
    let (id, _) = a_dead_letter(&hub, &payee, support::reserve_address(), 1000).await;
    settle_the_first_window(&hub);
    // The payee declared an FXP (of a currency it does not hold: the API
    // takes it, the console marks it).
    let corridors = json!({"corridors": [{"sourceCurrency": "USD", "targetCurrency": "TZS"}]});
    hub.admin_expect(
        "PUT",
        &format!("/participants/{PAYEE}/fxCorridors"),
        Some(corridors.clone()),
        200,
    );
    let browser = Browser::start("viewer", &hub).await;
    browser.sign_in(&tokens.viewer).await;
    assert!(browser.text(".who").await.contains("grafana · viewer"));

    for (page, name) in [
        ("/console/", "overview"),
        ("/console/participants", "participants"),
        (
            &format!("/console/participants/{PAYER}") as &str,
            "participant",
        ),
        ("/console/settlement", "settlement"),
        ("/console/settlement/settlements/1", "settlement-detail"),
        ("/console/transfers", "transfers"),
        ("/console/audit", "audit"),
        ("/console/scheme", "scheme"),
        ("/console/fx", "fx"),
        (
            &format!("/console/fx?participant={PAYEE}") as &str,
            "fx-corridors",
        ),
    ] {
        browser.goto(page).await;
        assert_eq!(browser.path().await, page);
        assert_eq!(browser.count(".flash.error").await, 0, "{page}");
        browser.assert_skip_link_first(page).await;
        // Reading forms (find a transfer, filter the audit) use GET; no
        // form on a viewer's page may POST a change.
        assert_eq!(
            browser.count("main form[method='post']").await,
            0,
            "{page} shows a viewer a control that changes something"
        );
        browser.shot(name).await;
    }

    // By keyboard: the first Tab reaches the skip link, Enter takes the
    // focus past the navigation to the page's main content.
    let key = |key: Key| {
        KeyActions::new("keyboard".to_string())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() })
    };
    browser.client.perform_actions(key(Key::Tab)).await.unwrap();
    let focused = browser.client.active_element().await.unwrap();
    assert_eq!(focused.text().await.unwrap(), "Skip to main content");
    browser
        .client
        .perform_actions(key(Key::Enter))
        .await
        .unwrap();
    let focused = browser.client.active_element().await.unwrap();
    assert_eq!(focused.attr("id").await.unwrap().as_deref(), Some("main"));
    browser.shot("skip-link-used").await;

    browser.goto("/console/transfers").await;
    assert!(
        browser.text("main").await.contains(&id),
        "the viewer sees the dead letter"
    );

    // A big scheme's list is filtered by name; the hub's health is shown.
    browser.goto("/console/participants?q=PAYER").await;
    assert_eq!(browser.count("main table tbody tr").await, 1);
    assert!(browser.text("main table tbody").await.contains(PAYER));
    browser.goto("/console/").await;
    let tiles = browser.text(".tiles").await;
    assert!(
        tiles.contains("Hub\nOK") && tiles.contains("sqlite store, active"),
        "{tiles}"
    );

    // A change forged with the viewer's own session and CSRF token is
    // refused by the console's access check (the access table's 403, before
    // the form is read), and nothing changes.
    let cookie = browser.cookie().await;
    let csrf = browser
        .attribute("header form input[name=csrf]", "value")
        .await
        .unwrap();
    let forged = support::http(
        hub.admin,
        "POST",
        &format!("/console/participants/{PAYER}/limits"),
        &[
            ("Cookie".to_string(), cookie.clone()),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        format!("csrf={csrf}&currency=USD&value=999999").as_bytes(),
    );
    assert_eq!(forged.status, 403, "{forged:?}");
    assert!(
        forged
            .text()
            .contains("Forbidden: role viewer may not POST /console/participants/"),
        "{forged:?}"
    );
    let limits = hub
        .admin_expect("GET", &format!("/participants/{PAYER}/limits"), None, 200)
        .json();
    assert_eq!(support::number(&limits[0]["limit"]["value"]), 1000.0);
    // The attempt is in the audit trail as refused (written beside the
    // answer, so awaited), and counted against the DFSP it was about: the
    // overview, which the viewer reads too, shows it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let events = loop {
        let events = hub
            .admin_expect("GET", "/audit-events?actor=grafana", None, 200)
            .json();
        if !events.as_array().unwrap().is_empty() || std::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["outcome"], "FORBIDDEN", "{events:#?}");
    assert_eq!(events[0]["role"], "viewer", "{events:#?}");
    assert_eq!(
        events[0]["after"]["request"],
        format!("POST /console/participants/{PAYER}/limits")
    );
    let row = format!("tr[data-refusals='{PAYER}']");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        browser.goto("/console/").await;
        if browser.count(&row).await > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the overview never showed {PAYER}'s refusal: {}",
            browser.text("main").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refusals = browser.text(&row).await;
    assert!(refusals.contains("admin_forbidden 1"), "{refusals}");
    browser.shot("overview-refusals").await;
    browser.goto("/console/audit").await;
    assert!(browser.text("main table").await.contains("FORBIDDEN"));

    // Without the session's CSRF token a POST is refused before anything.
    let no_token = support::http(
        hub.admin,
        "POST",
        &format!("/console/participants/{PAYER}/active"),
        &[
            ("Cookie".to_string(), cookie),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        b"csrf=forged",
    );
    assert_eq!(no_token.status, 403);

    // The viewer sees the FXP's corridors, and cannot change them: a
    // forged form is refused by the console's access check and changes
    // nothing.
    browser.goto("/console/fx").await;
    let fxps = browser.text("table.fxps").await;
    assert!(
        fxps.contains("USD → TZS") && fxps.contains("no TZS position"),
        "{fxps}"
    );
    let forged = support::http(
        hub.admin,
        "POST",
        "/console/fx/corridors",
        &[
            ("Cookie".to_string(), browser.cookie().await),
            (
                "Content-Type".to_string(),
                "application/x-www-form-urlencoded".to_string(),
            ),
        ],
        format!("csrf={csrf}&participant={PAYEE}").as_bytes(),
    );
    assert_eq!(forged.status, 403, "{forged:?}");
    assert!(forged.text().contains("Forbidden"), "{forged:?}");
    assert_eq!(
        hub.admin_expect(
            "GET",
            &format!("/participants/{PAYEE}/fxCorridors"),
            None,
            200
        )
        .json(),
        corridors
    );

    // Signing out ends the session.
    browser.click("header form button[type=submit]").await;
    assert!(browser.path().await.starts_with("/console/sign-in"));
    browser.goto("/console/participants").await;
    assert!(browser.path().await.starts_with("/console/sign-in"));
    browser.shot("signed-out").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_callbacks_show_and_are_resent_from_the_console() {
    // On loopback without credentials the console is open, as the API is.
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start_with(&dir.path().join("data"), &["--callback-retry-for-s", "1"]);
    hub.setup();
    let payer_address = support::reserve_address();
    let payee = Stub::start(PAYEE);
    let (id, fulfil) = a_dead_letter(&hub, &payee, payer_address, 10_000).await;

    let browser = Browser::start("callbacks", &hub).await;
    browser.goto("/console/").await;
    assert_eq!(browser.path().await, "/console/", "no sign-in when open");
    assert!(browser.text(".who").await.contains("loopback · operator"));
    let row = browser.text(&format!("tr[data-dfsp='{PAYER}']")).await;
    assert!(
        row.contains("failing since") && row.contains("1 dead letters"),
        "{row}"
    );
    browser.shot("overview-failing").await;
    browser
        .click(&format!("tr[data-dfsp='{PAYER}'] a[href$='#dead-letters']"))
        .await;
    let letters = browser
        .text("#dead-letters + p + div + div.table-wrap")
        .await;
    assert!(
        letters.contains(&id) && letters.contains("PUT"),
        "{letters}"
    );
    browser.shot("dead-letters").await;

    // The payer is back: resend its dead letters from the console.
    let payer = Stub::start_on(PAYER, payer_address);
    browser
        .click(&format!("form[action$='participant={PAYER}'] button"))
        .await;
    assert!(browser
        .flash()
        .await
        .contains(&format!("1 dead letters of {PAYER} sent again")));
    let resent = payer.expect("PUT", &format!("/transfers/{id}"));
    assert_eq!(resent.text(), fulfil, "the payee's fulfil, byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_hub_is_set_up_from_the_console() {
    // Nothing set up through the API: the console alone takes the hub to
    // its first DFSP.
    let dir = tempfile::tempdir().unwrap();
    let hub = Hub::start(&dir.path().join("data"));
    let browser = Browser::start("scheme", &hub).await;
    browser.goto("/console/scheme").await;
    assert!(browser
        .text(".flash.warn")
        .await
        .contains("no accounts yet"));
    browser.shot("scheme-fresh").await;

    browser.fill("#hub-currency-code", "usd").await;
    browser.click("#hub-currency button[type=submit]").await;
    assert!(browser
        .flash()
        .await
        .contains("The hub's USD accounts are created"));
    assert_eq!(browser.count("table.hub-accounts tbody tr").await, 2);
    let hub_accounts = hub
        .admin_expect("GET", "/participants/Hub", None, 200)
        .json();
    let kinds = strings(&hub_accounts["accounts"], "ledgerAccountType");
    assert_eq!(
        kinds,
        ["HUB_MULTILATERAL_SETTLEMENT", "HUB_RECONCILIATION"],
        "{hub_accounts}"
    );

    browser.fill("#model-name", "DEFERREDNET").await;
    browser.click("#new-model button[type=submit]").await;
    assert!(browser
        .flash()
        .await
        .contains("Settlement model DEFERREDNET created"));
    // A model the API refuses is refused with its words, and not listed.
    browser.fill("#model-name", "BROKEN").await;
    browser.fill("#model-currency", "ZZZ").await;
    browser.click("#new-model button[type=submit]").await;
    assert_eq!(browser.count(".flash.error").await, 1);
    let models = hub
        .admin_expect("GET", "/settlementModels", None, 200)
        .json();
    let names = strings(&models, "name");
    assert_eq!(names, ["DEFERREDNET"], "{models}");
    assert_eq!(models[0]["autoPositionReset"], true, "{models}");
    assert_eq!(models[0]["settlementGranularity"], "NET", "{models}");

    browser.select("#oracle-type", "EMAIL").await;
    browser
        .fill("#oracle-endpoint", "http://127.0.0.1:9/oracle")
        .await;
    browser.click("#new-oracle button[type=submit]").await;
    assert!(browser.flash().await.contains("Oracle for EMAIL added"));
    let oracles = hub.admin_expect("GET", "/oracles", None, 200).json();
    assert_eq!(oracles[0]["oracleIdType"], "EMAIL", "{oracles}");
    browser.shot("scheme-set-up").await;

    // Now a DFSP can be onboarded, and settled with the model made here.
    let payer = Stub::start(PAYER);
    browser.goto("/console/participants").await;
    browser.fill("#onboard-name", PAYER).await;
    browser.fill("#onboard-currency", "USD").await;
    browser.fill("#onboard-cap", "1000").await;
    browser.fill("#onboard-base", &payer.base_url()).await;
    browser.click("#onboard button[type=submit]").await;
    assert!(browser.flash().await.contains("payerfsp onboarded in USD"));
}

const FXP: &str = "fxp";

/// FSPIOP v2.0 headers for `/fxTransfers`.
fn fx_headers(source: &str, destination: &str, with_accept: bool) -> Vec<(String, String)> {
    let mut headers = vec![(
        "Content-Type".to_string(),
        "application/vnd.interoperability.fxTransfers+json;version=2.0".to_string(),
    )];
    if with_accept {
        headers.push((
            "Accept".to_string(),
            "application/vnd.interoperability.fxTransfers+json;version=2".to_string(),
        ));
    }
    headers.push(("Date".to_string(), http_date(now_ms())));
    headers.push(("FSPIOP-Source".to_string(), source.to_string()));
    headers.push(("FSPIOP-Destination".to_string(), destination.to_string()));
    headers
}

/// The payer converts USD 300 into TZS 750,000 through the FXP, for the
/// transfer `determining`; the FXP is asked.
fn convert(hub: &Hub, fxp: &Stub, commit_request_id: &str, determining: &str) {
    let body = format!(
        r#"{{"commitRequestId":"{commit_request_id}","determiningTransferId":"{determining}","initiatingFsp":"{PAYER}","counterPartyFsp":"{FXP}","amountType":"SEND","sourceAmount":{{"currency":"USD","amount":"300"}},"targetAmount":{{"currency":"TZS","amount":"750000"}},"condition":"{CONDITION}","expiration":"{}"}}"#,
        fspiop_time(far_future())
    );
    let headers = fx_headers(PAYER, FXP, true);
    let response = hub.api("POST", "/fxTransfers", &headers, body.as_bytes());
    assert_eq!(response.status, 202, "{response:?}");
    fxp.expect("POST", "/fxTransfers");
}

/// The FXP accepts the conversion; the payer is told.
fn accept_conversion(hub: &Hub, payer: &Stub, commit_request_id: &str) {
    let body = format!(
        r#"{{"conversionState":"RESERVED","fulfilment":"{FULFILMENT}","completedTimestamp":"{}"}}"#,
        fspiop_time(now_ms())
    );
    let headers = fx_headers(FXP, PAYER, false);
    let path = format!("/fxTransfers/{commit_request_id}");
    let response = hub.api("PUT", &path, &headers, body.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    payer.expect("PUT", &path);
}

/// Clicks a checkbox (no page follows).
async fn tick(browser: &Browser, css: &str) {
    browser
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|error| panic!("no {css}: {error}"))
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fxp_is_set_up_and_a_conversion_is_followed_to_its_transfer_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let (hub, tokens) = hub_with_tokens(dir.path());
    let payer = Stub::start(PAYER);
    let fxp = Stub::start(FXP);
    let payee = Stub::start(PAYEE);
    let browser = Browser::start("fx", &hub).await;
    browser.sign_in(&tokens.operator).await;

    // The scheme in TZS too; the payer in USD, the payee in TZS, the FXP in
    // both: the onboarding form twice (a known name gains the currency),
    // each time with the FX callbacks under the DFSP's base URL.
    browser.goto("/console/scheme").await;
    browser.fill("#hub-currency-code", "TZS").await;
    browser.click("#hub-currency button[type=submit]").await;
    assert!(browser
        .flash()
        .await
        .contains("The hub's TZS accounts are created"));
    for (stub, currency, funds) in [
        (&payer, "USD", "1000"),
        (&fxp, "USD", ""),
        (&fxp, "TZS", "1000000"),
        (&payee, "TZS", ""),
    ] {
        browser.goto("/console/participants").await;
        browser.fill("#onboard-name", &stub.name).await;
        browser.fill("#onboard-currency", currency).await;
        browser.fill("#onboard-cap", "1000000").await;
        browser.fill("#onboard-base", &stub.base_url()).await;
        browser.fill("#onboard-funds", funds).await;
        browser.click("#onboard button[type=submit]").await;
        let done = browser.flash().await;
        assert!(
            done.contains(&format!("{} onboarded in {currency}", stub.name)),
            "{done}"
        );
    }
    let endpoints = hub
        .admin_expect("GET", &format!("/participants/{FXP}/endpoints"), None, 200)
        .json();
    assert!(
        endpoints
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "FSPIOP_CALLBACK_URL_FX_TRANSFER_PUT"
                && e["value"] == format!("{}/fxTransfers/{{{{commitRequestId}}}}", fxp.base_url())),
        "{endpoints}"
    );

    // The FXP's page: a position in each currency; not yet an FXP.
    browser.goto(&format!("/console/participants/{FXP}")).await;
    assert_eq!(browser.count("table.positions tbody tr").await, 2);
    let tzs = browser
        .text("table.positions tr[data-currency='TZS']")
        .await;
    assert!(
        tzs.contains("1,000,000 TZS"),
        "the cap and the cover: {tzs}"
    );
    assert!(browser
        .text("#fx + p")
        .await
        .contains("is not a declared FXP"));
    browser.shot("fxp-two-currencies").await;

    // Declared from the FX page: every direction between its currencies
    // is offered; the one ticked is declared, audited as the operator's.
    browser.goto("/console/fx").await;
    assert!(browser
        .text("main")
        .await
        .contains("No participant is a declared FXP"));
    browser.select("#fx-participant", FXP).await;
    browser.click("form.search button[type=submit]").await;
    assert_eq!(
        browser.path().await,
        format!("/console/fx?participant={FXP}")
    );
    assert_eq!(
        browser
            .count("#corridors input[type=checkbox]:not(:checked)")
            .await,
        2
    );
    tick(&browser, "#corridor-USD-TZS").await;
    browser.click("form.corridors button[type=submit]").await;
    let done = browser.flash().await;
    assert!(done.contains("fxp's corridors set: USD → TZS"), "{done}");
    assert_eq!(
        hub.admin_expect("GET", "/fxps", None, 200).json(),
        json!([{"name": FXP, "isActive": 1, "corridors": [{"sourceCurrency": "USD", "targetCurrency": "TZS"}]}])
    );
    assert_eq!(browser.count("#corridor-USD-TZS:checked").await, 1);
    assert!(browser
        .text(&format!("table.fxps tr[data-fxp='{FXP}']"))
        .await
        .contains("USD → TZS"));
    assert_eq!(
        browser
            .count(&format!("table.fxp-positions tr[data-fxp='{FXP}']"))
            .await,
        2
    );
    browser.shot("fx-declared").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let events = loop {
        let events = hub
            .admin_expect("GET", "/audit-events?action=fxp.corridors", None, 200)
            .json();
        if !events.as_array().unwrap().is_empty() || std::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(events[0]["actor"], "alice", "{events}");
    assert_eq!(events[0]["target"], FXP, "{events}");
    assert!(events[0]["after"].to_string().contains("TZS"), "{events}");

    // A DFSP of one currency is offered no corridor, and told why.
    browser
        .goto(&format!("/console/fx?participant={PAYER}"))
        .await;
    assert!(browser.text(".flash.warn").await.contains("USD only"));
    assert_eq!(browser.count("form.corridors").await, 0);
    // The list marks the FXP; its page names its corridor.
    browser.goto("/console/participants").await;
    assert_eq!(browser.count("a.badge.fxp").await, 1);
    browser.goto(&format!("/console/participants/{FXP}")).await;
    assert!(browser.text("ul.corridors").await.contains("USD → TZS"));

    // A conversion, found by its commitRequestId: reserved, not yet
    // accepted, its transfer not yet prepared (but linked).
    let (conversion, transfer) = (new_id(), new_id());
    convert(&hub, &fxp, &conversion, &transfer);
    browser.goto("/console/transfers").await;
    browser.fill("#transfer-id", &conversion).await;
    browser.click("form.search button[type=submit]").await;
    let found = browser.text("section.transfer").await;
    for expected in [
        "Conversion",
        "RESERVED",
        "300 USD → 750,000 TZS",
        "1 USD = 2,500 TZS",
        "FXP accepted\nnot yet",
        "not prepared (yet)",
        PAYER,
        FXP,
    ] {
        assert!(found.contains(expected), "{expected} in {found}");
    }
    browser.shot("conversion-reserved").await;

    // Accepted, the transfer prepared and committed: both legs commit.
    accept_conversion(&hub, &payer, &conversion);
    let body =
        prepare_body(&transfer, PAYER, PAYEE, "750000", far_future()).replace("\"USD\"", "\"TZS\"");
    assert_eq!(hub.prepare(PAYER, PAYEE, &body).status, 202);
    payee.expect("POST", "/transfers");
    browser
        .goto(&format!("/console/transfers?id={conversion}"))
        .await;
    let side = browser.text("section.fx").await;
    assert!(
        side.contains("RESERVED") && side.contains(&format!("Paid to\n{PAYEE} in TZS")),
        "{side}"
    );
    let headers = fspiop_headers(PAYEE, PAYER, false);
    let fulfil = fulfil_body(FULFILMENT, "COMMITTED");
    let response = hub.api(
        "PUT",
        &format!("/transfers/{transfer}"),
        &headers,
        fulfil.as_bytes(),
    );
    assert_eq!(response.status, 200, "{response:?}");
    payer.expect("PUT", &format!("/transfers/{transfer}"));
    fxp.expect("PATCH", &format!("/fxTransfers/{conversion}"));

    // From the conversion to its transfer, and back.
    browser
        .goto(&format!("/console/transfers?id={conversion}"))
        .await;
    assert!(browser
        .text("#transfer-title")
        .await
        .starts_with("Conversion"));
    let side = browser.text("section.fx").await;
    assert!(!side.contains("not yet"), "accepted: {side}");
    assert!(
        browser.text("dd.dependent").await.contains("COMMITTED"),
        "{side}"
    );
    browser.shot("conversion-committed").await;
    browser.click("dd.dependent a").await;
    assert_eq!(
        browser.path().await,
        format!("/console/transfers?id={transfer}")
    );
    let found = browser.text("section.transfer").await;
    for expected in [
        "COMMITTED",
        "750,000 TZS",
        "Paid through a currency conversion",
        FXP,
    ] {
        assert!(found.contains(expected), "{expected} in {found}");
    }
    assert!(browser.text("dd.conversion").await.contains("COMMITTED"));
    browser.shot("dependent-transfer").await;
    browser.click("dd.conversion a").await;
    assert_eq!(
        browser.path().await,
        format!("/console/transfers?id={conversion}")
    );

    // The FXP's positions, per currency: owed the USD, owing the TZS.
    browser.goto("/console/fx").await;
    let row = |currency: &str| {
        format!("table.fxp-positions tr[data-fxp='{FXP}'][data-currency='{currency}']")
    };
    let usd = browser.text(&row("USD")).await;
    assert!(usd.contains("-300 USD"), "{usd}");
    let tzs = browser.text(&row("TZS")).await;
    assert!(tzs.contains("750,000 TZS"), "{tzs}");
    browser.shot("fxp-positions").await;

    // Nothing ticked withdraws the FXP.
    browser
        .goto(&format!("/console/fx?participant={FXP}"))
        .await;
    tick(&browser, "#corridor-USD-TZS").await;
    browser.click("form.corridors button[type=submit]").await;
    assert!(browser.flash().await.contains("fxp is no longer an FXP"));
    assert_eq!(
        hub.admin_expect("GET", "/fxps", None, 200).json(),
        json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dfsp_person_sees_a_portal_of_its_own_dfsp_only() {
    let dir = tempfile::tempdir().unwrap();
    let (operator, operator_line) = support::admin_token("alice", "operator");
    let (dfsp, dfsp_line) = support::admin_token("payer-ops", &format!("dfsp:{PAYER}"));
    let file = dir.path().join("admin-tokens");
    std::fs::write(&file, format!("{operator_line}\n{dfsp_line}\n")).unwrap();
    let mut hub = Hub::start_with(
        &dir.path().join("data"),
        &["--admin-tokens", file.to_str().unwrap()],
    );
    hub.admin_bearer = Some(operator);
    hub.setup();
    let payer = Stub::start(PAYER);
    let payee = Stub::start(PAYEE);
    hub.onboard(PAYER, &payer.base_url(), 10_000, 5_000);
    hub.onboard(PAYEE, &payee.base_url(), 10_000, 5_000);
    let id = transfer(&hub, &payer, &payee, "12.5");
    settle_the_first_window(&hub);

    // Signed in, the person lands on its own DFSP's page: the portal.
    let browser = Browser::start("dfsp-portal", &hub).await;
    browser.sign_in(&dfsp).await;
    assert_eq!(
        browser.path().await,
        format!("/console/participants/{PAYER}")
    );
    assert!(browser
        .text(".who")
        .await
        .contains(&format!("payer-ops · dfsp:{PAYER}")));
    let nav = browser.text("nav").await;
    for shown in [PAYER, "Transfers", "Settlement"] {
        assert!(nav.contains(shown), "{nav}");
    }
    for hidden in [
        "Overview",
        "Participants",
        "FX",
        "Audit",
        "Approvals",
        "Scheme",
    ] {
        assert!(!nav.contains(hidden), "the nav offers {hidden}: {nav}");
    }
    assert_eq!(browser.count("main form[method='post']").await, 0);
    let main = browser.text("main").await;
    assert!(main.contains("Positions per currency"), "{main}");
    assert!(!main.contains(PAYEE), "{main}");
    browser.shot("portal").await;

    // Its transfer, found, with the window it fell in: the window's page
    // shows that window alone.
    browser.goto(&format!("/console/transfers?id={id}")).await;
    assert!(browser.text("main").await.contains(&id));
    assert_eq!(browser.count(".flash.error").await, 0);
    assert_eq!(
        browser.attribute("a.window", "href").await.as_deref(),
        Some("/console/settlement?window=1#window-1")
    );
    browser.shot("transfer").await;
    browser.click("a.window").await;
    assert_eq!(browser.count("tr[data-window]").await, 1);
    let window = browser.text("tr#window-1").await;
    assert!(window.contains("PENDING_SETTLEMENT"), "{window}");
    browser.shot("transfer-window").await;
    // Its settlement net, alone.
    browser.goto("/console/settlement/settlements/1").await;
    let net = browser.text("main").await;
    assert!(net.contains(PAYER) && !net.contains(PAYEE), "{net}");
    // The report is the whole settlement's: not offered.
    assert!(!net.contains("report"), "{net}");
    browser.shot("settlement-net").await;

    // Another DFSP's page, and the scheme's pages, are refused.
    for page in [
        format!("/console/participants/{PAYEE}"),
        "/console/participants".to_string(),
        "/console/audit".to_string(),
    ] {
        browser.goto(&page).await;
        let refused = browser.text("main").await;
        assert!(
            refused.contains("Forbidden: role dfsp:payerfsp"),
            "{page}: {refused}"
        );
    }
    browser.shot("refused").await;
}

/// A real, throw-away OpenID provider: the npm package oidc-provider (an
/// OpenID Certified implementation) run by node from
/// `tests/oidc-provider/` (its packages installed there by `npm ci` when
/// missing, at the versions its package-lock.json pins), killed when
/// dropped.
struct IdentityProvider {
    child: Child,
    issuer: String,
    out: BufReader<std::process::ChildStdout>,
}

impl Drop for IdentityProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl IdentityProvider {
    /// Bound and saying its issuer; `roles` (JSON, login → roles) are the
    /// `roles` claim of each person's access tokens.
    fn start(roles: &serde_json::Value) -> IdentityProvider {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc-provider");
        if !dir
            .join("node_modules/oidc-provider/package.json")
            .is_file()
        {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir)
                .status()
                .unwrap_or_else(|error| {
                    panic!(
                        "npm is needed for the OpenID provider (apt-get install -y npm): {error}"
                    )
                });
            assert!(status.success(), "npm ci in {} failed", dir.display());
        }
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .current_dir(&dir)
            .env("KASI_TEST_ROLES", roles.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start node: {error}"));
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let issuer = loop {
            let mut line = String::new();
            let read = out.read_line(&mut line).unwrap();
            assert!(read > 0, "the OpenID provider exited before it listened");
            if let Some(issuer) = line.trim().strip_prefix("listening ") {
                break issuer.to_string();
            }
        };
        IdentityProvider { child, issuer, out }
    }

    /// Registers the console's callback as its client's redirect URI and
    /// waits until it serves.
    fn ready(&mut self, redirect: &str) {
        use std::io::Write as _;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{redirect}").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            let read = self.out.read_line(&mut line).unwrap();
            assert!(read > 0, "the OpenID provider exited before it was ready");
            if line.trim() == "ready" {
                break;
            }
        }
    }
}

/// Issue 32: a person signs in to the console through the scheme's
/// identity provider, in a browser, end to end — the console's button, the
/// provider's own login and consent pages, the authorization code with
/// PKCE traded by kasi as a confidential client, and back to the page they
/// asked for, named and in the role the provider gives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_through_the_schemes_identity_provider() {
    let mut provider = IdentityProvider::start(&json!({
        "dora": ["hub-treasury"],
        "mallory": ["offline_access"],
    }));
    let dir = tempfile::tempdir().unwrap();
    let (tokens, _) = tokens_file(dir.path());
    let secret = dir.path().join("oidc-client-secret");
    std::fs::write(&secret, "kasi-test-secret\n").unwrap();
    let hub = Hub::start_with(
        &dir.path().join("data"),
        &[
            "--admin-tokens",
            tokens.to_str().unwrap(),
            "--oidc-issuer",
            &provider.issuer,
            "--oidc-client-id",
            "kasi-console",
            "--oidc-client-secret-file",
            secret.to_str().unwrap(),
            "--oidc-audience",
            "urn:kasi:admin",
            "--oidc-role-map",
            "hub-treasury=finance",
        ],
    );
    provider.ready(&format!("http://{}/console/oidc/callback", hub.admin));
    // The hub asked the provider for its discovery document when it
    // started — before the provider could serve it (it needs the hub's
    // port) — and asks again at most every ten seconds. Wait, with a
    // deadline, until a sign-in begins with a redirect to the provider.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    loop {
        let start = support::http(
            hub.admin,
            "GET",
            "/console/oidc/start?next=%2Fconsole%2Fparticipants",
            &[],
            b"",
        );
        if start.status == 303 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hub never reached the identity provider: {start:?}\n{}",
            hub.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let browser = Browser::start("oidc-sign-in", &hub).await;

    let sign_in = |login: &'static str| {
        let (browser, hub) = (&browser, &hub);
        async move {
            browser
                .goto("/console/sign-in?next=/console/participants")
                .await;
            browser.click("#provider-sign-in").await;
            // The provider's own pages: its login (any password), then its
            // consent.
            assert_eq!(
                browser.count("input[name=login]").await,
                1,
                "not the provider's login page: {} {}\n{}",
                browser.client.current_url().await.unwrap(),
                browser.text("body").await,
                hub.log()
            );
            browser.fill("input[name=login]", login).await;
            browser.fill("input[name=password]", "not-checked").await;
            browser.click("button[type=submit]").await;
            browser.click("button[type=submit]").await;
        }
    };

    sign_in("dora").await;
    // The callback's page moves on by itself to where she was going.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while browser.path().await != "/console/participants" {
        assert!(
            std::time::Instant::now() < deadline,
            "never reached the page asked for: {} {}",
            browser.path().await,
            browser.text("main").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    browser.shot("signed-in-through-the-provider").await;
    assert_eq!(browser.text(".who").await, "dora · finance");
    let cookie = browser.cookie().await;
    hub.await_log("console sign-in");
    assert!(
        hub.log().lines().any(|l| l.contains("console sign-in")
            && l.contains("dora")
            && l.contains("identity-provider")),
        "the sign-in is logged with its source"
    );
    // Finance moves money but does not configure the scheme: the oracle
    // form is not offered to her.
    browser.goto("/console/scheme").await;
    assert_eq!(
        browser
            .count("form[action='/console/scheme/oracles']")
            .await,
        0
    );
    drop(cookie);

    // Signed out, someone the provider knows but kasi gives no role gets
    // no session.
    browser
        .click("form[action='/console/sign-out'] button")
        .await;
    // The provider remembers dora (single sign-on): forget her there too.
    browser
        .client
        .goto(&format!(
            "{}/.well-known/openid-configuration",
            provider.issuer
        ))
        .await
        .unwrap();
    browser.client.delete_all_cookies().await.unwrap();
    sign_in("mallory").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let main = browser.text("main").await;
        if main.contains("no kasi role") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mallory was not refused: {} {main}",
            browser.path().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    browser.goto("/console/").await;
    assert!(
        browser.path().await.starts_with("/console/sign-in"),
        "no session: {}",
        browser.path().await
    );
}
