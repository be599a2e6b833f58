//! `kasi bench compare`: Markdown "evolution" tables over several runs,
//! each compared with run #1 (latency by leg, throughput, hub stage means).

use std::fmt::{self, Write as _};

use serde_json::Value;

use super::format::{
    cell, fmt_count, fmt_opt, fmt_rate, fmt_ratio, fmt_signed, leg, num, ordered_legs, text,
    text_cell, DASH,
};
use super::markdown::{stage_rows, StageRow};

// ---------------------------------------------------------------------------
// Comparison of several runs
// ---------------------------------------------------------------------------

fn run_label(file: &str, report: &Value) -> String {
    cell(&text(report, "label").unwrap_or_else(|| file.to_owned()))
}

/// Every leg measured in any report: each leg takes its place from the first
/// report that has it, and e2e goes last because it sums the others.
fn legs_across(reports: &[(String, Value)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (_, report) in reports {
        for name in ordered_legs(report) {
            if leg(report, &name).is_some() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if let Some(e2e) = names.iter().position(|n| n == "e2e") {
        let e2e = names.remove(e2e);
        names.push(e2e);
    }
    names
}

fn delta_and_ratio(value: Option<f64>, base: Option<f64>, decimals: usize) -> (String, String) {
    let delta = match (value, base) {
        (Some(v), Some(b)) => fmt_signed(v - b, decimals),
        _ => DASH.to_owned(),
    };
    let ratio = match (value, base) {
        (Some(v), Some(b)) if b != 0.0 => fmt_ratio(v / b),
        _ => DASH.to_owned(),
    };
    (delta, ratio)
}

pub(super) fn write_compare(out: &mut String, reports: &[(String, Value)]) -> fmt::Result {
    writeln!(out, "# kasi bench — comparison\n")?;
    if reports.is_empty() {
        return writeln!(out, "No reports to compare.");
    }
    writeln!(out, "## Runs\n")?;
    writeln!(
        out,
        "| # | label | flow | target | load | started_at | file |"
    )?;
    writeln!(out, "|---:|---|---|---|---|---|---|")?;
    for (i, (file, report)) in reports.iter().enumerate() {
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            i + 1,
            run_label(file, report),
            text_cell(report, "flow"),
            text_cell(report, "target"),
            text_cell(report, "load"),
            text_cell(report, "started_at"),
            cell(file),
        )?;
    }
    writeln!(out)?;

    writeln!(out, "## Latency by leg\n")?;
    writeln!(out, "Δ and × compare each run's p99 with run #1.\n")?;
    let base_report = &reports[0].1;
    for name in legs_across(reports) {
        writeln!(out, "### {}\n", cell(&name))?;
        writeln!(
            out,
            "| # | label | mean ms | p99 ms | max ms | Δ p99 | × p99 |"
        )?;
        writeln!(out, "|---:|---|---:|---:|---:|---:|---:|")?;
        let base_p99 = leg(base_report, &name).and_then(|l| num(l, "p99_ms"));
        for (i, (file, report)) in reports.iter().enumerate() {
            let summary = leg(report, &name).unwrap_or(&Value::Null);
            let p99 = num(summary, "p99_ms");
            let (delta, ratio) = if i == 0 {
                ("base".to_owned(), "base".to_owned())
            } else {
                delta_and_ratio(p99, base_p99, 2)
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {delta} | {ratio} |",
                i + 1,
                run_label(file, report),
                fmt_opt(num(summary, "mean_ms"), 2),
                fmt_opt(p99, 2),
                fmt_opt(num(summary, "max_ms"), 2),
            )?;
        }
        writeln!(out)?;
    }

    writeln!(out, "## Throughput\n")?;
    writeln!(
        out,
        "| # | label | throughput/s | Δ | × | completed | errors | timeouts |"
    )?;
    writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|")?;
    let base_rate = num(base_report, "throughput_per_s");
    for (i, (file, report)) in reports.iter().enumerate() {
        let rate = num(report, "throughput_per_s");
        let (delta, ratio) = if i == 0 {
            ("base".to_owned(), "base".to_owned())
        } else {
            match (rate, base_rate) {
                // Rates get rate formatting, not the fixed 2 decimals of ms.
                (Some(r), Some(b)) => {
                    let delta = fmt_rate(r - b);
                    let delta = if delta.starts_with('-') || r == b {
                        delta
                    } else {
                        format!("+{delta}")
                    };
                    let ratio = if b != 0.0 {
                        fmt_ratio(r / b)
                    } else {
                        DASH.to_owned()
                    };
                    (delta, ratio)
                }
                _ => (DASH.to_owned(), DASH.to_owned()),
            }
        };
        writeln!(
            out,
            "| {} | {} | {} | {delta} | {ratio} | {} | {} | {} |",
            i + 1,
            run_label(file, report),
            rate.map_or_else(|| DASH.to_owned(), fmt_rate),
            fmt_count(num(report, "completed")),
            fmt_count(num(report, "errors")),
            fmt_count(num(report, "timeouts")),
        )?;
    }
    writeln!(out)?;

    write_compare_hub_stages(out, reports)
}

fn write_compare_hub_stages(out: &mut String, reports: &[(String, Value)]) -> fmt::Result {
    let per_run: Vec<Option<Vec<StageRow>>> = reports
        .iter()
        .map(|(_, report)| stage_rows(report))
        .collect();
    if per_run.iter().flatten().all(Vec::is_empty) {
        return Ok(());
    }
    let mut keys: Vec<(String, String)> = Vec::new();
    for row in per_run.iter().flatten().flatten() {
        let key = (row.phase.clone(), row.stage.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mean_of = |run: usize, key: &(String, String)| {
        per_run[run]
            .as_ref()?
            .iter()
            .find(|row| row.phase == key.0 && row.stage == key.1)?
            .mean_us
    };

    writeln!(out, "## Hub stages (mean µs)\n")?;
    writeln!(out, "× is each run's mean over run #1's.\n")?;
    let mut header = "| phase | stage | #1 mean µs |".to_owned();
    let mut rule = "|---|---|---:|".to_owned();
    for run in 2..=reports.len() {
        write!(header, " #{run} mean µs | #{run} × |")?;
        rule.push_str("---:|---:|");
    }
    writeln!(out, "{header}\n{rule}")?;
    for key in &keys {
        let base = mean_of(0, key);
        write!(
            out,
            "| {} | {} | {} |",
            cell(&key.0),
            cell(&key.1),
            fmt_opt(base, 2)
        )?;
        for run in 1..reports.len() {
            let mean = mean_of(run, key);
            let (_, ratio) = delta_and_ratio(mean, base, 2);
            write!(out, " {} | {ratio} |", fmt_opt(mean, 2))?;
        }
        writeln!(out)?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::compare;
    use crate::report::tests::{leg_summary, sample_report};
    use serde_json::json;

    fn second_report() -> Value {
        let mut report = sample_report();
        report["label"] = json!("transfer c128");
        report["throughput_per_s"] = json!(8100.3);
        report["legs"]["prepare"] = leg_summary(81000, 5.0, 15.0, 40.0);
        report["legs"].as_object_mut().unwrap().remove("fulfil");
        report["legs"]["quote"] = leg_summary(81000, 1.0, 2.0, 3.0);
        report["leg_order"] = json!(["quote", "prepare", "e2e"]);
        report["hub_stages"]["stages"][0]["mean_us"] = json!(450.0);
        report
    }

    #[test]
    fn compare_shows_delta_and_ratio_against_the_first_run() {
        let md = compare(&[
            ("a/report.json".to_owned(), sample_report()),
            ("b/report.json".to_owned(), second_report()),
        ]);
        assert!(md.contains("| 1 | transfer c64 | transfer | embedded | closed | 2026-11-22T08:30:00Z | a/report.json |"), "{md}");
        let prepare = md.find("### prepare").expect("prepare table");
        let section = &md[prepare..];
        assert!(section.contains("| 1 | transfer c64 | 4.10 | 9.00 | 30.00 | base | base |"));
        // p99 9 → 15: +6.00 and 1.67×.
        assert!(
            section.contains("| 2 | transfer c128 | 5.00 | 15.00 | 40.00 | +6.00 | 1.67× |"),
            "{md}"
        );
        assert!(
            md.contains("| 2 | transfer c128 | 8,100 | +2,700 | 1.50× | 54,002 | 3 | 0 |"),
            "{md}"
        );
    }

    #[test]
    fn compare_renders_missing_legs_as_dashes_and_puts_e2e_last() {
        let md = compare(&[
            ("a".to_owned(), sample_report()),
            ("b".to_owned(), second_report()),
        ]);
        let order: Vec<usize> = ["### prepare", "### fulfil", "### quote", "### e2e"]
            .iter()
            .map(|h| md.find(h).unwrap_or_else(|| panic!("{h} missing\n{md}")))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        // Run 2 has no fulfil leg; run 1 has no quote leg, so run 2's quote
        // has nothing to compare with.
        assert!(
            md.contains("| 2 | transfer c128 | — | — | — | — | — |"),
            "{md}"
        );
        assert!(md.contains("| 1 | transfer c64 | — | — | — | base | base |"));
        assert!(md.contains("| 2 | transfer c128 | 1.00 | 2.00 | 3.00 | — | — |"));
    }

    #[test]
    fn compare_p99_ten_to_fifteen_is_plus_five_and_one_and_a_half() {
        let mut first = sample_report();
        first["legs"]["e2e"]["p99_ms"] = json!(10.0);
        let mut second = sample_report();
        second["legs"]["e2e"]["p99_ms"] = json!(15.0);
        let mut zero = sample_report();
        zero["legs"]["e2e"]["p99_ms"] = json!(0.0);
        let md = compare(&[("1".to_owned(), first), ("2".to_owned(), second.clone())]);
        let e2e = &md[md.find("### e2e").unwrap()..];
        assert!(e2e.contains("| 15.00 | 80.00 | +5.00 | 1.50× |"), "{md}");
        // A zero baseline has a delta but no meaningful ratio.
        let md = compare(&[("0".to_owned(), zero), ("2".to_owned(), second)]);
        let e2e = &md[md.find("### e2e").unwrap()..];
        assert!(e2e.contains("| 15.00 | 80.00 | +15.00 | — |"), "{md}");
    }

    #[test]
    fn compare_puts_hub_stage_means_side_by_side() {
        let mut no_stages = sample_report();
        no_stages["hub_stages"] = Value::Null;
        let md = compare(&[
            ("a".to_owned(), sample_report()),
            ("b".to_owned(), second_report()),
            ("c".to_owned(), no_stages),
        ]);
        assert!(
            md.contains("| phase | stage | #1 mean µs | #2 mean µs | #2 × | #3 mean µs | #3 × |")
        );
        assert!(
            md.contains("| prepare | http_receive | 300.00 | 450.00 | 1.50× | — | — |"),
            "{md}"
        );
        // Without any hub stages the section is left out.
        let md = compare(&[("c".to_owned(), json!({"kasi_bench_report": 1}))]);
        assert!(!md.contains("## Hub stages"));
        assert!(md.contains("| 1 | c | — | — | — | — | c |"), "{md}");
    }
}
