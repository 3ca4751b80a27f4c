"""Read YAML/JSON documents into pydantic models and report every problem as one `UserError`.

The cluster spec, the strategy document and the GraphItem are all hand-editable files. A user who
mistypes a field must see `<file>: <field.path>: <what is wrong>` in plain words, for every problem at
once, instead of a pydantic dump or a traceback. This module is the one place that knows how to turn
file, YAML/JSON and pydantic errors into such lines.

The same goes for files that are broken in bulk: a file too large to be a document, nesting deeper
than any document has, YAML aliases that multiply into millions of values ("billion laughs"), or a
YAML value its tag cannot hold all end as one such message, with the line where it happens, instead
of a RecursionError, a hang or a raw traceback.
"""

from __future__ import annotations

import datetime
import difflib
import json
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import PydanticCustomError

from adrun.errors import UserError

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]

# Every document is far shallower (a cluster spec nests 6 levels, a strategy 7); PyYAML's composer
# recurses per level and overflows Python's stack at about 490.
MAX_DEPTH = 64
# With YAML aliases expanded a document may hold one value per character of its file, plus this:
# room for any real use of anchors (`<<: *defaults`, `ssh: *ssh`), while an alias bomb that would
# expand a few hundred bytes into millions of values is refused before anything walks it.
ALIAS_SLACK = 10_000
# Beyond this many problems the rest of the report would only repeat the same mistake.
MAX_REPORTED = 20


def _whole_number_only(value: Any) -> Any:
    """Refuse YAML's `true` and `1.0` where Python would let them pass as the number 1."""
    if isinstance(value, (bool, float)):
        raise PydanticCustomError("literal_error", "Input should be 1", {"expected": "1"})
    return value


# The `version` field of every document: exactly the whole number 1.
Version1 = Annotated[Literal[1], BeforeValidator(_whole_number_only)]


class Problems(ValueError):
    """Findings of a cross-field check, each with the path of the field it is about.

    Raised from model validators: pydantic keeps the exception in the error's context, so the
    report can name the exact field (`nodes[2].address`) instead of the model that ran the check.
    Paths are relative to the model whose validator raised.
    """

    def __init__(self, findings: Sequence[tuple[Loc, str]]) -> None:
        self.findings = list(findings)
        super().__init__("; ".join(_join(loc, msg) for loc, msg in findings))


def format_loc(loc: Loc) -> str:
    """`("nodes", 1, "workers")` -> `nodes[1].workers`. A key that is no plain name (control
    characters, a lone surrogate no terminal can print, or very long) is shown quoted and cut short."""
    text = ""
    for item in loc:
        if isinstance(item, int):
            text += f"[{item}]"
            continue
        name = item if isinstance(item, str) and item.isprintable() and len(item) <= 80 else _show(item)
        text += f".{name}" if text else name
    return text


def describe_errors(err: ValidationError, model: type[BaseModel]) -> list[str]:
    """One `<field.path>: <plain words>` line per problem pydantic found while validating `model`
    (the first MAX_REPORTED of them, then how many more there are)."""
    lines = []
    for error in err.errors():
        loc, _ = _resolve(model, error["loc"])
        ctx_error = error.get("ctx", {}).get("error")
        if isinstance(ctx_error, Problems):
            lines += [_join(loc + sub_loc, msg) for sub_loc, msg in ctx_error.findings]
        elif error["type"] in ("extra_forbidden", "invalid_key"):
            # invalid_key: a field name YAML read as something other than text (`1:`, `null:`)
            parent, parent_model = _resolve(model, error["loc"][:-1])
            lines.append(_join(parent, _unknown_field(error["loc"][-1], parent_model)))
        else:
            lines.append(_join(loc, _plain_message(error)))
    if len(lines) > MAX_REPORTED:
        lines = lines[:MAX_REPORTED] + [f"... and {len(lines) - MAX_REPORTED} more problems"]
    return lines


