"""README.md's option references agree with the code that defines the options.

The command-line options are documented once, in their click `help`; the README's "Usage" block is
generated from them (tests/support/readme_usage.py). The builders' options are documented in their pydantic
`Options` (names, defaults, descriptions); the README's "Strategies" table is checked against them.

At the root of tests/unit: README.md is the whole tree's.
"""

from __future__ import annotations

import re

import pytest

from adrun.cli import main
from adrun.strategies import BUILDERS
from adrun.strategies.auto import AUTO, AutoOptions
from tests.support.readme_usage import README, readme_block, render_usage

pytestmark = pytest.mark.timeout(30)


def test_the_usage_block_is_generated_from_the_click_options():
    """Fails when an option, its help, metavar or default changed without the README: run
    `.venv/bin/python -m tests.support.readme_usage` to regenerate the block."""
    assert readme_block(README.read_text()) == render_usage(main)


def test_the_usage_block_names_every_option_of_every_command():
    """The generator leaves nothing out (only `--help`, which every command has)."""
    block = readme_block(README.read_text())
    commands = [main]
    while commands:
        command = commands.pop()
        commands += getattr(command, "commands", {}).values()
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("-") and opt not in ("--help", "--version"):
                    assert re.search(rf"(^|[ ,]){re.escape(opt)}\b", block, re.M), f"{command.name} {opt}"


def _strategy_rows() -> dict[str, str]:
    """builder name -> the "options (default)" cell of README's strategies table."""
    text = README.read_text().split("## Strategies", 1)[1]
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
        elif rows and not line.startswith("|"):
            break
    return rows


def _named_options(name: str, rows: dict[str, str]) -> dict[str, str | None]:
    """The options the row of `name` names, with the default it gives (None: no default given),
    including those of the builder it refers to with "as X"."""
    cell = rows[name]
    named: dict[str, str | None] = {}
    for other in re.findall(r"\bas (\w+)", cell):
        named.update(_named_options(other, rows))
    for option, default in re.findall(r"`(\w+)`(?: \(([^)]*)\))?", cell):
        named[option] = default or named.get(option)
    return named


def _default_text(value: object) -> str | None:
    if value is None:
        return None  # derived from the cluster: the README says from what, in words
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("name", [*sorted(BUILDERS), AUTO])
def test_the_strategies_table_gives_every_option_and_its_default(name: str):
    """Before this test the README claimed to be generated from the builders' docstrings; it was
    not, and nothing checked it."""
    rows = _strategy_rows()
    options = (AutoOptions if name == AUTO else BUILDERS[name].Options).model_fields
    named = _named_options(name, rows)
    assert sorted(named) == sorted(options), f"README's {name} row"
    for option, field in options.items():
        default = _default_text(field.default)
        if named[option] is not None and default is not None:
            assert named[option] == default, f"README's {name} row: `{option}`"


def _spec_rows() -> dict[str, str]:
    """field path (`nodes[].ssh.port`) -> the default cell of README's cluster spec table; a row
    naming several fields (`nodes[].ssh.user` / `port` / `identity_file`) gives each the cell."""
    text = README.read_text().split("## Cluster spec", 1)[1]
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            first, *siblings = re.findall(r"`([^`]+)`", cells[0])
            prefix = first.rsplit(".", 1)[0] + "." if "." in first else ""
            for path in (first, *(prefix + name for name in siblings)):
                rows[path] = cells[2]
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_cluster_spec_table_gives_every_field_and_its_default():
    from pydantic_core import PydanticUndefined

    from adrun.spec import ClusterSpec, Node, SSHConfig

    rows = _spec_rows()
    fields = {**{name: f for name, f in ClusterSpec.model_fields.items() if name != "nodes"},
              **{f"nodes[].{name}": f for name, f in Node.model_fields.items() if name != "ssh"},
              **{f"nodes[].ssh.{name}": f for name, f in SSHConfig.model_fields.items()}}
    assert sorted(rows) == sorted(fields)
    for path, field in fields.items():
        if field.default is PydanticUndefined:
            assert rows[path] == "required", path
        elif field.default is not None and not isinstance(field.default, bool):
            # the table's first word (or code span) is the default; words may follow ("ssh defaults, 22")
            shown = re.split(r"[,;]\s*", rows[path].replace("`", ""))
            assert str(field.default).replace("'", "") in shown, f"README's {path}: {rows[path]!r}, the field: {field.default!r}"
