//! The per-second timeline SVG (`timeline.svg`): completed/s and e2e
//! p50/p99 panels sharing a time axis, warm-up and draining shading, and
//! the hub's RSS and callback backlog when the run scraped them.

use std::fmt::{self, Write as _};

use serde_json::Value;

use super::format::{array, fmt_num, max_value, num, text, BYTES_PER_MB, STRING_WRITE};

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

pub(super) fn write_timeline_svg(out: &mut String, report: &Value) -> fmt::Result {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;
    use crate::report::timeline_svg;
    use serde_json::json;

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
}
