"""Builders, the Strategy document's validation and YAML io, and plan/graph/spec matching."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.graph_item import GraphItem, VariableInfo
from adrun.spec import ClusterSpec, Node
from adrun.strategies import BUILDERS, build_strategy
from adrun.strategies.document import (
    AllReduceSync,
    PSSync,
    Strategy,
    check_matches,
    dump_strategy,
    load_strategy,
    strategy_to_yaml,
)
from adrun.strategies.ps import least_loaded_assignment


def float_var(name: str, nbytes: int, grad: str | None = "dense", trainable: bool = True) -> VariableInfo:
    return VariableInfo(name=name, shape=[nbytes // 4], dtype="float32", trainable=trainable, grad=grad)


def graph(*sizes: int) -> GraphItem:
    """Variables v0, v1, ... of the given byte sizes, plus state that must not be planned."""
    variables = [float_var(f"v{i}", size) for i, size in enumerate(sizes)]
    variables.append(float_var("no_grad", 4000, grad=None))
    variables.append(VariableInfo(name="global_step", shape=[], dtype="int64", trainable=False))
    return GraphItem(variables=variables)


def spec(workers: int = 2, ps: int = 2) -> ClusterSpec:
    return ClusterSpec(version=1, nodes=[Node(address="localhost", workers=workers, ps=ps)])


def ps_tasks(strategy: Strategy) -> list[int]:
    return [v.sync.ps_task for v in strategy.variables if isinstance(v.sync, PSSync)]


def ps_loads(strategy: Strategy, item: GraphItem) -> list[int]:
    sizes = {v.name: v.nbytes for v in item.variables}
    loads = [0] * strategy.num_ps
    for v in strategy.variables:
        assert isinstance(v.sync, PSSync)
        loads[v.sync.ps_task] += sizes[v.name]
    return loads


# --- builders ---------------------------------------------------------------------------------


def test_registry_names() -> None:
    assert sorted(BUILDERS) == ["AllReduce", "PS", "PSLoadBalancing"]
    assert all(b.__doc__ and "Choose it" in b.__doc__ for b in BUILDERS.values())


def test_only_variables_with_gradients_are_planned() -> None:
    strategy = build_strategy("PS", graph(400, 300), spec(), {})
    assert [v.name for v in strategy.variables] == ["v0", "v1"]


def test_ps_puts_everything_on_task_0() -> None:
    strategy = build_strategy("PS", graph(400, 300, 200), spec(ps=3), {"sync": "true", "staleness": "2"})
    assert ps_tasks(strategy) == [0, 0, 0]
    assert strategy.options == {"sync": True, "staleness": 2}
    assert all(isinstance(v.sync, PSSync) and v.sync.staleness == 2 for v in strategy.variables)


def test_ps_load_balancing_lpt() -> None:
    item = graph(400, 300, 200, 200, 100)
    strategy = build_strategy("PSLoadBalancing", item, spec(ps=2), {})
    # 400 -> 0; 300 -> 1; 200 -> 1 (500); 200 -> 0 (600); 100 -> 1 (600)
    assert ps_tasks(strategy) == [0, 1, 1, 0, 1]
    assert ps_loads(strategy, item) == [600, 600]


def test_ps_load_balancing_sorts_before_placing() -> None:
    # In creation order (AutoDist) the last, largest variable lands on top of an even split: 700/500.
    item = graph(100, 200, 200, 300, 400)
    strategy = build_strategy("PSLoadBalancing", item, spec(ps=2), {})
    assert ps_tasks(strategy) == [1, 1, 0, 1, 0]
    assert ps_loads(strategy, item) == [600, 600]


def test_least_loaded_assignment_ties_go_to_lowest_index_and_keep_order() -> None:
    assert least_loaded_assignment([8, 8, 8, 8], 3) == ([0, 1, 2, 0], [16, 8, 8])
    assert least_loaded_assignment([], 2) == ([], [0, 0])


def test_allreduce_groups_by_chunk_size() -> None:
    strategy = build_strategy("AllReduce", graph(4, 4, 4, 4, 4), spec(ps=0), {"chunk_size": "2"})
    assert [v.sync.group for v in strategy.variables if isinstance(v.sync, AllReduceSync)] == [0, 0, 1, 1, 2]
    assert strategy.options == {"chunk_size": 2}
    assert strategy.num_ps == 0


def test_allreduce_default_chunk() -> None:
    strategy = build_strategy("AllReduce", graph(*[4] * 130), spec(), {})
    groups = [v.sync.group for v in strategy.variables if isinstance(v.sync, AllReduceSync)]
    assert groups.count(0) == 128 and groups[128:] == [1, 1]


def test_allreduce_chunk_size_must_be_positive() -> None:
    with pytest.raises(UserError, match=r"AllReduce options: chunk_size: must be >= 1"):
        build_strategy("AllReduce", graph(4), spec(), {"chunk_size": "0"})


def test_option_value_must_convert() -> None:
    with pytest.raises(UserError, match=r"PS options: sync: expected true or false, got 'maybe'"):
        build_strategy("PS", graph(4), spec(), {"sync": "maybe"})


def test_ps_staleness_needs_sync() -> None:
    with pytest.raises(UserError, match=r"PS options: staleness: .*needs sync=true"):
        build_strategy("PS", graph(4), spec(), {"sync": "false", "staleness": "1"})


@pytest.mark.parametrize("name", ["PS", "PSLoadBalancing"])
def test_ps_builder_without_ps_process(name: str) -> None:
    with pytest.raises(UserError, match=r"has no PS process.*AllReduce.*`ps: 1`"):
        build_strategy(name, graph(4), spec(ps=0), {})


def test_unknown_builder_lists_known_ones() -> None:
    with pytest.raises(UserError) as info:
        build_strategy("Horovod", graph(4), spec(), {})
    assert "unknown strategy builder 'Horovod'" in str(info.value)
    assert str(info.value).endswith("known builders: AllReduce, PS, PSLoadBalancing")


def test_unknown_builder_case_hint() -> None:
    with pytest.raises(UserError, match=r"did you mean PSLoadBalancing\?"):
        build_strategy("psloadbalancing", graph(4), spec(), {})


def test_unknown_option_lists_builder_options() -> None:
    with pytest.raises(UserError) as info:
        build_strategy("AllReduce", graph(4), spec(), {"chunk": "2"})
    message = str(info.value)
    assert "unknown option 'chunk' for strategy builder AllReduce" in message
    assert "chunk_size (int, default 128)" in message


# --- document ---------------------------------------------------------------------------------


def test_dump_load_round_trip(tmp_path: Path) -> None:
    strategy = build_strategy("PSLoadBalancing", graph(400, 300, 200), spec(ps=2), {"staleness": "1"})
    path = tmp_path / "strategy.yml"
    dump_strategy(strategy, path)
    assert load_strategy(path) == strategy


def test_yaml_is_readable() -> None:
    text = strategy_to_yaml(build_strategy("AllReduce", graph(40), spec(), {}))
    assert "shape: [10]" in text
    assert "sync: {kind: allreduce, group: 0, compressor: none}" in text
    keys = [line.split(":")[0] for line in text.splitlines() if re.match(r"^[a-z_]+:", line)]
    assert keys == ["version", "builder", "options", "fingerprint", "num_workers", "num_ps", "variables"]


STRATEGY = """\
version: 1
builder: hand-written
fingerprint: abc
num_workers: 2
num_ps: {num_ps}
variables:
  - {{name: a, shape: [2], dtype: float32, grad: dense, sync: {{kind: ps, ps_task: 0}}}}
  - {{name: b, shape: [2], dtype: float32, grad: dense, sync: {{kind: allreduce, group: 0}}}}
  - {{name: c, shape: [2], dtype: float32, grad: sparse, sync: {sync3}}}
  - {{name: {name3}, shape: [2], dtype: float32, grad: dense, sync: {sync4}}}
