"""Text from a file or a flag quoted back to people: short, and never able to steer a terminal.

A value in an error message is an excerpt (`reprlib`'s bounded repr, whatever its size: a YAML
alias bomb's value expands to millions of items, and a full repr of it took minutes and
gigabytes), and text a person wrote into the lake (an alert's reason, who acknowledged it) is
printed with its control characters escaped: an ESC sequence would clear or retitle the
terminal, a newline forge another event's line.
"""

from __future__ import annotations

import reprlib

EXCERPT_CHARACTERS = 60

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, EXCERPT_CHARACTERS, EXCERPT_CHARACTERS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def excerpt(value) -> str:
    """The value as the user would recognise it, on one short line."""
    text = printable(_REPR.repr(value))
    return text if len(text) <= EXCERPT_CHARACTERS else text[: EXCERPT_CHARACTERS - 3] + "..."


def printable(text: str) -> str:
    """`text` with every character Python does not call printable (controls such as ESC and
    newline, bidi overrides, line separators) as its escape, `\\x1b`, `\\n`, `\\u202e`."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )
