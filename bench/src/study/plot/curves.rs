//! The goodput curve of a load sweep (`--concurrency A,B,… --batch-share F`): requests per
//! second that met their class's TTFT and ITL targets, against the concurrent sessions offered,
//! one line per arm (the mean over its runs at each load).

use std::fmt::Write as _;

use super::{COLOURS, FONT, axes, escape, open, scale};

/// One arm's goodput at one offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    /// Concurrent sessions offered.
    pub(crate) sessions: f64,
    /// Requests per second that met both targets of their class.
    pub(crate) goodput: f64,
}

/// One arm's line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Curve {
    pub(crate) arm: String,
    pub(crate) points: Vec<Point>,
}

/// The SVG: goodput (y, from 0) against concurrent sessions (x), a line and dots per arm.
pub(crate) fn goodput_curve(title: &str, curves: &[Curve]) -> String {
    // Wide enough for the legend's longest arm names at the right.
    let (w, h) = (900.0, 440.0);
    let area = (80.0, 40.0, 500.0, 380.0);
    let all = curves.iter().flat_map(|c| &c.points);
    let (lo, hi) = all
        .clone()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.sessions), b.max(p.sessions)));
    let pad = ((hi - lo) * 0.05).max(1.0);
    let xr = if lo.is_finite() { (lo - pad, hi + pad) } else { (0.0, 1.0) };
    let top = all.map(|p| p.goodput).fold(0.0, f64::max);
    let yr = (0.0, if top > 0.0 { top * 1.1 } else { 1.0 });
    let mut svg = open(w, h, title);
    axes(&mut svg, area, xr, yr, ("concurrent sessions offered", "goodput, requests/s within SLO"));
    for (i, curve) in curves.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let xy: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|p| (scale(p.sessions, xr, (area.0, area.2)), scale(p.goodput, yr, (area.3, area.1))))
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
        let curves = [
            Curve {
                arm: "fleet <admission>".into(),
                points: vec![Point { sessions: 88.0, goodput: 1.2 }, Point { sessions: 176.0, goodput: 0.8 }],
            },
            Curve { arm: "SMG".into(), points: vec![Point { sessions: 88.0, goodput: 1.0 }] },
        ];
        let svg = goodput_curve("Goodput", &curves);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches(r#"r="4""#).count(), 3, "a dot per point");
        assert!(svg.contains("fleet &lt;admission&gt;") && svg.contains(">SMG</text>"));
        assert!(goodput_curve("empty", &[]).ends_with("</svg>\n"));
    }
}
