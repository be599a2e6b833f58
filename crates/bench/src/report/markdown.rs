//! The Markdown summary of one run (`report.md`, and the hub sections of
//! the terminal summary): run parameters, headline, latency by leg, errors,
//! hub stages, breakpoint, waterfalls, timeline reference and soak.

use std::fmt::{self, Write as _};

use serde_json::Value;

use super::format::{
    array, cell, fmt_count, fmt_num, fmt_opt, fmt_rate, fmt_ratio, fmt_signed, fmt_trim, leg,
    max_value, num, ordered_legs, present, text, text_cell, BYTES_PER_MB, DASH, STRING_WRITE,
};

// ---------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------

/// More waterfalls than this drown the summary; the rest stay in report.json.
const MAX_WATERFALLS: usize = 5;
const WATERFALL_BAR_CELLS: usize = 40;

/// Inline code that survives backticks in the text.
fn code_span(s: &str) -> String {
    let s = cell(s);
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

pub(super) fn write_markdown(out: &mut String, report: &Value) -> fmt::Result {
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
    if let Some(by_currency) = present(report, "positions_by_currency").and_then(Value::as_object) {
        // FX: each currency's sum, and the FXPs' share of it.
        let cells: Vec<String> = by_currency
            .iter()
            .map(|(currency, sums)| {
                let text = |key: &str| sums[key].as_str().unwrap_or(DASH).to_owned();
                format!("{currency} {} (FXPs {})", text("sum"), text("fxps"))
            })
            .collect();
        writeln!(out, "| positions by currency | {} |", cells.join(", "))?;
    }
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
pub(super) struct StageRow {
    pub(super) phase: String,
    pub(super) stage: String,
    pub(super) calls: Option<f64>,
    pub(super) min_us: Option<f64>,
    pub(super) mean_us: Option<f64>,
    pub(super) max_us: Option<f64>,
    pub(super) std_us: Option<f64>,
    pub(super) cum_us: Option<f64>,
}

pub(super) fn stage_rows(report: &Value) -> Option<Vec<StageRow>> {
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

pub(super) fn write_hub_stages(out: &mut String, report: &Value) -> fmt::Result {
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

pub(super) fn write_breakpoint(out: &mut String, report: &Value) -> fmt::Result {
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

pub(super) fn write_waterfalls(out: &mut String, report: &Value) -> fmt::Result {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::markdown;
    use crate::report::tests::sample_report;
    use serde_json::json;

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
}
