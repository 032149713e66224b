use super::*;

fn series(label: &str, points: &[(f64, f64)]) -> Series {
    Series {
        label: label.into(),
        points: points.to_vec(),
    }
}

fn panel(title: &str, log_x: bool, log_y: bool, series: Vec<Series>) -> Panel {
    Panel {
        title: title.into(),
        x_label: "clients".into(),
        y_label: "commands/s".into(),
        log_x,
        log_y,
        series,
    }
}

fn figure(panels: Vec<Panel>, cols: usize) -> Figure {
    Figure {
        title: "Figure".into(),
        footnote: "note".into(),
        panels,
        cols,
    }
}

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// `<polyline>`s drawn in colour `c` (series lines, legend swatches and dashes).
fn polylines_in(svg: &str, c: RGBColor) -> Vec<&str> {
    let stroke = format!("stroke=\"{}\"", hex(c));
    svg.split("<polyline")
        .skip(1)
        .map(|s| &s[..s.find("/>").unwrap()])
        .filter(|s| s.contains(&stroke))
        .collect()
}

/// The text of every `<text>` element, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|s| {
            let body = &s[s.find('>').unwrap() + 1..s.find("</text>").unwrap()];
            body.trim().to_string()
        })
        .collect()
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    (be(&png[16..20]), be(&png[20..24]))
}

/// `width="W" height="H"` of the SVG's root element.
fn svg_size(svg: &str) -> (u32, u32) {
    let head = &svg[svg.find("<svg").unwrap()..];
    let head = &head[..head.find('>').unwrap()];
    let attr = |name: &str| -> u32 {
        let at = head.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        head[at..at + head[at..].find('"').unwrap()]
            .parse()
            .unwrap()
    };
    (attr("width"), attr("height"))
}

fn two_series_panel(title: &str) -> Panel {
    panel(
        title,
        false,
        true,
        vec![
            series("CS", &[(1.0, 10.0), (4.0, 1000.0)]),
            series("SMR", &[(1.0, 5.0), (4.0, 400.0), (8.0, 600.0)]),
        ],
    )
}

#[test]
fn every_series_of_every_panel_is_drawn_and_in_the_legend() {
    let fig = figure(
        vec![
            two_series_panel("a"),
            two_series_panel("b"),
            two_series_panel("c"),
        ],
        2,
    );
    let svg = fig.svg().unwrap();
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for (i, points) in [(0, 2), (1, 3)] {
        // Per panel: the line and the legend's swatch.
        assert_eq!(polylines_in(&svg, color(i)).len(), 3 * 2, "series {i}");
        // Markers: one per point and one in the legend.
        let marker = format!("fill=\"{}\"", hex(color(i)));
        let circles = svg
            .split("<circle")
            .skip(1)
            .filter(|c| c[..c.find("/>").unwrap()].contains(&marker))
            .count();
        assert_eq!(circles, 3 * (points + 1), "series {i}");
    }
    let t = texts(&svg);
    for label in ["CS", "SMR"] {
        assert_eq!(t.iter().filter(|s| *s == label).count(), 3, "{label}");
    }
    for title in ["Figure", "a", "b", "c", "note", "clients", "commands/s"] {
        assert!(t.iter().any(|s| s == title), "{title} in {t:?}");
    }
}

#[test]
fn series_keep_their_colour_across_panels() {
    let p1 = two_series_panel("a");
    let mut p2 = two_series_panel("b");
    p2.series.reverse();
    let svg = figure(vec![p1, p2], 2).svg().unwrap();
    // Index 0 is blue in both panels whatever its label, index 1 red.
    assert_eq!(polylines_in(&svg, COLORS[0]).len(), 4);
    assert_eq!(polylines_in(&svg, COLORS[1]).len(), 4);
    assert_ne!(hex(COLORS[0]), hex(COLORS[1]));
}

