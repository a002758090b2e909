//! Reports (`create_report`): a Markdown or HTML document of text, tables and charts, the
//! charts drawn with `plotters` into PNG (with the bundled DejaVu Sans font, so no system font
//! is needed) or SVG files beside the document, which links them by relative name.
//!
//! Rendering is pure: it takes the data (the tool runs any queries first) and returns the
//! files' bytes; the caller writes them into the user's workspace.

use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{DataError, Result};

/// The font every chart's text is drawn with (DejaVu Sans; its licence is in
/// `services/data/assets/DejaVuSans.LICENSE`).
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

pub const MAX_SECTIONS: usize = 50;
/// Rows of a table shown in the document; the rest are counted.
pub const MAX_TABLE_ROWS: usize = 200;
/// Categories (bars, pie slices) or points of a chart.
pub const MAX_CHART_POINTS: usize = 5000;
const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Markdown,
    Html,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    #[default]
    Png,
    Svg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChartKind {
    Bar,
    Line,
    Scatter,
    Pie,
}

/// Rows with their column names.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Data {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Section {
    Text(String),
    Table {
        title: Option<String>,
        data: Data,
        /// The data was cut at a cap before it got here.
        truncated: bool,
    },
    Chart(Chart),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub kind: ChartKind,
    /// The column of the x values (categories for bar, line and pie).
    pub x: String,
    /// The columns of the y values: one series each (pie: the first).
    pub y: Vec<String>,
    pub data: Data,
    pub image: ImageFormat,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub title: String,
    pub format: Format,
    pub sections: Vec<Section>,
}

/// A rendered report: the document and its images, named relative to the report's folder.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub document: String,
    pub files: Vec<(String, Vec<u8>)>,
}

fn font() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            if plotters::style::register_font(FAMILY, style, FONT).is_err() {
                tracing::error!("the bundled chart font did not load; charts will have no text");
            }
        }
    });
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

fn label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "(null)".into(),
        other => other.to_string(),
    }
}

fn column(data: &Data, name: &str) -> Result<usize> {
    data.columns.iter().position(|c| c == name).ok_or_else(|| {
        DataError::Invalid(format!(
            "the chart names the column {name:?}, which the data does not have (it has {})",
            data.columns.join(", ")
        ))
    })
}

fn draw_err<E: std::fmt::Debug>(e: E) -> DataError {
    DataError::Invalid(format!("the chart could not be drawn: {e:?}"))
}

/// The series of a chart: x labels or numbers, and per y column its values.
struct Series {
    labels: Vec<String>,
    xs: Vec<Option<f64>>,
    ys: Vec<(String, Vec<Option<f64>>)>,
}

fn series(chart: &Chart) -> Result<Series> {
    if chart.y.is_empty() {
        return Err(DataError::Invalid(
            "a chart needs at least one y column".into(),
        ));
    }
    let xi = column(&chart.data, &chart.x)?;
    let yis = chart
        .y
        .iter()
        .map(|y| column(&chart.data, y))
        .collect::<Result<Vec<_>>>()?;
    let rows: Vec<&Vec<Value>> = chart.data.rows.iter().take(MAX_CHART_POINTS).collect();
    if rows.is_empty() {
        return Err(DataError::Invalid(format!(
            "the chart {:?} has no rows to draw",
            chart.title
        )));
    }
    let at = |r: &Vec<Value>, i: usize| r.get(i).cloned().unwrap_or(Value::Null);
    Ok(Series {
        labels: rows.iter().map(|r| label(&at(r, xi))).collect(),
        xs: rows.iter().map(|r| number(&at(r, xi))).collect(),
        ys: chart
            .y
            .iter()
            .zip(yis)
            .map(|(name, yi)| {
                (
                    name.clone(),
                    rows.iter().map(|r| number(&at(r, yi))).collect(),
                )
            })
            .collect(),
    })
}

