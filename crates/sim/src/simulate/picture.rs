//! The picture of a run (SVG, pure): one panel per cluster (per run, with `compare`), time
//! across. In each: the ready slices (blue) against the desired (grey) and the hot spares
//! held (orange, a ring where one was swapped in), the phase as a coloured band on top,
//! each scripted step as a numbered red line (listed under the title), each recovery as a
//! green bar labelled with how long it took, and the goodput in the panel's caption.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::summary::{Point, Recovery, Summary};
use slice_core::api::Phase;

const WIDTH: u32 = 1200;
const PANEL: u32 = 300;
const READY: RGBColor = RGBColor(31, 119, 180);
const SPARE: RGBColor = RGBColor(255, 127, 14);
const FAULT: RGBColor = RGBColor(214, 39, 40);
const RECOVERY: RGBColor = RGBColor(44, 160, 44);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Failed = Box<dyn std::error::Error>;

/// The SVG of a scenario's runs: `(label, summary)` each, the label empty for a single run.
pub fn render_svg(scenario: &str, runs: &[(&str, &Summary)]) -> Result<String, String> {
    let panels: Vec<(String, &Summary, &str)> = runs
        .iter()
        .flat_map(|(label, s)| {
            s.history
                .keys()
                .map(move |c| (label.to_string(), *s, c.as_str()))
        })
        .collect();
    let steps = step_lines(runs);
    let head = 44 + 18 * steps.len() as u32;
    let height = head + PANEL * panels.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        draw(&root, scenario, head, &steps, &panels).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The title's list of the scripted steps: when each ran, in every run (the runs of
/// `compare` take the same steps at their own times).
fn step_lines(runs: &[(&str, &Summary)]) -> Vec<String> {
    let per_run: Vec<_> = runs.iter().map(|(l, s)| (*l, faults(&s.steps))).collect();
    let Some((_, first)) = per_run.first() else {
        return vec![];
    };
    first
        .iter()
        .enumerate()
        .map(|(i, (at, n, what))| {
            if per_run.len() == 1 {
                return format!("step {n} at {at:.1} s: {what}");
            }
            let times: Vec<String> = per_run
                .iter()
                .filter_map(|(label, steps)| {
                    steps.get(i).map(|(t, ..)| format!("{label} at {t:.1} s"))
                })
                .collect();
            format!("step {n}: {what} ({})", times.join(", "))
        })
        .collect()
}

/// The scripted steps that act (waits do not): when, their number, what they did.
fn faults(steps: &[(f64, String)]) -> Vec<(f64, String, String)> {
    steps
        .iter()
        .filter_map(|(at, step)| {
            let (n, what) = step.strip_prefix("step ")?.split_once(' ')?;
            (!what.starts_with("wait")).then(|| (*at, n.to_string(), what.to_string()))
        })
        .collect()
}

fn draw(
    root: &Area,
    scenario: &str,
    head: u32,
    steps: &[String],
    panels: &[(String, &Summary, &str)],
) -> Result<(), Failed> {
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(head);
    top.draw(&Text::new(
        format!("simulate: scenario \"{scenario}\""),
        (12, 8),
        ("sans-serif", 22).into_font(),
    ))?;
    let key = "phase band: green Running, orange Restarting, grey Pending or waiting, red Failed; \
               red lines: the scripted steps below; green bars: recoveries";
    top.draw(&Text::new(
        key,
        (420, 14),
        ("sans-serif", 13).into_font().color(&BLACK.mix(0.6)),
    ))?;
    for (i, line) in steps.iter().enumerate() {
        top.draw(&Text::new(
            line.as_str(),
            (16, 38 + 18 * i as i32),
            ("sans-serif", 14).into_font().color(&FAULT),
        ))?;
    }
    for (area, (label, summary, cluster)) in body
        .split_evenly((panels.len().max(1), 1))
        .iter()
        .zip(panels)
    {
        // Each run's panels mark the steps at that run's own times.
        panel(area, label, summary, cluster, &faults(&summary.steps))?;
    }
    Ok(())
}

fn phase_color(p: Phase) -> RGBColor {
    match p {
        Phase::Running => RGBColor(152, 223, 138),
        Phase::Restarting => RGBColor(255, 187, 120),
        Phase::Failed | Phase::Invalid => RGBColor(255, 152, 150),
        Phase::Succeeded => RGBColor(44, 160, 44),
        _ => RGBColor(199, 199, 199),
    }
}

/// The panel's caption: the cluster, its goodput, the spares held and swapped.
fn caption(label: &str, s: &Summary, cluster: &str) -> String {
    let run = if label.is_empty() {
        String::new()
    } else {
        format!("{label}: ")
    };
    let swaps: u32 = s
        .clusters
        .iter()
        .filter(|(n, _)| n == cluster)
        .flat_map(|(_, st)| {
            st.groups
                .iter()
                .filter_map(|g| g.spares.as_ref().map(|sp| sp.swaps))
        })
        .sum();
    let (pct, held) = s.goodput.get(cluster).map_or((0.0, 0.0), |g| {
        (
            100.0 * g.productive / g.wanted.max(f64::MIN_POSITIVE),
            g.spares_held,
        )
    });
    format!(
        "{run}cluster {cluster}: goodput {pct:.1} %, spares held {held:.1} slice-s, swapped {swaps}"
    )
}

fn panel(
    area: &Area,
    label: &str,
    s: &Summary,
    cluster: &str,
    steps: &[(f64, String, String)],
) -> Result<(), Failed> {
    let points = &s.history[cluster];
    let end = s
        .elapsed
        .as_secs_f64()
        .max(points.last().map_or(1.0, |p| p.at + 1.0));
    let top = points
        .iter()
        .map(|p| p.ready.max(p.desired).max(p.spares))
        .max()
        .unwrap_or(1) as f64;
    let (band, bars) = (top + 1.0, top + 0.6);
    let mut chart = ChartBuilder::on(area)
        .caption(caption(label, s, cluster), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(44)
        // Room on the right for the label of a recovery that ends the run.
        .build_cartesian_2d(0f64..end * 1.1, 0f64..top + 1.5)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("slices")
        .y_labels(top as usize + 2)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .draw()?;
    for (i, p) in points.iter().enumerate() {
        let next = points.get(i + 1).map_or(end, |n| n.at);
        chart.draw_series([Rectangle::new(
            [(p.at, band), (next, band + 0.4)],
            phase_color(p.phase).filled(),
        )])?;
        if (next - p.at) / end > 0.06 {
            chart.draw_series([Text::new(
                format!("{:?}", p.phase),
                (p.at + end * 0.005, band + 0.32),
                ("sans-serif", 12),
            )])?;
        }
    }
    let stepped = |f: fn(&Point) -> u32| steps_of(points, end, f);
    chart
        .draw_series([PathElement::new(
            stepped(|p| p.desired),
            ShapeStyle::from(&BLACK.mix(0.35)).stroke_width(2),
        )])?
        .label("desired slices")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.35)));
    chart
        .draw_series([PathElement::new(
            stepped(|p| p.ready),
            READY.stroke_width(3),
        )])?
        .label("ready slices")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], READY.stroke_width(3)));
    if points.iter().any(|p| p.spares > 0) {
        chart
            .draw_series([PathElement::new(
                stepped(|p| p.spares),
                SPARE.stroke_width(2),
            )])?
            .label("spares held (ring: swapped in)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], SPARE.stroke_width(2)));
        let swaps = points.windows(2).filter(|w| w[1].spares < w[0].spares);
        chart.draw_series(
            swaps.map(|w| Circle::new((w[1].at, w[1].spares as f64), 6, SPARE.stroke_width(2))),
        )?;
    }
    for (at, n, _) in steps {
        chart.draw_series([PathElement::new(
            [(*at, 0.0), (*at, band)],
            FAULT.stroke_width(2),
        )])?;
        chart.draw_series([Text::new(
            n.clone(),
            (*at - end * 0.012, band - 0.1),
            ("sans-serif", 14).into_font().color(&FAULT),
        )])?;
    }
    let recoveries = s.recoveries.iter().filter(|r| r.cluster == cluster);
    for r in recoveries {
        recovery(&mut chart, r, bars)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// Recovery labels start a little right of the fault's line and number.
fn end_gap(from: f64, to: f64) -> f64 {
    (to - from).min(0.3)
}

/// A step function through the points, held to `end`.
fn steps_of(points: &[Point], end: f64, f: fn(&Point) -> u32) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let next = points.get(i + 1).map_or(end, |n| n.at);
        out.push((p.at, f(p) as f64));
        out.push((next, f(p) as f64));
    }
    out
}

