"""`aaco completion bash|zsh|tcsh`: the shell's completion script for every command and option,
generated from the parser by shtab (so it cannot fall behind the commands); arguments marked
as paths (common.path_argument) complete file or folder names."""

from __future__ import annotations

from aaco_pipelines.cli.common import with_examples
from aaco_pipelines.config import AacoPaths

SHELLS = ("bash", "zsh", "tcsh")


def completion_script(parser, shell: str) -> str:
    """The shell's completion script for `parser` (aaco's own: build_parser)."""
    import shtab

    kinds = {"file": shtab.FILE, "dir": shtab.DIRECTORY}
    for action in walk_actions(parser):
        kind = getattr(action, "aaco_path", None)
        if kind:
            action.complete = kinds[kind]
    return shtab.complete(parser, shell=shell)


def walk_actions(parser):
    """Every argument of the parser and of all its subcommands."""
    import argparse

    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases once
                yield from walk_actions(sub)


def cmd_completion(args, paths: AacoPaths) -> int:
    print(completion_script(args.root_parser, args.shell))
    return 0


def add_parser(sub, root) -> None:
    """`aaco completion`, which completes the commands of `root`, the whole parser."""
    completion = sub.add_parser(
        "completion", help="print the shell completion script (bash, zsh or tcsh)"
    )
    completion.add_argument(
        "shell", choices=SHELLS, metavar="SHELL", help="the shell to complete in: bash, zsh or tcsh"
    )
    with_examples(
        completion,
        "aaco completion bash > ~/.local/share/bash-completion/completions/aaco",
        "aaco completion zsh > ~/.zfunc/_aaco  # with fpath+=(~/.zfunc) before compinit",
    )
    completion.set_defaults(func=cmd_completion, root_parser=root)
