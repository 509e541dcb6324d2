"""The documentation site's reference pages (docs/reference_pages.py), generated from the code.

Every command, sidecar key, Dagster definition, TraceLake table and environment variable has its
documentation entry, each page names all of them, and the check does fail when one lacks its
entry. MkDocs itself is not run here: `make docs-check` builds the whole site (--strict) in CI;
the hook is exercised with MkDocs' own Files and config objects.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from aaco_pipelines.analysis.bottleneck.classification import rules_markdown
from aaco_pipelines.cli import build_parser
from aaco_pipelines.definitions import defs
from aaco_pipelines.foundation import environment_variables
from aaco_pipelines.registry import objectives, sidecar, sidecar_keys
from aaco_pipelines.tracelake import schema

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def load(path: Path, name: str):
    """A module of docs/ (no package) by its path, writing no __pycache__ into docs/."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


@pytest.fixture(scope="module")
def reference():
    return load(DOCS / "reference_pages.py", "reference_pages_under_test")


@pytest.fixture(scope="module")
def built(reference):
    return reference.build()


def test_every_entry_of_the_code_is_documented(built):
    pages, missing = built
    assert missing == []


def test_the_pages_are_the_reference_section_of_the_nav(built):
    pages, _ = built
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    (section,) = [entry["Reference"] for entry in config["nav"] if "Reference" in entry]
    listed = {next(iter(e.values())) if isinstance(e, dict) else e for e in section}
    assert listed == set(pages)
    assert config["hooks"] == ["docs/hooks/generated_reference.py"]
    index = pages["reference/index.md"]
    for path in set(pages) - {"reference/index.md"}:
        assert f"]({Path(path).name})" in index


def test_the_cli_page_names_every_command_and_argument(reference, built):
    page = built[0]["reference/cli.md"]
    commands = list(reference.commands(build_parser()))
    assert len(commands) > 30
    for path, line, parser in commands:
        assert f"# {' '.join(path)}\n" in page
        assert line and line.split()[0] in page
        for action in reference.arguments(parser):
            name = action.option_strings[0] if action.option_strings else action.metavar
            name = name or action.dest
            assert f"| `{name}" in page or f"| `[{name}" in page, f"{' '.join(path)} {name}"


def test_the_sidecar_page_names_every_key_and_objective(built):
    page = built[0]["reference/sidecar.md"]
    for key in sidecar.KNOWN_KEYS | sidecar.GENERATION_KEYS | sidecar.INPUT_KEYS:
        assert f"| `{key}` |" in page
    for key in objectives.OBJECTIVE_KINDS:
        assert f"| `{key}` |" in page
    assert "| `timeout_s` | number (seconds) | the runner's limit, 600 s" in page
    assert "| 1 to 86400 |" in page and "| 0 to 3600 s |" in page


def test_the_dagster_page_names_every_definition(built):
    page = built[0]["reference/dagster.md"]
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        assert f"### {key.to_user_string()}\n" in page
    assert graph.asset_check_keys
    for check in graph.asset_check_keys:
        assert f"| `{check.name}` |" in page
    for definition in [*defs.jobs, *defs.sensors, *defs.schedules]:
        assert f"| `{definition.name}` |" in page


def test_the_tracelake_page_has_a_heading_per_table_and_every_column(built):
    page = built[0]["reference/tracelake.md"]
    for name, table in schema.TABLES.items():
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for field in table:
            assert f"| `{field.name}` | `{schema.duckdb_type(field.type)}` |" in section
    for name in schema.VIEWS:
        assert f"### {name} (view)" in page
    # a column's comment on its line, then the group comment right above it
    assert "| `kernel_family` | `VARCHAR` | gemm \\| convolution" in page
    assert "forward \\| generation — v9: a generation session's latency" in page


def test_the_environment_page_names_every_variable(built):
    page = built[0]["reference/environment.md"]
    for name, entry in environment_variables.ENVIRONMENT.items():
        assert f"| `{name}` |" in page
        assert environment_variables.DEFAULT in entry, f"{name}: say its default"
    assert "| `AACO_HOME` |" in page and "| `DAGSTER_HOME` |" in page


def test_the_bottleneck_rules_page_is_the_classifiers_table(built):
    assert rules_markdown().strip() in built[0]["reference/bottleneck-rules.md"]


# --- the check fails when an entry lacks its documentation -----------------------------------


def test_a_command_or_argument_without_help_is_reported(reference):
    parser = build_parser()
    ui = next(p for path, _, p in reference.commands(parser) if path == ("aaco", "ui"))
    next(a for a in ui._actions if "--host" in a.option_strings).help = None
    subparsers = next(a for a in parser._actions if a.choices and "ui" in a.choices)
    next(c for c in subparsers._choices_actions if c.dest == "worker").help = None
    _, missing = reference.cli_page(parser)
    assert missing == [
        "cli: `aaco ui` --host HOST has no help",
        "cli: `aaco worker` has no help line",
    ]


def test_a_sidecar_key_without_its_keydoc_or_a_stale_keydoc_is_reported(reference, monkeypatch):
    assert reference.sidecar_page()[1] == []
    monkeypatch.setattr(sidecar, "KNOWN_KEYS", sidecar.KNOWN_KEYS | {"made_up_key"})
    stale = sidecar_keys.KeyDoc("integer", "1", "1 or more", "gone from the parser")
    monkeypatch.setitem(sidecar_keys.GENERATION_SIDECAR_KEYS, "gone_key", stale)
    page, missing = reference.sidecar_page()
    assert missing == [
        "sidecar: top-level key `made_up_key` has no KeyDoc",
        "sidecar: a KeyDoc names generation key `gone_key`, which the parser does not know",
    ]
    assert "| `made_up_key` | — |" in page


