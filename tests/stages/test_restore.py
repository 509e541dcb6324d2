"""`aaco restore`: a TraceLake deleted after a week of sessions comes back from the bundles and
its journal as itself: every table equal, row for row, but the moment each session became
visible (completed_sessions.completed_at, stamped anew); the gate's verdict the same. A lake in
place is never overwritten, a tampered bundle is skipped and named, and a stopped restore
leaves nothing."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from aaco_pipelines.analysis.envelope.choice import save_envelope
from aaco_pipelines.bundle.manifest import write_manifest
from aaco_pipelines.cli import main
from aaco_pipelines.errors import Interrupted
from aaco_pipelines.execution.session_folders import clean_leftovers
from aaco_pipelines.registry.scan import registered_model
from aaco_pipelines.stages import restore
from aaco_pipelines.stages.pipeline import measure_model
from aaco_pipelines.stages.review_night import review_night
from aaco_pipelines.tracelake.journal import FDR_SWEEP, JUDGED_AGAINST, LOADED_COMPLETE, LakeJournal
from aaco_pipelines.tracelake.schema import TABLES, TRACE_TABLES, stored
from aaco_pipelines.tracelake.store import TraceLake
from tests import models
from tests.helpers import SHARED, add_model, copy_home, home_paths, synthetic_envelope

pytestmark = pytest.mark.timeout(300)

SAMPLES = SHARED / "samples" / "profilers"
SLLM = "sllm_r9700_decode_attn_564735"  # a rocprofv3 CSV run on a Radeon AI PRO R9700
# Stamped with the moment of the restore: when each session became visible again.
RESTORE_STAMPS = {"completed_sessions": ["completed_at"]}


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A week of an AACO_HOME, quickly: the host's envelope stored (a synthetic one spares the
    sweep), two models measured and analysed in turn, one session loaded without analysis, a
    GPU trace ingested (judged against its GPU's datasheet), a night's sessions swept for false
    discoveries, and two baselines, one pinned by `aaco baseline pin`."""
    paths = home_paths(tmp_path_factory.mktemp("restore_week") / "aaco")
    with pytest.MonkeyPatch.context() as patch:
        _point_at(patch, paths)
        save_envelope(TraceLake(paths.tracelake), synthetic_envelope(5e10, 1e10))
        mlp = registered_model(add_model(paths, "mlp", models.tiny_mlp()))
        wide = registered_model(add_model(paths, "wide", models.tiny_mlp(hidden=64, seed=1)))
        ids = [measure_model(m, paths, analyze=True).session_id for m in (mlp, wide, mlp)]
        measure_model(wide, paths)  # visible without analysis
        trace = tmp_path_factory.mktemp("rocprofv3")
        for part in ("kernel_trace", "agent_info"):
            shutil.copy(SAMPLES / f"{SLLM}_{part}.csv", trace / f"{SLLM}_{part}.csv")
        assert main(["ingest", str(trace), "--name", "decode_attn"]) == 0
        review_night(TraceLake(paths.tracelake), ids)
        for argv in (
            ["release", "--model", "mlp", "--last", "2"],
            ["wide_ref", "--model", "wide", "--pin"],
        ):
            assert main(["baseline", "create", *argv, "--include-suspect"]) == 0
        assert main(["baseline", "pin", "release"]) == 0
    return paths, ids


@pytest.fixture
def home(week, tmp_path, monkeypatch):
    """This test's copy of the week, AACO_HOME pointing at it; and the analysed mlp sessions."""
    paths, ids = week
    paths = copy_home(paths, tmp_path / "aaco")
    _point_at(monkeypatch, paths)
    return paths, [i for i in ids if "-mlp-" in i]


