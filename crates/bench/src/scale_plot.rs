//! The scaling benchmark's plot: per system, the time until all Applications are Synced and
//! Healthy (left) and the processes' peak RSS (right) against N, as one SVG image.

use std::path::Path;

use plotters::prelude::*;

use crate::scale::{Row, System};

/// What a panel shows of a run.
type Measure = fn(&Row) -> f64;

/// Draw `rows` into `path` (SVG).
pub(crate) fn plot(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (1100, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(draw)?;
    let (left, right) = root.split_horizontally(550);
    let max_n = rows.iter().map(|r| r.n).max().unwrap_or(1) as f64;
    let mut systems: Vec<System> = Vec::new();
    for row in rows {
        if !systems.contains(&row.system) {
            systems.push(row.system);
        }
    }
    let ready: Measure = |r| r.ready.as_secs_f64();
    let panels = [
        (&left, "All Synced and Healthy (Flux: Ready)", "seconds", ready),
        (&right, "Peak RSS, all processes", "MiB", Row::total_mib as Measure),
    ];
    for (area, title, unit, value) in panels {
        let max_y = rows.iter().map(value).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..max_n * 1.05, 0.0..max_y)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("Applications")
            .y_desc(unit)
            .draw()
            .map_err(draw)?;
        for (i, system) in systems.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.system == *system)
                .map(|r| (r.n as f64, value(r)))
                .collect();
            // In the order of N, whatever the order of the runs.
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(draw)?
                .label(system.to_string())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
            chart
                .draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(draw)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw)?;
    }
    root.present().map_err(draw)?;
    Ok(())
}

fn draw(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(n: usize, system: System, ready: u64, rss_mib: &[u64]) -> Row {
        Row {
            n,
            system,
            ready: Duration::from_secs(ready),
            commit: Duration::from_secs(ready / 2),
            rss_kib: rss_mib.iter().map(|m| m * 1024).collect(),
            requests: 10 * n as u64,
            page: None,
        }
    }

    #[test]
    fn the_plot_draws_a_line_per_system_with_its_legend() -> anyhow::Result<()> {
        let rows = [
            row(500, System::Capstan { replicas: 1 }, 50, &[40]),
            row(2000, System::Capstan { replicas: 1 }, 200, &[90]),
            row(500, System::Capstan { replicas: 3 }, 45, &[40, 41, 39]),
            row(500, System::Flux, 300, &[60, 80]),
        ];
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("plots/scale.svg");
        plot(&rows, &path)?;
        let svg = std::fs::read_to_string(&path)?;
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for label in [
            "Capstan, 1 replica",
            "Capstan, 3 replicas",
            "Flux (source- and kustomize-controller)",
        ] {
            // Two panels, a legend entry each.
            assert_eq!(svg.matches(label).count(), 2, "{label} in {svg}");
        }
        assert!(svg.contains("All Synced and Healthy") && svg.contains("Peak RSS"));
        // A line per system and panel: 3 systems × 2 panels.
        // Each system's line and legend mark, in each panel: 3 × 2 × 2 (the mesh's are thinner).
        let thick = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .count();
        assert_eq!(thick, 12, "{svg}");
        Ok(())
    }
}
