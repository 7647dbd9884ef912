//! The study's two plots as plain SVG (no font or system dependencies; any browser shows them):
//!
//! - **interactivity vs throughput**: one marker pair per arm, p50 (filled) and p90 (open, the
//!   slow side) interactivity against tok/s/GPU;
//! - **busiest-rank load over time**: one panel per arm, the busiest decode rank's running
//!   requests (colour) and the mean rank's (grey) over emulated time, the measured window shaded;
//! - and for a load sweep, **the throughput–interactivity curve** and, with service classes,
//!   **the goodput curve** ([`curves`]).

mod curves;

use std::fmt::Write as _;

pub(crate) use curves::{Curve, GOODPUT, INTERACTIVITY, Point, curves};

use super::table::Label;
use crate::replay::report::Report;

const COLOURS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const FONT: &str = "font-family=\"sans-serif\" font-size=\"12\"";

/// About `n` round tick values covering `lo..=hi`.
pub(crate) fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Linear map of `lo..hi` onto `a..b`.
fn scale(v: f64, (lo, hi): (f64, f64), (a, b): (f64, f64)) -> f64 {
    if hi > lo { a + (v - lo) / (hi - lo) * (b - a) } else { (a + b) / 2.0 }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Axes with ticks for the plot area `(x0, y0)–(x1, y1)` (SVG y grows downwards).
fn axes(svg: &mut String, area: (f64, f64, f64, f64), xr: (f64, f64), yr: (f64, f64), labels: (&str, &str)) {
    let (x0, y0, x1, y1) = area;
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        x1 - x0,
        y1 - y0
    );
    for t in ticks(xr.0, xr.1, 6) {
        let x = scale(t, xr, (x0, x1));
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{}" stroke="#444"/><text x="{x:.1}" y="{}" text-anchor="middle" {FONT}>{}</text>"##,
            y1 + 4.0,
            y1 + 17.0,
            tick_label(t)
        );
    }
    for t in ticks(yr.0, yr.1, 4) {
        let y = scale(t, yr, (y1, y0));
        let _ = writeln!(
            svg,
            r##"<line x1="{}" y1="{y:.1}" x2="{x0}" y2="{y:.1}" stroke="#444"/><line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end" {FONT}>{}</text>"##,
            x0 - 4.0,
            x0 - 6.0,
            y + 4.0,
            tick_label(t)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{}" text-anchor="middle" {FONT}>{}</text>"#,
        (x0 + x1) / 2.0,
        y1 + 34.0,
        escape(labels.0)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate({},{:.1}) rotate(-90)" text-anchor="middle" {FONT}>{}</text>"#,
        x0 - 42.0,
        (y0 + y1) / 2.0,
        escape(labels.1)
    );
}

fn tick_label(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn open(width: f64, height: f64, title: &str) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="20" text-anchor="middle" font-family="sans-serif" font-size="14">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    svg
}