def test_a_deleted_lake_comes_back_as_itself(home, capsys, monkeypatch):
    paths, mlp = home
    before, verdict = _snapshot(paths), _diff(capsys, mlp[-1])
    assert len(before["session_records"]) == 5 and len(before["baselines"]) == 2
    assert {e["source"] for e in before["hardware_envelopes"]} == {"measured", "datasheet"}
    _delete_lake(paths)
    # A run starting now must not take the bundles of a lost lake for orphans to quarantine.
    monkeypatch.setenv("AACO_ORPHAN_GRACE_S", "0")
    assert clean_leftovers(paths) == [] and len(list(paths.sessions.glob("2*/*"))) == 5
    monkeypatch.delenv("AACO_ORPHAN_GRACE_S")

    assert main(["restore"]) == 0
    out, err = capsys.readouterr()
    assert out == (
        f"restored 5 sessions, 2 baselines and 2 hardware envelopes into {paths.tracelake}\n"
    )
    assert [line.split(":")[1] for line in err.splitlines()] == [
        f" restoring bundle {n} of 5" for n in range(1, 6)
    ]
    after = _snapshot(paths)
    for table in before:
        assert _json(after[table]) == _json(before[table]), _first_difference(table, before, after)
    stamped = TraceLake(paths.tracelake).query("SELECT * FROM completed_sessions")
    assert stamped.num_rows == 5 and stamped["completed_at"].null_count == 0
    pinned = [(b["baseline_name"], b["pinned"]) for b in after["baselines"]]
    assert pinned == [("release", True), ("wide_ref", True)]
    assert _diff(capsys, mlp[-1]) == verdict  # the gate decides as it did
    assert not list(paths.home.glob(".*restoring-*"))


