"""The `adrun` command group; each command module adds its commands to it."""

from __future__ import annotations

import click

from adrun import __version__


class _RunByDefault(click.Group):
    """`adrun train.py` means `adrun run train.py`: a first word that is no command starts a run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_RunByDefault, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="adrun")
def main() -> None:
    """Run an unmodified TensorFlow graph-mode script data-parallel on a cluster.

    \b
      adrun train.py                       this machine as a local cluster
      adrun --spec cluster.yml --strategy AllReduce train.py --epochs 3
      adrun strategy build PS --spec cluster.yml -o plan.yml train.py
    """
