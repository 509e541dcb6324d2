"""Models whose weights live in external files (every model over protobuf's 2 GB: every LLM).

The `.onnx` file then holds the graph, and each large tensor names a file (`location`, relative to
the model's folder) with an offset and a length. A model's identity is the model file and those
files together, its snapshot copies them all, and ONNX Runtime loads them from the snapshot. The
locations are read from a file the user gave us, so they are data: a location that is absolute,
climbs out of the model's folder (`..`, or a link pointing outside), or names no regular file is
refused with the model and the location named, before anything is copied or loaded.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from aaco_pipelines.errors import AacoInputError

if TYPE_CHECKING:  # onnx (0.1 s) is imported where a model is parsed: most have no external data
    import onnx

FIX = (
    "keep the weight files beside the model, named as the model refers to them "
    "(re-save it with onnx.save_model(..., save_as_external_data=True, location=NAME))"
)
BYTES_FIX = (
    "re-save the model so that its offsets and lengths are written again "
    "(onnx.save_model(..., save_as_external_data=True, location=NAME)), or re-export it"
)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph stores: initializers and Constant values, subgraphs included."""
    import onnx

    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                yield attribute.t
            elif attribute.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from _tensors(subgraph)


def _location(tensor: onnx.TensorProto, model_path: Path) -> tuple[str, int, int | None]:
    entries = {entry.key: entry.value for entry in tensor.external_data}
    return (
        entries.get("location", ""),
        _byte_count(entries, "offset", tensor.name, model_path) or 0,
        _byte_count(entries, "length", tensor.name, model_path),
    )


# The largest offset or length a file can have (ONNX Runtime reads them as int64).
MAX_BYTE_COUNT = (1 << 63) - 1
_DECIMAL = re.compile(r"[0-9]{1,19}")


def _byte_count(entries: dict[str, str], key: str, tensor: str, model_path: Path) -> int | None:
    """An external tensor's `offset` or `length`, None when not given. The value is text from
    the user's file: anything but a plain decimal count of bytes (`abc`, `-8`, `1e3`, ` 4`) is
    one error naming the weight, never Python's ValueError (which ended every registry scan)
    nor a negative number left for ONNX Runtime to refuse."""
    value = entries.get(key)
    if value is None:
        return None
    if not _DECIMAL.fullmatch(value) or int(value) > MAX_BYTE_COUNT:
        shown = repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
        raise AacoInputError(
            f"weight {tensor!r} has external-data {key} {shown}, not a whole number of bytes "
            f"in 0..{MAX_BYTE_COUNT}",
            path=model_path,
            fix=BYTES_FIX,
        )
    return int(value)


def external_files(model_path: Path, model: onnx.ModelProto | None = None) -> list[str]:
    """The external data files of a model, as relative locations, sorted; [] for a model that
    keeps its weights inside. Each is checked: inside the model's folder, a regular file, and
    long enough for every tensor stored in it. A file that does not parse has none here: the
    graph stage reports it as not a model."""
    if model is None:
        model = _parsed_if_external(model_path, _scan(model_path))
        if model is None:
            return []
    import onnx

    folder = model_path.parent.resolve()
    needed: dict[str, int] = {}
    for tensor in _tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location, offset, length = _location(tensor, model_path)
        path = _inside(model_path, folder, location, tensor.name)
        end = offset + (length if length is not None else 0)
        needed[location] = max(needed.get(location, 0), end, 1 if length is None else 0)
        size = path.stat().st_size
        if end > size:
            raise AacoInputError(
                f"weight {tensor.name!r} needs bytes up to {end} of external file {location!r}, "
                f"which has {size}",
                path=model_path,
                fix=FIX,
            )
    return sorted(needed)


def _inside(model_path: Path, folder: Path, location: str, tensor: str) -> Path:
    """The external file a location names, refused unless it is a regular file in the folder."""
    relative = Path(location)
    if not location or relative.is_absolute() or ".." in relative.parts or "\0" in location:
        raise AacoInputError(
            f"weight {tensor!r} names external file {location!r}, outside the model's folder",
            path=model_path,
            fix=FIX,
        )
    path = folder / relative
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise AacoInputError(
            f"external weight file {location!r} (of weight {tensor!r}) is missing",
            path=model_path,
            fix=FIX,
        ) from None
    if not resolved.is_relative_to(folder):
        raise AacoInputError(
            f"external weight file {location!r} leads outside the model's folder",
            path=model_path,
            fix=FIX,
        )
    if not resolved.is_file():
        raise AacoInputError(
            f"external weight file {location!r} is not a regular file", path=model_path, fix=FIX
        )
    return path


# Every external tensor carries this key, so a file without these bytes has no external data
# and need not be parsed (a 2 GB model with its weights inside would be, at every registry scan).
_MARKER = b"location"


def model_sha256(model_path: Path, chunk_bytes: int = 1 << 20) -> str:
    """The content hash of a model: its file alone when it keeps its weights inside (the plain
    sha256 of the file, as before), else the file and each external file in location order,
    each preceded by its location, so renaming or editing any of them is a new version.

    A file that does not parse, or names external files wrongly, hashes as a plain file: a
    model file given by path still gets as far as its snapshot, which reports the problem. The
    registry scan asks `hashed_model` instead, to report and skip such a file."""
    return hashed_model(model_path, chunk_bytes)[0]


def hashed_model(model_path: Path, chunk_bytes: int = 1 << 20) -> tuple[str, AacoInputError | None]:
    """(the model's content hash as `model_sha256` gives it, why its external data cannot be
    used or None), reading every file once. An unreadable model file raises its OSError."""
    digest = hashlib.sha256()
    model = _parsed_if_external(model_path, _scan(model_path, digest, chunk_bytes))
    try:
        files = external_files(model_path, model) if model is not None else []
        if not files:
            return digest.hexdigest(), None
        combined = hashlib.sha256(b"aaco-model-with-external-data\0" + digest.digest())
        for location in files:
            combined.update(location.encode() + b"\0")
            part = hashlib.sha256()
            _scan(model_path.parent / location, part, chunk_bytes)
            combined.update(part.digest())
        return combined.hexdigest(), None
    except AacoInputError as problem:
        return digest.hexdigest(), problem
    except OSError as exc:  # an external file unreadable, or gone since it was checked
        problem = AacoInputError(
            f"an external weight file cannot be read ({exc.strerror or exc}: {exc.filename})",
            path=model_path,
            fix="make the weight files readable by the user aaco runs as",
        )
        return digest.hexdigest(), problem


def _scan(path: Path, digest=None, chunk_bytes: int = 1 << 20) -> bool:
    """Whether _MARKER occurs in the file (looked for across chunk edges), feeding `digest`."""
    marked, tail = False, b""
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            if digest is not None:
                digest.update(chunk)
            if not marked:
                marked = _MARKER in tail + chunk
                tail = chunk[-(len(_MARKER) - 1) :]
                if marked and digest is None:
                    break
    return marked


def _parsed_if_external(model_path: Path, marked: bool) -> onnx.ModelProto | None:
    """The model without its weights when it may have external data (`marked`), else None; None
    too for a file that does not parse: loading it says so (graph.inputs.load_model). A model
    that keeps its weights inside, up to 2 GB, is never parsed just to learn it has none."""
    if not marked:
        return None
    import onnx

    try:
        return onnx.load(str(model_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError, OSError: not a model
        return None


def total_bytes(model_path: Path) -> int:
    """The model file and its external files: what a session must map."""
    return model_path.stat().st_size + sum(
        os.stat(model_path.parent / location).st_size for location in external_files(model_path)
    )
