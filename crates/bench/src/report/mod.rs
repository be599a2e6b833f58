//! Report files of `kasi bench`: renders the summary report (a
//! `"kasi_bench_report": 1` JSON value) as Markdown, as a per-second timeline
//! SVG, and as "evolution" tables comparing several runs, in the layout of the
//! Mojaloop performance reports so results can be read side by side with them.
//!
//! Every field of the report may be null or absent (a lookup run has no
//! transfer legs, a null-hub run has no hub stages, ...), so every accessor
//! here is optional and missing values render as "—" rather than failing.

use std::fmt::{self, Write as _};
use std::path::Path;

use anyhow::{bail, Context as _};
use serde_json::Value;

const DASH: &str = "—";
const REPORT_VERSION_KEY: &str = "kasi_bench_report";
const REPORT_VERSION: u64 = 1;
/// More waterfalls than this drown the summary; the rest stay in report.json.
const MAX_WATERFALLS: usize = 5;
const WATERFALL_BAR_CELLS: usize = 40;
/// Used to order legs that a report's `leg_order` does not mention, so the
/// output follows the life of a payment instead of the alphabet.
const CANONICAL_LEG_ORDER: [&str; 8] = [
    "lookup",
    "transaction_request",
    "quote",
    "prepare",
    "forward",
    "fulfil",
    "notify",
    "e2e",
];
const STRING_WRITE: &str = "writing to a String cannot fail";

// ---------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------

/// A human-readable Markdown summary of one run.
pub(crate) fn markdown(report: &Value) -> String {
    let mut out = String::new();
    write_markdown(&mut out, report).expect(STRING_WRITE);
    out
}

/// What the terminal summary adds to its own lines: the hub's per-stage
/// table, the breakpoint steps and the sampled waterfalls (Markdown reads
/// well enough as plain text).
pub(crate) fn hub_sections(report: &Value) -> String {
    let mut out = String::new();
    let mut write = || -> fmt::Result {
        if present(report, "hub_stages").is_some() {
            write_hub_stages(&mut out, report)?;
        }
        write_breakpoint(&mut out, report)?;
        write_waterfalls(&mut out, report)
    };
    write().expect(STRING_WRITE);
    out
}

/// A self-contained SVG: completed/s on top, e2e p50/p99 below, sharing the
/// time axis, with warm-up and draining seconds shaded; and, when the run
/// scraped them from the hub's `/metrics`, a third panel of the hub's RSS
/// (MB, left axis) and callback backlog (right axis).
pub(crate) fn timeline_svg(report: &Value) -> String {
    let mut out = String::new();
    write_timeline_svg(&mut out, report).expect(STRING_WRITE);
    out
}

/// Markdown "evolution" tables over several runs; run #1 is the baseline
/// that every Δ and × refers to.
pub(crate) fn compare(reports: &[(String, Value)]) -> String {
    let mut out = String::new();
    write_compare(&mut out, reports).expect(STRING_WRITE);
    out
}

/// Writes `report.json`, `report.md` and `timeline.svg` into `dir`, creating
/// it (and its parents) first.
pub(crate) fn write_folder(dir: &Path, report: &Value) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating report folder {}", dir.display()))?;
    let mut json = serde_json::to_string_pretty(report).context("serialising the report")?;
    json.push('\n');
    write_file(&dir.join("report.json"), &json)?;
    write_file(&dir.join("report.md"), &markdown(report))?;
    write_file(&dir.join("timeline.svg"), &timeline_svg(report))?;
    Ok(())
}

/// Reads a report from a `report.json` file or from a folder holding one, as
/// written by [`write_folder`].
pub(crate) fn load_report(path: &Path) -> anyhow::Result<Value> {
    let file = if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_path_buf()
    };
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let report: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("parsing {} as JSON", file.display()))?;
    match report.get(REPORT_VERSION_KEY) {
        None | Some(Value::Null) => bail!(
            "{} is not a kasi bench report: it has no \"{REPORT_VERSION_KEY}\" key",
            file.display()
        ),
        Some(version) if version.as_u64() == Some(REPORT_VERSION) => Ok(report),
        Some(version) => bail!(
            "{} is a kasi bench report of version {version}; this kasi reads version {REPORT_VERSION}",
            file.display()
        ),
    }
}

fn write_file(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------
// Reading optional fields
// ---------------------------------------------------------------------------

fn num(value: &Value, key: &str) -> Option<f64> {
    value
        .get(key)
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

fn text(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// `value` unless it is absent or null, so "present" checks treat both alike.
fn present<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.get(key).filter(|v| !v.is_null())
}

fn leg<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    present(report, "legs").and_then(|legs| present(legs, name))
}

/// The report's legs in display order: its `leg_order` first (even entries
/// without data, so a reader sees a leg that was expected but not measured),
/// then any other measured leg in payment order.
fn ordered_legs(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = array(report, "leg_order")
        .iter()
        .filter_map(|name| name.as_str().map(str::to_owned))
        .collect();
    let mut unlisted: Vec<String> = present(report, "legs")
        .and_then(Value::as_object)
        .map(|legs| {
            legs.keys()
                .filter(|name| !names.contains(*name))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    unlisted.sort_by_key(|name| {
        let rank = CANONICAL_LEG_ORDER
            .iter()
            .position(|known| known == name)
            .unwrap_or(CANONICAL_LEG_ORDER.len() - 1);
        (rank, name.clone())
    });
    names.extend(unlisted);
    names
}

// ---------------------------------------------------------------------------
// Number formatting
// ---------------------------------------------------------------------------

/// `x` with `decimals` decimals and thousands separators: 54002 → "54,002".
fn fmt_num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return DASH.to_owned();
    }
    let digits = format!("{:.*}", decimals, x.abs());
    let (int_part, frac_part) = match digits.split_once('.') {
        Some((int_part, frac_part)) => (int_part, Some(frac_part)),
        None => (digits.as_str(), None),
    };
    let mut out = String::new();
    // Rounding can turn a tiny negative into zero; "-0.00" would look like a
    // real negative value.
    if x < 0.0 && digits.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        out.push('-');
    }
    for (i, ch) in int_part.chars().enumerate() {
        if i > 0 && (int_part.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if let Some(frac_part) = frac_part {
        out.push('.');
        out.push_str(frac_part);
    }
    out
}

fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| DASH.to_owned(), |x| fmt_num(x, decimals))
}

fn fmt_count(x: Option<f64>) -> String {
    fmt_opt(x, 0)
}

/// A difference with an explicit sign, so a regression is visible at a glance.
fn fmt_signed(x: f64, decimals: usize) -> String {
    let body = fmt_num(x, decimals);
    if body.starts_with('-') || body.bytes().all(|b| !b.is_ascii_digit() || b == b'0') {
        body
    } else {
        format!("+{body}")
    }
}

fn fmt_ratio(x: f64) -> String {
    format!("{x:.2}×")
}

/// Rates span 1/s to 100,000/s; decimals only where they carry information.
fn fmt_rate(x: f64) -> String {
    let decimals = match x.abs() {
        r if r >= 1000.0 => 0,
        r if r >= 10.0 => 1,
        _ => 2,
    };
    fmt_num(x, decimals)
}

