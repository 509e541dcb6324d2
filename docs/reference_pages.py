"""The documentation site's reference pages, generated from the code as the site builds.

Each `*_page()` returns (Markdown, missing): the page, read from the code (argparse,
registry.sidecar_keys, the Dagster definitions, the TraceLake schema and its source's comments,
foundation.environment_variables, the bottleneck rule table), and the entries of the code that
have no documentation. `build()` gives both for every page; the MkDocs hook
(hooks/generated_reference.py) adds the pages to the site and fails the build on a missing
entry, and so does tests/test_docs_reference.py. docs/ is no package: both load this file by path.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import os
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The folders of the Dagster project and library, and the package each installs as.
SOURCE_FOLDERS = {"aaco_pipelines": "aaco_pipelines", "assets": "aaco_pipelines.assets",
                  "resources": "aaco_pipelines.resources", "sensors": "aaco_pipelines.sensors"}  # fmt: skip
TABLE_SOURCES = REPO / "aaco_pipelines" / "tracelake" / "tables"
SCHEMA_SOURCE = REPO / "aaco_pipelines" / "tracelake" / "schema.py"
ENVIRONMENT_SOURCE = REPO / "aaco_pipelines" / "foundation" / "environment_variables.py"
VARIABLE = re.compile(r"AACO_[A-Z0-9_]+|DAGSTER_HOME")  # what must have an ENVIRONMENT entry
GENERATED = "<!-- Generated from the code by docs/reference_pages.py: do not edit. -->"
NOTHING = "—"
ESCAPES = (("\\", "\\\\"), ("*", "\\*"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"))


# --- Markdown --------------------------------------------------------------------------------


def text(value: object) -> str:
    """Prose for Markdown: code spans kept as they are; elsewhere the characters Markdown or
    HTML would act on (`*`, `<`, `>`, `|`, a backslash) escaped."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: no code spans
        parts = [str(value).replace("`", "'")]
    for index in range(0, len(parts), 2):
        for plain, escaped in ESCAPES:
            parts[index] = parts[index].replace(plain, escaped)
    return "`".join(parts)


def cell(value: object) -> str:
    """One table cell: prose on one line."""
    return text(" ".join(str(value).split())) if value not in (None, "") else NOTHING


def code(value: object) -> str:
    return f"`{value}`" if "`" not in str(value) else cell(value)


def codes(values: Iterable[object]) -> str:
    return ", ".join(code(value) for value in values) or NOTHING


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def described(what: str, description: str | None, missing: list[str]) -> str | None:
    """The description, noting `what` in `missing` when there is none."""
    if not description:
        missing.append(f"{what} has no description")
    return description


def paragraphs(value: str | None) -> str:
    """A docstring or description as Markdown paragraphs."""
    return "\n".join(text(line) for line in inspect.cleandoc(value or "").splitlines())


def first_paragraph(value: str | None) -> str:
    return " ".join(inspect.cleandoc(value or "").split("\n\n")[0].split())


def page(title: str, intro: str, body: list[str]) -> str:
    return "\n".join([GENERATED, "", f"# {title}", "", intro, "", *body]).rstrip() + "\n"


# --- the command line ------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("aaco",), line=None):
    """(path, help line, parser) of the command and every subcommand below it, in `--help`'s
    order; the root's help line is its description's first paragraph."""
    yield path, first_paragraph(parser.description) if len(path) == 1 else line, parser
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # else an alias
                    seen.add(id(sub))
                    yield from commands(sub, (*path, name), helps.get(name))


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skipped = (argparse._HelpAction, argparse._SubParsersAction)
    return [
        a for a in parser._actions if not isinstance(a, skipped) and a.help != argparse.SUPPRESS
    ]


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action, missing) -> list[str]:
    formatter = parser.formatter_class(prog=parser.prog)
    if action.option_strings:
        metavar = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
        name = ", ".join(f"{option} {metavar}".strip() for option in action.option_strings)
    else:
        name = formatter._format_args(action, action.dest)
    if not action.help:
        missing.append(f"cli: `{parser.prog}` {name} has no help")
    meaning = formatter._expand_help(action) if action.help else None
    if action.nargs == 0:  # a flag (store_true, --x/--no-x): on or off when not given
        default = {True: "on", False: "off"}.get(action.default, NOTHING)
    elif action.required if action.option_strings else action.nargs not in ("?", "*"):
        default = "required"
    elif action.default in (None, argparse.SUPPRESS, [], ""):
        default = NOTHING
    elif isinstance(action.default, list | tuple):
        default = code(" ".join(map(str, action.default)))
    else:
        default = code(action.default)
    return [code(name), cell(meaning), default, codes(action.choices or ())]