"""


def strategy_error(tmp_path: Path, num_ps: int = 2, sync3: str = "{kind: ps, ps_task: 1}",
                   name3: str = "d", sync4: str = "{kind: allreduce, group: 1}") -> str:
    path = tmp_path / "strategy.yml"
    path.write_text(STRATEGY.format(num_ps=num_ps, sync3=sync3, name3=name3, sync4=sync4))
    with pytest.raises(UserError) as info:
        load_strategy(path)
    return str(info.value)


def test_ps_task_out_of_range(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, sync4="{kind: ps, ps_task: 2}")
    assert message == (
        f"{tmp_path / 'strategy.yml'}: variables[3].sync.ps_task: PS task 2 does not exist; "
        "num_ps is 2 (tasks 0..1)"
    )


def test_ps_sync_needs_ps_process(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, num_ps=0)
    assert "strategy.yml: variables[0].sync: a 'ps' synchronizer needs a PS process, but num_ps is 0" in message
    assert "variables[2].sync:" in message


def test_staleness_needs_sync(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, sync3="{kind: ps, ps_task: 1, sync: false, staleness: 2}")
    assert "strategy.yml: variables[2].sync.staleness: a bound of 2 step(s) needs `sync: true`" in message


def test_duplicate_variable(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, name3="a")
    assert "strategy.yml: variables[3].name: duplicate variable 'a' (also variables[0])" in message


def test_unknown_sync_kind_and_field(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, sync3="{kind: nccl}", sync4="{kind: ps, ps_tsak: 0}")
    assert "strategy.yml: variables[2].sync: unknown kind 'nccl', expected one of 'ps', 'allreduce'" in message
    assert "strategy.yml: variables[3].sync: unknown field 'ps_tsak' (did you mean 'ps_task'?)" in message
    assert "strategy.yml: variables[3].sync.ps_task: required field is missing" in message


def test_negative_ps_task(tmp_path: Path) -> None:
    message = strategy_error(tmp_path, sync4="{kind: ps, ps_task: -1}")
    assert "strategy.yml: variables[3].sync.ps_task: must be >= 0, got -1" in message


# --- check_matches ----------------------------------------------------------------------------


def test_check_matches_accepts_same_graph_and_spec() -> None:
    item = graph(400, 300)
    check_matches(build_strategy("PS", item, spec(), {}), item, spec())


def test_check_matches_names_changed_variable() -> None:
    strategy = build_strategy("PS", graph(400, 300), spec(), {})
    with pytest.raises(UserError) as info:
        check_matches(strategy, graph(400, 320), spec(), source="plan.yml")
    assert "plan.yml: planned for a different graph" in str(info.value)
    assert "'v1' changed: shape [75] -> [80]" in str(info.value)


def test_check_matches_names_missing_and_extra_variables() -> None:
    strategy = build_strategy("PS", graph(400, 300), spec(), {})
    renamed = graph(400, 300)
    renamed = renamed.model_copy(
        update={"variables": [v.model_copy(update={"name": "w1"}) if v.name == "v1" else v for v in renamed.variables]}
    )
    with pytest.raises(UserError) as info:
        check_matches(strategy, renamed, spec())
    assert "not in the graph (or no longer trained): v1" in str(info.value)
    assert "trained but not planned: w1" in str(info.value)


def test_check_matches_unplanned_state_changed() -> None:
    item = graph(400)
    strategy = build_strategy("PS", item, spec(), {})
    changed = item.model_copy(update={"variables": item.variables[:-1]})  # global_step gone
    with pytest.raises(UserError, match="planned variables are unchanged"):
        check_matches(strategy, changed, spec())


def test_check_matches_cluster_size() -> None:
    item = graph(400)
    strategy = build_strategy("PS", item, spec(workers=2, ps=1), {})
    with pytest.raises(UserError) as info:
        check_matches(strategy, item, spec(workers=4, ps=1))
    assert "planned for 2 worker(s) and 1 PS, but the cluster spec has 4 worker(s) and 1 PS" in str(info.value)
    assert "different graph" not in str(info.value)


def test_strategies_import_neither_tensorflow_nor_launch() -> None:
    code = (
        "import sys, adrun.strategies, adrun.strategies.document;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'tensorflow' or m.startswith('adrun.launch')"
        " or m.startswith('adrun.runtime')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