/// Short form for durations and stage targets: 5.0 → "5", 2.5 → "2.5".
fn fmt_trim(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

// ---------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------

/// Text safe inside a Markdown table cell: a `|` would end the cell and a
/// newline the row.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Inline code that survives backticks in the text.
fn code_span(s: &str) -> String {
    let s = cell(s);
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

fn write_markdown(out: &mut String, report: &Value) -> fmt::Result {
    write_title(out, report)?;
    write_run_parameters(out, report)?;
    write_headline(out, report)?;
    write_leg_latencies(out, report)?;
    write_errors_by_code(out, report)?;
    write_hub_stages(out, report)?;
    write_breakpoint(out, report)?;
    write_waterfalls(out, report)?;
    write_timeline_reference(out, report)?;
    write_soak(out, report)
}

fn write_title(out: &mut String, report: &Value) -> fmt::Result {
    let label = text(report, "label").unwrap_or_else(|| "unnamed run".to_owned());
    let mut title = format!("kasi bench — {label}");
    for key in ["flow", "target"] {
        if let Some(value) = text(report, key) {
            write!(title, " · {value}")?;
        }
    }
    writeln!(out, "# {}\n", title.replace(['\n', '\r'], " "))
}

fn write_run_parameters(out: &mut String, report: &Value) -> fmt::Result {
    writeln!(out, "## Run\n")?;
    writeln!(out, "| parameter | value |")?;
    writeln!(out, "|---|---|")?;
    let command = text(report, "command").map_or_else(|| DASH.to_owned(), |c| code_span(&c));
    let null_hub = match present(report, "null_hub").and_then(Value::as_bool) {
        Some(true) => "yes (hub replaced by the null hub)".to_owned(),
        Some(false) => "no".to_owned(),
        None => DASH.to_owned(),
    };
    let rows = [
        ("command", command),
        ("started at", text_cell(report, "started_at")),
        ("machine", machine_description(report)),
        ("flow", text_cell(report, "flow")),
        ("target", text_cell(report, "target")),
        ("null hub", null_hub),
        ("API", text_cell(report, "api")),
        ("profile", text_cell(report, "profile")),
        ("load", load_description(report)),
        ("DFSPs", fmt_count(num(report, "dfsps"))),
        ("warm-up", seconds_cell(num(report, "warmup_s"))),
        ("measured", seconds_cell(num(report, "duration_s"))),
    ];
    for (name, value) in rows {
        writeln!(out, "| {name} | {value} |")?;
    }
    writeln!(out)
}

fn text_cell(report: &Value, key: &str) -> String {
    text(report, key).map_or_else(|| DASH.to_owned(), |s| cell(&s))
}

fn seconds_cell(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| DASH.to_owned(), |s| format!("{} s", fmt_trim(s)))
}

fn machine_description(report: &Value) -> String {
    let Some(machine) = present(report, "machine").and_then(Value::as_object) else {
        return DASH.to_owned();
    };
    let mut parts = Vec::new();
    if let Some(cpus) = machine.get("cpus").and_then(Value::as_f64) {
        parts.push(format!("{} CPUs", fmt_trim(cpus)));
    }
    for key in ["os", "hostname"] {
        if let Some(value) = machine.get(key).and_then(Value::as_str) {
            parts.push(value.to_owned());
        }
    }
    // Whatever else the harness records (kernel, CPU model, ...) is kept.
    for (key, value) in machine {
        if !["cpus", "os", "hostname"].contains(&key.as_str()) && !value.is_null() {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            parts.push(format!("{key} {value}"));
        }
    }
    if parts.is_empty() {
        DASH.to_owned()
    } else {
        cell(&parts.join(" · "))
    }
}

fn load_description(report: &Value) -> String {
    let load = text(report, "load");
    let unit = match load.as_deref() {
        Some("closed") => " users",
        Some("open") => "/s",
        _ => "",
    };
    let stages: Vec<String> = array(report, "stages")
        .iter()
        .map(|stage| {
            let target = num(stage, "target").map_or_else(|| DASH.to_owned(), fmt_trim);
            let duration = num(stage, "duration_s").map_or_else(|| DASH.to_owned(), fmt_trim);
            format!("{target}{unit} for {duration} s")
        })
        .collect();
    let kind = match load.as_deref() {
        Some("closed") => "closed loop".to_owned(),
        Some("open") => "open loop".to_owned(),
        Some(other) => other.to_owned(),
        None => DASH.to_owned(),
    };
    if stages.is_empty() {
        cell(&kind)
    } else {
        cell(&format!("{kind}: {}", stages.join(", then ")))
    }
}

fn write_headline(out: &mut String, report: &Value) -> fmt::Result {
    writeln!(out, "## Headline\n")?;
    writeln!(out, "| metric | value |")?;
    writeln!(out, "|---|---|")?;
    let throughput = num(report, "throughput_per_s")
        .map_or_else(|| DASH.to_owned(), |r| format!("{}/s", fmt_rate(r)));
    let p99 = num(report, "e2e_p99_ms")
        .map_or_else(|| DASH.to_owned(), |ms| format!("{} ms", fmt_num(ms, 2)));
    let completed = num(report, "completed");
    let errors = num(report, "errors");
    let errors_cell = match (errors, completed) {
        (Some(errors), Some(completed)) if errors + completed > 0.0 => format!(
            "{} ({:.2}% of finished)",
            fmt_num(errors, 0),
            errors / (errors + completed) * 100.0
        ),
        (errors, _) => fmt_count(errors),
    };
    let net_zero = match present(report, "positions_net_zero").and_then(Value::as_bool) {
        Some(true) => "yes".to_owned(),
        // A non-zero net position means money was created or destroyed: shout.
        Some(false) => "**NO**".to_owned(),
        None => DASH.to_owned(),
    };
    writeln!(out, "| throughput | {throughput} |")?;
    writeln!(out, "| e2e p99 | {p99} |")?;
    writeln!(out, "| completed | {} |", fmt_count(completed))?;
    writeln!(out, "| errors | {errors_cell} |")?;
    writeln!(out, "| timeouts | {} |", fmt_count(num(report, "timeouts")))?;
    writeln!(out, "| positions net zero | {net_zero} |")?;
    writeln!(out, "| vs the null hub | {} |", null_hub_comparison(report))?;
    if let Some(cpu) = present(report, "cpu") {
        let cores_and_cost =
            |cores: &str, per_flow: &str| match (num(cpu, cores), num(cpu, per_flow)) {
                (Some(cores), Some(us)) => format!(
                    "{} cores, {} µs per flow",
                    fmt_num(cores, 2),
                    fmt_num(us, 0)
                ),
                _ => DASH.to_owned(),
            };
        writeln!(
            out,
            "| hub CPU in the window | {} |",
            cores_and_cost("hub_cores", "hub_us_per_flow")
        )?;
        writeln!(
            out,
            "| harness CPU in the window | {} |",
            cores_and_cost("harness_cores", "harness_us_per_flow")
        )?;
        if let Some(us) =
            present(report, "null_hub_ratio").and_then(|ratio| num(ratio, "null_hub_us_per_flow"))
        {
            writeln!(
                out,
                "| null hub CPU (baseline) | {} µs per flow |",
                fmt_num(us, 0)
            )?;
        }
    }
    writeln!(out)
}

fn null_hub_comparison(report: &Value) -> String {
    let Some(ratio_info) = present(report, "null_hub_ratio") else {
        return DASH.to_owned();
    };
    let null_rate = num(ratio_info, "null_hub_throughput_per_s");
    // Derive the ratio when only the null hub's rate was recorded.
    let ratio = num(ratio_info, "ratio").or_else(|| {
        let own = num(report, "throughput_per_s")?;
        null_rate.filter(|r| *r > 0.0).map(|r| own / r)
    });
    let mut sentence = match (ratio, null_rate) {
        (Some(ratio), Some(rate)) => {
            format!("kasi at {ratio:.2} × the null hub ({}/s)", fmt_rate(rate))
        }
        (Some(ratio), None) => format!("kasi at {ratio:.2} × the null hub"),
        (None, Some(rate)) => format!("null hub at {}/s", fmt_rate(rate)),
        (None, None) => DASH.to_owned(),
    };
    if let Some(note) = text(ratio_info, "note") {
        write!(sentence, " — {note}").expect(STRING_WRITE);
    }
    cell(&sentence)
}

fn write_leg_latencies(out: &mut String, report: &Value) -> fmt::Result {
    writeln!(out, "## Latency by leg (ms)\n")?;
    let legs = ordered_legs(report);
    if legs.is_empty() {
        return writeln!(out, "{DASH} (no latencies recorded)\n");
    }
    writeln!(
        out,
        "| leg | count | min | mean | p50 | p90 | p95 | p99 | max |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for name in legs {
        let summary = leg(report, &name).unwrap_or(&Value::Null);
        write!(
            out,
            "| {} | {} |",
            cell(&name),
            fmt_count(num(summary, "count"))
        )?;
        for key in [
            "min_ms", "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms",
        ] {
            write!(out, " {} |", fmt_opt(num(summary, key), 2))?;
        }
        writeln!(out)?;
    }
    writeln!(out)
}

fn write_errors_by_code(out: &mut String, report: &Value) -> fmt::Result {
    writeln!(out, "## Errors by code\n")?;
    let mut rows: Vec<(&String, &Value)> = present(report, "errors_by_code")
        .and_then(Value::as_object)
        .map(|codes| codes.iter().collect())
        .unwrap_or_default();
    if rows.is_empty() {
        return writeln!(out, "None recorded.\n");
    }
    // Most frequent first: that is the one to fix.
    rows.sort_by(|(a_code, a), (b_code, b)| {
        let a_count = num(a, "count").unwrap_or(0.0);
        let b_count = num(b, "count").unwrap_or(0.0);
        b_count.total_cmp(&a_count).then_with(|| a_code.cmp(b_code))
    });
    writeln!(out, "| code | count | first message |")?;
    writeln!(out, "|---|---:|---|")?;
    for (code, info) in rows {
        writeln!(
            out,
            "| {} | {} | {} |",
            cell(code),
            fmt_count(num(info, "count")),
            text_cell(info, "first")
        )?;
    }
    writeln!(out)
}

/// One row of the hub's per-stage timings, with the zero-call convention and
/// derived cumulative time applied.
struct StageRow {
    phase: String,
    stage: String,
    calls: Option<f64>,
    min_us: Option<f64>,
    mean_us: Option<f64>,
    max_us: Option<f64>,
    std_us: Option<f64>,
    cum_us: Option<f64>,
}

fn stage_rows(report: &Value) -> Option<Vec<StageRow>> {
    let hub_stages = present(report, "hub_stages")?;
    let rows = array(hub_stages, "stages")
        .iter()
        .map(|row| {
            let calls = num(row, "calls");
            // A stage that never ran has no meaningful min/max (hubs often
            // report sentinels such as u64::MAX); the Mojaloop reports show 0.
            let stat = |key: &str| {
                if calls == Some(0.0) {
                    Some(0.0)
                } else {
                    num(row, key)
                }
            };
            // Hubs that only report mean and calls still get a share of total.
            let cum_us = stat("cum_us").or_else(|| Some(calls? * num(row, "mean_us")?));
            StageRow {
                phase: text(row, "phase").unwrap_or_else(|| DASH.to_owned()),
                stage: text(row, "stage").unwrap_or_else(|| DASH.to_owned()),
                calls,
                min_us: stat("min_us"),
                mean_us: stat("mean_us"),
                max_us: stat("max_us"),
                std_us: stat("std_us"),
                cum_us,
            }
        })
        .collect();
    Some(rows)
}

fn write_hub_stages(out: &mut String, report: &Value) -> fmt::Result {
    let source = present(report, "hub_stages").and_then(|h| text(h, "source"));
    match source {
        Some(source) => writeln!(out, "## Hub stages (from {})\n", code_span(&source))?,
        None => writeln!(out, "## Hub stages\n")?,
    }
    let rows = match stage_rows(report) {
        Some(rows) if !rows.is_empty() => rows,
        _ => {
            return writeln!(
                out,
                "{DASH} (the hub exposes no stage timings for this run)\n"
            )
        }
    };
    let total_cum_us: f64 = rows.iter().filter_map(|r| r.cum_us).sum();
    writeln!(
        out,
        "| phase | stage | calls | min (µs) | mean (µs) | max (µs) | std (µs) | cum (ms) | % of total |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for row in &rows {
        let share = match row.cum_us {
            Some(cum) if total_cum_us > 0.0 => format!("{:.1}%", cum / total_cum_us * 100.0),
            Some(_) => "0.0%".to_owned(),
            None => DASH.to_owned(),
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {share} |",
            cell(&row.phase),
            cell(&row.stage),
            fmt_count(row.calls),
            fmt_opt(row.min_us, 2),
            fmt_opt(row.mean_us, 2),
            fmt_opt(row.max_us, 2),
            fmt_opt(row.std_us, 2),
            fmt_opt(row.cum_us.map(|us| us / 1000.0), 2),
        )?;
    }
    writeln!(
        out,
        "| **total** | | | | | | | {} | 100.0% |\n",
        fmt_num(total_cum_us / 1000.0, 2)
    )
}

fn write_breakpoint(out: &mut String, report: &Value) -> fmt::Result {
    let Some(breakpoint) = present(report, "breakpoint") else {
        return Ok(());
    };
    writeln!(out, "## Breakpoint\n")?;
    let rate = |key: &str| {
        num(breakpoint, key).map_or_else(|| DASH.to_owned(), |r| format!("{}/s", fmt_rate(r)))
    };
    writeln!(out, "| | |")?;
    writeln!(out, "|---|---|")?;
    writeln!(
        out,
        "| threshold | {} |",
        text_cell(breakpoint, "threshold")
    )?;
    writeln!(out, "| last good rate | {} |", rate("last_good_rate_per_s"))?;
    writeln!(out, "| broke at | {} |", rate("broke_at_rate_per_s"))?;
    writeln!(out, "| reason | {} |\n", text_cell(breakpoint, "reason"))?;
    let steps = array(breakpoint, "steps");
    if steps.is_empty() {
        return Ok(());
    }
    writeln!(out, "| offered/s | throughput/s | p99 ms | errors | ok |")?;
    writeln!(out, "|---:|---:|---:|---:|---|")?;
    for step in steps {
        let ok = match step.get("ok").and_then(Value::as_bool) {
            Some(true) => "ok",
            Some(false) => "**broke**",
            None => DASH,
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {ok} |",
            num(step, "rate_per_s").map_or_else(|| DASH.to_owned(), fmt_rate),
            num(step, "throughput_per_s").map_or_else(|| DASH.to_owned(), fmt_rate),
            fmt_opt(num(step, "p99_ms"), 2),
            fmt_count(num(step, "errors")),
        )?;
    }
    writeln!(out)
}

fn write_waterfalls(out: &mut String, report: &Value) -> fmt::Result {
    let waterfalls = array(report, "waterfalls");
    if waterfalls.is_empty() {
        return Ok(());
    }
    writeln!(out, "## Waterfalls\n")?;
    writeln!(
        out,
        "Hub stages of sampled transfers; each bar spans its stage on a scale of the whole trace \
         ({WATERFALL_BAR_CELLS} cells).\n"
    )?;
    for waterfall in waterfalls.iter().take(MAX_WATERFALLS) {
        write_waterfall(out, waterfall)?;
    }
    if waterfalls.len() > MAX_WATERFALLS {
        writeln!(
            out,
            "{} more in report.json.\n",
            waterfalls.len() - MAX_WATERFALLS
        )?;
    }
    Ok(())
}

struct Span {
    label: String,
    start_us: Option<f64>,
    end_us: Option<f64>,
}

fn write_waterfall(out: &mut String, waterfall: &Value) -> fmt::Result {
    let id = text(waterfall, "transfer_id").unwrap_or_else(|| DASH.to_owned());
    let mut spans: Vec<Span> = array(waterfall, "spans")
        .iter()
        .map(|span| {
            let phase = text(span, "phase").unwrap_or_else(|| DASH.to_owned());
            let stage = text(span, "stage").unwrap_or_else(|| DASH.to_owned());
            Span {
                // A backtick run could close the code fence early.
                label: format!("{phase} {stage}").replace('`', "'"),
                start_us: num(span, "start_us"),
                end_us: num(span, "end_us"),
            }
        })
        .collect();
    // Chronological order is what makes a waterfall readable, whatever order
    // the hub recorded the spans in.
    spans.sort_by(|a, b| {
        a.start_us
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.start_us.unwrap_or(f64::INFINITY))
    });
    let trace_start = spans
        .iter()
        .filter_map(|s| s.start_us)
        .fold(f64::INFINITY, f64::min);
    let trace_end = spans
        .iter()
        .filter_map(|s| s.end_us)
        .fold(f64::NEG_INFINITY, f64::max);
    let total_us = if trace_start.is_finite() && trace_end.is_finite() {
        (trace_end - trace_start).max(0.0)
    } else {
        0.0
    };
    writeln!(
        out,
        "Transfer {} — {} µs first to last span:\n",
        code_span(&id),
        fmt_num(total_us, 1)
    )?;
    writeln!(out, "```text")?;
    if spans.is_empty() {
        writeln!(out, "(no spans)")?;
    }
    let times: Vec<String> = spans
        .iter()
        .map(|span| {
            format!(
                "{}→{} µs",
                fmt_opt(span.start_us, 1),
                fmt_opt(span.end_us, 1)
            )
        })
        .collect();
    let label_width = spans
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let times_width = times.iter().map(|t| t.chars().count()).max().unwrap_or(0);
    for (span, times) in spans.iter().zip(&times) {
        let bar = match (span.start_us, span.end_us) {
            (Some(start), Some(end)) => waterfall_bar(
                start - trace_start,
                end - trace_start,
                total_us,
                WATERFALL_BAR_CELLS,
            ),
            _ => String::new(),
        };
        writeln!(
            out,
            "{:<label_width$}  {:>times_width$}  |{bar}",
            span.label, times
        )?;
    }
    writeln!(out, "```\n")
}