def usage(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class(prog=parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "")
    return formatter.format_help().strip()


def cli_page(parser: argparse.ArgumentParser | None = None) -> tuple[str, list[str]]:
    """Every `aaco` command and subcommand: its help line, its usage, and each argument with
    its meaning, default and choices."""
    if parser is None:
        from aaco_pipelines.cli import build_parser

        parser = build_parser()
    body: list[str] = []
    missing: list[str] = []
    for path, line, command in commands(parser):
        name = " ".join(path)
        body += [f"{'#' * min(max(len(path), 2), 4)} {name}", ""]
        if not line:
            missing.append(f"cli: `{name}` has no help line")
        body += [text(line), ""] if line else []
        if command.description and first_paragraph(command.description) != first_paragraph(line):
            body += [paragraphs(command.description), ""]
        body += ["```text", usage(command), "```", ""]
        rows = [_argument_row(command, action, missing) for action in arguments(command)]
        body += table(["argument", "meaning", "default", "choices"], rows) if rows else []
    intro = (
        "Every command of `aaco` with its arguments, read from the command line's parser. "
        "A user mistake is one line with the fix (exit status 2), never a traceback."
    )
    return page("Command line", intro, body), missing


# --- sidecar keys ----------------------------------------------------------------------------


def key_table(known: Iterable[str], docs: dict, where: str, missing: list[str]) -> list[str]:
    """The keys the parser knows with their KeyDoc; one without, or a KeyDoc of a key it does
    not know, noted in `missing`."""
    known = set(known)
    missing += [f"sidecar: {where} key `{key}` has no KeyDoc" for key in sorted(known - set(docs))]
    missing += [
        f"sidecar: a KeyDoc names {where} key `{key}`, which the parser does not know"
        for key in sorted(set(docs) - known)
    ]
    rows = [
        [code(key), *(cell(getattr(docs[key], f)) for f in ("kind", "default", "allowed", "meaning"))]
        if key in docs else [code(key), *[NOTHING] * 4]
        for key in [key for key in docs if key in known] + sorted(known - set(docs))
    ]  # fmt: skip
    return table(["key", "kind", "default", "allowed", "meaning"], rows)


def sidecar_page() -> tuple[str, list[str]]:
    """Every key of a model's sidecar (and of its `generation:` and `inputs:` sections) with its
    kind, default, allowed values and meaning, and every objective (SLO) with its unit."""
    from aaco_pipelines.registry import objectives, sidecar, sidecar_keys

    missing: list[str] = []
    first, *others = sidecar.SIDECAR_SUFFIXES
    body = [
        "```yaml", *indented_block(sidecar.__doc__), "```", "",
        "## Keys", "", *key_table(sidecar.KNOWN_KEYS, sidecar_keys.SIDECAR_KEYS, "top-level",
                                  missing),
        "## generation", "",
        "The `generation:` section: an LLM decoder's workload. Every key is optional.", "",
        *key_table(sidecar.GENERATION_KEYS, sidecar_keys.GENERATION_SIDECAR_KEYS, "generation",
                   missing),
        "## inputs", "", "Each entry under `inputs:` (`NAME: {shape: [...], dtype: ...}`).", "",
        *key_table(sidecar.INPUT_KEYS, sidecar_keys.INPUT_SIDECAR_KEYS, "inputs", missing),
        "## Objectives", "",
        "The keys of `objectives:` (in the sidecar, or in the registry's "
        f"`{objectives.REGISTRY_OBJECTIVES_FILE}`), each a limit from "
        f"{objectives.SMALLEST_LIMIT:g} to {objectives.LARGEST_LIMIT:g} in its unit; "
        f"`{objectives.PER_TARGET}: {{target: {{...}}}}` sets a target's own limits.", "",
        *table(["objective", "limit", "unit", "what it limits"], (
            [code(key), {"max": "ceiling", "min": "floor"}.get(kind.bound, kind.bound),
             code(kind.unit), cell(described(f"sidecar: objective `{key}`", kind.description,
                                             missing))]
            for key, kind in sorted(objectives.OBJECTIVE_KINDS.items())
        )),
    ]  # fmt: skip
    intro = (
        f"A model `name.onnx` in the registry may have a sidecar `name{first}` beside it (or "
        f"{', '.join(f'`{suffix}`' for suffix in others)}): how to feed the model and how to "
        "measure it. A key it does not know, or a value out of its range, is an error naming "
        "the file and the key when the registry is read. For example (from "
        "`aaco_pipelines.registry.sidecar`):"
    )
    return page("Sidecar keys", intro, body), missing


def indented_block(docstring: str | None) -> list[str]:
    """The first indented block of a docstring (its example), dedented."""
    lines = inspect.cleandoc(docstring or "").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("    ")), len(lines))
    end = next((i for i in range(start, len(lines)) if lines[i][:1].strip()), len(lines))
    return "\n".join(line[4:].rstrip() for line in lines[start:end]).strip("\n").splitlines()


