"""Named baselines on real measured sessions: created from ids or a window, pinned one per
model+target, compared with a session; and bad input is refused without touching the lake."""

from __future__ import annotations

import datetime as dt

import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.gate.baselines import (
    compare_to_baseline,
    create_baseline,
    get_baseline,
    list_baselines,
    pin_baseline,
    pinned_baseline,
)
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import (
    copy_home,
    store_sessions,
    without_baselines,
)


@pytest.fixture(scope="module")
def mlp_swap_measured(mlp_swap_template, tmp_path_factory):
    """A copy of mlp_swap_template: three sessions of the tiny MLP, then one after its file was
    swapped for a slower one. (lake, tiny ids, slower id)."""
    template, ids = mlp_swap_template
    paths = copy_home(template, tmp_path_factory.mktemp("baselines") / "aaco")
    return TraceLake(paths.tracelake), ids[:3], ids[3]


@pytest.fixture
def mlp_swap(mlp_swap_measured):
    """mlp_swap_measured with no baselines left by an earlier test: (lake, tiny ids, slower id)."""
    lake, tiny, slower = mlp_swap_measured
    return without_baselines(lake), tiny, slower


def _baseline_rows(lake: TraceLake) -> list[dict]:
    return lake.query("SELECT * FROM baselines ORDER BY baseline_name").to_pylist()


def test_create_from_ids_and_from_a_window(mlp_swap):
    lake, tiny, slower = mlp_swap
    by_ids = create_baseline(lake, "release", session_ids=tiny[:2], note="v1.0")
    assert by_ids.session_ids == tuple(tiny[:2]) and by_ids.n_sessions == 2
    assert (by_ids.model_slug, by_ids.target, by_ids.note) == ("mlp", "cpu", "v1.0")
    p50s = lake.query(
        "SELECT median(latency_p50_ns) AS m FROM sessions WHERE session_id IN (?, ?)", tiny[:2]
    )["m"][0].as_py()
    assert by_ids.latency_p50_ns == pytest.approx(p50s)
    assert by_ids.env["onnxruntime_version"] and by_ids.runtime_fingerprint
    assert by_ids.providers_used == ("CPUExecutionProvider",)

    until = lake.query("SELECT started_at FROM sessions WHERE session_id = ?", [tiny[2]])
    window = create_baseline(lake, "recent", model_slug="mlp", last=2, until=until[0][0].as_py())
    assert window.session_ids == tuple(tiny[1:])
    assert window.window["last"] == 2 and window.window["target"] == "cpu"
    everything = create_baseline(lake, "all", model_slug="mlp")  # no window: the last 10
    assert everything.session_ids == (*tiny, slower)
    assert [b.name for b in list_baselines(lake, "mlp")] == ["release", "recent", "all"]
    assert list_baselines(lake, "other") == []


def test_one_pinned_baseline_per_model_and_target(mlp_swap):
    lake, tiny, _ = mlp_swap
    create_baseline(lake, "a", session_ids=tiny[:2], pin=True)
    create_baseline(lake, "b", session_ids=tiny[1:])
    assert pinned_baseline(lake, "mlp", "cpu").name == "a"
    assert pin_baseline(lake, "b").pinned
    assert pinned_baseline(lake, "mlp", "cpu").name == "b"
    assert not get_baseline(lake, "a").pinned
    assert pinned_baseline(lake, "mlp", "gpu0") is None
    # Replacing the pinned baseline keeps it pinned.
    replaced = create_baseline(lake, "b", session_ids=tiny, replace=True)
    assert replaced.pinned and replaced.n_sessions == 3
    assert [r["pinned"] for r in _baseline_rows(lake)] == [False, True]


def test_compare_detects_the_swap_to_a_slower_model(mlp_swap):
    lake, tiny, slower = mlp_swap
    create_baseline(lake, "release", session_ids=tiny)
    comparison = compare_to_baseline(lake, slower, "release", resamples=500)
    p50 = comparison.metrics["latency_p50_ns"]
    assert p50.verdict == "regression" and p50.ci_low > 0 and p50.effect_pct > 50
    assert p50.ci_low <= p50.effect_pct <= p50.ci_high
    throughput = comparison.metrics["throughput_per_s"]
    assert throughput.verdict == "regression" and throughput.ci_high < 0, throughput
    assert comparison.metrics["latency_p99_ns"].effect_pct > 0
    assert comparison.parameters["baseline_iterations"] == 600


def test_bad_input_is_refused_and_leaves_the_lake_unchanged(mlp_swap):
    lake, tiny, slower = mlp_swap
    create_baseline(lake, "release", session_ids=tiny[:2], pin=True)
    store_sessions(lake, [{"session_id": "other-1", "model_slug": "other", "target": "cpu"}])
    before = _baseline_rows(lake)
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    attempts = {
        "already exists": lambda: create_baseline(lake, "release", session_ids=tiny),
        "unknown sessions": lambda: create_baseline(lake, "x", session_ids=[tiny[0], "nope"]),
        "mixes models": lambda: create_baseline(lake, "x", session_ids=[tiny[0], "other-1"]),
        "no sessions of 'mlp'": lambda: create_baseline(lake, "x", model_slug="mlp", since=future),
        "no sessions of model": lambda: create_baseline(lake, "x", model_slug="ghost"),
        "needs a name": lambda: create_baseline(lake, " ", session_ids=tiny),
        "no baseline named": lambda: pin_baseline(lake, "ghost"),
        "no session 'nope'": lambda: compare_to_baseline(lake, "nope", "release"),
        "is other on cpu": lambda: compare_to_baseline(lake, "other-1", "release"),
    }
    for message, attempt in attempts.items():
        with pytest.raises(AacoInputError, match=message) as error:
            attempt()
        assert error.value.fix
    assert _baseline_rows(lake) == before