/// Spaces up to the span's start then blocks to its end, on a `cells`-wide
/// scale of the whole trace. A span too short for one cell still gets one
/// block (or a thin mark when it has no duration at all) so it is not lost.
fn waterfall_bar(start: f64, end: f64, total: f64, cells: usize) -> String {
    if total <= 0.0 {
        return "▏".to_owned();
    }
    let to_cell = |t: f64| ((t / total * cells as f64).round().max(0.0) as usize).min(cells);
    let mut from = to_cell(start);
    let mut to = to_cell(end);
    if end > start && to <= from {
        from = from.min(cells - 1);
        to = from + 1;
    }
    if to <= from {
        return format!("{}▏", " ".repeat(from.min(cells - 1)));
    }
    format!("{}{}", " ".repeat(from), "█".repeat(to - from))
}

fn write_timeline_reference(out: &mut String, report: &Value) -> fmt::Result {
    writeln!(out, "## Timeline\n")?;
    writeln!(
        out,
        "![Completed per second and e2e latency per second](timeline.svg)\n"
    )?;
    let timeline = array(report, "timeline");
    if timeline.is_empty() {
        return writeln!(out, "No per-second samples recorded.");
    }
    let count_phase = |phase: &str| {
        timeline
            .iter()
            .filter(|s| s.get("phase").and_then(Value::as_str) == Some(phase))
            .count()
    };
    writeln!(
        out,
        "{} one-second samples: {} warm-up, {} measuring, {} draining (see `timeline.svg`; \
         the numbers are in `report.json`).",
        timeline.len(),
        count_phase("warm-up"),
        count_phase("measuring"),
        count_phase("draining")
    )
}

// ---------------------------------------------------------------------------
// Soak: the measuring period in tenths
// ---------------------------------------------------------------------------

/// A run measured at least this long gets the soak section.
const SOAK_MIN_MEASURED_S: usize = 60;
const SOAK_ROWS: usize = 10;

/// The slope of the least-squares line through `points` (x, y), in y per
/// x; None with fewer than two distinct x.
fn least_squares_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &(x, y) in points {
        sxy += (x - mean_x) * (y - mean_y);
        sxx += (x - mean_x) * (x - mean_x);
    }
    (sxx > 0.0).then(|| sxy / sxx)
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// One series of the measuring seconds: (t_s, value) where it was measured.
fn soak_series(samples: &[&Value], key: &str, scale: f64) -> Vec<(f64, f64)> {
    samples
        .iter()
        .filter_map(|s| Some((num(s, "t_s")?, num(s, key)? * scale)))
        .collect()
}