# --- Dagster definitions ---------------------------------------------------------------------


def definitions():
    """The code location's dg.Definitions (aaco_pipelines.definitions)."""
    import dagster as dg

    import aaco_pipelines.definitions as module

    (defs,) = [value for value in vars(module).values() if isinstance(value, dg.Definitions)]
    return defs


def partitions(definition) -> str:
    import dagster as dg

    if definition is None:
        return "none"
    if isinstance(definition, dg.MultiPartitionsDefinition):
        dims = definition.partitions_defs
        return " × ".join(f"{dim.name} ({partitions(dim.partitions_def)})" for dim in dims)
    if isinstance(definition, dg.DynamicPartitionsDefinition):
        return f"dynamic `{definition.name}`"
    return " ".join(str(definition).split())


def description_of(definition) -> str | None:
    """A sensor's or schedule's description, else its function's docstring's first paragraph."""
    function = getattr(definition, "_raw_fn", None) or getattr(definition, "__wrapped__", None)
    return definition.description or first_paragraph(inspect.getdoc(function) if function else "")


def dagster_page(defs=None) -> tuple[str, list[str]]:
    """Every asset of the Dagster code location with its group, partitions and asset checks,
    and every job, sensor, schedule and resource setting."""
    defs = definitions() if defs is None else defs
    graph = defs.resolve_asset_graph()
    body: list[str] = ["## Assets", ""]
    missing: list[str] = []
    asset_keys = list(graph.toposorted_asset_keys)  # pipeline order
    for key in asset_keys:
        node, name = graph.get(key), key.to_user_string()
        description = described(f"dagster: asset `{name}`", node.description, missing)
        body += [f"### {name}", "", *([paragraphs(description), ""] if description else [])]
        body += [
            f"- group: {code(node.group_name)}",
            f"- partitions: {cell(partitions(node.partitions_def))}",
            f"- upstream: {codes(sorted(k.to_user_string() for k in node.parent_keys))}",
            "",
        ]
        checks = [graph.get(check) for check in sorted(node.check_keys, key=lambda k: k.name)]
        body += table(["asset check", "blocking", "what it checks"], (
            [code(check.key.name), "yes" if check.blocking else "no",
             cell(described(f"dagster: asset check `{name}.{check.key.name}`",
                            check.description, missing))]
            for check in checks
        )) if checks else []  # fmt: skip
    rows = []
    for job in sorted(defs.jobs or [], key=lambda job: job.name):
        selection = getattr(job, "selection", None)
        if selection is not None:
            chosen = selection.resolve(graph)
            runs = codes(k.to_user_string() for k in asset_keys if k in chosen)
        else:
            runs = ", ".join(f"op {code(node.name)}" for node in job.graph.nodes)
        description = described(f"dagster: job `{job.name}`", job.description, missing)
        rows.append([code(job.name), runs, cell(partitions(getattr(job, "partitions_def", None))),
                     cell(description)])  # fmt: skip
    body += ["## Jobs", "", *table(["job", "runs", "partitions", "description"], rows)]
    rows = [
        [code(sensor.name), codes(target.job_name for target in sensor.targets),
         f"{sensor.minimum_interval_seconds} s", sensor.default_status.value.lower(),
         cell(described(f"dagster: sensor `{sensor.name}`", description_of(sensor),
                        missing))]
        for sensor in sorted(defs.sensors or [], key=lambda sensor: sensor.name)
    ]  # fmt: skip
    body += ["## Sensors", "", *table(["sensor", "starts", "every", "when deployed",
                                       "description"], rows)]  # fmt: skip
    rows = [
        [code(schedule.name), code(schedule.cron_schedule),
         cell(schedule.execution_timezone or "UTC"), code(schedule.job_name),
         schedule.default_status.value.lower(),
         cell(described(f"dagster: schedule `{schedule.name}`", description_of(schedule),
                        missing))]
        for schedule in sorted(defs.schedules or [], key=lambda schedule: schedule.name)
    ]  # fmt: skip
    body += ["## Schedules", "", *table(["schedule", "cron", "time zone", "starts",
                                         "when deployed", "description"], rows)]  # fmt: skip
    rows = [
        [code(name), code(field), field_default(info), cell(described(
            f"dagster: resource `{name}` field `{field}`", info.description, missing))]
        for name, resource in sorted((defs.resources or {}).items())
        for field, info in getattr(type(resource), "model_fields", {}).items()
    ]  # fmt: skip
    body += ["## Resources", "", "What the assets, sensors and jobs are given, and its settings.",
             "", *table(["resource", "setting", "default", "description"], rows)]  # fmt: skip
    intro = (
        "The Dagster code location (`aaco_pipelines.definitions`): its assets with their checks "
        "and partitions, its jobs, sensors, schedule and resources, as the Dagster UI shows them."
    )
    return page("Dagster definitions", intro, body), missing


