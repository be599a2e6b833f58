//! Quotes in persistent mode: the FSPIOP duplicate rules on requests and
//! answers, and who may answer.

use ledger::*;

fn name(text: &str) -> FspName {
    FspName::new(text).unwrap()
}

fn ledger_with_two_dfsps() -> Ledger {
    let usd = Currency::parse("USD").unwrap();
    let mut ledger = Ledger::new(Limits::default());
    let setup = vec![
        Command::CreateHub { name: name("Hub") },
        Command::CreateHubAccount {
            currency: usd,
            kind: AccountKind::HubMultilateralSettlement,
        },
        Command::CreateHubAccount {
            currency: usd,
            kind: AccountKind::HubReconciliation,
        },
        Command::CreateParticipant {
            name: name("payerfsp"),
            currency: usd,
        },
        Command::CreateParticipant {
            name: name("payeefsp"),
            currency: usd,
        },
    ];
    let result = ledger.apply_batch(1, &setup);
    assert!(result.outcomes.iter().all(|o| o.error_code().is_none()));
    ledger
}

fn one(ledger: &mut Ledger, command: Command) -> (Outcome, Vec<Record>) {
    let mut result = ledger.apply_batch(2, &[command]);
    (result.outcomes.pop().unwrap(), result.records)
}

fn record(id: u128, hash: u8) -> Command {
    Command::RecordQuote {
        quote_id: TransferId::new(id),
        payer: name("payerfsp"),
        payee: name("payeefsp"),
        request_hash: RequestHash([hash; 32]),
    }
}

fn answer(id: u128, caller: &str, hash: u8) -> Command {
    Command::AnswerQuote {
        quote_id: TransferId::new(id),
        caller: name(caller),
        is_error: false,
        body: format!("answer {hash}"),
        request_hash: RequestHash([hash; 32]),
    }
}

#[test]
fn a_resent_request_is_a_duplicate_and_a_modified_one_is_3106() {
    let mut ledger = ledger_with_two_dfsps();
    assert_eq!(one(&mut ledger, record(1, 1)).0, Outcome::Done);
    let before = ledger.snapshot();
    let (outcome, records) = one(&mut ledger, record(1, 1));
    assert!(
        matches!(outcome, Outcome::QuoteDuplicate(ref view) if view.answer.is_none()),
        "{outcome:?}"
    );
    assert!(records.is_empty());
    let (outcome, records) = one(&mut ledger, record(1, 2));
    assert_eq!(outcome.error_code(), Some(ErrorCode::MODIFIED_REQUEST));
    assert!(records.is_empty());
    assert_eq!(ledger.snapshot(), before);
}

#[test]
fn the_answer_is_kept_and_resent_with_a_duplicate_request() {
    let mut ledger = ledger_with_two_dfsps();
    one(&mut ledger, record(1, 1));
    assert_eq!(one(&mut ledger, answer(1, "payeefsp", 9)).0, Outcome::Done);
    match one(&mut ledger, record(1, 1)).0 {
        Outcome::QuoteDuplicate(view) => {
            let answer = view.answer.expect("the answer is kept");
            assert_eq!(answer.body, "answer 9");
            assert_eq!(view.payer, name("payerfsp"));
        }
        other => panic!("{other:?}"),
    }
    // The same answer again is a duplicate; a different one is 3106.
    assert!(matches!(
        one(&mut ledger, answer(1, "payeefsp", 9)).0,
        Outcome::QuoteDuplicate(_)
    ));
    assert_eq!(
        one(&mut ledger, answer(1, "payeefsp", 8)).0.error_code(),
        Some(ErrorCode::MODIFIED_REQUEST)
    );
}

#[test]
fn only_the_payee_answers_a_known_quote() {
    let mut ledger = ledger_with_two_dfsps();
    one(&mut ledger, record(1, 1));
    assert_eq!(
        one(&mut ledger, answer(1, "payerfsp", 9)).0.error_code(),
        Some(ErrorCode::GENERIC_VALIDATION_ERROR)
    );
    assert_eq!(
        one(&mut ledger, answer(2, "payeefsp", 9)).0.error_code(),
        Some(ErrorCode(3205))
    );
    let unknown = Command::RecordQuote {
        quote_id: TransferId::new(3),
        payer: name("payerfsp"),
        payee: name("nobody"),
        request_hash: RequestHash([1; 32]),
    };
    assert_eq!(
        one(&mut ledger, unknown).0.error_code(),
        Some(ErrorCode(3201))
    );
}

#[test]
fn quotes_survive_restore() {
    let mut ledger = ledger_with_two_dfsps();
    one(&mut ledger, record(1, 1));
    one(&mut ledger, answer(1, "payeefsp", 9));
    one(&mut ledger, record(2, 1));
    let snapshot = ledger.snapshot();
    assert!(snapshot.audit().is_empty());
    let restored = Ledger::restore(snapshot.clone(), Limits::default()).unwrap();
    assert_eq!(restored.snapshot(), snapshot);
}