/// For a run measured a minute or more: its measuring seconds in tenths
/// (throughput, e2e p99, the hub's RSS and callback backlog, the ledger's
/// transfers in memory, the harness's own RSS), then each series' first,
/// last and largest value and its least-squares drift per hour, and the
/// p99 of the first tenth against the last. All from the per-second
/// samples; a p99 here is the median of the tenth's one-second p99s (the
/// samples keep no histogram).
fn write_soak(out: &mut String, report: &Value) -> fmt::Result {
    let measuring: Vec<&Value> = array(report, "timeline")
        .iter()
        .filter(|s| s.get("phase").and_then(Value::as_str) == Some("measuring"))
        .collect();
    if measuring.len() < SOAK_MIN_MEASURED_S {
        return Ok(());
    }
    writeln!(out, "\n## Soak\n")?;
    writeln!(
        out,
        "The {} measuring seconds in tenths. p99: the median of the tenth's one-second e2e p99s \
         (worst: the largest). Hub RSS and callback backlog (queued + in flight, all \
         destinations) are the hub's `/metrics`, scraped once a second; a dash is a series \
         the hub does not expose.\n",
        measuring.len()
    )?;
    writeln!(
        out,
        "| seconds | completed/s | p99 ms | worst p99 ms | hub RSS MB | backlog mean | backlog max | transfers in memory | harness RSS MB |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    let tenth = |i: usize| {
        let n = measuring.len();
        &measuring[i * n / SOAK_ROWS..(i + 1) * n / SOAK_ROWS]
    };
    let values = |rows: &[&Value], key: &str| -> Vec<f64> {
        rows.iter().filter_map(|s| num(s, key)).collect()
    };
    for i in 0..SOAK_ROWS {
        let rows = tenth(i);
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            continue;
        };
        let from = num(first, "t_s").map_or(f64::NAN, |t| t - 1.0);
        let to = num(last, "t_s").unwrap_or(f64::NAN);
        let p99 = values(rows, "p99_ms");
        let backlog = values(rows, "callback_backlog");
        let rss = values(rows, "hub_rss_bytes");
        let harness = values(rows, "harness_rss_bytes");
        writeln!(
            out,
            "| {}–{} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_num(from, 0),
            fmt_num(to, 0),
            mean(&values(rows, "completed")).map_or_else(|| DASH.to_owned(), fmt_rate),
            fmt_opt(median(&p99), 1),
            fmt_opt(max_value(p99.iter().copied()), 1),
            fmt_opt(mean(&rss).map(|b| b / BYTES_PER_MB), 1),
            fmt_opt(mean(&backlog), 1),
            fmt_count(max_value(backlog.iter().copied())),
            fmt_count(values(rows, "transfers_in_memory").last().copied()),
            fmt_opt(mean(&harness).map(|b| b / BYTES_PER_MB), 1),
        )?;
    }
    writeln!(
        out,
        "\n| series | first | last | max | drift per hour (least squares) |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|")?;
    let mb = 1.0 / BYTES_PER_MB;
    for (name, key, scale, unit, decimals) in [
        ("hub RSS", "hub_rss_bytes", mb, " MB", 1),
        ("callback backlog", "callback_backlog", 1.0, "", 1),
        ("transfers in memory", "transfers_in_memory", 1.0, "", 0),
        ("harness RSS", "harness_rss_bytes", mb, " MB", 1),
    ] {
        let series = soak_series(&measuring, key, scale);
        let (Some(first), Some(last)) = (series.first(), series.last()) else {
            writeln!(out, "| {name} | {DASH} | {DASH} | {DASH} | {DASH} |")?;
            continue;
        };
        let max = max_value(series.iter().map(|p| p.1));
        let drift = least_squares_slope(&series).map_or_else(
            || DASH.to_owned(),
            |per_s| format!("{}{unit}", fmt_signed(per_s * 3600.0, decimals)),
        );
        writeln!(
            out,
            "| {name} | {}{unit} | {}{unit} | {}{unit} | {drift} |",
            fmt_num(first.1, decimals),
            fmt_num(last.1, decimals),
            fmt_opt(max, decimals),
        )?;
    }
    let (first, last) = (
        median(&values(tenth(0), "p99_ms")),
        median(&values(tenth(SOAK_ROWS - 1), "p99_ms")),
    );
    writeln!(
        out,
        "\ne2e p99, first tenth {} ms, last tenth {} ms{}.",
        fmt_opt(first, 1),
        fmt_opt(last, 1),
        match (first, last) {
            (Some(first), Some(last)) if first > 0.0 => format!(" ({})", fmt_ratio(last / first)),
            _ => String::new(),
        }
    )
}

// ---------------------------------------------------------------------------
// Timeline SVG
// ---------------------------------------------------------------------------

const SVG_WIDTH: f64 = 900.0;
const SVG_HEIGHT: f64 = 420.0;
const PLOT_LEFT: f64 = 78.0;
const PLOT_RIGHT: f64 = 880.0;
const TOP_PANEL: (f64, f64) = (58.0, 206.0);
const BOTTOM_PANEL: (f64, f64) = (226.0, 370.0);
/// The hub's memory and backlog, when the report has them.
const HUB_PANEL: (f64, f64) = (390.0, 534.0);
/// Taller and wider with the hub panel (its right axis needs the margin).
const SVG_HUB_HEIGHT: f64 = 590.0;
const SVG_HUB_WIDTH: f64 = 960.0;
const COLOR_RSS: &str = "#9467bd";
const COLOR_BACKLOG: &str = "#ff7f0e";
const BYTES_PER_MB: f64 = 1_000_000.0;
const COLOR_COMPLETED: &str = "#1f77b4";
const COLOR_P50: &str = "#2ca02c";
const COLOR_P99: &str = "#d62728";
const FILL_WARMUP: &str = "#e6e6e6";
const FILL_DRAINING: &str = "#fbe3d2";

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// One per-second sample, covering (`start_s`, `end_s`].
struct Sample {
    start_s: f64,
    end_s: f64,
    phase: String,
    completed: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    /// The hub's resident memory (MB) and callbacks queued or in flight,
    /// from its `/metrics`.
    hub_rss_mb: Option<f64>,
    callback_backlog: Option<f64>,
}

fn timeline_samples(report: &Value) -> Vec<Sample> {
    let mut raw: Vec<(f64, &Value)> = array(report, "timeline")
        .iter()
        .enumerate()
        // A sample without t_s still has a place: the n-th second.
        .map(|(i, sample)| (num(sample, "t_s").unwrap_or((i + 1) as f64), sample))
        .collect();
    raw.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut samples = Vec::with_capacity(raw.len());
    let mut previous_end: Option<f64> = None;
    for (end_s, sample) in raw {
        // t_s is the end of the second the sample counts, so the first sample
        // covers the second before it, not before the load started.
        let start_s = previous_end.unwrap_or_else(|| (end_s - 1.0).max(0.0).min(end_s));
        samples.push(Sample {
            start_s,
            end_s,
            phase: text(sample, "phase").unwrap_or_default(),
            completed: num(sample, "completed"),
            p50_ms: num(sample, "p50_ms"),
            p99_ms: num(sample, "p99_ms"),
            hub_rss_mb: num(sample, "hub_rss_bytes").map(|b| b / BYTES_PER_MB),
            callback_backlog: num(sample, "callback_backlog"),
        });
        previous_end = Some(end_s);
    }
    samples
}

/// Maps a data interval linearly onto a pixel interval.
#[derive(Clone, Copy)]
struct Scale {
    domain: (f64, f64),
    range: (f64, f64),
}

impl Scale {
    fn map(&self, v: f64) -> f64 {
        let (d0, d1) = self.domain;
        let (r0, r1) = self.range;
        r0 + (v - d0) / (d1 - d0) * (r1 - r0)
    }
}

/// A 1-2-5 step giving about `ticks` ticks over `span`, so labels are round.
fn nice_step(span: f64, ticks: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / ticks;
    let magnitude = 10f64.powf(raw.log10().floor());
    let normalised = raw / magnitude;
    let nice = if normalised <= 1.0 {
        1.0
    } else if normalised <= 2.0 {
        2.0
    } else if normalised <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn ticks(from: f64, to: f64, step: f64) -> Vec<f64> {
    let first = (from / step).ceil() * step;
    let mut out = Vec::new();
    let mut i = 0.0;
    loop {
        let tick = first + i * step;
        // Tolerance so float error does not drop the last tick.
        if tick > to + step * 1e-9 || out.len() > 100 {
            break;
        }
        out.push(tick);
        i += 1.0;
    }
    out
}

fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    fmt_num(v, decimals)
}

fn max_value(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::max)
}

/// A y scale from 0 to a round number above `max`, and its tick step.
fn value_axis(max: Option<f64>, panel: (f64, f64)) -> (Scale, f64) {
    let max = max.filter(|m| *m > 0.0).unwrap_or(1.0);
    let step = nice_step(max, 4.0);
    let top = (max / step).ceil() * step;
    let scale = Scale {
        domain: (0.0, top),
        range: (panel.1, panel.0),
    };
    (scale, step)
}