fn y_range(s: &Series) -> (f64, f64) {
    let vals = s.ys.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    let (lo, hi) = vals.fold((0f64, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let hi = if hi == f64::MIN { 1.0 } else { hi };
    let pad = ((hi - lo).abs() * 0.08).max(1e-9);
    (lo.min(0.0) - if lo < 0.0 { pad } else { 0.0 }, hi + pad)
}

/// The x axis of bar and line charts: `n` slots of width 1, category `i` in `[i, i + 1)`,
/// labelled at its middle.
#[derive(Clone)]
struct Slots(usize);

impl Ranged for Slots {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let n = self.0.max(1) as f64;
        limit.0 + ((v / n) * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let step = self.0.div_ceil(hint.max_num_points().max(1)).max(1);
        (0..self.0).step_by(step).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let s = series(chart)?;
    root.fill(&WHITE).map_err(draw_err)?;
    let n = s.labels.len();
    let caption = (FAMILY, 26).into_font();
    let labels = s.labels.clone();
    let category = move |x: &f64| {
        let i = x.floor();
        if (x - i - 0.5).abs() < 1e-6 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    match chart.kind {
        ChartKind::Pie => {
            let (_, values) = &s.ys[0];
            let mut sizes = Vec::new();
            let mut names = Vec::new();
            for (l, v) in s.labels.iter().zip(values) {
                if let Some(v) = v.filter(|v| *v > 0.0) {
                    sizes.push(v);
                    names.push(l.clone());
                }
            }
            if sizes.is_empty() {
                return Err(DataError::Invalid(
                    "a pie chart needs positive values".into(),
                ));
            }
            let colors: Vec<RGBColor> = (0..sizes.len())
                .map(|i| {
                    let c = Palette99::pick(i).to_rgba();
                    RGBColor(c.0, c.1, c.2)
                })
                .collect();
            let titled = root.titled(&chart.title, caption).map_err(draw_err)?;
            let (w, h) = titled.dim_in_pixel();
            let center = (w as i32 / 2, h as i32 / 2);
            let radius = f64::from(w.min(h)) * 0.36;
            let mut pie = Pie::new(&center, &radius, &sizes, &colors, &names);
            pie.label_style((FAMILY, 16).into_font());
            pie.percentages((FAMILY, 14).into_font().color(&BLACK));
            titled.draw(&pie).map_err(draw_err)?;
        }
        ChartKind::Scatter => {
            let xs: Vec<f64> = s.xs.iter().flatten().copied().collect();
            if xs.is_empty() {
                return Err(DataError::Invalid(format!(
                    "a scatter chart needs numbers in its x column {:?}",
                    chart.x
                )));
            }
            let (xlo, xhi) = xs
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
            let pad = ((xhi - xlo).abs() * 0.05).max(1e-9);
            let (ylo, yhi) = y_range(&s);
            let mut c = ChartBuilder::on(&root)
                .caption(&chart.title, caption)
                .margin(16)
                .x_label_area_size(48)
                .y_label_area_size(72)
                .build_cartesian_2d(xlo - pad..xhi + pad, ylo..yhi)
                .map_err(draw_err)?;
            c.configure_mesh()
                .x_desc(&chart.x)
                .label_style((FAMILY, 14))
                .draw()
                .map_err(draw_err)?;
            for (k, (name, ys)) in s.ys.iter().enumerate() {
                let color = Palette99::pick(k).mix(0.9);
                let points: Vec<(f64, f64)> =
                    s.xs.iter()
                        .zip(ys)
                        .filter_map(|(x, y)| Some(((*x)?, (*y)?)))
                        .collect();
                c.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                    .map_err(draw_err)?
                    .label(name)
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, Palette99::pick(k).filled()));
            }
            if s.ys.len() > 1 {
                c.configure_series_labels()
                    .label_font((FAMILY, 14))
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(draw_err)?;
            }
        }
        ChartKind::Bar | ChartKind::Line => {
            let (ylo, yhi) = y_range(&s);
            let mut c = ChartBuilder::on(&root)
                .caption(&chart.title, caption)
                .margin(16)
                .x_label_area_size(64)
                .y_label_area_size(72)
                .build_cartesian_2d(Slots(n), ylo..yhi)
                .map_err(draw_err)?;
            c.configure_mesh()
                .disable_x_mesh()
                .x_label_formatter(&category)
                .x_desc(&chart.x)
                .label_style((FAMILY, 14))
                .draw()
                .map_err(draw_err)?;
            let k = s.ys.len() as f64;
            for (si, (name, ys)) in s.ys.iter().enumerate() {
                let color = Palette99::pick(si).mix(0.9);
                let legend = move |(x, y): (i32, i32)| {
                    Rectangle::new([(x, y - 5), (x + 16, y + 5)], Palette99::pick(si).filled())
                };
                if chart.kind == ChartKind::Bar {
                    let bars = ys.iter().enumerate().filter_map(|(i, v)| {
                        let v = (*v)?;
                        let left = i as f64 + 0.1 + 0.8 * si as f64 / k;
                        let right = left + 0.8 / k;
                        Some(Rectangle::new(
                            [(left, 0f64.max(ylo)), (right, v)],
                            color.filled(),
                        ))
                    });
                    c.draw_series(bars)
                        .map_err(draw_err)?
                        .label(name)
                        .legend(legend);
                } else {
                    let points: Vec<(f64, f64)> = ys
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| Some((i as f64 + 0.5, (*v)?)))
                        .collect();
                    c.draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
                        .map_err(draw_err)?
                        .label(name)
                        .legend(legend);
                    c.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
                        .map_err(draw_err)?;
                }
            }
            if s.ys.len() > 1 {
                c.configure_series_labels()
                    .label_font((FAMILY, 14))
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(draw_err)?;
            }
        }
    }
    root.present().map_err(draw_err)?;
    Ok(())
}

/// Draw a chart as PNG bytes.
pub fn png(chart: &Chart) -> Result<Vec<u8>> {
    font();
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (WIDTH, HEIGHT)).into_drawing_area();
        draw(root, chart)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(draw_err)?;
        w.write_image_data(&rgb).map_err(draw_err)?;
    }
    Ok(out)
}

