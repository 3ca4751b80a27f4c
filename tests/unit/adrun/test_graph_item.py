"""GraphItem: sizes, fingerprint stability, JSON round trip, readable load errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.graph_item import GraphItem, PooledBags, VariableInfo, load_graph_item, save_graph_item


def make_item(kernel_shape: list[int] | None = None) -> GraphItem:
    return GraphItem(
        variables=[
            VariableInfo(name="dense/kernel", shape=kernel_shape or [784, 10], dtype="float32", trainable=True, grad="dense"),
            VariableInfo(name="dense/bias", shape=[10], dtype="float32", trainable=True, grad="dense"),
            VariableInfo(name="emb", shape=[1000, 16], dtype="bfloat16", trainable=True, grad="sparse"),
            VariableInfo(name="frozen", shape=[3], dtype="float64", trainable=True, grad=None),
            VariableInfo(name="global_step", shape=[], dtype="int64", trainable=False, grad=None),
        ],
        optimizer="GradientDescentOptimizer",
        global_step="global_step",
        batch_size=32,
    )


def test_nbytes_from_shape_and_itemsize() -> None:
    sizes = {v.name: v.nbytes for v in make_item().variables}
    assert sizes == {"dense/kernel": 784 * 10 * 4, "dense/bias": 40, "emb": 1000 * 16 * 2, "frozen": 24, "global_step": 8}


def test_unknown_dimension_counts_as_one() -> None:
    assert VariableInfo(name="v", shape=[-1, 8], dtype="int32", trainable=True).nbytes == 32


def test_trainable_with_grads_keeps_creation_order() -> None:
    assert [v.name for v in make_item().trainable_with_grads()] == ["dense/kernel", "dense/bias", "emb"]


def test_fingerprint_stable_and_sensitive_to_shape() -> None:
    assert make_item().fingerprint == make_item().fingerprint
    assert len(make_item().fingerprint) == 16
    assert make_item([784, 20]).fingerprint != make_item().fingerprint


def test_fingerprint_ignores_non_variable_fields() -> None:
    other = make_item().model_copy(update={"batch_size": 64, "optimizer": "AdamOptimizer"})
    assert other.fingerprint == make_item().fingerprint


def test_fingerprint_depends_on_order() -> None:
    item = make_item()
    swapped = item.model_copy(update={"variables": list(reversed(item.variables))})
    assert swapped.fingerprint != item.fingerprint


def test_json_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    save_graph_item(make_item(), path)
    loaded = load_graph_item(path)
    assert loaded == make_item()
    assert GraphItem.from_json(make_item().to_json()) == make_item()


def test_unknown_dtype_rejected(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text('{"variables": [{"name": "v", "shape": [2], "dtype": "f4", "trainable": true}]}')
    with pytest.raises(UserError, match=r"graph.json: variables\[0\].dtype: unknown dtype 'f4'"):
        load_graph_item(path)


def test_duplicate_variable_names_rejected() -> None:
    v = VariableInfo(name="v", shape=[], dtype="float32", trainable=True)
    with pytest.raises(ValueError, match=r"variables\[1\].name: duplicate variable 'v' \(also variables\[0\]\)"):
        GraphItem(variables=[v, v])


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text('{\n  "variables": [,]\n}')
    with pytest.raises(UserError, match=r"graph.json: line 2, column \d+: invalid JSON"):
        load_graph_item(path)


def test_deeply_nested_json(tmp_path: Path) -> None:
    # Before: a raw RecursionError from the JSON parser.
    path = tmp_path / "graph.json"
    path.write_text('{"variables": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(UserError, match=r"graph.json: nested too deeply to be a GraphItem$"):
        load_graph_item(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope.json: file not found"):
        load_graph_item(tmp_path / "nope.json")


def with_blocker(item: GraphItem, name: str, reason: str | None) -> GraphItem:
    return item.model_copy(
        update={"variables": [v.model_copy(update={"partition_blocker": reason}) if v.name == name else v
                              for v in item.variables]}
    )


def test_partition_blocker_defaults_to_none() -> None:
    assert all(v.partition_blocker is None for v in make_item().variables)


def test_fingerprint_ignores_partition_blocker() -> None:
    blocked = with_blocker(make_item(), "dense/kernel", "read inside tf.while_loop")
    assert blocked.variables[0].partition_blocker == "read inside tf.while_loop"
    assert blocked.fingerprint == make_item().fingerprint
    assert blocked != make_item()


def test_partition_blocker_round_trip(tmp_path: Path) -> None:
    item = with_blocker(make_item(), "emb", "created with tf.Variable or a Keras layer, not tf.compat.v1.get_variable")
    path = tmp_path / "graph.json"
    save_graph_item(item, path)
    assert load_graph_item(path) == item


def test_json_without_partition_blocker_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text(
        '{"version": 1, "variables": [{"name": "w", "shape": [3, 2], "dtype": "float32", "trainable": true, '
        '"grad": "dense"}], "optimizer": null, "global_step": null, "batch_size": null}'
    )
    item = load_graph_item(path)
    assert item.variables[0].partition_blocker is None
    assert item.fingerprint == GraphItem(
        variables=[VariableInfo(name="w", shape=[3, 2], dtype="float32", trainable=True, grad="dense")]
    ).fingerprint


def with_pooled(item: GraphItem) -> GraphItem:
    return item.model_copy(update={"variables": [
        v.model_copy(update={"pooled": PooledBags(examples=32, ids=32 * 20)}) if v.name == "emb" else v
        for v in item.variables]})


def test_pooled_bags_round_trip_and_leave_the_fingerprint_alone(tmp_path: Path) -> None:
    item = with_pooled(make_item())
    path = tmp_path / "graph.json"
    save_graph_item(item, path)
    assert load_graph_item(path) == item
    assert load_graph_item(path).variables[2].pooled == PooledBags(examples=32, ids=640)
    assert item.fingerprint == make_item().fingerprint
    assert item != make_item()


def test_json_without_pooled_bags_still_loads(tmp_path: Path) -> None:
    """A record made before capture looked at pooled lookups: none counted."""
    path = tmp_path / "graph.json"
    path.write_text(
        '{"version": 1, "variables": [{"name": "emb", "shape": [30, 2], "dtype": "float32", "trainable": true, '
        '"grad": "sparse", "partition_blocker": null}], "optimizer": null, "global_step": null, "batch_size": 8}'
    )
    assert load_graph_item(path).variables[0].pooled is None
