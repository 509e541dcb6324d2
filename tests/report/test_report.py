"""Session reports: a real measured session rendered as self-contained HTML, JSON and Markdown;
the plots on synthetic data; and `aaco report` with its one-line errors."""

from __future__ import annotations

import base64
import json
import re
from xml.etree import ElementTree

import numpy as np
import pyarrow as pa
import pytest

from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.analysis.metrics.derived import UNITS
from aaco_pipelines.cli import main
from aaco_pipelines.config import AacoPaths
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.drift.changepoint import change_points_of
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.breakdown_plots import op_breakdown, roofline
from aaco_pipelines.report.content import metric_meanings, render_json
from aaco_pipelines.report.drift_plots import drift_row_plot
from aaco_pipelines.report.html import render_html
from aaco_pipelines.report.latency_intervals import median_interval
from aaco_pipelines.report.markdown_report import render_markdown
from aaco_pipelines.report.run_plots import iteration_latency, latency_histogram, telemetry
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import FAST_SIDECAR, assert_plot_texts_inside, synthetic_envelope

SVG = "http://www.w3.org/2000/svg"
SECTIONS = (
    "summary",
    "bottleneck",
    "derived-metrics",
    "time",
    "roofline",
    "telemetry",
    "drift",
    "environment",
)
PLOTS = {
    "latency-histogram",
    "iteration-latency",
    "op-breakdown",
    "roofline",
    "telemetry",
    "drift-latency_p50_ns",
    "drift-throughput_per_s",
}


@pytest.fixture(scope="module")
def analysed_conv_session(tmp_path_factory) -> tuple[AacoPaths, str]:
    """One analysed session of a tiny conv model; a synthetic envelope for today's runtime
    spares the envelope sweep."""
    home = tmp_path_factory.mktemp("report")
    paths = AacoPaths(home=home, registry=home / "registry", tracelake=home / "lake.duckdb")
    path = models.save(models.conv_block_model(), paths.registry / "conv.onnx")
    FAST_SIDECAR.save(paths.registry / "conv.yaml")
    save_envelope(TraceLake(paths.tracelake), synthetic_envelope(5e10, 1e10))
    bundle = measure_model(registered_model(path), paths, analyze=True)
    return paths, bundle.session_id


def _assert_svg(svg: bytes) -> None:
    """An SVG document of a plot's size whose texts are text (the viewer's font draws them)."""
    root = ElementTree.fromstring(svg)
    assert root.tag == f"{{{SVG}}}svg"
    width, height = (float(root.get(side).removesuffix("pt")) for side in ("width", "height"))
    assert width > 100 and height > 100
    assert root.iter(f"{{{SVG}}}text")  # not glyph outlines
    assert len(svg) < 100_000


def test_html_report_is_one_offline_file_with_every_section_and_plot(analysed_conv_session):
    paths, session_id = analysed_conv_session
    page = render_html(paths.tracelake, session_id)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # Nothing is fetched: no script, stylesheet link, or src/href outside data URIs and anchors.
    assert "<script" not in page and "<link" not in page
    links = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", page)
    assert links and all(link.startswith(("data:image/svg+xml;base64,", "#")) for link in links)
    assert not re.search(r"https?://", page.split('<pre id="report-json">')[0])
    for key in SECTIONS:
        assert f'<section id="{key}">' in page
    images = dict(
        re.findall(
            r'<figure id="plot-([\w-]+)"><img src="data:image/svg\+xml;base64,([^"]+)"', page
        )
    )
    assert set(images) == PLOTS
    assert page.count("<img ") == len(PLOTS)
    for encoded in images.values():
        _assert_svg(base64.b64decode(encoded, validate=True))
    assert len(page.encode()) < 1_000_000
    assert session_id in page and "launch_tax" in page
    summary = page.split('<section id="summary">')[1]  # whether to trust it comes first
    assert re.search(r"<p>Measurement (ok \(\d+ iterations|SUSPECT: )", summary), summary[:300]


def test_json_report_matches_the_sessions_table(analysed_conv_session):
    paths, session_id = analysed_conv_session
    content = render_json(paths.tracelake, "latest")
    json.dumps(content, allow_nan=False)  # plain JSON as it stands
    row = (
        TraceLake(paths.tracelake)
        .query("SELECT * FROM sessions WHERE session_id = ?", [session_id])
        .to_pylist()[0]
    )
    summary = content["summary"]
    assert content["session"]["session_id"] == session_id
    for key in ("latency_mean_ns", "latency_p50_ns", "latency_p99_ns", "throughput_per_s"):
        assert summary[key] == pytest.approx(row[key])
    assert summary["measured_iterations"] == row["measured_iterations"]
    low, high = summary["latency_mean_ci_ns"]
    assert low < summary["latency_mean_ns"] < high
    low, high = summary["latency_p50_ci_ns"]
    assert low <= summary["latency_p50_ns"] <= high
    assert content["bottleneck"]["bottleneck"] and content["bottleneck"]["evidence"]
    assert all(m["meaning"] for m in content["derived_metrics"])
    assert content["top_ops"] and content["top_kernels"] and content["roofline"]["envelope"]
    assert {d["metric"] for d in content["drift"]} >= {"latency_p50_ns", "throughput_per_s"}
    assert content["environment"]["onnxruntime_version"]
    stored = (
        TraceLake(paths.tracelake)
        .query(
            "SELECT verdict, iterations FROM measurement_quality WHERE session_id = ?", [session_id]
        )
        .to_pylist()
    )
    assert (
        stored == [{k: content["measurement"][k] for k in ("verdict", "iterations")}]
        and stored[0]["iterations"] == row["measured_iterations"]
    )


