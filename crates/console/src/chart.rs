//! Server-rendered SVG charts (the dashboard's): inline in the page, no
//! script, nothing from another origin. Every chart has a `<title>` and a
//! `<desc>` (named by `aria-labelledby`), each point or bar a `<title>`
//! with its exact number (the tooltip), and its page shows a small table
//! beside it for whom cannot see it. Labels are text maud escapes.

use maud::{html, Markup};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;
/// A bar's height and the gap after it.
const BAR: f64 = 18.0;
const BAR_GAP: f64 = 6.0;
const BAR_LABEL: f64 = 140.0;

/// The series' colours, in order (the last: "others").
pub const PALETTE: [&str; 9] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f",
];

/// A named series of one value per x label.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub values: Vec<u64>,
}

/// The smallest "nice" bound (1, 2 or 5 times a power of ten) at least
/// `max`, and at least 1.
pub fn nice_max(max: u64) -> u64 {
    let mut bound = 1u64;
    loop {
        for step in [1, 2, 5] {
            if bound.saturating_mul(step) >= max {
                return bound.saturating_mul(step);
            }
        }
        if bound > u64::MAX / 10 {
            return u64::MAX;
        }
        bound *= 10;
    }
}

/// Where the `i`-th of `n` points stands across the plot.
pub fn x_of(i: usize, n: usize) -> f64 {
    let plot = WIDTH - LEFT - RIGHT;
    match n {
        0 | 1 => LEFT + plot / 2.0,
        n => LEFT + plot * i as f64 / (n - 1) as f64,
    }
}

/// Where `value` stands up the plot whose top is `max`.
pub fn y_of(value: u64, max: u64) -> f64 {
    let plot = HEIGHT - TOP - BOTTOM;
    TOP + plot - plot * value as f64 / max.max(1) as f64
}

fn frame(id: &str, title: &str, desc: &str, height: f64, body: Markup) -> Markup {
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    html! {
        svg.chart id=(id) role="img" xmlns="http://www.w3.org/2000/svg"
            viewBox=(format!("0 0 {WIDTH} {height}")) width=(WIDTH) height=(height)
            aria-labelledby=(format!("{title_id} {desc_id}")) {
            title id=(title_id) { (title) }
            desc id=(desc_id) { (desc) }
            (body)
        }
    }
}

fn empty(text: &str, height: f64) -> Markup {
    html! {
        text x=(WIDTH / 2.0) y=(height / 2.0) text-anchor="middle" fill="#555" { (text) }
    }
}

/// Lines of `series` over `labels` (one value per label each), a point
/// per value with its exact number in its tooltip; `unit` names what is
/// counted ("transfers").
pub fn lines(
    id: &str,
    title: &str,
    desc: &str,
    labels: &[String],
    series: &[Series],
    unit: &str,
) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .max()
        .unwrap_or(0);
    let total: u64 = series.iter().flat_map(|s| s.values.iter()).sum();
    let top = nice_max(max);
    let n = labels.len();
    let body = match total {
        0 => empty(&format!("No {unit} in this range"), HEIGHT),
        _ => html! {
            // The axes, the top and the first and last hours.
            line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(HEIGHT - BOTTOM) stroke="#999" {}
            line x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - RIGHT) y2=(HEIGHT - BOTTOM) stroke="#999" {}
            text x=(LEFT - 4.0) y=(TOP + 4.0) text-anchor="end" font-size="11" { (top) }
            text x=(LEFT - 4.0) y=(HEIGHT - BOTTOM) text-anchor="end" font-size="11" { "0" }
            @if let Some(first) = labels.first() {
                text x=(LEFT) y=(HEIGHT - 8.0) font-size="11" { (first) }
            }
            @if n > 1 {
                @if let Some(last) = labels.last() {
                    text x=(WIDTH - RIGHT) y=(HEIGHT - 8.0) text-anchor="end" font-size="11" { (last) }
                }
            }
            @for (k, s) in series.iter().enumerate() {
                @let colour = PALETTE[k.min(PALETTE.len() - 1)];
                @let points: Vec<String> = s.values.iter().enumerate()
                    .map(|(i, v)| format!("{:.1},{:.1}", x_of(i, n), y_of(*v, top)))
                    .collect();
                g.series data-series=(s.name) {
                    title { (s.name) ": " (s.values.iter().sum::<u64>()) " " (unit) }
                    polyline points=(points.join(" ")) fill="none" stroke=(colour) stroke-width="2" {}
                    @for (i, v) in s.values.iter().enumerate() {
                        @if *v > 0 {
                            circle cx=(format!("{:.1}", x_of(i, n))) cy=(format!("{:.1}", y_of(*v, top)))
                                r="3" fill=(colour) {
                                title { (s.name) ", " (labels.get(i).map_or("", String::as_str)) ": " (v) " " (unit) }
                            }
                        }
                    }
                }
            }
        },
    };
    frame(id, title, desc, HEIGHT, body)
}