fn write_timeline_svg(out: &mut String, report: &Value) -> fmt::Result {
    let samples = timeline_samples(report);
    let label = text(report, "label").unwrap_or_else(|| "kasi bench".to_owned());

    let (t_from, t_to) = match (samples.first(), samples.last()) {
        (Some(first), Some(last)) => {
            let from = first.start_s.min(0.0);
            (from, last.end_s.max(from + 1.0))
        }
        // Ten empty seconds keep the axes recognisable around "no data".
        _ => (0.0, 10.0),
    };
    let x = Scale {
        domain: (t_from, t_to),
        range: (PLOT_LEFT, PLOT_RIGHT),
    };
    let max_completed = max_value(samples.iter().filter_map(|s| s.completed));
    let max_latency = max_value(samples.iter().flat_map(|s| [s.p50_ms, s.p99_ms]).flatten());
    let (y_top, y_top_step) = value_axis(max_completed, TOP_PANEL);
    let (y_bottom, y_bottom_step) = value_axis(max_latency, BOTTOM_PANEL);
    // The third panel only when the run has the hub's figures at all.
    let hub_panel = samples
        .iter()
        .any(|s| s.hub_rss_mb.is_some() || s.callback_backlog.is_some());
    let mut panels = vec![TOP_PANEL, BOTTOM_PANEL];
    let (width, height) = if hub_panel {
        panels.push(HUB_PANEL);
        (SVG_HUB_WIDTH, SVG_HUB_HEIGHT)
    } else {
        (SVG_WIDTH, SVG_HEIGHT)
    };

    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" fill="#333333">"##
    )?;
    let title = if hub_panel {
        format!("{label} — completed per second, e2e latency, hub memory and callback backlog")
    } else {
        format!("{label} — completed per second and e2e latency")
    };
    writeln!(out, "<title>{}</title>", xml_escape(&title))?;
    writeln!(
        out,
        r##"<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>"##
    )?;
    writeln!(
        out,
        r#"<text x="{PLOT_LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        xml_escape(&title)
    )?;
    write_legend(out, hub_panel)?;

    // Shading first so grid lines and series draw over it.
    for (from, to, phase) in shaded_intervals(&samples) {
        let fill = if phase == "warm-up" {
            FILL_WARMUP
        } else {
            FILL_DRAINING
        };
        for &panel in &panels {
            writeln!(
                out,
                r#"<rect class="phase-{phase}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"/>"#,
                x.map(from),
                panel.0,
                (x.map(to) - x.map(from)).max(0.5),
                panel.1 - panel.0
            )?;
        }
    }

    write_value_axis(out, TOP_PANEL, y_top, y_top_step, "completed / s")?;
    write_value_axis(
        out,
        BOTTOM_PANEL,
        y_bottom,
        y_bottom_step,
        "e2e latency (ms)",
    )?;
    write_time_axis(out, x, &panels)?;

    let series_completed = series_path(&samples, |s| s.completed, x, y_top);
    let series_p50 = series_path(&samples, |s| s.p50_ms, x, y_bottom);
    let series_p99 = series_path(&samples, |s| s.p99_ms, x, y_bottom);
    for (id, color, path) in [
        ("completed", COLOR_COMPLETED, &series_completed),
        ("p50", COLOR_P50, &series_p50),
        ("p99", COLOR_P99, &series_p99),
    ] {
        if let Some(d) = path {
            writeln!(
                out,
                r#"<path id="series-{id}" d="{d}" fill="none" stroke="{color}" stroke-width="1.8" stroke-linejoin="round" stroke-linecap="round"/>"#
            )?;
        }
    }
    if series_completed.is_none() {
        write_no_data(out, TOP_PANEL)?;
    }
    if series_p50.is_none() && series_p99.is_none() {
        write_no_data(out, BOTTOM_PANEL)?;
    }
    if hub_panel {
        write_hub_panel(out, &samples, x)?;
    }
    writeln!(out, "</svg>")
}

/// The third panel: the hub's RSS in MB on the left axis (with the grid),
/// the callback backlog on its own axis on the right.
fn write_hub_panel(out: &mut String, samples: &[Sample], x: Scale) -> fmt::Result {
    let (y_rss, y_rss_step) = value_axis(
        max_value(samples.iter().filter_map(|s| s.hub_rss_mb)),
        HUB_PANEL,
    );
    let (y_backlog, y_backlog_step) = value_axis(
        max_value(samples.iter().filter_map(|s| s.callback_backlog)),
        HUB_PANEL,
    );
    write_value_axis(out, HUB_PANEL, y_rss, y_rss_step, "hub RSS (MB)")?;
    for tick in ticks(y_backlog.domain.0, y_backlog.domain.1, y_backlog_step) {
        let py = y_backlog.map(tick);
        writeln!(
            out,
            r#"<line x1="{PLOT_RIGHT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="{COLOR_BACKLOG}"/>"#,
            PLOT_RIGHT + 4.0
        )?;
        writeln!(
            out,
            r#"<text x="{}" y="{:.1}" text-anchor="start" fill="{COLOR_BACKLOG}">{}</text>"#,
            PLOT_RIGHT + 7.0,
            py + 4.0,
            fmt_tick(tick, y_backlog_step)
        )?;
    }
    let middle = (HUB_PANEL.0 + HUB_PANEL.1) / 2.0;
    let right = SVG_HUB_WIDTH - 14.0;
    writeln!(
        out,
        r#"<text x="{right}" y="{middle}" text-anchor="middle" fill="{COLOR_BACKLOG}" transform="rotate(90 {right} {middle})">callback backlog</text>"#
    )?;
    let series_rss = series_path(samples, |s| s.hub_rss_mb, x, y_rss);
    let series_backlog = series_path(samples, |s| s.callback_backlog, x, y_backlog);
    for (id, color, path) in [
        ("hub-rss", COLOR_RSS, &series_rss),
        ("callback-backlog", COLOR_BACKLOG, &series_backlog),
    ] {
        if let Some(d) = path {
            writeln!(
                out,
                r#"<path id="series-{id}" d="{d}" fill="none" stroke="{color}" stroke-width="1.8" stroke-linejoin="round" stroke-linecap="round"/>"#
            )?;
        }
    }
    Ok(())
}

fn write_legend(out: &mut String, hub_panel: bool) -> fmt::Result {
    let y = 42.0;
    let mut x = PLOT_LEFT;
    let mut series = vec![
        ("completed / s", COLOR_COMPLETED),
        ("e2e p50", COLOR_P50),
        ("e2e p99", COLOR_P99),
    ];
    if hub_panel {
        series.extend([("hub RSS", COLOR_RSS), ("callback backlog", COLOR_BACKLOG)]);
    }
    for (name, color) in series {
        writeln!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="2.5"/>"#,
            y - 4.0,
            x + 18.0,
            y - 4.0
        )?;
        writeln!(
            out,
            r#"<text x="{}" y="{y}">{}</text>"#,
            x + 23.0,
            xml_escape(name)
        )?;
        x += 115.0;
    }
    for (name, fill) in [("warm-up", FILL_WARMUP), ("draining", FILL_DRAINING)] {
        writeln!(
            out,
            r##"<rect x="{x}" y="{}" width="18" height="10" fill="{fill}" stroke="#999"/>"##,
            y - 9.0
        )?;
        writeln!(out, r#"<text x="{}" y="{y}">{name}</text>"#, x + 23.0)?;
        x += 95.0;
    }
    Ok(())
}

/// Contiguous warm-up or draining runs of samples, merged into one interval
/// each so the shading is a few rectangles rather than one per second.
fn shaded_intervals(samples: &[Sample]) -> Vec<(f64, f64, &'static str)> {
    let mut intervals: Vec<(f64, f64, &'static str)> = Vec::new();
    for sample in samples {
        let phase: &'static str = match sample.phase.as_str() {
            "warm-up" => "warm-up",
            "draining" => "draining",
            _ => continue,
        };
        match intervals.last_mut() {
            Some((_, end, last_phase)) if *last_phase == phase && sample.start_s <= *end + 1e-9 => {
                *end = sample.end_s;
            }
            _ => intervals.push((sample.start_s, sample.end_s, phase)),
        }
    }
    intervals
}

fn write_value_axis(
    out: &mut String,
    panel: (f64, f64),
    y: Scale,
    step: f64,
    title: &str,
) -> fmt::Result {
    for tick in ticks(y.domain.0, y.domain.1, step) {
        let py = y.map(tick);
        writeln!(
            out,
            r##"<line x1="{PLOT_LEFT}" y1="{py:.1}" x2="{PLOT_RIGHT}" y2="{py:.1}" stroke="#dddddd" stroke-width="1"/>"##
        )?;
        writeln!(
            out,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            PLOT_LEFT - 6.0,
            py + 4.0,
            fmt_tick(tick, step)
        )?;
    }
    writeln!(
        out,
        r##"<rect x="{PLOT_LEFT}" y="{}" width="{}" height="{}" fill="none" stroke="#999999"/>"##,
        panel.0,
        PLOT_RIGHT - PLOT_LEFT,
        panel.1 - panel.0
    )?;
    let middle = (panel.0 + panel.1) / 2.0;
    writeln!(
        out,
        r#"<text x="16" y="{middle}" text-anchor="middle" transform="rotate(-90 16 {middle})">{}</text>"#,
        xml_escape(title)
    )
}