def field_default(info) -> str:
    if info.default_factory is not None or info.is_required():
        return "computed when loaded" if info.default_factory else "required"
    return NOTHING if info.default in (None, {}, []) else code(info.default)


# --- TraceLake tables ------------------------------------------------------------------------


def comments(source: str) -> tuple[dict[int, str], set[int]]:
    """{line: comment text} of a source file, and the lines holding nothing but a comment."""
    found: dict[int, str] = {}
    code_lines: set[int] = set()
    layout = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in layout:
            code_lines.update(range(token.start[0], token.end[0] + 1))
    return found, set(found) - code_lines


def block_above(line: int, found: dict[int, str], alone: set[int], floor: int = 0) -> str:
    """The comment lines right above `line` (none blank between), section rules left out."""
    lines: list[str] = []
    while line - 1 > floor and line - 1 in alone:
        line -= 1
        lines.insert(0, found[line])
    return " ".join(" ".join(p.split()) for p in lines if p and not p.startswith("---"))


def assignments(path: Path) -> tuple[dict[str, ast.AST], dict[int, str], set[int]]:
    """{name: its module-level assignment} of a source file, with comments() of it, where a
    string statement (a docstring of what follows) counts as a comment too."""
    source = path.read_text()
    nodes, (found, alone) = {}, comments(source)
    for node in ast.parse(source).body[1:]:  # the module's docstring is no comment on a name
        if isinstance(node, ast.Expr) and isinstance(getattr(node.value, "value", None), str):
            lines = range(node.lineno, node.end_lineno + 1)
            found.update({n: "" for n in lines} | {node.end_lineno: node.value.value.strip()})
            alone.update(lines)
        targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in node.targets if isinstance(node, ast.Assign) else targets:
            if isinstance(target, ast.Name):
                nodes[target.id] = node
    return nodes, found, alone


def assignment_comment(path: Path, name: str) -> str:
    """The comment right above the module-level assignment of `name`."""
    nodes, found, alone = assignments(path)
    return block_above(nodes[name].lineno, found, alone) if name in nodes else ""