def validate(model: type[M], data: Any, source: str) -> M:
    """`model.model_validate(data)`, with every problem reported as `<source>: <path>: <reason>`."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise UserError("\n".join(f"{source}: {line}" for line in describe_errors(err, model))) from None


def load_yaml_model(path: str | Path, model: type[M], max_bytes: int) -> M:
    """Read a YAML file of at most `max_bytes` and validate it as `model`; any problem becomes one
    `UserError`."""
    text = _read_text(path, max_bytes)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise UserError(f"{path}: {_yaml_problem(err, text)}") from None
    return validate(model, _require_mapping(data, path), str(path))


def load_json_model(path: str | Path, model: type[M]) -> M:
    """Read a JSON file and validate it as `model`; any problem becomes one `UserError`."""
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: line {err.lineno}, column {err.colno}: invalid JSON: {err.msg}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a {model.__name__}") from None
    return validate(model, _require_mapping(data, path), str(path))


def dump_yaml(data: dict[str, Any]) -> str:
    """Readable YAML: keys in model order, short lists and leaf mappings in flow style (`[784, 10]`)."""
    return yaml.dump(
        data, Dumper=_IndentedDumper, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
    )


class _IndentedDumper(yaml.SafeDumper):
    """SafeDumper that indents list items under their key (`nodes:\n  - address: ...`), as people write it."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


