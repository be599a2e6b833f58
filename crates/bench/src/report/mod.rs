//! Report files of `kasi bench`: renders the summary report (a
//! `"kasi_bench_report": 1` JSON value) as Markdown, as a per-second timeline
//! SVG, and as "evolution" tables comparing several runs, in the layout of the
//! Mojaloop performance reports so results can be read side by side with them.
//!
//! Every field of the report may be null or absent (a lookup run has no
//! transfer legs, a null-hub run has no hub stages, ...), so every accessor
//! here is optional and missing values render as "—" rather than failing.

mod compare;
mod format;
mod markdown;
mod svg;

use std::fmt;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde_json::Value;

use compare::write_compare;
use format::{present, STRING_WRITE};
use markdown::{write_breakpoint, write_hub_stages, write_markdown, write_waterfalls};
use svg::write_timeline_svg;

const REPORT_VERSION_KEY: &str = "kasi_bench_report";
const REPORT_VERSION: u64 = 1;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn leg_summary(count: u64, mean: f64, p99: f64, max: f64) -> Value {
        json!({
            "count": count, "min_ms": 0.3, "mean_ms": mean, "p50_ms": mean * 0.9,
            "p90_ms": mean * 1.4, "p95_ms": mean * 1.6, "p99_ms": p99, "max_ms": max
        })
    }

    pub(super) fn sample_report() -> Value {
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