def schema_sources(path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """{VARIABLE: (description, {column: comment})} of every `VARIABLE = pa.schema(...)` of a
    source file: the comment right above the assignment, and each column's comment on its line,
    then the comment lines right above it."""
    nodes, found, alone = assignments(path)
    schemas = {}
    for name, node in nodes.items():
        call = node.value
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "schema"):
            continue
        columns, floor = {}, node.lineno
        for element in (
            call.args[0].elts if call.args and isinstance(call.args[0], ast.List) else []
        ):
            first = element.elts[0] if isinstance(element, ast.Tuple) and element.elts else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                lines = range(element.lineno, element.end_lineno + 1)
                inline = [found[n] for n in lines if n in found and n not in alone]
                above = block_above(element.lineno, found, alone, floor)
                columns[first.value] = " — ".join(p for p in (" ".join(inline), above) if p)
            floor = element.end_lineno
        schemas[name] = (block_above(node.lineno, found, alone), columns)  # fmt: skip
    return schemas


def table_names() -> dict[str, str]:
    """{schema variable: table name} from the TABLES dict of tracelake/schema.py."""
    tables = assignments(SCHEMA_SOURCE)[0]["TABLES"].value
    return {
        value.id: key.value
        for key, value in zip(tables.keys, tables.values, strict=True)
        if isinstance(key, ast.Constant) and isinstance(value, ast.Name)
    }


def tracelake_page() -> tuple[str, list[str]]:
    """Every table of the TraceLake with its columns, their types and meaning, and the views
    read over them."""
    from aaco_pipelines.tracelake import schema

    sources = {
        variable: (path, *found)
        for path in sorted(TABLE_SOURCES.glob("*.py"))
        for variable, found in schema_sources(path).items()
    }
    variables = {table_name: variable for variable, table_name in table_names().items()}
    body: list[str] = []
    missing: list[str] = []
    for name, arrow_schema in schema.TABLES.items():
        variable = variables.get(name)
        path, description, columns = sources.get(variable, (None, "", {}))
        if path is None:
            missing.append(f"tracelake: table `{name}` has no `{variable} = pa.schema(` source")
        elif not description:
            where = os.path.relpath(path, REPO)
            missing.append(f"tracelake: table `{name}` has no comment above {variable} in {where}")
        body += [f"## {name}", "", *([text(description), ""] if description else [])]
        stored = [f"`{variable}` in `{os.path.relpath(path, REPO)}`"] if path else []
        if name in schema.STORED_AS:
            stored.append(f"stored as `{schema.STORED_AS[name]}`, read through the view `{name}`")
        if name in schema.TRACE_TABLES:
            stored.append(f"device-trace rows stored in `{schema.TRACE_TABLES[name][0]}`")
        body += ["Defined as " + "; ".join(stored) + ".", ""] if stored else []
        body += table(["column", "type", "meaning"], (
            [code(field.name), code(schema.duckdb_type(field.type)), cell(columns.get(field.name))]
            for field in arrow_schema
        ))  # fmt: skip
    body += [
        "## How tables are stored", "", text(assignment_comment(SCHEMA_SOURCE, "STORED_AS")), "",
        "## Views", "",
        "Views are read like tables. " + text(assignment_comment(SCHEMA_SOURCE, "VIEWS")), "",
    ]  # fmt: skip
    for name, sql in schema.VIEWS.items():
        reads = sorted(set(re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]+)", sql)))
        body += [f"### {name} (view)", "", f"Reads {codes(reads)}.", ""]
        body += ["```sql", inspect.cleandoc(sql), "```", ""]
    intro = (
        f"The TraceLake (schema version {schema.SCHEMA_VERSION}): every table with its columns, "
        "read from the schema and the comments of its source (`aaco_pipelines/tracelake/"
        "tables/`). Times are integer nanoseconds (Unix epoch for timestamps); `session_id` "
        "ties every row to its session."
    )
    return page("TraceLake tables", intro, body), missing


# --- environment variables -------------------------------------------------------------------