def test_a_lake_in_place_is_never_overwritten(home, capsys):
    paths, _ = home
    before = paths.tracelake.read_bytes()
    assert main(["restore"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"aaco: error: {paths.tracelake}: ")
    assert "move it aside first" in err and "aaco restore again" in err
    assert paths.tracelake.read_bytes() == before


def test_a_home_with_nothing_to_restore_from_is_refused(aaco_paths, capsys):
    """A wrong AACO_HOME gets one line, not an empty lake."""
    assert main(["restore"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to restore the TraceLake from" in err
    assert not aaco_paths.tracelake.exists()


def test_a_tampered_bundle_is_skipped_and_named(home, capsys):
    paths, mlp = home
    (bundle,) = paths.sessions.glob(f"*/{mlp[-1]}")
    edited = bundle / "tables" / "iterations.parquet"
    table = pq.read_table(edited)
    edited.chmod(0o644)
    pq.write_table(table.set_column(4, "latency_ns", pc.multiply(table["latency_ns"], 2)), edited)
    _delete_lake(paths)
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("restored 4 sessions, 2 baselines")
    assert f"skipped 1 bundle: {mlp[-1]} (" in out and "tables/iterations.parquet" in out
    lake = TraceLake(paths.tracelake)
    for table in ("session_records", "iterations", "drift_verdicts", "completed_sessions"):
        found = lake.query(f"SELECT count(*) AS n FROM {table} WHERE session_id = ?", [mlp[-1]])
        assert found["n"][0].as_py() == 0, table


def test_a_stopped_restore_leaves_no_lake(home, capsys, monkeypatch):
    """SIGTERM part-way (the second session's drift judged): exit 143, no lake, no work folder,
    and the next restore starts afresh."""
    paths, _ = home
    _delete_lake(paths)
    judged = []

    def stop_at_the_second(lake, bundle, **options):
        judged.append(bundle.session_id)
        if len(judged) == 2:
            raise Interrupted("SIGTERM")
        return original(lake, bundle, **options)

    original = restore.judge_drift
    monkeypatch.setattr(restore, "judge_drift", stop_at_the_second)
    assert main(["restore"]) == 143
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert not paths.tracelake.exists() and not list(paths.home.glob(".*restoring-*"))
    assert len(list(paths.sessions.glob("2*/*"))) == 5  # the bundles untouched


def _point_at(patch, paths) -> None:
    patch.setenv("AACO_HOME", str(paths.home))
    patch.delenv("AACO_REGISTRY", raising=False)
    patch.delenv("AACO_TRACELAKE", raising=False)


def _snapshot(paths) -> dict[str, list[dict]]:
    """Every stored table of the lake, each read whole and sorted by all its columns."""
    names = [stored(name) for name in TABLES] + [name for name, _ in TRACE_TABLES.values()]
    lake = TraceLake(paths.tracelake)
    with lake.reading():
        return {
            name: lake.query(f"SELECT * {_excluding(name)} FROM {name} ORDER BY ALL").to_pylist()
            for name in names
        }


def _excluding(table: str) -> str:
    stamps = RESTORE_STAMPS.get(table)
    return f"EXCLUDE ({', '.join(stamps)})" if stamps else ""


def _json(rows) -> str:
    """Rows compared as JSON, NaN equal to NaN and every float (in JSON text columns too) to 12
    significant digits: DuckDB sums in parallel in no fixed order, so the last bits of a sum
    differ between two runs of one analysis over the same rows."""
    return json.dumps(_rounded(rows), default=str, sort_keys=True)


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(item) for item in value]
    if isinstance(value, str) and value.startswith(("{", "[")):
        try:
            return _rounded(json.loads(value))
        except ValueError:
            return value
    return value


def _first_difference(table: str, before: dict, after: dict) -> str:
    """The first row that differs, for the failure message."""
    rows = zip(before[table], after[table], strict=False)
    for old, new in rows:
        if _json(old) != _json(new):
            changed = {k: (old[k], new.get(k)) for k in old if _json(old[k]) != _json(new.get(k))}
            return f"{table}: {changed} in {old}"
    return f"{table}: {len(before[table])} rows before, {len(after[table])} after"


def _diff(capsys, session_id: str) -> dict:
    assert main(["diff", "--paired", "never", "--json", "--current", session_id]) == 0
    return json.loads(capsys.readouterr().out)


def _delete_lake(paths) -> None:
    paths.tracelake.unlink()
    paths.tracelake.with_name(paths.tracelake.name + ".wal").unlink(missing_ok=True)


def test_without_a_journal_every_session_comes_back_and_nothing_is_measured(home, capsys):
    """A lake from before the journal: its sessions come back analysed, the trace judged against
    its GPU's datasheet as at first, this host's sessions against no envelope (none kept) rather
    than one measured now by another host."""
    paths, _ = home
    quality = _snapshot(paths)["measurement_quality"]
    _delete_lake(paths)
    LakeJournal(paths.tracelake).path.unlink()
    assert main(["restore"]) == 0  # nothing vouches for the bundles: none without being asked
    out = capsys.readouterr().out
    assert out.startswith("restored 0 sessions") and out.count("there is no journal") == 5
    _delete_lake(paths)
    assert main(["restore", "--unverified"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored 5 sessions, 0 baselines and 0 hardware envelopes into ")
    assert "5 sessions marked UNVERIFIED" in out
    assert out.endswith(
        "; no journal beside the lake: no envelopes or baselines to restore, "
        "every session analysed again\n"
    )
    judged = (
        TraceLake(paths.tracelake)
        .query("SELECT session_id, envelope_source, envelope_note FROM bottleneck_reports")
        .to_pylist()
    )
    assert len(judged) == 5 and {r["envelope_source"] for r in judged} == {"none", "datasheet"}
    assert all(
        r["envelope_note"].startswith(restore.NO_ENVELOPE_KEPT[:-1])
        for r in judged
        if r["envelope_source"] == "none"
    )
    # measured as before, and suspect now: nothing shows the evidence is what was measured
    restored = _snapshot(paths)["measurement_quality"]
    assert all(
        r["verdict"] == "suspect" and "evidence is unverified" in r["reasons_json"]
        for r in restored
    )
    unjudged = ("verdict", "reasons_json")
    assert _json([{k: v for k, v in r.items() if k not in unjudged} for r in restored]) == _json(
        [{k: v for k, v in r.items() if k not in unjudged} for r in quality]
    )


def test_the_journal_skips_lines_a_kill_cut_short_or_a_hand_edited(tmp_path):
    """Appends start on a new line after a torn one; torn and edited records are counted, not
    used, and the rest is read."""
    journal = LakeJournal(tmp_path / "tracelake.duckdb")
    journal.record(LOADED_COMPLETE, session_id="a")
    with open(journal.path, "a") as handle:
        handle.write('{"kind": "loaded_compl')  # a kill mid-write
    journal.record(LOADED_COMPLETE, session_id="b")
    journal.record(FDR_SWEEP, session_ids=["a", 3], q=0.05)  # not session ids
    journal.record(JUDGED_AGAINST, session_id="a", envelope_id=None, note="none")
    state = journal.state()
    assert journal.path == tmp_path / "tracelake.journal"
    assert state.unreadable_lines == 2 and state.not_analysed == {"b"} and not state.sweeps


def _p50_times_100(bundle) -> None:
    """Edit the session's p50 (x100) and append a kernel row, then rewrite the manifest to
    match: a bundle laundered as a careful editor would."""
    for name, edit in (
        ("sessions", lambda t: t.set_column(
            t.schema.get_field_index("latency_p50_ns"), "latency_p50_ns",
            pc.multiply(t["latency_p50_ns"], 100))),
        ("kernel_events", lambda t: pa.concat_tables([t, t.slice(0, 1)])),
    ):  # fmt: skip
        path = bundle / "tables" / f"{name}.parquet"
        path.chmod(0o644)
        pq.write_table(edit(pq.read_table(path)), path)
    (bundle / "manifest.json").chmod(0o644)
    write_manifest(bundle)


@pytest.mark.parametrize("tampering", ["manifest_deleted", "rewritten_with_manifest"])
def test_a_laundered_bundle_is_skipped_against_the_journal(home, capsys, tampering):
    """The bundle's own manifest cannot vouch for it: whoever edits the files can delete it or
    write it again. The journal's record of it, taken when it was loaded, can."""
    paths, mlp = home
    (bundle,) = paths.sessions.glob(f"*/{mlp[-1]}")
    if tampering == "manifest_deleted":
        (bundle / "manifest.json").unlink()
        reason = "manifest.json is missing; the journal recorded one when it was loaded"
    else:
        _p50_times_100(bundle)
        reason = "manifest.json is not the one the journal recorded when it was loaded"
    _delete_lake(paths)
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored 4 sessions") and f"{mlp[-1]} (its {reason}" in out, out
    assert main(["verify"]) == 0  # what was restored verifies; the laundered one is not there
    assert mlp[-1] not in capsys.readouterr().out


def test_a_bundle_the_journal_never_vouched_for_is_restored_only_marked_unverified(home, capsys):
    paths, mlp = home
    journal = LakeJournal(paths.tracelake).path
    kept = [line for line in journal.read_text().splitlines() if '"kind": "bundle"' not in line]
    journal.write_text("\n".join(kept) + "\n")  # as a journal written before it kept bundles
    _delete_lake(paths)
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored 0 sessions") and "aaco restore --unverified" in out, out
    assert not TraceLake(paths.tracelake).session_states()  # an empty lake, nothing laundered

    _delete_lake(paths)
    assert main(["restore", "--unverified"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored 5 sessions") and "5 sessions marked UNVERIFIED" in out, out
    assert main(["verify", mlp[-1]]) == 2  # never "ok", never "not covered"
    captured = capsys.readouterr()
    assert "UNVERIFIED: restored without a record of its bundle" in captured.out
    assert main(["report", "--session", mlp[-1], "--format", "md"]) == 0
    assert "UNVERIFIED evidence: restored (aaco restore --unverified)" in capsys.readouterr().out
    quality = (
        TraceLake(paths.tracelake)
        .query(
            "SELECT verdict, reasons_json FROM measurement_quality WHERE session_id = ?", [mlp[-1]]
        )
        .to_pylist()[0]
    )
    assert quality["verdict"] == "suspect" and "evidence is unverified" in quality["reasons_json"]