/// Interactivity (p50 filled, p90 open) against tok/s/GPU, one colour per arm.
pub(crate) fn interactivity_vs_throughput(title: &str, rows: &[(Label, &Report)], gpus: u32) -> String {
    let (w, h) = (760.0, 440.0);
    let area = (80.0, 40.0, 520.0, 380.0);
    let pts: Vec<(f64, Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|(_, r)| {
            (r.total_tokens_per_s / f64::from(gpus.max(1)), r.interactivity.p50, r.interactivity.p90)
        })
        .collect();
    let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = pts.iter().flat_map(|p| [p.1, p.2]).flatten().collect();
    let range = |v: &[f64]| {
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        if lo.is_finite() {
            (lo - (hi - lo).max(hi.abs() * 0.05) * 0.3, hi + (hi - lo).max(hi.abs() * 0.05) * 0.3)
        } else {
            (0.0, 1.0)
        }
    };
    let (xr, yr) = (range(&xs), range(&ys));
    let mut svg = open(w, h, title);
    axes(&mut svg, area, xr, yr, ("tok/s/GPU (input + output)", "interactivity, tok/s per user"));
    for (i, ((arm, _), (x, p50, p90))) in rows.iter().zip(&pts).enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let px = scale(*x, xr, (area.0, area.2));
        let py = |v: f64| scale(v, yr, (area.3, area.1));
        if let (Some(a), Some(b)) = (p50, p90) {
            let _ = writeln!(
                svg,
                r#"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{c}"/>"#,
                py(*a),
                py(*b)
            );
        }
        if let Some(a) = p50 {
            let _ = writeln!(svg, r#"<circle cx="{px:.1}" cy="{:.1}" r="5" fill="{c}"/>"#, py(*a));
        }
        if let Some(b) = p90 {
            let _ = writeln!(
                svg,
                r#"<circle cx="{px:.1}" cy="{:.1}" r="5" fill="white" stroke="{c}" stroke-width="2"/>"#,
                py(*b)
            );
        }
        let ly = 60.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<circle cx="545" cy="{:.1}" r="5" fill="{c}"/><text x="556" y="{ly:.1}" {FONT}>{}</text>"#,
            ly - 4.0,
            escape(&arm.to_string())
        );
    }
    let ly = 60.0 + 20.0 * rows.len() as f64 + 10.0;
    let _ = writeln!(svg, r##"<text x="540" y="{ly:.1}" {FONT}>filled: p50</text>"##);
    let _ = writeln!(svg, r##"<text x="540" y="{:.1}" {FONT}>open: p90 (the slow side)</text>"##, ly + 16.0);
    svg.push_str("</svg>\n");
    svg
}

/// One panel per arm: the busiest rank's and the mean rank's running requests over time.
pub(crate) fn busiest_over_time(title: &str, rows: &[(Label, &Report)]) -> String {
    let (w, panel) = (820.0, 150.0);
    let h = 40.0 + panel * rows.len() as f64 + 20.0;
    let t_max =
        rows.iter().flat_map(|(_, r)| r.rank_series.last()).map(|s| s.at_ms / 1e3).fold(1.0, f64::max);
    let y_max = rows
        .iter()
        .flat_map(|(_, r)| r.rank_series.iter().map(|s| f64::from(s.busiest())))
        .fold(1.0, f64::max);
    let mut svg = open(w, h, title);
    for (i, (arm, r)) in rows.iter().enumerate() {
        let top = 40.0 + panel * i as f64;
        let area = (80.0, top + 18.0, 780.0, top + panel - 40.0);
        let (xr, yr) = ((0.0, t_max), (0.0, y_max));
        let (wx0, wx1) = (
            scale(r.window_ms.0 / 1e3, xr, (area.0, area.2)),
            scale(r.window_ms.1 / 1e3, xr, (area.0, area.2)),
        );
        let _ = writeln!(
            svg,
            r##"<rect x="{wx0:.1}" y="{}" width="{:.1}" height="{}" fill="#f0f0f0"/>"##,
            area.1,
            (wx1 - wx0).max(0.0),
            area.3 - area.1
        );
        axes(
            &mut svg,
            area,
            xr,
            yr,
            (if i + 1 == rows.len() { "emulated time, s (shaded: measured window)" } else { "" }, "requests"),
        );
        let line = |f: &dyn Fn(&crate::replay::ranks::RankSample) -> f64| -> String {
            r.rank_series
                .iter()
                .map(|s| {
                    format!(
                        "{:.1},{:.1}",
                        scale(s.at_ms / 1e3, xr, (area.0, area.2)),
                        scale(f(s), yr, (area.3, area.1))
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mean = |s: &crate::replay::ranks::RankSample| {
            s.running.iter().map(|&v| f64::from(v)).sum::<f64>() / s.running.len().max(1) as f64
        };
        let c = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            svg,
            r##"<polyline points="{}" fill="none" stroke="#999" stroke-width="1"/>"##,
            line(&mean)
        );
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="1.2"/>"#,
            line(&|s| f64::from(s.busiest()))
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" {FONT} fill="{c}">{} — busiest rank (grey: mean rank)</text>"#,
            area.0 + 6.0,
            area.1 + 14.0,
            escape(&arm.to_string())
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ranks::RankSample;
    use crate::replay::report::Sample;
    use crate::replay::schedule::tests::shaping;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(3.0, 27.0, 4), vec![10.0, 20.0]);
        assert_eq!(ticks(0.0, 0.9, 4), vec![0.0, 0.25, 0.5, 0.75]);
    }

    #[test]
    fn the_plots_are_svg_with_one_series_per_arm() {
        let s = Sample {
            sent_ms: 0.0,
            ttft_ms: 1.0,
            end_ms: 10.0,
            gaps_ms: vec![1.0],
            tokens: 2,
            input_tokens: 5,
            class: None,
        };
        let series = (0..5)
            .map(|i| RankSample {
                at_ms: f64::from(i) * 1e3,
                running: vec![i, 1],
                tokens: vec![0, 0],
                workers: Vec::new(),
            })
            .collect();
        let r = Report::new("t".into(), "closed", shaping(), &[s], 0, 0).with_ranks(series, None);
        let label = |w| Label { arm: crate::study::arm::Arm::Weight(w), run: None };
        let rows = [(label(0.0), &r), (label(1e6), &r)];
        for svg in [interactivity_vs_throughput("a & b", &rows, 12), busiest_over_time("t", &rows)] {
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("1,000,000") && !svg.contains("a & b"));
        }
        assert_eq!(busiest_over_time("t", &rows).matches("<polyline").count(), 4);
    }
}