class _Refused(yaml.MarkedYAMLError):
    """Well-formed YAML that is no document: nested or expanded (through aliases) far beyond what any
    document needs, or with an alias inside the node it names."""

    def __init__(self, problem: str, mark: Any) -> None:  # Any: the pure or the C parser's Mark
        super().__init__(problem=problem, problem_mark=mark)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key written twice in one mapping (PyYAML silently keeps the last),
    nesting deeper than MAX_DEPTH, aliases that expand the document beyond its budget of values
    (one per character of the text, plus ALIAS_SLACK) or refer to a node that contains them, and
    reports a scalar its tag cannot hold (`!!int abc`, the date `2001-13-45`) as a YAML error at
    its line instead of the ValueError PyYAML lets escape.

    Keys brought in by a merge (`<<: *defaults`) may be overridden, as YAML intends.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0  # nodes composed so far, each alias counted as the nodes it stands for
        self._budget = len(stream) + ALIAS_SLACK
        self._anchor_sizes: dict[str | None, int] = {}  # anchor -> nodes of its (finished) subtree

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors and event.anchor not in self._anchor_sizes:
                raise _Refused(f"alias *{event.anchor} refers to a node that contains it", event.start_mark)
            self._count(self._anchor_sizes.get(event.anchor, 0), event.start_mark)  # unknown: PyYAML says so
            return super().compose_node(parent, index)
        if self._depth == MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self._values
        self._count(1, event.start_mark)
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._anchor_sizes[event.anchor] = self._values - before
        return node

    def _count(self, values: int, mark: Any) -> None:
        self._values += values
        if self._values > self._budget:
            raise _Refused(
                f"YAML aliases expand the document to more than {self._budget} values "
                f"(one per character of the file, plus {ALIAS_SLACK}); write repeated parts out or repeat less", mark
            )

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError):
            if not isinstance(node, yaml.ScalarNode):
                raise
            kind = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(
                None, None, f"{_show(node.value)} is not a valid {kind} (quote it to write text)", node.start_mark
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {_show(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_text(path: str | Path, max_bytes: int | None = None) -> str:
    """The file as text. No more than `max_bytes` are read, so `/dev/zero` or a data file given by
    mistake is refused instead of filling the memory."""
    try:
        with open(path, "rb") as file:
            data = file.read(-1 if max_bytes is None else max_bytes + 1)
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read it: {err.strerror or err}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise UserError(f"{path}: larger than {_size(max_bytes)}, the most this kind of file may be (is it the right file?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from None


def _size(nbytes: int) -> str:
    return f"{nbytes // 2**20} MiB" if nbytes >= 2**20 else f"{nbytes} bytes"


def _require_mapping(data: Any, path: str | Path) -> dict[str, Any]:
    if data is None:
        raise UserError(f"{path}: the file is empty")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of fields at the top level, got {_show(data)}")
    return data


def _yaml_problem(err: yaml.YAMLError, text: str) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow; it has no mark
        line = text.count("\n", 0, err.position) + 1
        column = err.position - text.rfind("\n", 0, err.position)
        where = f"line {line}, column {column}: "
        problem = f"the character U+{err.character:04X} is not allowed in YAML ({err.reason})"
    kind = "" if isinstance(err, _Refused) else "YAML syntax error: "
    return f"{where}{kind}{problem}"


def _join(loc: Loc, msg: str) -> str:
    path = format_loc(loc)
    return f"{path}: {msg}" if path else msg


def _resolve(model: type[BaseModel], loc: Loc) -> tuple[Loc, type[BaseModel] | None]:
    """Drop discriminated-union tags from a pydantic `loc` and find the model at its end.

    Pydantic puts the tag of a tagged union into the location (`variables.3.sync.ps.ps_task`);
    the user's file has no such level, so the path shown must skip it.
    """
    fields: list[str | int] = []
    current: Any = model
    for item in loc:
        if item == "[key]":  # pydantic's marker for "the key of this dict entry"
            continue
        current = _without_none(current)
        origin = get_origin(current)
        if isinstance(item, int) and origin is list:
            current = get_args(current)[0]
        elif _is_model(current) and item in current.model_fields:
            current = current.model_fields[item].annotation
        elif _is_model_union(current):
            current = next((m for m in get_args(current) if item in _literal_values(m)), None)
            continue
        elif origin is dict:
            current = get_args(current)[1]
        else:
            current = None
        fields.append(item)
    current = _without_none(current)
    return tuple(fields), current if _is_model(current) else None


def _without_none(tp: Any) -> Any:
    """`tp` without `None` in a union and without `Annotated` metadata (kept on list items, such as a
    list of tagged unions)."""
    if get_origin(tp) is Annotated:
        return _without_none(get_args(tp)[0])
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _without_none(args[0]) if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 - built from a tuple at run time
    return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_model_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and all(_is_model(a) for a in get_args(tp))


def _literal_values(model: type[BaseModel]) -> set[Any]:
    return {
        value
        for field in model.model_fields.values()
        if get_origin(field.annotation) is Literal
        for value in get_args(field.annotation)
    }


def _unknown_field(name: Any, owner: type[BaseModel] | None) -> str:
    """`name` is the key as YAML read it: usually text, but `1:` or `null:` give a number or None."""
    if owner is None:
        return f"unknown field {_show(name)}"
    known = list(owner.model_fields)
    close = difflib.get_close_matches(name, known, n=1) if isinstance(name, str) else []
    hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(known)}"
    return f"unknown field {_show(name)} ({hint})"


def _plain_message(error: Any) -> str:
    kind, ctx, got = error["type"], error.get("ctx", {}), _show(error["input"])
    messages = {
        "missing": "required field is missing",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {got}",
        "greater_than": f"must be > {ctx.get('gt')}, got {got}",
        "less_than_equal": f"must be <= {ctx.get('le')}, got {got}",
        "less_than": f"must be < {ctx.get('lt')}, got {got}",
        "literal_error": f"must be {ctx.get('expected')}, got {got}",
        "int_parsing": f"expected a whole number, got {got}",
        "int_type": f"expected a whole number, got {got}",
        "int_from_float": f"expected a whole number, got {got}",
        "finite_number": f"must be a finite number, got {got}",
        "float_type": f"expected a number, got {got}",
        "float_parsing": f"expected a number, got {got}",
        "bool_parsing": f"expected true or false, got {got}",
        "bool_type": f"expected true or false, got {got}",
        "string_type": f"expected a text value, got {got}",
        "string_too_short": "must not be empty",
        "string_unicode": "contains a lone UTF-16 surrogate (such as '\\ud800'), which has no UTF-8 form",
        "list_type": f"expected a list, got {got}",
        "too_short": f"needs at least {ctx.get('min_length')} entry/entries, got {ctx.get('actual_length')}",
        "dict_type": f"expected a mapping, got {got}",
        "model_type": f"expected a mapping of fields, got {got}",
        "model_attributes_type": f"expected a mapping of fields, got {got}",
        "union_tag_not_found": f"missing field {ctx.get('discriminator')}",
        "union_tag_invalid": f"unknown {str(ctx.get('discriminator')).strip(chr(39))} "
        f"'{ctx.get('tag')}', expected one of {ctx.get('expected_tags')}",
    }
    if kind in messages:
        return messages[kind]
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    msg: str = error["msg"]
    return msg[:1].lower() + msg[1:]


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML: `'two'`, `-1`, `true`, `null`, `a list`; long text cut
    short, so a 200,000-character value does not become a 200,000-character message."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None or isinstance(value, bool):
        text = json.dumps(value)
    elif isinstance(value, datetime.date):  # YAML reads 2024-01-31 as a date
        text = value.isoformat()
    else:
        text = repr(value)
    return f"{text[:30]}... ({len(text)} characters)" if len(text) > 40 else text
