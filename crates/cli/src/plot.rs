//! Line charts of sweep results, as PNG and SVG, with a font embedded in the binary
//! (a subset of DejaVu Sans, `assets/`) so that plots need nothing from the system.

use crate::CliError;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
static REGISTER: Once = Once::new();

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A simulated series: solid line with filled points, colour by index.
    Simulated(usize),
    /// A published series: dashed line with hollow points, colour by index (the same
    /// index as the simulated series of the same policy).
    Published(usize),
    /// A reference level (e.g. the media rate): thin grey line.
    Reference,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) in data units.
    pub points: Vec<(f64, f64)>,
    /// Style.
    pub kind: Kind,
}

/// How an axis maps data to the page.
#[derive(Clone, Debug)]
pub enum Axis {
    /// Linear.
    Linear,
    /// Logarithmic, base 2 (queue depths, zone counts).
    Log2,
    /// Logarithmic, base 10.
    Log10,
    /// Categories at 0, 1, 2...: their names.
    Categories(Vec<String>),
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        match self {
            Axis::Linear | Axis::Categories(_) => v,
            Axis::Log2 => v.max(f64::MIN_POSITIVE).log2(),
            Axis::Log10 => v.max(f64::MIN_POSITIVE).log10(),
        }
    }

    fn label(&self, v: f64) -> String {
        match self {
            Axis::Linear => format!("{v:.0}"),
            Axis::Log2 => format!("{:.0}", 2f64.powf(v)),
            Axis::Log10 => {
                let x = 10f64.powf(v);
                if x >= 10.0 { format!("{x:.0}") } else { format!("{x:.1}") }
            }
            Axis::Categories(names) => {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        }
    }

    /// Range of mapped values for data in [lo, hi].
    fn range(&self, lo: f64, hi: f64) -> (f64, f64) {
        match self {
            Axis::Linear => (0f64.min(lo), hi * 1.08),
            Axis::Categories(names) => (-0.5, names.len() as f64 - 0.5),
            Axis::Log2 => (self.map(lo).floor(), self.map(hi).ceil()),
            Axis::Log10 => (self.map(lo).floor(), self.map(hi).ceil()),
        }
    }

    fn ticks(&self, lo: f64, hi: f64) -> usize {
        match self {
            Axis::Categories(names) => names.len() * 2 + 1,
            Axis::Log2 | Axis::Log10 => (hi - lo).round() as usize + 1,
            Axis::Linear => 10,
        }
    }
}

/// A chart.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title (says that the numbers are simulated).
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X axis.
    pub x: Axis,
    /// Y axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x8c, 0x56, 0x4b),
    ];
    C[i % C.len()]
}

/// The smallest and largest x and y of every point of `c` (`None` without points).
fn extent(c: &Chart) -> Option<(f64, f64, f64, f64)> {
    let pts = c.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    (x0 <= x1).then_some((x0, x1, y0, y1))
}

fn draw_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let (x0, x1, y0, y1) = extent(c).ok_or_else(|| "nothing to plot".to_string())?;
    let (xa, xb) = c.x.range(x0, x1);
    let (ya, yb) = c.y.range(y0, y1);
    let (xb, yb) = (if xb > xa { xb } else { xa + 1.0 }, if yb > ya { yb } else { ya + 1.0 });
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(xa..xb, ya..yb)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .x_labels(c.x.ticks(xa, xb))
        .y_labels(c.y.ticks(ya, yb))
        .x_label_formatter(&|v| c.x.label(*v))
        .y_label_formatter(&|v| c.y.label(*v))
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(err)?;
    for s in &c.series {
        let data: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (c.x.map(x), c.y.map(y))).collect();
        match s.kind {
            Kind::Simulated(i) => {
                let col = color(i);
                chart
                    .draw_series(LineSeries::new(data.clone(), col.stroke_width(2)))
                    .map_err(err)?
                    .label(&s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
                chart.draw_series(data.iter().map(|&p| Circle::new(p, 4, col.filled()))).map_err(err)?;
            }
            Kind::Published(i) => {
                let col = color(i);
                chart
                    .draw_series(DashedLineSeries::new(data.clone(), 6, 4, col.stroke_width(1)))
                    .map_err(err)?
                    .label(&s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(1)));
                chart.draw_series(data.iter().map(|&p| Circle::new(p, 5, col.stroke_width(2)))).map_err(err)?;
            }
            Kind::Reference => {
                let col = RGBColor(0x70, 0x70, 0x70);
                chart
                    .draw_series(DashedLineSeries::new(data, 3, 3, col.stroke_width(1)))
                    .map_err(err)?
                    .label(&s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(1)));
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Draws `c` to `stem.png` and `stem.svg`; returns the paths written.
pub fn draw(c: &Chart, stem: &Path) -> Result<Vec<PathBuf>, CliError> {
    REGISTER.call_once(|| {
        // The font is ours and valid; if it were not, the first draw reports it.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    }
    let png = stem.with_extension("png");
    let svg = stem.with_extension("svg");
    let (w, h) = (960, 600);
    let fail = |p: &Path, e: String| CliError(format!("{}: {e}", p.display()));
    // Drawn in memory, then written through `output::create`: a plot's path may name
    // an image or a file in use, which is refused before anything is truncated.
    let mut rgb = vec![0u8; 3 * w as usize * h as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw_on(&root, c).map_err(|e| fail(&png, e))?;
    }
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (w, h)).into_drawing_area();
        draw_on(&root, c).map_err(|e| fail(&svg, e))?;
    }
    let mut encoded = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut encoded, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header()
            .and_then(|mut wr| {
                wr.write_image_data(&rgb)?;
                wr.finish()
            })
            .map_err(|e| fail(&png, e.to_string()))?;
    }
    for (path, bytes) in [(&png, encoded.as_slice()), (&svg, text.as_bytes())] {
        let mut f = crate::output::create(path, None)?;
        f.write_all(bytes).map_err(|e| fail(path, e.to_string()))?;
    }
    Ok(vec![png, svg])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("zblk-plot-{}", std::process::id()));
        let c = Chart {
            title: "test (simulated)".to_string(),
            x_label: "QD".to_string(),
            y_label: "MB/s".to_string(),
            x: Axis::Log2,
            y: Axis::Linear,
            series: vec![
                Series { label: "zwp".into(), points: vec![(1.0, 250.0), (128.0, 120.0)], kind: Kind::Simulated(0) },
                Series {
                    label: "zwp pub".into(),
                    points: vec![(1.0, 244.0), (128.0, 112.0)],
                    kind: Kind::Published(0),
                },
                Series { label: "media".into(), points: vec![(1.0, 248.0), (128.0, 248.0)], kind: Kind::Reference },
            ],
        };
        let paths = draw(&c, &dir.join("t")).unwrap();
        let png = std::fs::read(&paths[0]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let svg = std::fs::read_to_string(&paths[1]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("simulated"), "{svg}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