#[test]
fn text_is_escaped_in_svg() {
    let mut p = two_series_panel("t<1> & more");
    p.series[0].label = "a<b>&c".into();
    p.x_label = "x & <y>".into();
    let fig = Figure {
        title: "Fig <1> & \"2\"".into(),
        footnote: "k=<v> & more".into(),
        panels: vec![p],
        cols: 1,
    };
    let svg = fig.svg().unwrap();
    for raw in ["t<1>", "a<b>", "<y>", "<1>", "<v>", "& more"] {
        assert!(!svg.contains(raw), "{raw} unescaped");
    }
    for escaped in [
        "t&lt;1&gt; &amp; more",
        "a&lt;b&gt;&amp;c",
        "x &amp; &lt;y&gt;",
        "Fig &lt;1&gt; &amp;",
        "k=&lt;v&gt; &amp; more",
    ] {
        assert!(svg.contains(escaped), "{escaped} missing");
    }
}

#[test]
fn negative_values_get_a_dashed_zero_line() {
    let p = Panel {
        title: "improvement".into(),
        x_label: "clients".into(),
        y_label: "%".into(),
        log_x: false,
        log_y: false,
        series: vec![series("batch", &[(1.0, -5.0), (8.0, 12.0)])],
    };
    let svg = figure(vec![p.clone()], 1).svg().unwrap();
    let t = texts(&svg);
    assert!(
        t.iter().any(|s| s.starts_with('-')),
        "a negative tick: {t:?}"
    );
    assert!(t.iter().any(|s| s == "0"), "a zero tick: {t:?}");
    let dashes = polylines_in(&svg, ZERO_LINE);
    assert!(dashes.len() >= 10, "a dashed line: {} dashes", dashes.len());
    // All dashes on one horizontal line.
    let ys: Vec<&str> = dashes
        .iter()
        .flat_map(|d| {
            let pts = &d[d.find("points=\"").unwrap() + 8..];
            let pts = &pts[..pts.find('"').unwrap()];
            pts.split(' ')
                .filter(|p| !p.is_empty())
                .map(|p| p.split(',').nth(1).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(ys.windows(2).all(|w| w[0] == w[1]), "{ys:?}");

    // No zero line without negative values, nor on a log axis.
    let mut positive = p.clone();
    positive.series[0].points = vec![(1.0, 5.0), (8.0, 12.0)];
    assert!(polylines_in(&figure(vec![positive], 1).svg().unwrap(), ZERO_LINE).is_empty());
}

#[test]
fn all_negative_values_still_show_zero() {
    let p = panel(
        "worse",
        false,
        false,
        vec![series("s", &[(1.0, -5.0), (2.0, -3.0)])],
    );
    let axis = Axis::new([-5.0, -3.0].into_iter(), false, true);
    assert_eq!((axis.lo, axis.hi), (-5.0, 0.0));
    figure(vec![p], 1).svg().unwrap();
}

#[test]
fn log_axes_spanning_3_to_4000() {
    let p = panel(
        "log-log",
        true,
        true,
        vec![series("s", &[(3.0, 3.0), (40.0, 90.0), (4000.0, 4000.0)])],
    );
    let svg = figure(vec![p], 1).svg().unwrap();
    let t = texts(&svg);
    // Decades on both axes (from 2 to 5000).
    for label in ["10", "100", "1000"] {
        assert_eq!(
            t.iter().filter(|s| *s == label).count(),
            2,
            "{label}: {t:?}"
        );
    }
    let line = polylines_in(&svg, color(0));
    assert_eq!(line.len(), 2, "the line and the legend swatch");
    // The line rises left to right through three points.
    let pts: Vec<(i32, i32)> = {
        let l = line.iter().find(|l| l.matches(',').count() == 3).unwrap();
        let p = &l[l.find("points=\"").unwrap() + 8..];
        p[..p.find('"').unwrap()]
            .split_whitespace()
            .map(|xy| {
                let (x, y) = xy.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    };
    assert!(pts[0].0 < pts[1].0 && pts[1].0 < pts[2].0, "{pts:?}");
    assert!(pts[0].1 > pts[1].1 && pts[1].1 > pts[2].1, "{pts:?}");
}

#[test]
fn degenerate_inputs_draw_without_panicking() {
    let cases: Vec<(&str, bool, bool, Vec<Series>)> = vec![
        ("no series", false, false, vec![]),
        ("no series, log", true, true, vec![]),
        ("empty series", false, false, vec![series("empty", &[])]),
        ("empty series, log", true, true, vec![series("empty", &[])]),
        (
            "one point",
            false,
            false,
            vec![series("one", &[(3.0, 7.0)])],
        ),
        (
            "one point, log",
            true,
            true,
            vec![series("one", &[(3.0, 7.0)])],
        ),
        (
            "one zero point",
            false,
            false,
            vec![series("z", &[(0.0, 0.0)])],
        ),
        (
            "all equal",
            false,
            false,
            vec![series("eq", &[(2.0, 5.0), (2.0, 5.0), (2.0, 5.0)])],
        ),
        (
            "all equal, log",
            true,
            true,
            vec![series("eq", &[(100.0, 100.0), (100.0, 100.0)])],
        ),
        (
            "all zero",
            false,
            false,
            vec![series("zero", &[(1.0, 0.0), (2.0, 0.0)])],
        ),
        (
            "zero and negative on log axes",
            true,
            true,
            vec![
                series("mixed", &[(0.0, 5.0), (-1.0, 3.0), (2.0, 0.0), (4.0, 8.0)]),
                series("none left", &[(0.0, 0.0), (-3.0, -3.0)]),
            ],
        ),
        (
            "not finite",
            false,
            false,
            vec![series(
                "nan",
                &[(f64::NAN, 1.0), (1.0, f64::INFINITY), (2.0, 3.0)],
            )],
        ),
        (
            "huge and tiny",
            true,
            true,
            vec![series("wide", &[(1e-300, 1e-300), (1e300, f64::MAX)])],
        ),
        (
            "huge linear",
            false,
            false,
            vec![series(
                "wide",
                &[(-f64::MAX, f64::MAX), (f64::MAX, -f64::MAX)],
            )],
        ),
    ];
    for (name, log_x, log_y, s) in cases {
        let labels: Vec<String> = s.iter().map(|s| s.label.clone()).collect();
        let fig = figure(vec![panel(name, log_x, log_y, s)], 1);
        let svg = fig.svg().unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = texts(&svg);
        for l in labels {
            assert!(t.contains(&l), "{name}: legend {l}");
        }
        fig.png().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // No panels at all, and zero columns.
    for fig in [figure(vec![], 2), figure(vec![two_series_panel("a")], 0)] {
        fig.svg().unwrap();
        png_size(&fig.png().unwrap());
    }
}

#[test]
fn skipped_points_are_not_drawn() {
    let p = panel(
        "log",
        false,
        true,
        vec![series(
            "s",
            &[(1.0, 5.0), (2.0, 0.0), (3.0, -1.0), (4.0, 8.0)],
        )],
    );
    let svg = figure(vec![p], 1).svg().unwrap();
    let marker = format!("fill=\"{}\"", hex(color(0)));
    // The two positive points and the legend's marker.
    assert_eq!(svg.matches(&marker).count(), 3);
}

#[test]
fn png_has_the_svgs_size() {
    let fig = Figure {
        title: "A figure".into(),
        footnote: "a long footnote that wraps: ".repeat(20),
        panels: vec![
            two_series_panel("a"),
            two_series_panel("b"),
            two_series_panel("c"),
        ],
        cols: 2,
    };
    let png = fig.png().unwrap();
    let (w, h) = png_size(&png);
    assert_eq!(w, 2 * PANEL_W);
    assert_eq!((w, h), svg_size(&fig.svg().unwrap()));
    // Two rows of panels and a footnote of several lines.
    let l = Layout::new(&fig).unwrap();
    assert!(l.foot_lines.len() >= 4, "{:?}", l.foot_lines);
    assert!(h > 2 * CHART_H + l.foot_lines.len() as u32 * 14);
    assert_eq!(h, l.height);

    // A 1-column figure is one panel wide.
    let one = figure(vec![two_series_panel("a")], 1);
    assert_eq!(png_size(&one.png().unwrap()).0, PANEL_W);
}

#[test]
fn png_is_not_blank() {
    let png = figure(vec![two_series_panel("a")], 1).png().unwrap();
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let rgb = &buf[..info.buffer_size()];
    let blue = rgb
        .chunks(3)
        .filter(|p| p == &[COLORS[0].0, COLORS[0].1, COLORS[0].2])
        .count();
    let dark = rgb.chunks(3).filter(|p| p.iter().all(|&c| c < 80)).count();
    assert!(blue > 100, "the first series is drawn: {blue} px");
    assert!(dark > 1000, "text and axes are drawn: {dark} px");
}

#[test]
fn long_titles_and_legends_wrap() {
    let mut p = two_series_panel(
        "replica CPU (mean of 4 replicas; execution + replies, one event loop) and more words",
    );
    p.series = (0..10)
        .map(|i| series(&format!("series number {i}"), &[(1.0, i as f64 + 1.0)]))
        .collect();
    let fig = figure(vec![p, two_series_panel("short")], 2);
    let l = Layout::new(&fig).unwrap();
    assert!(l.panel_titles[0].len() >= 2, "{:?}", l.panel_titles[0]);
    assert_eq!(l.panel_titles[1].len(), 1);
    assert!(l.legends[0].len() >= 3, "{:?}", l.legends[0]);
    for line in &l.panel_titles[0] {
        let w = measure(PANEL_TITLE_PX, true, line).unwrap();
        assert!(w <= PANEL_W - 2 * PAD, "{line}");
    }
    // Nothing is lost by wrapping.
    assert_eq!(
        l.panel_titles[0].join(" "),
        fig.panels[0].title,
        "words kept in order"
    );
    fig.svg().unwrap();
    fig.png().unwrap();
}

#[test]
fn legend_labels_wider_than_a_panel_are_shortened() {
    let long = "a label that goes on and on ".repeat(10);
    let mut p = two_series_panel("a");
    p.series[0].label = long.clone();
    let l = Layout::new(&figure(vec![p], 1)).unwrap();
    let (i, shown) = &l.legends[0][0][0];
    assert_eq!(*i, 0);
    assert!(shown.ends_with('…') && long.starts_with(shown.trim_end_matches('…')));
    let legend_w = PANEL_W - CHART_MARGIN_LEFT - Y_AXIS_W - CHART_MARGIN_RIGHT;
    assert!(text_width(LEGEND_PX, shown).unwrap() <= legend_w - LEGEND_SWATCH - 6);
    assert_eq!(
        l.legends[0][1],
        [(1, "SMR".to_string())],
        "the next on a row of its own"
    );
}

#[test]
fn wrap_breaks_words_longer_than_a_line() {
    let word = "x".repeat(400);
    let lines = wrap(&word, FOOT_PX, false, 200).unwrap();
    assert!(lines.len() > 1);
    assert_eq!(lines.concat(), word);
    for l in &lines {
        assert!(text_width(FOOT_PX, l).unwrap() <= 200);
    }
    assert_eq!(wrap("a\nb", FOOT_PX, false, 200).unwrap(), ["a", "b"]);
    assert!(wrap("", FOOT_PX, false, 200).unwrap().is_empty());
    // Bold text is measured wider, so it wraps sooner.
    let title = "replica CPU (mean of 4 replicas; execution + replies, one event loop)";
    let regular = text_width(PANEL_TITLE_PX, title).unwrap();
    let bold = measure(PANEL_TITLE_PX, true, title).unwrap();
    assert!(bold > regular);
    assert_eq!(
        wrap(title, PANEL_TITLE_PX, false, regular).unwrap().len(),
        1
    );
    assert_eq!(wrap(title, PANEL_TITLE_PX, true, regular).unwrap().len(), 2);
}

#[test]
fn write_writes_svg_and_png() {
    let dir = std::env::temp_dir().join(format!("partita-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stem = dir.join("fig9.v2");
    let fig = figure(vec![two_series_panel("a")], 1);
    let files = fig.write(&stem).unwrap();
    assert_eq!(
        files,
        vec![dir.join("fig9.v2.svg"), dir.join("fig9.v2.png")]
    );
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    assert_eq!(svg, fig.svg().unwrap());
    let png = std::fs::read(&files[1]).unwrap();
    png_size(&png);

    // A directory that does not exist: the error names the file.
    let missing = dir.join("no such dir").join("fig");
    match fig.write(&missing) {
        Err(PlotError::Write { path, .. }) => assert_eq!(path, dir.join("no such dir/fig.svg")),
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
