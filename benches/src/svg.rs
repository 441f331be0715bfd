//! A grouped bar chart as a standalone SVG document, for benchmark results (no plotting
//! dependency: a handful of `<rect>` and `<text>` elements).

use std::fmt::Write as _;

/// A grouped bar chart: one group of bars per category, one bar (and colour) per series.
#[derive(Clone, Debug, Default)]
pub struct BarChart {
    /// Heading above the chart.
    pub title: String,
    /// Label of the value axis.
    pub y_label: String,
    /// Category names, one group of bars each (left to right).
    pub groups: Vec<String>,
    /// Series: a name and one value per group (same length as `groups`); `NaN` leaves a gap.
    pub series: Vec<(String, Vec<f64>)>,
}

/// Colours of the series, in order (repeated beyond eight series).
const COLOURS: [&str; 8] = [
    "#1b9e77", "#66c2a5", "#d95f02", "#fc8d62", "#7570b3", "#a6a0d8", "#e7298a", "#e6ab02",
];

/// XML-escapes text for an element's content.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis maximum at or above `v`: 1, 2, 2.5 or 5 times a power of ten.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

impl BarChart {
    /// The chart as an SVG document. Panics if a series' length differs from the groups'.
    pub fn to_svg(&self) -> String {
        for (name, v) in &self.series {
            assert_eq!(
                v.len(),
                self.groups.len(),
                "series {name}: one value per group"
            );
        }
        let (left, right, top, bottom) = (70.0, 20.0, 50.0, 70.0);
        let legend_h = 20.0 * self.series.len().div_ceil(3) as f64;
        let n_series = self.series.len().max(1) as f64;
        let bar_w = 14.0;
        let group_w = bar_w * n_series + 24.0;
        let plot_w = group_w * self.groups.len().max(1) as f64;
        let plot_h = 300.0;
        // Wide enough for the title (about 8 px per character at 14 px) and for a legend row of
        // three entries (at least 180 px each), even when there are few bars.
        let title_w = self.title.chars().count() as f64 * 8.0 + 40.0;
        let legend_w = left + 3.0 * (plot_w / 3.0).max(180.0);
        let width = (left + plot_w + right).max(title_w).max(legend_w);
        let height = top + plot_h + bottom + legend_h;
        let max = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let ymax = nice_max(max);
        let y = |v: f64| top + plot_h - v / ymax * plot_h;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
            width / 2.0,
            esc(&self.title)
        );
        // Axis, grid lines and tick labels.
        for i in 0..=5 {
            let v = ymax * f64::from(i) / 5.0;
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                left + plot_w,
                left - 6.0,
                yy + 4.0,
                trim(v)
            );
        }
        let _ = writeln!(
            s,
            r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            top + plot_h / 2.0,
            esc(&self.y_label)
        );
        // Bars.
        for (g, group) in self.groups.iter().enumerate() {
            let gx = left + g as f64 * group_w + 12.0;
            for (k, (name, values)) in self.series.iter().enumerate() {
                let v = values[g];
                if !v.is_finite() {
                    continue;
                }
                let x = gx + k as f64 * bar_w;
                let h = (top + plot_h - y(v)).max(0.0);
                let _ = writeln!(
                    s,
                    r#"<rect class="bar" x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}: {}</title></rect>"#,
                    y(v),
                    bar_w - 2.0,
                    COLOURS[k % COLOURS.len()],
                    esc(group),
                    esc(name),
                    trim(v)
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="8" text-anchor="middle">{}</text>"#,
                    x + (bar_w - 2.0) / 2.0,
                    y(v) - 3.0,
                    trim(v)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + bar_w * n_series / 2.0,
                top + plot_h + 16.0,
                esc(group)
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{left}" x2="{left}" y1="{top}" y2="{:.1}" stroke="black"/><line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
            top + plot_h,
            left + plot_w,
            top + plot_h,
            top + plot_h
        );
        // Legend, three entries per row.
        for (k, (name, _)) in self.series.iter().enumerate() {
            let lx = left + (k % 3) as f64 * (plot_w / 3.0).max(180.0);
            let ly = top + plot_h + 40.0 + (k / 3) as f64 * 20.0;
            let _ = writeln!(
                s,
                r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                ly - 10.0,
                COLOURS[k % COLOURS.len()],
                lx + 16.0,
                ly,
                esc(name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// A value with at most two decimals and no trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bar_per_finite_value_with_escaped_labels() {
        let c = BarChart {
            title: "a < b".into(),
            y_label: "bytes".into(),
            groups: vec!["g1".into(), "g2".into()],
            series: vec![
                ("s&1".into(), vec![1.0, 2.5]),
                ("s2".into(), vec![f64::NAN, 4.0]),
            ],
        };
        let svg = c.to_svg();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="bar""#).count(), 3);
        assert!(svg.contains("a &lt; b") && svg.contains("s&amp;1"));
        assert!(!svg.contains("a < b"));
    }

    #[test]
    fn axis_maximum_is_rounded_up() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.7), 5.0);
        assert_eq!(nice_max(2.1), 2.5);
        assert_eq!(nice_max(1000.0), 1000.0);
        assert_eq!(trim(2.50), "2.5");
        assert_eq!(trim(3.0), "3");
    }
}