def string_mentions() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({every upper-case name in a string constant of the sources: the modules mentioning it},
    {name: the modules with a string that is the name alone, as reading the variable takes}),
    the environment registry itself left out (it would vouch for its own entries)."""
    mentions: dict[str, set[str]] = {}
    exact: dict[str, set[str]] = {}
    for folder, package in SOURCE_FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == ENVIRONMENT_SOURCE:
                continue
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            module = ".".join([package, *(p for p in parts if p != "__init__")])
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for name in re.findall(r"\b[A-Z][A-Z0-9_]*[A-Z0-9_]\b", node.value):
                        mentions.setdefault(name, set()).add(module)
                    if node.value in mentions:
                        exact.setdefault(node.value, set()).add(module)
    return mentions, exact


def environment_page() -> tuple[str, list[str]]:
    """Every environment variable aaco reads, its meaning and default, and the modules that
    name it."""
    from aaco_pipelines.foundation import environment_variables

    registry = environment_variables.ENVIRONMENT
    mentions, exact = string_mentions()
    unlisted = sorted(
        name for name in mentions if VARIABLE.fullmatch(name) and name not in registry
    )
    missing = [
        f"environment: `{name}` (in {', '.join(sorted(mentions[name]))}) has no entry in "
        "aaco_pipelines/foundation/environment_variables.py"
        for name in unlisted
    ]
    missing += [
        f"environment: ENVIRONMENT names `{name}`, which no source mentions"
        for name in registry
        if name not in mentions
    ]
    rows = []
    for name in [*registry, *unlisted]:
        meaning, _, default = registry.get(name, "").partition(environment_variables.DEFAULT)
        named_in = codes(sorted(exact.get(name) or mentions.get(name, ())))
        rows.append([code(name), cell(meaning), cell(default), named_in])
    intro = (
        "Every environment variable aaco reads, with its value when unset and the modules that "
        "name it in their code. The ones marked internal are set by aaco for its own child "
        "processes."
    )
    header = ["variable", "meaning", "default", "named in"]
    return page("Environment variables", intro, table(header, rows)), missing


# --- bottleneck rules ------------------------------------------------------------------------


def bottleneck_rules_page() -> tuple[str, list[str]]:
    """The bottleneck classifier's priors, every signal's bins and likelihoods, and why each
    signal matters."""
    from aaco_pipelines.analysis.bottleneck import classification

    intro = (
        "How a session's bottleneck class is judged (`aaco_pipelines.analysis.bottleneck."
        "classification`): each evidence signal falls into a bin of its rule, each bin says how "
        "likely that observation is under every class, and the posterior is the prior times "
        "those likelihoods (naive Bayes). A signal that was not measured drops out. The tables "
        "below are the classifier's own, printed by `rules_markdown()`."
    )
    return page("Bottleneck rules", intro, [classification.rules_markdown()]), []


# --- the section -----------------------------------------------------------------------------

PAGES = {  # {path under docs/: (what makes it, its title)}; each maker's docstring says what
    "reference/cli.md": (cli_page, "Command line"),  # it lists, on the section's front page
    "reference/sidecar.md": (sidecar_page, "Sidecar keys"),
    "reference/dagster.md": (dagster_page, "Dagster definitions"),
    "reference/tracelake.md": (tracelake_page, "TraceLake tables"),
    "reference/environment.md": (environment_page, "Environment variables"),
    "reference/bottleneck-rules.md": (bottleneck_rules_page, "Bottleneck rules"),
}


def reference_index() -> str:
    """The section's front page: one paragraph per page saying what it lists."""
    body = []
    for path, (make, title) in PAGES.items():
        body += [f"**[{title}]({Path(path).name})**: {first_paragraph(make.__doc__)}", ""]
    intro = (
        "These pages are generated from the code each time the site is built, so they always "
        "say what this version of aaco does. A command, sidecar key, Dagster definition, "
        "TraceLake table or environment variable without its documentation fails the build."
    )
    return page("Reference", intro, body)


def build() -> tuple[dict[str, str], list[str]]:
    """({page path under docs/: Markdown}, every entry of the code lacking documentation)."""
    pages, missing = {"reference/index.md": reference_index()}, []
    for path, (make, _) in PAGES.items():
        markdown, lacking = make()
        pages[path] = markdown
        missing += lacking
    return pages, missing


def pages() -> dict[str, str]:
    return build()[0]


def missing() -> list[str]:
    return build()[1]
