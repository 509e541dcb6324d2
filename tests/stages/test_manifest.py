"""Evidence that cannot lie: a bundle's manifest (every file, evidence.json and tables/ included)
is vouched for by its digest in the TraceLake. `aaco report`, `export`, `diff` and the doctor
check it cheaply and refuse a changed bundle, naming session and file; `aaco verify` hashes every
file; a reload refuses an edited table; a deleted evidence.json or manifest is tampering."""

from __future__ import annotations

import json
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aaco_pipelines.bundle.manifest import MANIFEST, check_bundles, read_manifest
from aaco_pipelines.bundle.session_bundle import EVIDENCE, file_digest
from aaco_pipelines.cli import main
from aaco_pipelines.cli.doctor_checks import PROBLEM, check_evidence
from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.stages.load import load_session
from aaco_pipelines.tracelake.schema import SCHEMA_VERSION, VIEWS
from aaco_pipelines.tracelake.store import TraceLake
from tests.helpers import replay_session, stamp_schema_version


@pytest.fixture
def home(measured_mlp_home):
    """A measured session whose row names this test's copy of its bundle (a copied home's rows
    name the template's), and a replay of it to diff against."""
    paths, bundle = measured_mlp_home
    lake = TraceLake(paths.tracelake)
    with lake.connect(write=True) as con:
        con.execute("UPDATE session_records SET bundle_path = ?", [str(bundle.path)])
    replay_session(lake, bundle.session_id, "replay")
    return measured_mlp_home


def _writable(path):
    path.chmod(0o644)  # bundle files are read-only; their owner can still change that
    return path