/// A bar per `(label, value, tooltip)`, across, longest the widest.
pub fn bars(
    id: &str,
    title: &str,
    desc: &str,
    items: &[(String, u64, String)],
    none: &str,
) -> Markup {
    let height = (items.len().max(1) as f64) * (BAR + BAR_GAP) + TOP * 2.0;
    let top = nice_max(items.iter().map(|(_, v, _)| *v).max().unwrap_or(0));
    let plot = WIDTH - BAR_LABEL - RIGHT - 60.0;
    let body = match items.is_empty() {
        true => empty(none, height),
        false => html! {
            @for (i, (label, value, tooltip)) in items.iter().enumerate() {
                @let y = TOP + i as f64 * (BAR + BAR_GAP);
                @let length = plot * *value as f64 / top as f64;
                g.bar {
                    title { (tooltip) }
                    text x=(BAR_LABEL - 6.0) y=(y + BAR - 5.0) text-anchor="end" font-size="12" { (label) }
                    rect x=(BAR_LABEL) y=(y) width=(format!("{length:.1}")) height=(BAR) fill=(PALETTE[0]) {}
                    text x=(BAR_LABEL + length + 4.0) y=(y + BAR - 5.0) font-size="12" { (value) }
                }
            }
        },
    };
    frame(id, title, desc, height, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, values: &[u64]) -> Series {
        Series {
            name: name.into(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn scales_round_up_to_nice_bounds() {
        assert_eq!(nice_max(0), 1);
        assert_eq!(nice_max(1), 1);
        assert_eq!(nice_max(3), 5);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(200), 200);
        assert_eq!(nice_max(201), 500);
        assert_eq!(nice_max(u64::MAX), u64::MAX);
        assert_eq!(y_of(0, 10), HEIGHT - BOTTOM);
        assert_eq!(y_of(10, 10), TOP);
        assert_eq!(y_of(5, 10), TOP + (HEIGHT - TOP - BOTTOM) / 2.0);
        assert_eq!(x_of(0, 3), LEFT);
        assert_eq!(x_of(2, 3), WIDTH - RIGHT);
        // One point stands in the middle, not at a division by zero.
        assert_eq!(x_of(0, 1), LEFT + (WIDTH - LEFT - RIGHT) / 2.0);
    }

    #[test]
    fn an_empty_chart_says_so_and_draws_no_line() {
        let svg = lines(
            "c",
            "T",
            "D",
            &["01:00".into()],
            &[series("USD", &[0])],
            "transfers",
        )
        .into_string();
        assert!(svg.contains("No transfers in this range"), "{svg}");
        assert!(!svg.contains("polyline"));
        assert!(svg.contains("<title id=\"c-title\">T</title>"));
        assert!(svg.contains("<desc id=\"c-desc\">D</desc>"));
        let none = bars("b", "T", "D", &[], "No latency yet").into_string();
        assert!(none.contains("No latency yet") && !none.contains("<rect"));
    }

    #[test]
    fn one_point_is_drawn_with_its_exact_number() {
        let svg = lines(
            "c",
            "T",
            "D",
            &["01:00".into()],
            &[series("USD", &[7])],
            "transfers",
        )
        .into_string();
        assert!(svg.contains("points=\"382.0,72.0\""), "{svg}");
        assert!(
            svg.contains("<title>USD, 01:00: 7 transfers</title>"),
            "{svg}"
        );
        // Scaled to 10: 7 stands at 70 % of the plot.
        assert!(svg.contains(">10</text>"), "{svg}");
    }

    #[test]
    fn labels_are_escaped() {
        let svg = lines(
            "c",
            "<b>",
            "a & b",
            &["<h>".into(), "x".into()],
            &[series("\"><script>", &[1, 2])],
            "transfers",
        )
        .into_string();
        assert!(!svg.contains("<script>") && !svg.contains("<b>") && !svg.contains("<h>"));
        assert!(
            svg.contains("&lt;b&gt;") && svg.contains("a &amp; b"),
            "{svg}"
        );
        assert!(
            svg.contains("data-series=\"&quot;&gt;&lt;script&gt;\""),
            "{svg}"
        );
        let bars = bars(
            "b",
            "T",
            "D",
            &[("<i>".into(), 5, "<i>: 5 ms".into())],
            "none",
        )
        .into_string();
        assert!(
            !bars.contains("<i>") && bars.contains("&lt;i&gt;: 5 ms"),
            "{bars}"
        );
    }
}