def test_markdown_report_has_the_same_sections(analysed_conv_session):
    paths, session_id = analysed_conv_session
    text = render_markdown(paths.tracelake, session_id)
    for title in ("Summary", "Bottleneck", "Derived metrics", "Where the time went", "Roofline"):
        assert f"## {title}" in text
    assert "| launch_tax |" in text and "host overhead between kernels" in text


def test_every_derived_metric_has_its_meaning():
    assert set(UNITS) <= set(metric_meanings())


def test_median_interval_uses_the_binomial_order_statistics():
    low, high, coverage = median_interval(np.arange(1.0, 21.0))
    assert (low, high) == (6.0, 15.0)  # the classic n = 20 table entry
    assert coverage == pytest.approx(0.9586, abs=1e-4)


def _drift_row(values, markers=None, baseline=None) -> dict:
    parameters = {"ewma": {"lam": 0.2, "L": 3.0}, "cusum": {"k": 0.5, "h": 5.0}}
    return {
        "metric": "latency_p50_ns",
        "verdict": "regression",
        "effect_pct": 10.0,
        "series_json": json.dumps({"values": values, "markers": markers or [[]] * len(values)}),
        "baseline_json": json.dumps(baseline),
        "parameters_json": json.dumps({**parameters, "min_effect_pct": 3.0}),
    }


def test_margins_follow_the_ticks_the_resized_axes_get():
    """Measured on the first ticks (1.87, 1.88, ...), the margins resize the axes, whose
    locator then picks other, wider ones (1.865, 1.870, ...): fit_margins measures that axes
    again, so the y label stays inside the image (it crossed the left edge before)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from aaco_pipelines.report.plot_layout import fit_margins

    figure = Figure(figsize=(6, 2.4), dpi=72)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    axes.plot([0, 1], [1.864, 1.895])
    axes.set_ylabel("latency (ms)")
    fit_margins(figure)
    assert_plot_texts_inside(figure)


def test_plots_render_synthetic_inputs_as_svg_with_every_text_inside(monkeypatch):
    """Every plot kind, drawn on synthetic data, is an SVG whose texts (titles, axis and tick
    labels, notes and annotations) all lie inside the image and off the other axes: the margins
    come from plot_layout.fit_margins, not from matplotlib's constrained layout."""
    drawn = []
    render = plot_canvas.to_svg
    monkeypatch.setattr(
        plot_canvas, "to_svg", lambda figure: drawn.append(figure) or render(figure)
    )
    rng = np.random.default_rng(0)
    latency = rng.normal(1e6, 5e4, 200)
    iterations = pa.table(
        {
            "pass": ["warmup"] * 3 + ["measured"] * 20 + ["profiled"] * 5,
            "iteration": list(range(3)) + list(range(20)) + list(range(5)),
            "start_ns": np.arange(28) * 2_000_000,
            "latency_ns": rng.integers(900_000, 1_100_000, 28),
        }
    )
    ops = pa.table(
        {
            "name": [f"node{i}" for i in range(20)],
            "op_type": ["MatMul", "Add", "Relu", "Conv"] * 5,
            "share": np.full(20, 0.05),
            "mean_ns": np.full(20, 1e4),
        }
    )
    points = pa.table(
        {
            "onnx_node": ["gemm", "add", "unknown"],
            "arithmetic_intensity": [50.0, 0.1, None],
            "achieved_flops_per_s": [3e10, 5e8, None],
            "time_ns": [1e5, 2e4, 1e3],
            "bound": ["compute", "memory", None],
        }
    )
    stamps = np.arange(0, 2e9, 5e7).astype(np.int64)
    samples = pa.table(
        {
            "timestamp_ns": np.r_[stamps, stamps],
            "series": ["cpu_frequency"] * len(stamps) + ["process rss"] * len(stamps),
            "value": np.r_[np.full(len(stamps), 2800.0), np.linspace(1e8, 2e8, len(stamps))],
            "unit": ["MHz"] * len(stamps) + ["bytes"] * len(stamps),
        }
    )
    passes = pa.table({"pass": ["measured"], "start_ns": [int(2e8)], "end_ns": [int(1.5e9)]})
    shifted = [100.0 + rng.normal(0, 0.5) for _ in range(15)] + [110.0] * 10
    baseline = {"median": 100.0, "mad": 0.4, "scale": 2.0, "floor": 2.0, "n": 24}
    markers = [[]] * 15 + [["runtime"]] + [[]] * 9
    images = [
        latency_histogram(latency, np.median(latency), np.percentile(latency, 99)),
        iteration_latency(iterations),
        op_breakdown(ops),
        roofline(points, 5e10, 1e10),
        roofline(  # a hierarchical roofline with a lifted roof
            points, 5e10, 1e10, ceilings=[("L2", 8e10), ("L3", 3e10)], lifted=["fp32 GEMM"]
        ),
        telemetry(samples, passes),
        drift_row_plot(_drift_row(shifted, markers, baseline)),
        drift_row_plot(_drift_row([100.0, None, 101.0])),  # no baseline yet, a gap
        latency_histogram(np.array([]), 0, 0),
        telemetry(samples.slice(0, 0)),
    ]
    for svg in images:
        _assert_svg(svg)
    assert len(drawn) == len(images)
    for figure in drawn:
        assert_plot_texts_inside(figure)
    assert [p for p, _ in change_points_of(shifted)] == [15]
    assert plot_canvas.markdown_image(images[0], "x").startswith("![x](data:image/svg+xml;base64,")