def _edit_p50(bundle) -> int:
    """Halve the p50 in tables/sessions.parquet, the file a reload reads; the p50 before."""
    path = _writable(bundle.table_path("sessions"))
    table = pq.read_table(path)
    p50 = table["latency_p50_ns"][0].as_py()
    column = table.schema.get_field_index("latency_p50_ns")
    pq.write_table(table.set_column(column, "latency_p50_ns", pa.array([p50 // 2])), path)
    return p50


def _stored_p50(lake, session_id) -> int:
    rows = lake.query(
        "SELECT latency_p50_ns FROM session_records WHERE session_id = ?", [session_id]
    )
    return rows["latency_p50_ns"][0].as_py()


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("aaco: error: "), err
    return err


def test_an_edited_p50_is_refused_by_report_export_diff_and_a_reload(home, tmp_path, capsys):
    paths, bundle = home
    sid, lake = bundle.session_id, TraceLake(paths.tracelake)
    report = ["report", "--session", sid, "--format", "json", "--output"]
    assert main([*report, str(tmp_path / "before.json")]) == 0  # untouched: reported
    p50 = _edit_p50(bundle)
    capsys.readouterr()
    for argv in (
        [*report, str(tmp_path / "after.json")],
        ["export", "--session", sid, "--output", str(tmp_path / "timeline.json")],
        ["diff", "--paired", "never", "--baseline", "replay", "--current", sid],
    ):
        err = _one_line_error(capsys, argv)
        assert sid in err and "tables/sessions.parquet changed" in err and "aaco verify" in err
    assert not (tmp_path / "after.json").exists() and not (tmp_path / "timeline.json").exists()
    with pytest.raises(AacoInputError, match="tables/sessions.parquet changed"):
        load_session(lake, bundle)
    assert _stored_p50(lake, sid) == p50  # the edited number never reached the lake


def test_a_rewritten_or_deleted_evidence_json_no_longer_hides_a_changed_file(
    home, tmp_path, capsys
):
    """The old way around the check: change a raw file and write evidence.json to match."""
    paths, bundle = home
    sid, lake = bundle.session_id, TraceLake(paths.tracelake)
    latencies = _writable(bundle.file("latencies.json"))
    data = json.loads(latencies.read_text())
    data["measured"]["latency_ns"][0] //= 2
    latencies.write_text(json.dumps(data))
    evidence = _writable(bundle.path / EVIDENCE)
    recorded = json.loads(evidence.read_text()) | {"latencies.json": file_digest(latencies)}
    evidence.write_text(json.dumps(recorded))
    bundle.verify_evidence()  # evidence.json alone now agrees: what the manifest catches
    with pytest.raises(AacoInputError, match="evidence.json changed"):
        load_session(lake, bundle)
    assert main(["verify", sid]) == 2
    assert "evidence.json changed (and 1 more)" in capsys.readouterr().out
    evidence.unlink()
    with pytest.raises(AacoInputError, match="evidence.json is missing"):
        load_session(lake, bundle)
    err = _one_line_error(capsys, ["report", "--session", sid, "--output", str(tmp_path / "r")])
    assert "evidence.json is missing" in err


def test_a_deleted_manifest_is_tampering_said_in_one_line(home, tmp_path, capsys):
    paths, bundle = home
    sid, lake = bundle.session_id, TraceLake(paths.tracelake)
    (bundle.path / MANIFEST).unlink()
    err = _one_line_error(capsys, ["report", "--session", sid, "--output", str(tmp_path / "r")])
    assert sid in err and "manifest.json is missing" in err
    doctor = check_evidence(paths)
    assert doctor.status == PROBLEM and sid in doctor.detail and MANIFEST in doctor.detail
    with pytest.raises(AacoInputError, match="manifest.json is missing"):
        load_session(lake, bundle)


def test_verify_hashes_every_file_and_prints_one_row_per_session(home, tmp_path, capsys):
    """A byte changed in place with its size and mtime kept passes the cheap check of a
    report, not `aaco verify`; a session loaded before manifests is not covered; a bundle gone
    fails verify."""
    paths, bundle = home
    sid, lake = bundle.session_id, TraceLake(paths.tracelake)
    replay_session(lake, sid, "before-manifests")
    replay_session(lake, sid, "moved")
    with lake.connect(write=True) as con:
        con.execute(
            "UPDATE session_records SET manifest_sha256 = NULL WHERE session_id = 'before-manifests'"
        )
    assert main(["verify", sid, "before-manifests"]) == 0
    rows = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines()[1:])
    assert rows == {sid: "ok", "before-manifests": "not covered (written before manifests)"}
    assert {c.state for c in check_bundles(lake, ["replay"], full=True)} == {"ok"}
    profile = _writable(bundle.file("ort_profile.json"))
    stat, text = profile.stat(), profile.read_bytes()
    digit = next(i for i, byte in enumerate(text) if chr(byte).isdigit())
    flipped = b"1" if text[digit : digit + 1] != b"1" else b"2"
    profile.write_bytes(text[:digit] + flipped + text[digit + 1 :])
    os.utime(profile, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    report = ["report", "--session", sid, "--format", "md", "--output", str(tmp_path / "r.md")]
    assert main(report) == 0  # the cheap check: size and mtime
    with lake.connect(write=True) as con:
        con.execute("UPDATE session_records SET bundle_path = '/gone' WHERE session_id = 'moved'")
    capsys.readouterr()
    assert main(["verify"]) == 2
    captured = capsys.readouterr()
    rows = dict(line.split(None, 1) for line in captured.out.splitlines()[1:])
    assert rows[sid] == rows["replay"] == "ort_profile.json changed"
    assert rows["moved"] == "bundle not found (/gone)"
    assert rows["before-manifests"] == "not covered (written before manifests)"
    assert len(captured.err.splitlines()) == 1 and "3 of 4 sessions" in captured.err


def test_the_manifest_covers_every_file_and_the_lake_keeps_its_digest(measured_mlp_template):
    paths, bundle = measured_mlp_template
    listed = read_manifest(bundle.path)
    files = {p.relative_to(bundle.path).as_posix() for p in bundle.path.rglob("*") if p.is_file()}
    assert set(listed) == files - {MANIFEST}
    assert {"tables/sessions.parquet", "tables/_COMPLETE", EVIDENCE, "ort_profile.json"} <= files
    assert [c.state for c in check_bundles(TraceLake(paths.tracelake), full=True)] == ["ok"]


def test_a_v13_lake_reads_and_migrates_with_every_session_not_covered(tmp_path):
    """v14 keeps each bundle's manifest digest: sessions loaded before have none (not
    covered), read before the migration (a read never migrates) and after it."""
    path = tmp_path / "v13.duckdb"
    lake = TraceLake(path)
    with lake.connect(write=True):
        pass
    with duckdb.connect(str(path)) as con:  # back to v13's shape, with a session then
        con.execute("DROP VIEW sessions")
        con.execute("ALTER TABLE session_records DROP COLUMN manifest_sha256")
        con.execute(f"CREATE VIEW sessions AS {VIEWS['sessions']}")
        con.execute(
            "INSERT INTO session_records (session_id, started_at, bundle_path) "
            "VALUES ('s', now(), '/b')"
        )
        con.execute("INSERT INTO completed_sessions VALUES ('s', now())")
        stamp_schema_version(con, 13)
    assert lake.manifest_digests() == {"s": ("/b", None)}
    with lake.connect(write=True):
        pass  # the next write migrates
    assert lake.schema_version() == SCHEMA_VERSION
    assert lake.manifest_digests(["s"]) == {"s": ("/b", None)}
    assert [c.line() for c in check_bundles(lake)] == ["not covered (written before manifests)"]


def test_a_copied_home_checks_its_own_bundles_not_the_originals(
    measured_mlp_home, tmp_path, capsys
):
    """The lake records absolute bundle paths: a copied home's rows name the original's
    bundles. Checks read the copy's own (found by session id): a change to the original is
    not the copy's, a change to the copy is."""
    paths, bundle = measured_mlp_home
    original = TraceLake(paths.tracelake).query("SELECT bundle_path FROM session_records")
    (named,) = original["bundle_path"].to_pylist()
    assert not named.startswith(str(paths.home))  # the copy's row names the template's bundle
    sid = bundle.session_id
    profile = _writable(bundle.file("ort_profile.json"))  # the copy's file
    assert main(["verify", sid]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == [sid, "ok"]
    profile.write_bytes(profile.read_bytes() + b" ")  # changed in the copy only
    assert main(["verify", sid]) == 2
    out = capsys.readouterr().out
    assert "ort_profile.json changed" in out
    err = _one_line_error(capsys, ["report", "--session", sid, "--format", "md",
                                   "--output", str(tmp_path / "r.md")])  # fmt: skip
    assert "ort_profile.json" in err and str(paths.home) in err