fn write_time_axis(out: &mut String, x: Scale, panels: &[(f64, f64)]) -> fmt::Result {
    let (from, to) = x.domain;
    let step = nice_step(to - from, 10.0).max(1.0);
    // Labels under the lowest panel.
    let bottom = panels.last().map_or(BOTTOM_PANEL.1, |panel| panel.1);
    for tick in ticks(from, to, step) {
        let px = x.map(tick);
        // Tick marks on every panel: they share this axis.
        for &panel in panels {
            writeln!(
                out,
                r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#999999"/>"##,
                panel.1,
                panel.1 + 4.0
            )?;
        }
        writeln!(
            out,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            bottom + 16.0,
            fmt_tick(tick, step)
        )?;
    }
    writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">seconds since the load started</text>"#,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        bottom + 38.0
    )
}

/// Path data for one series; a missing value breaks the line rather than
/// being drawn as zero. None when the series has no values at all.
fn series_path(
    samples: &[Sample],
    value: impl Fn(&Sample) -> Option<f64>,
    x: Scale,
    y: Scale,
) -> Option<String> {
    let mut d = String::new();
    let mut pen_down = false;
    let mut segment_len = 0;
    for sample in samples {
        match value(sample) {
            Some(v) => {
                let command = if pen_down { 'L' } else { 'M' };
                write!(
                    d,
                    "{}{command}{:.1} {:.1}",
                    if d.is_empty() { "" } else { " " },
                    x.map(sample.end_s),
                    y.map(v)
                )
                .expect(STRING_WRITE);
                pen_down = true;
                segment_len += 1;
            }
            None => {
                close_isolated_point(&mut d, segment_len);
                pen_down = false;
                segment_len = 0;
            }
        }
    }
    close_isolated_point(&mut d, segment_len);
    (!d.is_empty()).then_some(d)
}

/// A lone point would be an invisible zero-length path; a tiny segment with a
/// round cap shows it as a dot.
fn close_isolated_point(d: &mut String, segment_len: usize) {
    if segment_len == 1 {
        d.push_str(" h0.1");
    }
}

fn write_no_data(out: &mut String, panel: (f64, f64)) -> fmt::Result {
    writeln!(
        out,
        r##"<text class="no-data" x="{}" y="{}" text-anchor="middle" font-size="14" fill="#888888">no data</text>"##,
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        (panel.0 + panel.1) / 2.0 + 5.0
    )
}

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