def test_log_axes_label_decades_without_mathtext(monkeypatch):
    """The roofline's log axes label decades in Unicode superscripts: mathtext ($10^{9}$) was
    parsed afresh by every figure's renderer, and with eight minor ticks a decade it made the
    plot a run draws most often take twice as long."""
    from matplotlib import mathtext

    def refuse(*args, **kwargs):
        raise AssertionError("mathtext parsed")

    monkeypatch.setattr(mathtext.MathTextParser, "parse", refuse)
    points = pa.table(
        {
            "onnx_node": ["gemm", "add"],
            "arithmetic_intensity": [50.0, 0.01],
            "achieved_flops_per_s": [3e10, 5e6],
            "time_ns": [1e5, 2e4],
            "bound": ["compute", "memory"],
        }
    )
    _assert_svg(roofline(points, 5e10, 1e10))
    assert [plot_canvas.decade_label(v) for v in (1e9, 1e-2, 1.0, 3e9, 0.0)] == [
        "10\u2079",
        "10\u207b\u00b2",
        "10\u2070",
        "",
        "",
    ]


def test_cli_report_writes_the_file_and_refuses_an_unknown_session(
    analysed_conv_session, tmp_path, monkeypatch, capsys
):
    paths, session_id = analysed_conv_session
    monkeypatch.setenv("AACO_HOME", str(paths.home))
    monkeypatch.setenv("AACO_TRACELAKE", str(paths.tracelake))
    output = tmp_path / "report.html"
    assert main(["report", "--session", "latest", "--output", str(output)]) == 0
    assert output.read_text().startswith("<!DOCTYPE html>")
    as_json = tmp_path / "report.json"
    assert (
        main(["report", "--session", session_id, "--format", "json", "--output", str(as_json)]) == 0
    )
    assert json.loads(as_json.read_text())["session"]["session_id"] == session_id
    capsys.readouterr()
    missing = tmp_path / "missing.md"
    assert main(["report", "--session", "nope", "--format", "md", "--output", str(missing)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no session 'nope'" in error and "Fix:" in error
    assert session_id in error and not missing.exists()


def test_a_missing_lake_is_an_input_error_and_stays_missing(tmp_path):
    lake = tmp_path / "none.duckdb"
    with pytest.raises(AacoInputError, match="no TraceLake"):
        render_json(lake, "latest")
    assert not lake.exists()


def test_the_rooflines_texts_stay_inside_the_image(monkeypatch):
    """Title, axis labels, the peak label and the annotations are drawn inside the figure: the
    title with its note on ops without known cost, and the peak's label placed from the ridge
    point, ran past the right edge and were cut off."""
    drawn = []
    render = plot_canvas.to_svg
    monkeypatch.setattr(
        plot_canvas, "to_svg", lambda figure: drawn.append(figure) or render(figure)
    )
    points = pa.table(
        {
            "onnx_node": ["/model/layers.0/self_attn/q_proj/MatMul", "add", "custom"],
            "arithmetic_intensity": [50.0, 0.01, None],
            "achieved_flops_per_s": [3e10, 5e6, None],
            "time_ns": [1e5, 2e4, 1e3],
            "bound": ["compute", "memory", None],
        }
    )
    _assert_svg(roofline(points, 5.3e12, 1.2345e11, source="datasheet"))
    [figure] = drawn
    [axis] = figure.axes
    assert "without known cost" in axis.get_title()
    assert_plot_texts_inside(figure)
