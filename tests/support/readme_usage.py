"""README.md's "Usage" block, generated from the click commands: their options' help is the one
place the options are documented, and tests/unit/test_readme.py checks the README against it.

    .venv/bin/python -m tests.support.readme_usage     # rewrite the block in README.md after changing an option
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
import click

from tests.support.paths import REPO

README = REPO / "README.md"
BEGIN = "<!-- usage: generated from adrun's click options by `python -m tests.support.readme_usage`; do not edit -->"
END = "<!-- end of usage -->"
WIDTH = 110


def _commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """Every command under `group`, in the order the README shows them: `run` first, then the
    others by name, sub-commands under their group."""
    names = sorted(group.commands, key=lambda name: (name != "run", name))
    for name in names:
        command = group.commands[name]
        sub = click.Context(command, info_name=name, parent=ctx)
        if isinstance(command, click.Group):
            yield from _commands(command, sub)
        else:
            yield command, sub


def render_usage(main: click.Group) -> str:
    """Every command's summary, usage line and options (metavar, help, default and bounds, as
    `--help` prints them), without the `--help` option every command has."""
    formatter = click.HelpFormatter(width=WIDTH, max_width=WIDTH)
    root = click.Context(main, info_name="adrun")
    for number, (command, ctx) in enumerate(_commands(main, root)):
        if number:
            formatter.write_paragraph()
        formatter.write(f"# {command.get_short_help_str(limit=WIDTH - 2)}\n")
        path = ctx.command_path.replace("adrun run", "adrun [run]")  # a first word that is no command runs it
        formatter.write_usage(path, " ".join(command.collect_usage_pieces(ctx)), prefix="")
        records = [record for param in command.get_params(ctx)
                   if isinstance(param, click.Option) and "--help" not in param.opts
                   and (record := param.get_help_record(ctx)) is not None]
        if records:
            with formatter.indentation():
                formatter.write_dl(records)
    return "```\n" + formatter.getvalue() + "```\n"


def readme_block(text: str) -> str:
    """The generated block of README.md's text, between its markers."""
    start = text.index(BEGIN) + len(BEGIN) + 1
    return text[start:text.index(END, start)]


def main() -> None:
    from adrun.cli import main as adrun_main

    text = README.read_text()
    start = text.index(BEGIN) + len(BEGIN) + 1
    README.write_text(text[:start] + render_usage(adrun_main) + text[text.index(END, start):])
    print(f"{README}: usage block rewritten", file=sys.stderr)


if __name__ == "__main__":
    main()