fn recovery<DB: DrawingBackend>(
    chart: &mut ChartContext<
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    r: &Recovery,
    y: f64,
) -> Result<(), Failed>
where
    DB::ErrorType: 'static,
{
    let (from, to) = (r.at.as_secs_f64(), (r.at + r.took).as_secs_f64());
    chart.draw_series([Rectangle::new(
        [(from, y - 0.06), (to, y + 0.06)],
        RECOVERY.filled(),
    )])?;
    let text = format!("recovered in {:.1} s", r.took.as_secs_f64());
    chart.draw_series([Text::new(
        text,
        (from + end_gap(from, to), y - 0.12),
        ("sans-serif", 13).into_font().color(&RECOVERY),
    )])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// One cluster, one scripted step at `at` seconds, 100 s long.
    fn run(at: f64) -> Summary {
        let point = |t: f64| Point {
            at: t,
            phase: Phase::Running,
            ready: 2,
            desired: 2,
            spares: 0,
        };
        Summary {
            elapsed: Duration::from_secs(100),
            history: [("demo".to_string(), vec![point(0.0), point(90.0)])].into(),
            steps: vec![(at, "step 1 kill pod demo-0".to_string())],
            ..Summary::default()
        }
    }

    /// The x coordinates of the red (scripted step) lines.
    fn step_lines(svg: &str) -> Vec<String> {
        svg.lines()
            .filter(|l| l.contains("<polyline") && l.contains("#D62728"))
            .filter_map(|l| {
                l.split("points=\"")
                    .nth(1)?
                    .split(',')
                    .next()
                    .map(str::to_string)
            })
            .collect()
    }

    #[test]
    fn each_run_draws_its_own_step_times() {
        let (early, late) = (run(20.0), run(60.0));
        let svg = render_svg("s", &[("a", &early), ("b", &late)]).unwrap();
        let lines = step_lines(&svg);
        assert_eq!(lines.len(), 2, "{svg}");
        assert_ne!(
            lines[0], lines[1],
            "both panels drew the first run's step time"
        );
        assert!(
            svg.contains("step 1: kill pod demo-0 (a at 20.0 s, b at 60.0 s)"),
            "{svg}"
        );
        let single = render_svg("s", &[("", &early)]).unwrap();
        assert!(
            single.contains("step 1 at 20.0 s: kill pod demo-0"),
            "{single}"
        );
    }
}