fn write_compare(out: &mut String, reports: &[(String, Value)]) -> fmt::Result {
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
    use serde_json::json;

    fn leg_summary(count: u64, mean: f64, p99: f64, max: f64) -> Value {
        json!({
            "count": count, "min_ms": 0.3, "mean_ms": mean, "p50_ms": mean * 0.9,
            "p90_ms": mean * 1.4, "p95_ms": mean * 1.6, "p99_ms": p99, "max_ms": max
        })
    }

    fn sample_report() -> Value {
        json!({
            "kasi_bench_report": 1,
            "label": "transfer c64",
            "started_at": "2026-11-22T08:30:00Z",
            "machine": {"cpus": 2, "os": "linux", "hostname": "box"},
            "command": "kasi bench --flow transfer --concurrency 64",
            "flow": "transfer",
            "target": "embedded",
            "null_hub": false,
            "api": "http://127.0.0.1:40000",
            "profile": "average-load",
            "load": "closed",
            "stages": [{"duration_s": 5.0, "target": 64.0}],
            "dfsps": 8, "warmup_s": 2.0, "duration_s": 10.0,
            "throughput_per_s": 5400.2, "e2e_p99_ms": 22.1,
            "completed": 54002, "errors": 3, "timeouts": 0,
            "legs": {
                "prepare": leg_summary(54002, 4.1, 9.0, 30.0),
                "fulfil": leg_summary(54002, 3.0, 10.0, 25.0),
                "e2e": leg_summary(54002, 12.0, 22.1, 80.0),
            },
            "leg_order": ["prepare", "fulfil", "e2e"],
            "errors_by_code": {
                "transfer 4001": {"count": 3, "first": "Payer FSP insufficient liquidity"}
            },
            "positions_net_zero": true,
            "null_hub_ratio": {
                "null_hub_throughput_per_s": 9000.0, "ratio": 0.6,
                "note": "closed loop, same flow, 64 users, 5 s"
            },
            "hub_stages": {"source": "GET /stats/stages", "stages": [
                {"phase": "prepare", "stage": "http_receive", "calls": 1000,
                 "min_us": 1.0, "mean_us": 300.0, "max_us": 900.0, "std_us": 5.1,
                 "cum_us": 300000.0},
                {"phase": "fulfil", "stage": "commit", "calls": 1000,
                 "min_us": 2.0, "mean_us": 100.0, "max_us": 400.0, "std_us": 2.0,
                 "cum_us": 100000.0},
                {"phase": "fulfil", "stage": "unused", "calls": 0,
                 "min_us": 18446744073709551615u64, "mean_us": null, "max_us": 0,
                 "std_us": null, "cum_us": 0}
            ]},
            "waterfalls": [{"transfer_id": "tx-1", "spans": [
                {"phase": "prepare", "stage": "validate", "start_us": 50.0, "end_us": 100.0},
                {"phase": "prepare", "stage": "http_receive", "start_us": 0.0, "end_us": 50.0}
            ]}],
            "timeline": [
                {"t_s": 1.0, "phase": "warm-up", "started": 5000, "completed": 4900,
                 "errors": 0, "p50_ms": 9.0, "p99_ms": 21.0, "in_flight": 64},
                {"t_s": 2.0, "phase": "warm-up", "started": 5400, "completed": 5300,
                 "errors": 0, "p50_ms": 8.0, "p99_ms": 20.0, "in_flight": 64},
                {"t_s": 3.0, "phase": "measuring", "started": 5400, "completed": 5400,
                 "errors": 0, "p50_ms": 8.5, "p99_ms": 22.0, "in_flight": 64},
                {"t_s": 4.0, "phase": "measuring", "started": 5400, "completed": 5450,
                 "errors": 1, "p50_ms": 8.4, "p99_ms": 23.0, "in_flight": 64},
                {"t_s": 5.0, "phase": "draining", "started": 0, "completed": 64,
                 "errors": 0, "p50_ms": 7.0, "p99_ms": 15.0, "in_flight": 0}
            ],
            "breakpoint": {
                "threshold": "p99 > 50 ms or errors > 1%",
                "last_good_rate_per_s": 7000.0, "broke_at_rate_per_s": 8000.0,
                "reason": "p99 61 ms",
                "steps": [
                    {"rate_per_s": 7000.0, "throughput_per_s": 6990.0, "p99_ms": 30.0,
                     "errors": 0, "ok": true},
                    {"rate_per_s": 8000.0, "throughput_per_s": 7400.0, "p99_ms": 61.0,
                     "errors": 2, "ok": false}
                ]
            }
        })
    }

    /// A minimal well-formedness check: tags balance and nest, there is one
    /// root, attribute quotes close, and every `&` starts a known entity.
    fn check_well_formed(doc: &str) -> Result<(), String> {
        fn check_entities(text: &str) -> Result<(), String> {
            for (at, _) in text.match_indices('&') {
                let rest = &text[at + 1..];
                let known = ["amp;", "lt;", "gt;", "quot;", "apos;"]
                    .iter()
                    .any(|e| rest.starts_with(e));
                let numeric = rest.starts_with('#')
                    && rest[1..].find(';').is_some_and(|end| {
                        end > 0 && rest[1..1 + end].chars().all(|c| c.is_ascii_alphanumeric())
                    });
                if !known && !numeric {
                    return Err(format!("bare & at {:?}", &text[at..]));
                }
            }
            Ok(())
        }
        let mut stack: Vec<String> = Vec::new();
        let mut closed_root = false;
        let mut rest = doc;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            check_entities(text)?;
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            rest = &rest[open..];
            if let Some(body) = rest.strip_prefix("<?") {
                let end = body.find("?>").ok_or("unclosed <?")?;
                rest = &body[end + 2..];
                continue;
            }
            if let Some(body) = rest.strip_prefix("<!--") {
                let end = body.find("-->").ok_or("unclosed comment")?;
                rest = &body[end + 3..];
                continue;
            }
            // Find the tag's closing '>' outside quoted attribute values.
            let mut quote: Option<char> = None;
            let mut end = None;
            for (i, c) in rest.char_indices().skip(1) {
                match (quote, c) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), '<') => return Err("< inside an attribute".into()),
                    (Some(_), _) => {}
                    (None, '"' | '\'') => quote = Some(c),
                    (None, '<') => return Err("< inside a tag".into()),
                    (None, '>') => {
                        end = Some(i);
                        break;
                    }
                    (None, _) => {}
                }
            }
            let end = end.ok_or("unclosed tag")?;
            let tag = &rest[1..end];
            check_entities(tag)?;
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let name = name.trim();
                match stack.pop() {
                    Some(open) if open == name => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
                if stack.is_empty() {
                    closed_root = true;
                }
                continue;
            }
            if closed_root {
                return Err("second root element".into());
            }
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            if name.is_empty() {
                return Err(format!("tag without a name: <{tag}>"));
            }
            if tag.ends_with('/') {
                if stack.is_empty() {
                    closed_root = true;
                }
            } else {
                stack.push(name);
            }
        }
        check_entities(rest)?;
        if !rest.trim().is_empty() {
            return Err("text after the root".into());
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if !closed_root {
            return Err("no root element".into());
        }
        Ok(())
    }

    #[test]
    fn xml_checker_rejects_malformed_documents() {
        assert_eq!(
            check_well_formed(r#"<a x="1"><b/><c>t &amp; u</c></a>"#),
            Ok(())
        );
        for bad in [
            "<a><b></a></b>",
            "<a>",
            "<a></a><b/>",
            "<a>fish & chips</a>",
            r#"<a x="<"/>"#,
            r#"<a x="1/>"#,
            "",
        ] {
            assert!(check_well_formed(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn number_formatting_groups_thousands_and_signs_deltas() {
        assert_eq!(fmt_num(54002.0, 0), "54,002");
        assert_eq!(fmt_num(-1234567.891, 2), "-1,234,567.89");
        assert_eq!(fmt_num(-0.001, 2), "0.00");
        assert_eq!(fmt_num(999.0, 0), "999");
        assert_eq!(fmt_signed(5.0, 2), "+5.00");
        assert_eq!(fmt_signed(-2.5, 2), "-2.50");
        assert_eq!(fmt_signed(0.0, 2), "0.00");
        assert_eq!(fmt_rate(9000.0), "9,000");
        assert_eq!(fmt_trim(5.0), "5");
        assert_eq!(fmt_trim(2.5), "2.5");
    }

    #[test]
    fn markdown_shows_title_parameters_and_headline_numbers() {
        let md = markdown(&sample_report());
        assert!(
            md.starts_with("# kasi bench — transfer c64 · transfer · embedded\n"),
            "{md}"
        );
        assert!(md.contains("| command | `kasi bench --flow transfer --concurrency 64` |"));
        assert!(md.contains("| machine | 2 CPUs · linux · box |"), "{md}");
        assert!(
            md.contains("| load | closed loop: 64 users for 5 s |"),
            "{md}"
        );
        assert!(md.contains("| DFSPs | 8 |"));
        assert!(md.contains("| throughput | 5,400/s |"), "{md}");
        assert!(md.contains("| e2e p99 | 22.10 ms |"));
        assert!(md.contains("| completed | 54,002 |"));
        assert!(md.contains("| errors | 3 (0.01% of finished) |"), "{md}");
        assert!(md.contains("| positions net zero | yes |"));
        assert!(md.contains("kasi at 0.60 × the null hub (9,000/s)"), "{md}");
        assert!(md.contains("| transfer 4001 | 3 | Payer FSP insufficient liquidity |"));
        assert!(md.contains("![Completed per second and e2e latency per second](timeline.svg)"));
    }

    #[test]
    fn markdown_headline_shows_the_cpu_per_flow() {
        let mut report = sample_report();
        report["cpu"] = json!({"hub_cores": 1.01, "hub_us_per_flow": 263.4, "harness_cores": 0.54, "harness_us_per_flow": 140.2});
        report["null_hub_ratio"]["null_hub_us_per_flow"] = json!(113.0);
        let md = markdown(&report);
        assert!(
            md.contains("| hub CPU in the window | 1.01 cores, 263 µs per flow |"),
            "{md}"
        );
        assert!(
            md.contains("| harness CPU in the window | 0.54 cores, 140 µs per flow |"),
            "{md}"
        );
        assert!(
            md.contains("| null hub CPU (baseline) | 113 µs per flow |"),
            "{md}"
        );
        // No measurement, no rows.
        assert!(!markdown(&sample_report()).contains("CPU in the window"));
    }

    #[test]
    fn markdown_leg_table_follows_leg_order_with_two_decimals() {
        let md = markdown(&sample_report());
        let prepare = md.find("| prepare | 54,002 |").expect("prepare row");
        let fulfil = md.find("| fulfil | 54,002 |").expect("fulfil row");
        let e2e = md.find("| e2e | 54,002 |").expect("e2e row");
        assert!(prepare < fulfil && fulfil < e2e);
        assert!(md.contains("| prepare | 54,002 | 0.30 | 4.10 |"), "{md}");
        assert!(md.contains("| 9.00 | 30.00 |"));
    }

    #[test]
    fn markdown_kpi_table_percentages_are_shares_of_total_cum() {
        let md = markdown(&sample_report());
        assert!(
            md.contains("| phase | stage | calls | min (µs) | mean (µs) | max (µs) | std (µs) | cum (ms) | % of total |"),
            "{md}"
        );
        assert!(
            md.contains("| prepare | http_receive | 1,000 | 1.00 | 300.00 | 900.00 | 5.10 | 300.00 | 75.0% |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| fulfil | commit | 1,000 | 2.00 | 100.00 | 400.00 | 2.00 | 100.00 | 25.0% |"
            ),
            "{md}"
        );
        // The sentinel min of a stage that never ran must not leak through.
        assert!(
            md.contains("| fulfil | unused | 0 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.0% |"),
            "{md}"
        );
        assert!(md.contains("| **total** | | | | | | | 400.00 | 100.0% |"));
    }

    #[test]
    fn markdown_waterfall_bars_scale_to_the_trace_span() {
        let md = markdown(&sample_report());
        let half = "█".repeat(WATERFALL_BAR_CELLS / 2);
        let lines: Vec<&str> = md.lines().collect();
        let receive = lines
            .iter()
            .position(|l| l.starts_with("prepare http_receive"))
            .expect("http_receive line");
        let validate = lines
            .iter()
            .position(|l| l.starts_with("prepare validate"))
            .expect("validate line");
        // Sorted by start although the report listed validate first.
        assert!(receive < validate);
        assert!(
            lines[receive].ends_with(&format!("0.0→50.0 µs  |{half}")),
            "{}",
            lines[receive]
        );
        let pad = " ".repeat(WATERFALL_BAR_CELLS / 2);
        assert!(
            lines[validate].ends_with(&format!("50.0→100.0 µs  |{pad}{half}")),
            "{}",
            lines[validate]
        );
        assert!(md.contains("Transfer `tx-1` — 100.0 µs first to last span"));
    }

    #[test]
    fn waterfall_bar_keeps_tiny_spans_visible() {
        assert_eq!(waterfall_bar(0.0, 0.1, 100.0, 10), "█");
        assert_eq!(
            waterfall_bar(100.0, 100.0, 100.0, 10),
            format!("{}▏", " ".repeat(9))
        );
        assert_eq!(
            waterfall_bar(99.9, 100.0, 100.0, 10),
            format!("{}█", " ".repeat(9))
        );
        assert_eq!(waterfall_bar(0.0, 0.0, 0.0, 10), "▏");
    }

    #[test]
    fn markdown_limits_waterfalls_and_shows_breakpoint_steps() {
        let mut report = sample_report();
        let one = report["waterfalls"][0].clone();
        report["waterfalls"] = Value::Array(vec![one; 7]);
        let md = markdown(&report);
        assert_eq!(md.matches("Transfer `tx-1`").count(), MAX_WATERFALLS);
        assert!(md.contains("2 more in report.json."));
        assert!(
            md.contains("| 8,000 | 7,400 | 61.00 | 2 | **broke** |"),
            "{md}"
        );
        assert!(md.contains("| broke at | 8,000/s |"));
    }

    #[test]
    fn markdown_of_a_sparse_report_renders_dashes() {
        let report = json!({"kasi_bench_report": 1, "legs": null, "hub_stages": null,
                            "leg_order": ["lookup"], "breakpoint": null});
        let md = markdown(&report);
        assert!(md.starts_with("# kasi bench — unnamed run\n"));
        assert!(md.contains("| throughput | — |"));
        assert!(md.contains("| vs the null hub | — |"));
        assert!(md.contains("| lookup | — | — |"), "{md}");
        assert!(md.contains("the hub exposes no stage timings"));
        assert!(!md.contains("## Breakpoint"));
        assert!(!md.contains("## Waterfalls"));
        assert!(md.contains("No per-second samples recorded."));
    }

    #[test]
    fn svg_is_well_formed_with_a_path_per_series() {
        let svg = timeline_svg(&sample_report());
        check_well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert!(svg.contains(r#"width="900""#) && svg.contains(r#"height="420""#));
        for series in ["completed", "p50", "p99"] {
            assert!(
                svg.contains(&format!(r#"<path id="series-{series}" d="M"#)),
                "no {series} path"
            );
        }
        assert!(svg.contains("transfer c64 — completed per second"));
        assert!(!svg.contains("<script") && !svg.contains("@font-face") && !svg.contains("href"));
        assert!(!svg.contains("no data"));
        // Five samples make five points in the throughput line.
        let completed = svg
            .lines()
            .find(|l| l.contains(r#"id="series-completed""#))
            .unwrap();
        assert_eq!(completed.matches('L').count(), 4, "{completed}");
    }

    #[test]
    fn svg_shades_warm_up_and_draining_seconds() {
        let svg = timeline_svg(&sample_report());
        // One merged interval per phase, drawn in both panels.
        assert_eq!(svg.matches(r#"class="phase-warm-up""#).count(), 2);
        assert_eq!(svg.matches(r#"class="phase-draining""#).count(), 2);
        let intervals = shaded_intervals(&timeline_samples(&sample_report()));
        assert_eq!(
            intervals,
            vec![(0.0, 2.0, "warm-up"), (4.0, 5.0, "draining")]
        );
    }

    #[test]
    fn svg_escapes_text_from_the_report() {
        let mut report = sample_report();
        report["label"] = json!(r#"a<b & "c" 'd'>"#);
        let svg = timeline_svg(&report);
        check_well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"));
    }

    #[test]
    fn svg_of_an_empty_timeline_draws_axes_and_no_data() {
        for timeline in [json!([]), Value::Null] {
            let mut report = sample_report();
            report["timeline"] = timeline;
            let svg = timeline_svg(&report);
            check_well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
            assert_eq!(svg.matches(">no data</text>").count(), 2);
            assert!(!svg.contains("<path"));
            assert!(svg.contains("seconds since the load started"));
            assert!(svg.contains(r#"text-anchor="middle">10</text>"#), "{svg}");
        }
    }

    #[test]
    fn svg_without_hub_figures_has_no_third_panel() {
        let svg = timeline_svg(&sample_report());
        assert!(!svg.contains("hub RSS") && !svg.contains("callback backlog"));
        assert!(!svg.contains("series-hub-rss") && !svg.contains("series-callback-backlog"));
    }

    /// The sample report with the hub's figures in its timeline, every
    /// second but the fourth (a failed scrape).
    fn report_with_hub_figures() -> Value {
        let mut report = sample_report();
        let timeline = report["timeline"].as_array_mut().unwrap();
        for (i, sample) in timeline.iter_mut().enumerate() {
            if i != 3 {
                sample["hub_rss_bytes"] = json!(100_000_000 + i as u64 * 1_000_000);
                sample["callback_backlog"] = json!(i * 3);
                sample["transfers_in_memory"] = json!(1000 * i);
            }
        }
        report
    }

    #[test]
    fn svg_draws_the_hubs_memory_and_backlog_in_a_third_panel() {
        let svg = timeline_svg(&report_with_hub_figures());
        check_well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        assert!(svg.contains(r#"width="960""#) && svg.contains(r#"height="590""#));
        for series in ["completed", "p50", "p99", "hub-rss", "callback-backlog"] {
            assert!(
                svg.contains(&format!(r#"<path id="series-{series}" d="M"#)),
                "no {series} path"
            );
        }
        // Both axes are labelled, the legend names both series.
        assert!(svg.contains(">hub RSS (MB)</text>"), "{svg}");
        assert!(
            svg.contains(r#"rotate(90 946 462)">callback backlog</text>"#),
            "{svg}"
        );
        assert!(svg.contains(">hub RSS</text>") && svg.contains(">callback backlog</text>"));
        // The shading and the time axis reach the third panel; the labels
        // are under it.
        assert_eq!(svg.matches(r#"class="phase-warm-up""#).count(), 3);
        assert!(svg.contains(&format!(r#"y="{}""#, HUB_PANEL.1 + 38.0)));
        // RSS in MB: 100 to 104 MB, so the axis tops out at a round 150.
        assert!(svg.contains(r#"text-anchor="end">150</text>"#), "{svg}");
        // The missing scrape breaks the lines.
        let rss = svg
            .lines()
            .find(|l| l.contains(r#"id="series-hub-rss""#))
            .unwrap();
        assert_eq!(rss.matches('M').count(), 2, "{rss}");
    }

    #[test]
    fn least_squares_slope_of_a_line_and_of_noise() {
        let line: Vec<(f64, f64)> = (0..100).map(|t| (t as f64, 3.0 + 0.5 * t as f64)).collect();
        assert!((least_squares_slope(&line).unwrap() - 0.5).abs() < 1e-12);
        // Noise symmetric about a flat line: no drift.
        let flat: Vec<(f64, f64)> = (0..100)
            .map(|t| (t as f64, if t % 2 == 0 { 10.0 } else { 12.0 }))
            .collect();
        assert!(least_squares_slope(&flat).unwrap().abs() < 0.001);
        // A step in the middle is a drift; its slope is the least-squares one.
        let step = [(0.0, 0.0), (1.0, 0.0), (2.0, 1.0), (3.0, 1.0)];
        assert!((least_squares_slope(&step).unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(least_squares_slope(&[(1.0, 2.0)]), None);
        assert_eq!(least_squares_slope(&[(1.0, 2.0), (1.0, 3.0)]), None);
        assert_eq!(least_squares_slope(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    /// Ten minutes measured at 1,000/s: the hub's RSS grows by 0.1 MB a
    /// minute (6 MB an hour), the backlog sways around 2, p99 doubles.
    fn soak_report() -> Value {
        let mut report = sample_report();
        let timeline: Vec<Value> = (1..=600)
            .map(|t| {
                json!({
                    "t_s": t as f64 + 2.0, "phase": "measuring", "completed": 1000,
                    "p50_ms": 2.0, "p99_ms": if t <= 300 { 5.0 } else { 10.0 },
                    "hub_rss_bytes": 200_000_000.0 + t as f64 * 100_000.0 / 60.0,
                    "callback_backlog": if t % 2 == 0 { 1 } else { 3 },
                    "transfers_in_memory": 60_000,
                    "harness_rss_bytes": 50_000_000,
                })
            })
            .collect();
        report["timeline"] = json!(timeline);
        report
    }

    #[test]
    fn markdown_soak_section_computes_tenths_extremes_and_drift() {
        let md = markdown(&soak_report());
        assert!(md.contains("## Soak"), "{md}");
        assert!(md.contains("The 600 measuring seconds in tenths"), "{md}");
        // Ten rows of 60 s each.
        assert!(
            md.contains("| 2–62 | 1,000 | 5.0 | 5.0 | 200.1 | 2.0 | 3 | 60,000 | 50.0 |"),
            "{md}"
        );
        assert!(md.contains("| 542–602 | 1,000 | 10.0 | 10.0 |"), "{md}");
        // 0.1 MB a minute is 6 MB an hour.
        assert!(
            md.contains("| hub RSS | 200.0 MB | 201.0 MB | 201.0 MB | +6.0 MB |"),
            "{md}"
        );
        assert!(
            md.contains("| callback backlog | 3.0 | 1.0 | 3.0 | "),
            "{md}"
        );
        assert!(
            md.contains("| harness RSS | 50.0 MB | 50.0 MB | 50.0 MB | 0.0 MB |"),
            "{md}"
        );
        assert!(
            md.contains("e2e p99, first tenth 5.0 ms, last tenth 10.0 ms (2.00×)."),
            "{md}"
        );
    }

    #[test]
    fn markdown_has_no_soak_section_for_a_short_run() {
        assert!(!markdown(&sample_report()).contains("## Soak"));
        // Without the hub's figures, a long run's section shows dashes.
        let mut report = soak_report();
        for sample in report["timeline"].as_array_mut().unwrap() {
            for key in ["hub_rss_bytes", "callback_backlog", "transfers_in_memory"] {
                sample.as_object_mut().unwrap().remove(key);
            }
        }
        let md = markdown(&report);
        assert!(md.contains("| hub RSS | — | — | — | — |"), "{md}");
    }

    #[test]
    fn svg_breaks_the_line_at_missing_values() {
        let mut report = sample_report();
        report["timeline"][2]["p99_ms"] = Value::Null;
        let svg = timeline_svg(&report);
        let p99 = svg
            .lines()
            .find(|l| l.contains(r#"id="series-p99""#))
            .unwrap();
        assert_eq!(p99.matches('M').count(), 2, "{p99}");
    }

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

    #[test]
    fn write_folder_then_load_report_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("runs").join("c64");
        let report = sample_report();
        write_folder(&dir, &report).unwrap();
        for file in ["report.json", "report.md", "timeline.svg"] {
            let len = std::fs::metadata(dir.join(file)).unwrap().len();
            assert!(len > 100, "{file} is {len} bytes");
        }
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert_eq!(md, markdown(&report));
        assert_eq!(load_report(&dir).unwrap(), report);
        assert_eq!(load_report(&dir.join("report.json")).unwrap(), report);
    }

    #[test]
    fn write_folder_errors_name_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let blocker = tmp.path().join("not-a-dir");
        std::fs::write(&blocker, "x").unwrap();
        let err = write_folder(&blocker.join("run"), &sample_report()).unwrap_err();
        assert!(format!("{err:#}").contains("not-a-dir"), "{err:#}");
    }

    #[test]
    fn load_report_rejects_missing_or_unknown_versions() {
        let tmp = tempfile::tempdir().unwrap();
        let unversioned = tmp.path().join("other.json");
        std::fs::write(&unversioned, r#"{"label": "x"}"#).unwrap();
        let err = load_report(&unversioned).unwrap_err().to_string();
        assert!(err.contains("not a kasi bench report"), "{err}");
        assert!(err.contains("other.json"), "{err}");

        let future = tmp.path().join("future.json");
        std::fs::write(&future, r#"{"kasi_bench_report": 2}"#).unwrap();
        let err = load_report(&future).unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");

        let err = load_report(tmp.path()).unwrap_err();
        assert!(format!("{err:#}").contains("report.json"), "{err:#}");
    }
}
