//! A load sweep's curves (`--concurrency A,B,…`), one line per arm through its points (the
//! means over its runs at each offered load, in the order of the loads):
//!
//! - **the goodput curve** (with `--batch-share`): requests per second that met their class's
//!   TTFT and ITL targets, against the concurrent sessions offered;
//! - **the throughput–interactivity curve**: p90 interactivity against tok/s/GPU, where arms are
//!   compared at equal throughput ([`super::super::iso_throughput`]).

use std::fmt::Write as _;

use super::{COLOURS, FONT, axes, escape, open, scale};

/// One arm's point at one offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    pub(crate) x: f64,
    pub(crate) y: f64,
}

/// What the axes show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Axes {
    pub(crate) x: &'static str,
    pub(crate) y: &'static str,
    /// The y axis starts at 0 (else just below the lowest point).
    pub(crate) y_from_zero: bool,
}

/// The goodput curve's axes.
pub(crate) const GOODPUT: Axes =
    Axes { x: "concurrent sessions offered", y: "goodput, requests/s within SLO", y_from_zero: true };

/// The throughput–interactivity curve's axes.
pub(crate) const INTERACTIVITY: Axes =
    Axes { x: "tok/s/GPU", y: "p90 interactivity, tokens/s per request", y_from_zero: false };

/// One arm's line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Curve {
    pub(crate) arm: String,
    pub(crate) points: Vec<Point>,
}

/// The SVG: y against x on `axes`, a line and dots per arm.
pub(crate) fn curves(title: &str, axes_of: Axes, curves: &[Curve]) -> String {
    // Wide enough for the legend's longest arm names at the right.
    let (w, h) = (900.0, 440.0);
    let area = (80.0, 40.0, 500.0, 380.0);
    let all = curves.iter().flat_map(|c| &c.points);
    let (lo, hi) = all.clone().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.x), b.max(p.x)));
    let pad = ((hi - lo) * 0.05).max(1.0);
    let xr = if lo.is_finite() { (lo - pad, hi + pad) } else { (0.0, 1.0) };
    let top = all.clone().map(|p| p.y).fold(0.0, f64::max);
    let bottom = if axes_of.y_from_zero { 0.0 } else { all.map(|p| p.y).fold(top, f64::min) * 0.9 };
    let yr = (bottom, if top > bottom { bottom + (top - bottom) * 1.1 } else { bottom + 1.0 });
    let mut svg = open(w, h, title);
    axes(&mut svg, area, xr, yr, (axes_of.x, axes_of.y));
    for (i, curve) in curves.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let xy: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|p| (scale(p.x, xr, (area.0, area.2)), scale(p.y, yr, (area.3, area.1))))
            .collect();
        let path: Vec<String> = xy.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for (x, y) in &xy {
            let _ = writeln!(svg, r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{c}"/>"#);
        }
        let ly = 60.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="515" y1="{:.1}" x2="535" y2="{:.1}" stroke="{c}" stroke-width="2"/><text x="541" y="{ly:.1}" {FONT}>{}</text>"#,
            ly - 4.0,
            ly - 4.0,
            escape(&curve.arm)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_arm_is_a_line_through_its_points_in_the_legend() {
        let lines = [
            Curve {
                arm: "fleet <admission>".into(),
                points: vec![Point { x: 88.0, y: 1.2 }, Point { x: 176.0, y: 0.8 }],
            },
            Curve { arm: "SMG".into(), points: vec![Point { x: 88.0, y: 1.0 }] },
        ];
        let svg = curves("Goodput", GOODPUT, &lines);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches(r#"r="4""#).count(), 3, "a dot per point");
        assert!(svg.contains("fleet &lt;admission&gt;") && svg.contains(">SMG</text>"));
        assert!(svg.contains("goodput, requests/s within SLO"));
        assert!(curves("empty", INTERACTIVITY, &[]).ends_with("</svg>\n"));
    }
}
