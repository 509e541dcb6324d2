"""YAML from a file someone else wrote, refused when its aliases expand it beyond reason.

PyYAML's safe loader shares one object for every alias of an anchor, so a 400-byte file of
anchors of anchors (the "billion laughs") loads fast, and then whatever walks it (a repr for an
error message, the JSON of the measuring process's request) expands it: 28 MB of one error
line, gigabytes per run. So the composed document is measured as it would expand, every alias
counted as the values it stands for, and refused above MAX_VALUES before anything walks it.
"""

from __future__ import annotations

import yaml

MAX_VALUES = 100_000  # a model's sidecar or the registry's objectives hold tens


class ExpandsTooFar(yaml.YAMLError):
    """The document's aliases expand it beyond MAX_VALUES values."""


class _BoundedLoader(yaml.SafeLoader):
    def compose_document(self):
        node = super().compose_document()
        if _expanded_size(node, {}) > MAX_VALUES:
            raise ExpandsTooFar(
                f"its aliases expand it to more than {MAX_VALUES:,} values: write the values "
                "out, or use fewer anchors of anchors"
            )
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values the node stands for, aliases expanded (each shared node counted
    once per use, computed once)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_VALUES + 1  # a node that contains itself expands without end
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, sizes) for item in node.value)
    else:
        size = 1
    sizes[id(node)] = min(size, 10 * MAX_VALUES)  # bounded: sums stay small integers
    return sizes[id(node)]


def load_yaml(text: str):
    """The document, as yaml.safe_load reads it, or ExpandsTooFar (a yaml.YAMLError)."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ExpandsTooFar("it nests too deep to read (thousands of levels)") from None