/// Draw a chart as an SVG document.
pub fn svg(chart: &Chart) -> Result<String> {
    font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(root, chart)?;
    }
    Ok(out)
}

fn md_cell(v: &Value) -> String {
    label(v).replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Render a report: the document (`report.md` or `report.html`) and one image per chart
/// (`chart-1.png`, …).
pub fn render(report: &Report) -> Result<Rendered> {
    if report.sections.len() > MAX_SECTIONS {
        return Err(DataError::Invalid(format!(
            "a report has at most {MAX_SECTIONS} sections"
        )));
    }
    let mut files = Vec::new();
    let mut body = String::new();
    let md = report.format == Format::Markdown;
    if md {
        body.push_str(&format!("# {}\n\n", report.title.replace('\n', " ")));
    } else {
        body.push_str(&format!("<h1>{}</h1>\n", html(&report.title)));
    }
    let mut charts = 0;
    for section in &report.sections {
        match section {
            Section::Text(t) => {
                if md {
                    body.push_str(t.trim());
                    body.push_str("\n\n");
                } else {
                    for para in t.split("\n\n").filter(|p| !p.trim().is_empty()) {
                        body.push_str(&format!(
                            "<p>{}</p>\n",
                            html(para.trim()).replace('\n', "<br>")
                        ));
                    }
                }
            }
            Section::Table {
                title,
                data,
                truncated,
            } => {
                let shown = data.rows.iter().take(MAX_TABLE_ROWS);
                let more = data.rows.len().saturating_sub(MAX_TABLE_ROWS);
                if md {
                    if let Some(t) = title {
                        body.push_str(&format!("## {}\n\n", t.replace('\n', " ")));
                    }
                    let head: Vec<String> = data
                        .columns
                        .iter()
                        .map(|c| md_cell(&Value::String(c.clone())))
                        .collect();
                    body.push_str(&format!("| {} |\n", head.join(" | ")));
                    body.push_str(&format!("|{}\n", "---|".repeat(head.len().max(1))));
                    for r in shown {
                        let cells: Vec<String> = r.iter().map(md_cell).collect();
                        body.push_str(&format!("| {} |\n", cells.join(" | ")));
                    }
                } else {
                    if let Some(t) = title {
                        body.push_str(&format!("<h2>{}</h2>\n", html(t)));
                    }
                    body.push_str("<table>\n<thead><tr>");
                    for c in &data.columns {
                        body.push_str(&format!("<th>{}</th>", html(c)));
                    }
                    body.push_str("</tr></thead>\n<tbody>\n");
                    for r in shown {
                        body.push_str("<tr>");
                        for v in r {
                            body.push_str(&format!("<td>{}</td>", html(&label(v))));
                        }
                        body.push_str("</tr>\n");
                    }
                    body.push_str("</tbody>\n</table>\n");
                }
                let note = match (more, truncated) {
                    (0, false) => None,
                    (0, true) => {
                        Some("The query's result was cut at its row or byte cap.".to_string())
                    }
                    (n, _) => Some(format!("{n} more rows are not shown.")),
                };
                if let Some(n) = note {
                    body.push_str(&if md {
                        format!("\n_{n}_\n\n")
                    } else {
                        format!("<p><em>{}</em></p>\n", html(&n))
                    });
                } else if md {
                    body.push('\n');
                }
            }
            Section::Chart(chart) => {
                charts += 1;
                let (name, bytes) = match chart.image {
                    ImageFormat::Png => (format!("chart-{charts}.png"), png(chart)?),
                    ImageFormat::Svg => (format!("chart-{charts}.svg"), svg(chart)?.into_bytes()),
                };
                if md {
                    body.push_str(&format!(
                        "## {}\n\n![{}]({name})\n\n",
                        chart.title.replace('\n', " "),
                        chart.title.replace(['[', ']', '\n'], " ")
                    ));
                } else {
                    // Inline: the page is one self-contained file, shown as it is by a browser,
                    // the console or a mail client, with no second (authenticated) fetch.
                    use base64::Engine as _;
                    let mime = match chart.image {
                        ImageFormat::Png => "image/png",
                        ImageFormat::Svg => "image/svg+xml",
                    };
                    body.push_str(&format!(
                        "<h2>{t}</h2>\n<img src=\"data:{mime};base64,{data}\" alt=\"{t}\" title=\"{name}\">\n",
                        t = html(&chart.title),
                        data = base64::engine::general_purpose::STANDARD.encode(&bytes),
                    ));
                }
                files.push((name, bytes));
            }
        }
    }
    let document = if md {
        "report.md".to_string()
    } else {
        body = format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\
             body{{font-family:sans-serif;max-width:64rem;margin:2rem auto;padding:0 1rem}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25rem .5rem}}\
             img{{max-width:100%}}</style></head>\n<body>\n{body}</body></html>\n",
            html(&report.title)
        );
        "report.html".to_string()
    };
    files.insert(0, (document.clone(), body.into_bytes()));
    Ok(Rendered { document, files })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data() -> Data {
        Data {
            columns: vec!["region".into(), "revenue".into(), "cost".into()],
            rows: vec![
                vec![json!("north"), json!(120.5), json!("80")],
                vec![json!("south"), json!(98), json!(70)],
                vec![json!("east|west"), json!(143), json!(null)],
            ],
        }
    }

    fn chart(kind: ChartKind, image: ImageFormat) -> Chart {
        Chart {
            title: "Revenue by region".into(),
            kind,
            x: "region".into(),
            y: vec!["revenue".into(), "cost".into()],
            data: data(),
            image,
        }
    }

    #[test]
    fn every_kind_of_chart_is_a_valid_png_and_svg() {
        for kind in [ChartKind::Bar, ChartKind::Line, ChartKind::Pie] {
            let bytes = png(&chart(kind, ImageFormat::Png)).unwrap();
            let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
            let reader = decoder.read_info().unwrap();
            assert_eq!((reader.info().width, reader.info().height), (WIDTH, HEIGHT));
            // Not a blank canvas: bars, lines or slices drew colours other than white.
            let mut reader = reader;
            let mut buf = vec![0; reader.output_buffer_size()];
            reader.next_frame(&mut buf).unwrap();
            let coloured = buf
                .chunks(3)
                .filter(|p| p[0] != p[1] || p[1] != p[2])
                .count();
            assert!(coloured > 1000, "{kind:?}: {coloured} coloured pixels");
            let svg = svg(&chart(kind, ImageFormat::Svg)).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("Revenue by region"),
                "{kind:?}"
            );
        }
        let mut sc = chart(ChartKind::Scatter, ImageFormat::Png);
        sc.x = "revenue".into();
        sc.y = vec!["cost".into()];
        assert!(png(&sc).is_ok());
        let mut bad = chart(ChartKind::Bar, ImageFormat::Png);
        bad.y = vec!["profit".into()];
        assert!(png(&bad).unwrap_err().to_string().contains("profit"));
    }

    #[test]
    fn documents_link_their_charts_and_escape_cells() {
        for format in [Format::Markdown, Format::Html] {
            let r = render(&Report {
                title: "Q3 <sales>".into(),
                format,
                sections: vec![
                    Section::Text("Revenue grew.\n\nCosts fell.".into()),
                    Section::Table {
                        title: Some("By region".into()),
                        data: data(),
                        truncated: true,
                    },
                    Section::Chart(chart(ChartKind::Bar, ImageFormat::Png)),
                    Section::Chart(chart(ChartKind::Line, ImageFormat::Svg)),
                ],
            })
            .unwrap();
            let names: Vec<&str> = r.files.iter().map(|(n, _)| n.as_str()).collect();
            let doc = String::from_utf8(r.files[0].1.clone()).unwrap();
            match format {
                Format::Markdown => {
                    assert_eq!(names, ["report.md", "chart-1.png", "chart-2.svg"]);
                    assert!(doc.contains("![Revenue by region](chart-1.png)"), "{doc}");
                    assert!(doc.contains("| east\\|west | 143 | (null) |"), "{doc}");
                    assert!(doc.contains("cut at its row or byte cap"), "{doc}");
                }
                Format::Html => {
                    assert_eq!(names, ["report.html", "chart-1.png", "chart-2.svg"]);
                    use base64::Engine as _;
                    let png = base64::engine::general_purpose::STANDARD.encode(&r.files[1].1);
                    assert!(
                        doc.contains(&format!("<img src=\"data:image/png;base64,{png}\"")),
                        "the chart is inlined: {doc}"
                    );
                    assert!(doc.contains("data:image/svg+xml;base64,"), "{doc}");
                    assert!(doc.contains("<title>Q3 &lt;sales&gt;</title>"), "{doc}");
                    assert!(doc.contains("<p>Costs fell.</p>"), "{doc}");
                }
            }
        }
    }
}