def test_undescribed_dagster_definitions_are_reported(reference):
    @dg.asset(check_specs=[dg.AssetCheckSpec("bare_check", asset="bare_asset")])
    def bare_asset():
        yield dg.Output(1)
        yield dg.AssetCheckResult(passed=True)

    @dg.sensor(job_name="bare_job")
    def bare_sensor(context):
        return None

    @dg.sensor(job_name="bare_job")
    def explained_sensor(context):
        """Told by its docstring.

        Only the first paragraph counts."""

    job = dg.define_asset_job("bare_job", selection=[bare_asset])
    definitions = dg.Definitions(
        assets=[bare_asset], jobs=[job], sensors=[bare_sensor, explained_sensor]
    )
    page, missing = reference.dagster_page(definitions)
    assert missing == [
        "dagster: asset `bare_asset` has no description",
        "dagster: asset check `bare_asset.bare_check` has no description",
        "dagster: job `bare_job` has no description",
        "dagster: sensor `bare_sensor` has no description",
    ]
    assert "### bare_asset" in page and "| `bare_job` | `bare_asset` |" in page
    # a sensor without a description is described by its function's docstring's first paragraph
    assert "| `explained_sensor` | `bare_job` | 30 s | stopped | Told by its docstring. |" in page


def test_a_table_without_its_comment_is_reported(reference, monkeypatch, tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(reference.TABLE_SOURCES, tables)
    sessions = tables / "sessions.py"
    lines = sessions.read_text().splitlines(keepends=True)
    at = lines.index("MODELS = pa.schema(\n")
    assert lines[at - 1].startswith("# ")
    sessions.write_text("".join(lines[: at - 1] + lines[at:]))
    monkeypatch.setattr(reference, "TABLE_SOURCES", tables)
    _, missing = reference.tracelake_page()
    where = os.path.relpath(sessions, REPO)
    assert missing == [f"tracelake: table `models` has no comment above MODELS in {where}"]


def test_schema_comments_are_read_from_the_source(reference, tmp_path):
    source = tmp_path / "tables.py"
    source.write_text(
        "import pyarrow as pa\n\n"
        "# What one row is.\n"
        "# Said on two lines.\n"
        "DESCRIBED = pa.schema(\n"
        "    [\n"
        '        ("a", STR),  # the first\n'
        "        # v2: added together\n"
        '        ("b", STR),\n'
        "        (\n"
        '            "c",\n'
        "            STR,\n"
        "        ),  # wrapped by the formatter\n"
        "    ]\n"
        ")\n\n"
        "BARE = pa.schema([('x', STR)])\n"
        '"""A string right above counts as its comment."""\n'
        "STRING = pa.schema([('y', STR)])\n"
    )
    assert reference.schema_sources(source) == {
        "DESCRIBED": (
            "What one row is. Said on two lines.",
            {"a": "the first", "b": "v2: added together", "c": "wrapped by the formatter"},
        ),
        "BARE": ("", {"x": ""}),
        "STRING": ("A string right above counts as its comment.", {"y": ""}),
    }


def test_an_unlisted_or_stale_environment_variable_is_reported(reference, monkeypatch):
    monkeypatch.delitem(environment_variables.ENVIRONMENT, "AACO_LOCK_TIMEOUT_S")
    monkeypatch.setitem(environment_variables.ENVIRONMENT, "AACO_NEVER_READ", "x. Default: y")
    page, missing = reference.environment_page()
    assert len(missing) == 2
    assert missing[0].startswith("environment: `AACO_LOCK_TIMEOUT_S` (in ")
    assert "aaco_pipelines.tracelake.locking" in missing[0]
    assert (
        missing[1] == "environment: ENVIRONMENT names `AACO_NEVER_READ`, which no source mentions"
    )
    assert "| `AACO_LOCK_TIMEOUT_S` | — |" in page  # still listed, undocumented


def test_markdown_is_escaped_outside_code_spans(reference):
    assert reference.text("a|b <x> *y* `c|d <e>`") == "a\\|b &lt;x&gt; \\*y\\* `c|d <e>`"
    assert reference.cell("two\nlines") == "two lines"
    assert reference.cell(None) == reference.NOTHING


# --- the MkDocs hook -------------------------------------------------------------------------


@pytest.fixture
def mkdocs_config(tmp_path):
    """A site of no pages of its own, with the hook loaded as mkdocs.yml loads it."""
    from mkdocs.config.defaults import MkDocsConfig

    config = MkDocsConfig()
    (tmp_path / "docs").mkdir()
    config.load_dict({"site_name": "t", "docs_dir": str(tmp_path / "docs"),
                      "site_dir": str(tmp_path / "site"),
                      "hooks": [str(DOCS / "hooks" / "generated_reference.py")]})  # fmt: skip
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # MkDocs imports the hook
    try:
        errors, _ = config.validate()
    finally:
        sys.dont_write_bytecode = writes
    assert errors == []
    return config


def test_the_hook_adds_every_generated_page(mkdocs_config, built):
    from mkdocs.structure.files import Files

    files = mkdocs_config.plugins.on_files(Files([]), config=mkdocs_config)
    assert sorted(f.src_uri for f in files) == sorted(built[0])
    cli = files.get_file_from_path("reference/cli.md")
    assert cli.content_string == built[0]["reference/cli.md"]


def test_the_hook_fails_the_build_on_a_missing_entry(mkdocs_config, monkeypatch):
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import Files

    monkeypatch.setattr(sidecar, "KNOWN_KEYS", sidecar.KNOWN_KEYS | {"made_up_key"})
    with pytest.raises(PluginError, match="top-level key `made_up_key` has no KeyDoc"):
        mkdocs_config.plugins.on_files(Files([]), config=mkdocs_config)
