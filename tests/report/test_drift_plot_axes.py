"""The drift plot's axes as a newcomer reads them: whole sessions, the tables' unit, and how many
sessions a verdict needs while there are too few."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aaco_pipelines.governance.drift.detectors import EwmaParams, ewma
from aaco_pipelines.report import plot_canvas
from aaco_pipelines.report.drift_plots import drift_row_plot
from tests.helpers import assert_plot_texts_inside


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures the plots draw, kept as they are saved."""
    figures = []
    render = plot_canvas.to_svg
    monkeypatch.setattr(
        plot_canvas, "to_svg", lambda figure: figures.append(figure) or render(figure)
    )
    return figures


def _row(values: list[float], baseline: dict | None = None) -> dict:
    return {
        "metric": "latency_p50_ns",
        "verdict": "regression" if baseline else "insufficient_history",
        "effect_pct": 10.0 if baseline else None,
        "series_json": json.dumps({"values": values, "markers": [[]] * len(values)}),
        "baseline_json": json.dumps(baseline),
        "parameters_json": json.dumps(
            {"min_history": 3, "min_effect_pct": 3.0, "ewma": {}, "cusum": {}}
        ),
    }


def _shown_ticks(axis) -> list[str]:
    low, high = sorted(axis.xaxis.get_view_interval())
    ticks = zip(axis.xaxis.get_majorticklocs(), axis.xaxis.get_majorticklabels(), strict=False)
    return [label.get_text() for loc, label in ticks if low <= loc <= high]


def test_one_session_is_one_whole_tick_in_ms_with_what_a_verdict_needs(drawn):
    """One session: the x axis spanned -0.04 to 0.04 and the y axis read raw nanoseconds
    (1.2e6) beside tables in ms, with nothing saying why there was no verdict."""
    drift_row_plot(_row([1_234_567.0]))
    (figure,) = drawn
    top = figure.axes[0]
    assert top.get_xlim() == (-0.5, 0.5)
    assert _shown_ticks(figure.axes[-1]) == ["1"]
    assert top.get_ylabel() == "ms"
    assert np.allclose(top.lines[0].get_ydata(), [1.234567])
    notes = [text.get_text() for text in top.texts]
    assert "a verdict needs 3 earlier sessions: 0 so far" in notes
    assert_plot_texts_inside(figure)


def test_a_judged_series_is_numbered_from_one_and_its_baseline_drawn_in_ms(drawn):
    values = [1.0e6, 1.01e6, 0.99e6, 1.0e6, 1.1e6]
    baseline = {"median": 1.0e6, "mad": 5e3, "scale": 1e4, "floor": 1e4, "n": 4, "qn": 1e4}
    drift_row_plot(_row(values, baseline))
    (figure,) = drawn
    top, ewma_axis, _cusum = figure.axes
    assert _shown_ticks(figure.axes[-1]) == ["1", "2", "3", "4", "5"]
    assert top.get_ylabel() == "ms"
    median = next(line for line in top.lines if line.get_label() == "baseline median")
    assert np.allclose(median.get_ydata(), 1.0)  # ms, as the series
    # the detectors judge standardized values, the same whatever the unit: the last is 10 sd out
    z = np.asarray(values) / 1e6
    assert ewma_axis.lines[0].get_ydata()[-1] == pytest.approx(
        ewma((z - 1.0) / 0.01, EwmaParams()).statistic[-1]
    )
    assert not [t.get_text() for t in top.texts if "verdict needs" in t.get_text()]
    assert_plot_texts_inside(figure)


def test_a_session_over_the_trace_cap_gets_its_report_and_the_export_command(
    measured_mlp_home, monkeypatch
):
    """A GPU session of millions of kernels would take a minute and gigabytes of trace with
    every run: over the cap the trace is not written (an earlier one removed) and the note
    names the command that writes it; the report is written either way."""
    from aaco_pipelines.stages import publish as module
    from aaco_pipelines.tracelake.store import TraceLake

    paths, bundle = measured_mlp_home
    lake, sid = TraceLake(paths.tracelake), bundle.session_id
    small = module.publish(lake, sid, paths.home)
    assert small.trace_written and small.trace.is_file() and small.report.is_file()
    assert 0 < small.events
    monkeypatch.setattr(module, "AUTO_TRACE_MAX_EVENTS", small.events - 1)
    big = module.publish(lake, sid, paths.home)
    assert not big.trace_written and not big.trace.exists() and big.report.is_file()
    assert f"aaco export --session {sid} --format perfetto-proto" in big.trace_note(sid)
