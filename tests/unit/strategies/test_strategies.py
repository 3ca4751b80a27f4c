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
    Partition,
    PSSync,
    Strategy,
    VariablePlan,
    check_matches,
    dump_strategy,
    load_strategy,
    shard_sizes,
    strategy_to_yaml,
)
from adrun.strategies.partitioned_ps import UnevenPartitionedPS
from adrun.strategies.ps import least_loaded_assignment
from tests.support.paths import REPO


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


ALL_BUILDERS = [
    "AllReduce", "PS", "PSLoadBalancing", "Parallax", "PartitionedAR", "PartitionedPS",
    "RandomAxisPartitionAR", "UnevenPartitionedPS",
]


def test_registry_names() -> None:
    assert sorted(BUILDERS) == ALL_BUILDERS
    assert all(b.__doc__ and "Choose it" in b.__doc__ for b in BUILDERS.values())


@pytest.mark.parametrize("name", ALL_BUILDERS)
def test_every_option_is_documented(name: str) -> None:
    # Each builder's docstring (its reference in the code) names every option; the descriptions are what an
    # unknown option's error lists. README's table is checked against the Options in tests/unit/test_readme.py.
    builder = BUILDERS[name]
    for option, field in builder.Options.model_fields.items():
        assert field.description, f"{name}.{option} has no description"
        assert f"`{option}`" in (builder.__doc__ or ""), f"{name} docstring does not mention `{option}`"
        # a default the docstring repeats is the field's (the field is the one source)
        if field.default is not None:
            default = str(field.default).lower() if isinstance(field.default, bool) else str(field.default)
            for said in re.findall(rf"`{option}` \(default:? ([^;,)]*)", builder.__doc__ or ""):
                assert said == default, f"{name} docstring: `{option}` (default {said}), the field says {default}"


def test_only_variables_with_gradients_are_planned() -> None:
    strategy = build_strategy("PS", graph(400, 300), spec(), {})
    assert [v.name for v in strategy.variables] == ["v0", "v1"]


def test_ps_puts_everything_on_task_0() -> None:
    strategy = build_strategy(
        "PS", graph(400, 300, 200), spec(ps=3), {"sync": "true", "staleness": "2", "local_proxy": "true"}
    )
    assert ps_tasks(strategy) == [0, 0, 0]
    assert strategy.options == {"sync": True, "staleness": 2, "local_proxy": True, "chunk_bytes": 1 << 20}
    assert all(
        isinstance(v.sync, PSSync) and v.sync.staleness == 2 and v.sync.local_proxy for v in strategy.variables
    )


def test_ps_local_proxy_defaults_off() -> None:
    strategy = build_strategy("PSLoadBalancing", graph(400, 300), spec(ps=2), {})
    assert [v.sync.local_proxy for v in strategy.variables if isinstance(v.sync, PSSync)] == [False, False]


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


@pytest.mark.parametrize("builder", ["PS", "PSLoadBalancing"])
def test_a_large_dense_variable_is_cut_into_chunks_on_its_one_ps(builder: str) -> None:
    # 2.5 MiB -> 3 chunks of at most 1 MiB, all on the PS the whole variable gets; the small one whole
    item = graph(5 * 2**19, 400)
    strategy = build_strategy(builder, item, spec(ps=2), {})
    large, small = strategy.variables
    assert large.partition is not None and large.partition.axis == 0
    assert [s.ps_task for s in large.partition.shards] == [0, 0, 0]
    assert small.sync is not None and small.sync.ps_task == (0 if builder == "PS" else 1)


@pytest.mark.parametrize("options", [{"chunk_bytes": "0"}, {"staleness": "1"}, {"sync": "false"}, {"local_proxy": "true"}])
def test_chunks_only_for_synchronous_steps_and_when_asked(options: dict[str, str]) -> None:
    strategy = build_strategy("PSLoadBalancing", graph(5 * 2**19, 400), spec(ps=2), options)
    assert all(v.partition is None for v in strategy.variables)


def test_no_chunks_for_sparse_unsplittable_or_tf2_variables() -> None:
    sparse = float_var("emb", 4 * 2**20, grad="sparse")
    blocked = VariableInfo(name="kernel", shape=[2**20], dtype="float32", trainable=True, grad="dense",
                           partition_blocker="created with tf.Variable or a Keras layer, not tf.compat.v1.get_variable")
    item = GraphItem(variables=[sparse, blocked])
    strategy = build_strategy("PSLoadBalancing", item, spec(ps=2), {})
    assert all(v.partition is None for v in strategy.variables)
    tf2 = GraphItem(kind="tf2", variables=[float_var("kernel", 4 * 2**20)])
    assert build_strategy("PSLoadBalancing", tf2, spec(ps=2), {}).variables[0].partition is None


def test_least_loaded_assignment_ties_go_to_lowest_index_and_keep_order() -> None:
    assert least_loaded_assignment([8, 8, 8, 8], 3) == ([0, 1, 2, 0], [16, 8, 8])
    assert least_loaded_assignment([], 2) == ([], [0, 0])


def test_allreduce_groups_by_chunk_size() -> None:
    strategy = build_strategy("AllReduce", graph(4, 4, 4, 4, 4), spec(ps=0), {"chunk_size": "2"})
    assert [v.sync.group for v in strategy.variables if isinstance(v.sync, AllReduceSync)] == [0, 0, 1, 1, 2]
    assert strategy.options == {"chunk_size": 2, "compressor": "none", "powersgd_rank": 1}
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
    assert str(info.value).endswith("known builders: " + ", ".join(sorted([*BUILDERS, "Auto"])))


@pytest.mark.parametrize("typed,meant", [("psloadbalancing", "PSLoadBalancing"), ("auto", "Auto")])
def test_unknown_builder_case_hint(typed: str, meant: str) -> None:
    with pytest.raises(UserError, match=rf"did you mean {meant}\?"):
        build_strategy(typed, graph(4), spec(), {})


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
    assert keys == ["version", "builder", "options", "fingerprint", "num_workers", "num_ps", "variables",
                    "replica_devices"]


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
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# --- partitioning: shard sizes and the document -----------------------------------------------


def var(name: str, shape: list[int], grad: str = "dense", blocker: str | None = None) -> VariableInfo:
    return VariableInfo(
        name=name, shape=shape, dtype="float32", trainable=True, grad=grad, partition_blocker=blocker
    )


WHILE = "read inside tf.while_loop"


def mixed_graph() -> GraphItem:
    """An embedding, a dense layer, a bias, a variable read in a while loop, a scalar, a one-row matrix."""
    return GraphItem(
        variables=[
            var("emb", [1000, 16], grad="sparse"),  # 64000 B
            var("kernel", [784, 10]),  # 31360 B
            var("bias", [10]),  # 40 B
            var("lstm", [20, 40], blocker=WHILE),  # 3200 B
            var("scale", []),  # 4 B
            var("row", [1, 5]),  # 20 B
            VariableInfo(name="global_step", shape=[], dtype="int64", trainable=False),
        ]
    )


def placements(strategy: Strategy) -> dict[str, int | list[int]]:
    """Variable -> its PS task, or the PS task of each shard."""
    out: dict[str, int | list[int]] = {}
    for v in strategy.variables:
        tasks = [s.ps_task for s in v.synchronizers() if isinstance(s, PSSync)]
        out[v.name] = tasks if v.partition is not None else tasks[0]
    return out


def shard_loads(strategy: Strategy) -> list[int]:
    loads = [0] * strategy.num_ps
    for v in strategy.variables:
        row_bytes = 4
        for shape, sync in zip(v.shard_shapes(), v.synchronizers(), strict=True):
            assert isinstance(sync, PSSync)
            size = row_bytes
            for d in shape:
                size *= d
            loads[sync.ps_task] += size
    return loads


def test_shard_sizes_follow_tf_slicing() -> None:
    assert shard_sizes(10, 3) == [4, 3, 3]
    assert shard_sizes(10, 2) == [5, 5]
    assert shard_sizes(7, 7) == [1] * 7
    assert shard_sizes(1000, 3) == [334, 333, 333]
    for bad in ((3, 4), (5, 0)):
        with pytest.raises(ValueError, match="cannot split"):
            shard_sizes(*bad)


def test_plan_helpers() -> None:
    whole = VariablePlan(name="a", shape=[4], dtype="float32", grad="dense", sync=PSSync(ps_task=1))
    split = VariablePlan(
        name="b", shape=[5, 3], dtype="float32", grad="dense",
        partition=Partition(axis=1, shards=[AllReduceSync(group=0), AllReduceSync(group=1)]),
    )
    assert whole.synchronizers() == [PSSync(ps_task=1)]
    assert split.synchronizers() == [AllReduceSync(group=0), AllReduceSync(group=1)]
    assert whole.shard_shapes() == [[4]]
    assert split.shard_shapes() == [[5, 2], [5, 1]]
    base = {"version": 1, "builder": "x", "fingerprint": "f", "num_workers": 1, "num_ps": 2}
    assert Strategy(**base, variables=[whole, split]).uses_ps
    assert not Strategy(**base, variables=[split]).uses_ps
    shard_on_ps = split.model_copy(
        update={"partition": Partition(axis=1, shards=[AllReduceSync(group=0), PSSync(ps_task=0)])}
    )
    assert Strategy(**base, variables=[shard_on_ps]).uses_ps
    assert [Strategy(**base, variables=v).uses_all_reduce for v in ([whole], [split], [shard_on_ps], [whole, split])] == [
        False, True, True, True]


# --- PartitionedPS / UnevenPartitionedPS ------------------------------------------------------


def test_partitioned_ps_shards_and_lpt_placement() -> None:
    strategy = build_strategy("PartitionedPS", mixed_graph(), spec(ps=3), {})
    counts = {v.name: len(v.synchronizers()) if v.partition else 1 for v in strategy.variables}
    # k = min(#PS, rows): emb 1000 rows -> 3 (AutoDist: 2), kernel 784 -> 3 (AutoDist: 2), bias 10 -> 3.
    assert counts == {"emb": 3, "kernel": 3, "bias": 3, "lstm": 1, "scale": 1, "row": 1}
    assert all(v.partition is None or v.partition.axis == 0 for v in strategy.variables)
    # Shard bytes: emb 21376/21312/21312, kernel 10480/10440/10440, bias 16/12/12; whole: lstm 3200,
    # row 20, scale 4. Largest first onto the least loaded PS (ties -> lowest task).
    assert placements(strategy) == {
        "emb": [0, 1, 2], "kernel": [1, 2, 0], "bias": [1, 0, 0], "lstm": 2, "scale": 1, "row": 1,
    }
    assert shard_loads(strategy) == [31840, 31832, 34952]
    assert strategy.options == {"sync": True, "staleness": 0, "local_proxy": False}


def test_partitioned_ps_notes_only_blocked_variables() -> None:
    strategy = build_strategy("PartitionedPS", mixed_graph(), spec(ps=3), {})
    notes = {v.name: v.note for v in strategy.variables if v.note}
    assert notes == {"lstm": "kept whole: read inside tf.while_loop"}
    lstm = next(v for v in strategy.variables if v.name == "lstm")
    assert lstm.partition is None and isinstance(lstm.sync, PSSync)


def test_partitioned_ps_ships_options_to_every_shard() -> None:
    strategy = build_strategy(
        "PartitionedPS", mixed_graph(), spec(ps=2), {"staleness": "3", "local_proxy": "true"}
    )
    syncs = [s for v in strategy.variables for s in v.synchronizers()]
    assert syncs and all(isinstance(s, PSSync) and s.staleness == 3 and s.local_proxy for s in syncs)


def test_partitioned_ps_max_shards() -> None:
    item = GraphItem(variables=[var("a", [10, 4]), var("b", [3])])
    strategy = build_strategy("PartitionedPS", item, spec(ps=2), {"max_shards": "4"})
    assert [len(v.synchronizers()) for v in strategy.variables] == [4, 3]
    # a: rows 3,3,2,2 x 16 B = 48,48,32,32; b: 4,4,4. LPT: 48->0, 48->1, 32->0, 32->1, 4->0, 4->1, 4->0.
    assert placements(strategy) == {"a": [0, 1, 0, 1], "b": [0, 1, 0]}
    assert strategy.options["max_shards"] == 4


def test_partitioned_ps_one_ps_keeps_everything_whole() -> None:
    strategy = build_strategy("PartitionedPS", mixed_graph(), spec(ps=1), {})
    # Nothing to spread over: no partition, and no note (partitioning was not wanted, so not blocked).
    assert all(v.partition is None and v.note is None for v in strategy.variables)
    assert "max_shards" not in strategy.options


def test_partitioned_ps_needs_ps() -> None:
    with pytest.raises(UserError, match=r"PartitionedPS .* no PS process"):
        build_strategy("PartitionedPS", mixed_graph(), spec(ps=0), {})


@pytest.mark.parametrize(
    ("rows", "max_shards", "count", "note"),
    [
        (784, 3, 3, None),  # 784 % 3 == 1
        (10, 3, 3, None),
        (9, 3, 2, None),  # 3 divides 9
        (3, 3, 2, None),  # [2, 1]
        (1000, 4, 3, None),  # 4 divides 1000
        (12, 5, 5, None),
        (6, 3, 3, "shards even: every count from 2 to 3 divides 6"),
        (12, 4, 4, "shards even: every count from 2 to 4 divides 12"),
        (2, 3, 2, "shards even: every count from 2 to 2 divides 2"),
        (10, 1, 1, None),
    ],
)
def test_uneven_shard_count(rows: int, max_shards: int, count: int, note: str | None) -> None:
    assert UnevenPartitionedPS().choose_shards(rows, max_shards) == (count, note)


def test_uneven_partitioned_ps_plan() -> None:
    item = GraphItem(variables=[var("kernel", [784, 10]), var("w", [6, 2]), var("v", [9]), var("s", [])])
    strategy = build_strategy("UnevenPartitionedPS", item, spec(ps=2), {})  # max_shards = max(2, 3)
    shapes = {v.name: v.shard_shapes() for v in strategy.variables}
    assert shapes == {
        "kernel": [[262, 10], [261, 10], [261, 10]],
        "w": [[2, 2], [2, 2], [2, 2]],
        "v": [[5], [4]],
        "s": [[]],
    }
    notes = {v.name: v.note for v in strategy.variables}
    assert notes == {"kernel": None, "w": "shards even: every count from 2 to 3 divides 6", "v": None, "s": None}
    # Bytes: kernel 10480/10440/10440, v 20/16, w 16/16/16, s 4. LPT: 10480 -> 0, 10440 -> 1,
    # 10440 -> 1 (10440 < 10480), then every small piece -> 0 (10480 < 20880).
    assert placements(strategy) == {"kernel": [0, 1, 1], "w": [0, 0, 0], "v": [0, 0], "s": 0}


def test_uneven_partitioned_ps_one_ps_still_splits() -> None:
    strategy = build_strategy("UnevenPartitionedPS", GraphItem(variables=[var("k", [10, 2])]), spec(ps=1), {})
    assert strategy.variables[0].shard_shapes() == [[4, 2], [3, 2], [3, 2]]
    assert placements(strategy) == {"k": [0, 0, 0]}


def test_uneven_blocked_variable_stays_whole() -> None:
    item = GraphItem(variables=[var("k", [10, 2], blocker="created with tf.Variable")])
    strategy = build_strategy("UnevenPartitionedPS", item, spec(ps=2), {})
    assert strategy.variables[0].partition is None
    assert strategy.variables[0].note == "kept whole: created with tf.Variable"


# --- all-reduce family ------------------------------------------------------------------------


def groups(strategy: Strategy) -> dict[str, list[int]]:
    return {v.name: [s.group for s in v.synchronizers() if isinstance(s, AllReduceSync)] for v in strategy.variables}


def test_allreduce_compressor_dense_only() -> None:
    item = GraphItem(variables=[var("emb", [100, 4], grad="sparse"), var("w", [4, 4])])
    strategy = build_strategy("AllReduce", item, spec(ps=0), {"compressor": "powersgd", "powersgd_rank": "4"})
    emb, w = strategy.variables
    assert emb.sync == AllReduceSync(group=0, compressor="none")
    assert emb.note == "compressor powersgd not applied: sparse gradients are all-gathered uncompressed"
    assert w.sync == AllReduceSync(group=0, compressor="powersgd", powersgd_rank=4)
    assert w.note is None


def test_allreduce_unknown_compressor() -> None:
    with pytest.raises(UserError, match=r"AllReduce options: compressor: must be 'none', 'fp16', 'fp16-ef' or "
                       r"'powersgd', got 'int8'"):
        build_strategy("AllReduce", graph(4), spec(), {"compressor": "int8"})


def test_partitioned_ar_groups_over_flattened_shards() -> None:
    item = GraphItem(
        variables=[
            var("a", [4]),  # 2 shards: indices 0, 1
            var("b", [1, 3]),  # 1 row: whole, index 2
            var("c", [5, 2], grad="sparse"),  # 2 shards: 3, 4
            var("d", [3], blocker=WHILE),  # whole, index 5
            var("e", [7, 7]),  # 2 shards: 6, 7
        ]
    )
    strategy = build_strategy("PartitionedAR", item, spec(ps=0), {"chunk_size": "3", "compressor": "fp16"})
    assert groups(strategy) == {"a": [0, 0], "b": [0], "c": [1, 1], "d": [1], "e": [2, 2]}
    assert {v.name: v.shard_shapes() for v in strategy.variables} == {
        "a": [[2], [2]], "b": [[1, 3]], "c": [[3, 2], [2, 2]], "d": [[3]], "e": [[4, 7], [3, 7]],
    }
    assert {v.name: v.note for v in strategy.variables if v.note} == {
        "c": "compressor fp16 not applied: sparse gradients are all-gathered uncompressed",
        "d": "kept whole: read inside tf.while_loop",
    }
    compressors = {v.name: {s.compressor for s in v.synchronizers() if isinstance(s, AllReduceSync)}
                   for v in strategy.variables}
    assert compressors == {"a": {"fp16"}, "b": {"fp16"}, "c": {"none"}, "d": {"fp16"}, "e": {"fp16"}}


def test_partitioned_ar_shards_capped_by_rows() -> None:
    item = GraphItem(variables=[var("a", [3, 2]), var("b", [10])])
    strategy = build_strategy("PartitionedAR", item, spec(ps=0), {"shards": "4", "chunk_size": "2"})
    assert {v.name: v.shard_shapes() for v in strategy.variables} == {
        "a": [[1, 2], [1, 2], [1, 2]], "b": [[3], [3], [2], [2]],
    }
    assert groups(strategy) == {"a": [0, 0, 1], "b": [1, 2, 2, 3]}


def test_partitioned_ar_blocked_and_sparse_notes_combine() -> None:
    item = GraphItem(variables=[var("emb", [10, 2], grad="sparse", blocker=WHILE)])
    strategy = build_strategy("PartitionedAR", item, spec(ps=0), {"compressor": "fp16-ef"})
    assert strategy.variables[0].note == (
        "kept whole: read inside tf.while_loop; "
        "compressor fp16-ef not applied: sparse gradients are all-gathered uncompressed"
    )


def axis_graph() -> GraphItem:
    return GraphItem(
        variables=[
            var("w0", [4, 6]),
            var("emb", [8, 3], grad="sparse"),
            var("w1", [5, 5]),
            var("col", [1, 7]),  # only axis 1 has >= 2 entries
            var("w2", [3, 3, 3]),
            var("w3", [6, 4]),
            var("s", []),
        ]
    )


def axes(strategy: Strategy) -> dict[str, int | None]:
    return {v.name: v.partition.axis if v.partition else None for v in strategy.variables}


def test_random_axis_is_deterministic_per_seed() -> None:
    first = build_strategy("RandomAxisPartitionAR", axis_graph(), spec(ps=0), {"seed": "0", "chunk_size": "4"})
    again = build_strategy("RandomAxisPartitionAR", axis_graph(), spec(ps=0), {"seed": "0", "chunk_size": "4"})
    assert first == again
    assert axes(first) == {"w0": 1, "emb": 0, "w1": 1, "col": 1, "w2": 0, "w3": 1, "s": None}
    assert groups(first) == {"w0": [0, 0], "emb": [0, 0], "w1": [1, 1], "col": [1, 1], "w2": [2, 2],
                             "w3": [2, 2], "s": [3]}
    other = build_strategy("RandomAxisPartitionAR", axis_graph(), spec(ps=0), {"seed": "1", "chunk_size": "4"})
    assert axes(other) != axes(first)
    assert axes(other) == {"w0": 0, "emb": 0, "w1": 0, "col": 1, "w2": 1, "w3": 0, "s": None}


def test_random_axis_sparse_always_axis_0() -> None:
    for seed in range(30):
        strategy = build_strategy("RandomAxisPartitionAR", axis_graph(), spec(ps=0), {"seed": str(seed)})
        assert axes(strategy)["emb"] == 0
        assert axes(strategy)["col"] == 1


def test_random_axis_blocker_does_not_shift_other_draws() -> None:
    blocked = axis_graph()
    blocked = blocked.model_copy(
        update={"variables": [v.model_copy(update={"partition_blocker": WHILE}) if v.name == "w1" else v
                              for v in blocked.variables]}
    )
    plain = axes(build_strategy("RandomAxisPartitionAR", axis_graph(), spec(ps=0), {"seed": "0"}))
    with_blocker = build_strategy("RandomAxisPartitionAR", blocked, spec(ps=0), {"seed": "0"})
    assert axes(with_blocker) == {**plain, "w1": None}
    assert next(v.note for v in with_blocker.variables if v.name == "w1") == "kept whole: read inside tf.while_loop"


UNKNOWN_SHAPE = "its shape is not fully known when the graph is built (an initial value of unknown shape)"
ROWS_UNKNOWN = "kept whole: the size of axis 0 is unknown"


@pytest.mark.parametrize("builder,rows_unknown", [
    ("PartitionedPS", ROWS_UNKNOWN),
    ("UnevenPartitionedPS", ROWS_UNKNOWN),
    ("PartitionedAR", ROWS_UNKNOWN),
    ("RandomAxisPartitionAR", f"kept whole: {UNKNOWN_SHAPE}"),  # axis 1, the only candidate, was drawn
])
def test_variables_of_unknown_shape_stay_whole_with_a_note(builder: str, rows_unknown: str) -> None:
    """A variable made from an initial value of unknown static shape (capture marks it) is never cut:
    TF partitions only fully known shapes. Every partitioning builder keeps it whole and says why."""
    item = GraphItem(variables=[
        var("rows_unknown", [-1, 4], blocker=UNKNOWN_SHAPE),
        var("cols_unknown", [6, -1], blocker=UNKNOWN_SHAPE),
        var("rank_unknown", [-1], blocker=UNKNOWN_SHAPE),  # how capture records a shape of unknown rank
        var("known", [7, 4]),
    ])
    strategy = build_strategy(builder, item, spec(ps=2), {})
    assert {v.name: v.partition is not None for v in strategy.variables} == {
        "rows_unknown": False, "cols_unknown": False, "rank_unknown": False, "known": True,
    }
    assert {v.name: v.note for v in strategy.variables} == {
        "rows_unknown": rows_unknown,
        "cols_unknown": f"kept whole: {UNKNOWN_SHAPE}",
        "rank_unknown": ROWS_UNKNOWN,
        "known": None,
    }


# --- Parallax ---------------------------------------------------------------------------------


def parallax_graph() -> GraphItem:
    return GraphItem(
        variables=[
            var("emb1", [1000, 16], grad="sparse"),  # 64000 B
            var("d1", [16, 16]),
            var("emb2", [500, 16], grad="sparse"),  # 32000 B
            var("d2", [16]),
            var("d3", [16, 1]),
            var("emb3", [625, 16], grad="sparse"),  # 40000 B
        ]
    )


def test_parallax_dense_allreduce_sparse_ps() -> None:
    strategy = build_strategy(
        "Parallax", parallax_graph(), spec(ps=2), {"chunk_size": "2", "compressor": "fp16", "staleness": "1"}
    )
    by_name = {v.name: v.sync for v in strategy.variables}
    # Dense groups count dense variables only: d1, d2 -> group 0; d3 -> group 1.
    assert by_name["d1"] == AllReduceSync(group=0, compressor="fp16")
    assert by_name["d2"] == AllReduceSync(group=0, compressor="fp16")
    assert by_name["d3"] == AllReduceSync(group=1, compressor="fp16")
    # Sparse by PSLoadBalancing's LPT: 64000 -> 0, 40000 -> 1, 32000 -> 1 (loads 64000 / 72000).
    assert by_name["emb1"] == PSSync(ps_task=0, staleness=1)
    assert by_name["emb3"] == PSSync(ps_task=1, staleness=1)
    assert by_name["emb2"] == PSSync(ps_task=1, staleness=1)
    assert all(v.partition is None and v.note is None for v in strategy.variables)
    assert strategy.options == {"chunk_size": 2, "compressor": "fp16", "powersgd_rank": 1, "sync": True, "staleness": 1}


def test_parallax_without_ps() -> None:
    with pytest.raises(UserError) as info:
        build_strategy("Parallax", parallax_graph(), spec(ps=0), {})
    message = str(info.value)
    assert "sparse-gradient variables (emb1, emb2, emb3)" in message
    assert "--strategy AllReduce" in message and "`ps: 1`" in message
    dense_only = GraphItem(variables=[var("a", [2]), var("b", [3])])
    strategy = build_strategy("Parallax", dense_only, spec(ps=0), {})
    assert groups(strategy) == {"a": [0], "b": [0]}


def test_parallax_has_no_local_proxy_option() -> None:
    with pytest.raises(UserError, match="unknown option 'local_proxy' for strategy builder Parallax"):
        build_strategy("Parallax", parallax_graph(), spec(ps=1), {"local_proxy": "true"})


def test_option_descriptions_show_choices_and_unset() -> None:
    with pytest.raises(UserError) as info:
        build_strategy("PartitionedPS", graph(4), spec(), {"shards": "2"})
    message = str(info.value)
    assert "unknown option 'shards' for strategy builder PartitionedPS" in message
    assert "max_shards (int or unset, default unset)" in message
    assert "sync (bool, default true)" in message
    with pytest.raises(UserError) as info:
        build_strategy("AllReduce", graph(4), spec(), {"compresor": "fp16"})
    assert "compressor (one of none|fp16|fp16-ef|powersgd, default none)" in str(info.value)


# --- partitioned documents: validation and YAML -----------------------------------------------


def test_partitioned_yaml_round_trip(tmp_path: Path) -> None:
    for name, options in (("PartitionedPS", {"local_proxy": "true"}), ("PartitionedAR", {"compressor": "powersgd",
                          "powersgd_rank": "2"}), ("RandomAxisPartitionAR", {"seed": "3"}), ("UnevenPartitionedPS", {})):
        ps = 0 if name.endswith("AR") else 3
        strategy = build_strategy(name, mixed_graph(), spec(ps=ps), options)
        path = tmp_path / f"{name}.yml"
        dump_strategy(strategy, path)
        assert load_strategy(path) == strategy, name


def test_partitioned_yaml_is_readable() -> None:
    text = strategy_to_yaml(build_strategy("PartitionedPS", mixed_graph(), spec(ps=3), {}))
    assert (
        "  - name: bias\n"
        "    shape: [10]\n"
        "    dtype: float32\n"
        "    grad: dense\n"
        "    partition:\n"
        "      axis: 0\n"
        "      shards:\n"
        "        - {kind: ps, ps_task: 1, sync: true, staleness: 0, local_proxy: false, pool_bags: true}\n"
        "        - {kind: ps, ps_task: 0, sync: true, staleness: 0, local_proxy: false, pool_bags: true}\n"
        "        - {kind: ps, ps_task: 0, sync: true, staleness: 0, local_proxy: false, pool_bags: true}\n"
        "  - name: lstm\n"
    ) in text
    assert "    note: 'kept whole: read inside tf.while_loop'\n" in text
    assert "partition: null" not in text and "sync: null" not in text and "note: null" not in text
    ar = strategy_to_yaml(build_strategy("AllReduce", graph(40), spec(), {"compressor": "powersgd"}))
    assert "sync: {kind: allreduce, group: 0, compressor: powersgd, powersgd_rank: 1}" in ar


PARTITIONED = """\
version: 1
builder: hand-written
fingerprint: abc
num_workers: 2
num_ps: 2
variables:
  - {{name: a, shape: [4, 3], dtype: float32, grad: dense, {plan0}}}
  - name: b
    shape: [10, 3]
    dtype: {dtype1}
    grad: {grad1}
    partition:
      axis: {axis1}
      shards: [{shards1}]
"""


def partitioned_error(tmp_path: Path, plan0: str = "sync: {kind: ps, ps_task: 0}", grad1: str = "sparse",
                      axis1: int = 0, dtype1: str = "float32",
                      shards1: str = "{kind: ps, ps_task: 0}, {kind: ps, ps_task: 1}, {kind: ps, ps_task: 1}") -> str:
    path = tmp_path / "strategy.yml"
    path.write_text(PARTITIONED.format(plan0=plan0, grad1=grad1, axis1=axis1, shards1=shards1, dtype1=dtype1))
    with pytest.raises(UserError) as info:
        load_strategy(path)
    return str(info.value)


def test_partitioned_document_valid(tmp_path: Path) -> None:
    path = tmp_path / "strategy.yml"
    path.write_text(PARTITIONED.format(plan0="sync: {kind: ps, ps_task: 0}", grad1="sparse", axis1=0,
                                       dtype1="float32", shards1="{kind: ps, ps_task: 0}, {kind: ps, ps_task: 1}"))
    strategy = load_strategy(path)
    assert strategy.variables[1].shard_shapes() == [[5, 3], [5, 3]]
    assert strategy.uses_ps


def test_shard_ps_task_out_of_range(tmp_path: Path) -> None:
    message = partitioned_error(tmp_path, shards1="{kind: ps, ps_task: 0}, {kind: ps, ps_task: 1}, {kind: ps, ps_task: 2}")
    assert message.endswith(
        "strategy.yml: variables[1].partition.shards[2].ps_task: PS task 2 does not exist; num_ps is 2 (tasks 0..1)"
    )


def test_shard_field_errors_skip_the_union_tag(tmp_path: Path) -> None:
    message = partitioned_error(tmp_path, shards1="{kind: ps, ps_task: -1}, {kind: allreduce, grup: 0}")
    assert "strategy.yml: variables[1].partition.shards[0].ps_task: must be >= 0, got -1" in message
    assert "strategy.yml: variables[1].partition.shards[1]: unknown field 'grup' (did you mean 'group'?)" in message


def test_both_and_neither_sync_and_partition(tmp_path: Path) -> None:
    both = "sync: {kind: ps, ps_task: 0}, partition: {axis: 0, shards: [{kind: ps, ps_task: 0}, {kind: ps, ps_task: 1}]}"
    assert "strategy.yml: variables[0]: variable 'a' has both sync and partition; give exactly one" in (
        partitioned_error(tmp_path, plan0=both)
    )
    assert "strategy.yml: variables[0]: variable 'a' has neither sync nor partition; give exactly one" in (
        partitioned_error(tmp_path, plan0="note: hi")
    )


def test_compressor_on_sparse_gradient(tmp_path: Path) -> None:
    message = partitioned_error(tmp_path, shards1="{kind: allreduce, group: 0}, {kind: allreduce, group: 0, compressor: fp16}")
    assert message.endswith(
        "strategy.yml: variables[1].partition.shards[1].compressor: compressor 'fp16' works on dense gradients "
        "only; 'b' has sparse gradients, which are all-gathered uncompressed: use none"
    )
    path = tmp_path / "strategy.yml"
    path.write_text(PARTITIONED.format(plan0="sync: {kind: allreduce, group: 0, compressor: fp16-ef}",
                                       grad1="sparse", axis1=0, dtype1="float32",
                                       shards1="{kind: allreduce, group: 0}, {kind: ps, ps_task: 1}"))
    assert load_strategy(path).variables[0].sync == AllReduceSync(group=0, compressor="fp16-ef")  # 'a' is dense
    path.write_text(PARTITIONED.format(plan0="sync: {kind: allreduce, group: 0, compressor: powersgd, powersgd_rank: 0}",
                                       grad1="dense", axis1=0, dtype1="float32",
                                       shards1="{kind: allreduce, group: 0, compressor: fp16}, {kind: ps, ps_task: 1}"))
    with pytest.raises(UserError, match=r"variables\[0\].sync.powersgd_rank: must be >= 1, got 0"):
        load_strategy(path)


def test_partition_axis_and_shard_count_checks(tmp_path: Path) -> None:
    assert "strategy.yml: variables[1].partition.axis: axis 2 does not exist: 'b' has shape [10, 3] (rank 2)" in (
        partitioned_error(tmp_path, axis1=2)
    )
    message = partitioned_error(tmp_path, axis1=1, shards1=", ".join(["{kind: ps, ps_task: 0}"] * 4))
    assert "variables[1].partition.axis: 'b' has sparse gradients, which can only be partitioned on axis 0, not 1" in message
    assert "variables[1].partition.shards: 4 shards, but axis 1 of 'b' has only 3 entries (shape [10, 3])" in message
    assert "variables[1].partition.shards: needs at least 2 entry/entries, got 1" in (
        partitioned_error(tmp_path, shards1="{kind: ps, ps_task: 0}")
    )


@pytest.mark.parametrize("shape,axis", [([-1, 4], 0), ([4, -1], 0), ([-1, 4], 1)])
def test_unknown_dimension_cannot_be_partitioned(shape: list[int], axis: int) -> None:
    """On any axis: TF cuts only a variable whose whole shape is known."""
    unknown = shape.index(-1)
    with pytest.raises(ValueError, match=re.escape(f"axis {unknown} of 'v' (shape {shape}) has a size unknown when "
                                                   "the graph was built; it cannot be partitioned")):
        VariablePlan(name="v", shape=shape, dtype="float32", grad="dense",
                     partition=Partition(axis=axis, shards=[PSSync(ps_task=0), PSSync(ps_task=0)]))


def test_builders_write_the_replica_devices_of_the_spec() -> None:
    plan = build_strategy("PS", graph(40), ClusterSpec(version=1, nodes=[
        Node(address="localhost", workers=2, ps=1, replicas=2)]), {})
    assert plan.replica_devices == [["CPU:0", "CPU:1"], ["CPU:0", "CPU:1"]]
    assert plan.replicas_of(1) == ["CPU:0", "CPU:1"]


@pytest.mark.parametrize("devices,reason", [
    ("[[CPU:0]]", "replica_devices: 1 entries for 2 worker(s); give one list of devices per worker"),
    ("[[CPU:0], []]", "replica_devices[1]: no device; a worker needs at least one"),
    ("[[CPU:0, CPU:0], [CPU:0]]", "replica_devices[0]: a device is listed twice"),
    ("[[CPU:0, GPU:0], [CPU:0]]", "replica_devices[0]: ['CPU:0', 'GPU:0'] mixes CPU and GPU devices"),
    ("[[CPU:0], [TPU:0]]", "replica_devices[1][0]: 'TPU:0' is not a local device name; use CPU:<n> or GPU:<n>"),
    # a worker makes CPU:0..CPU:n for CPU:n, so the index is bounded like the spec's replicas
    ("[[CPU:0], [CPU:4095]]", "replica_devices[1][0]: 'CPU:4095' is beyond the last CPU a worker may use (CPU:63)"),
    ("[[GPU:64], [GPU:0]]", "replica_devices[0][0]: 'GPU:64' is beyond the last GPU a worker may use (GPU:63)"),
    # CPU:01 is CPU:1 to the runtime: it must not pass as a second device
    ("[[CPU:1, CPU:01], [CPU:0]]", "replica_devices[0][1]: 'CPU:01' is not a local device name"),
])
def test_bad_replica_devices_name_the_field(tmp_path: Path, devices: str, reason: str) -> None:
    path = tmp_path / "strategy.yml"
    text = STRATEGY.format(num_ps=2, sync3="{kind: ps, ps_task: 1}", name3="d", sync4="{kind: allreduce, group: 1}")
    path.write_text(text + f"replica_devices: {devices}\n")
    with pytest.raises(UserError) as info:
        load_strategy(path)
    assert f"strategy.yml: {reason}" in str(info.value)


@pytest.mark.parametrize("old,new,reason", [
    ("num_workers: 2", "num_workers: true", "num_workers: expected a whole number, got true"),
    ("num_ps: 2", "num_ps: 2.0", "num_ps: expected a whole number, got 2.0"),
    ("version: 1", "version: true", "version: must be 1, got true"),
    ("shape: [2], dtype: float32, grad: dense, sync: {kind: ps, ps_task: 0}",
     "shape: [true], dtype: float32, grad: dense, sync: {kind: ps, ps_task: 0}",
     "variables[0].shape[0]: expected a whole number, got true"),
    ("{kind: ps, ps_task: 0}", "{kind: ps, ps_task: false}", "variables[0].sync.ps_task: expected a whole number, got false"),
    ("{kind: ps, ps_task: 0}", "{kind: ps, ps_task: 0, sync: 1}", "variables[0].sync.sync: expected true or false, got 1"),
    ("{kind: allreduce, group: 0}", "{kind: allreduce, group: true}", "variables[1].sync.group: expected a whole number, got true"),
])
def test_document_counts_and_flags_are_not_lookalikes(tmp_path: Path, old: str, new: str, reason: str) -> None:
    # Before: `true` passed as 1 (and 1 as true), 2.0 as 2.
    text = STRATEGY.format(num_ps=2, sync3="{kind: ps, ps_task: 1}", name3="d", sync4="{kind: allreduce, group: 1}")
    assert old in text
    path = tmp_path / "strategy.yml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(UserError) as info:
        load_strategy(path)
    assert str(info.value) == f"{path}: {reason}"


def test_document_shares_the_loaders_limits(tmp_path: Path) -> None:
    """The strategy document is read by the same loader as the spec: depth and size are bounded."""
    path = tmp_path / "strategy.yml"
    path.write_text("version: 1\noptions: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(UserError, match=r"strategy.yml: line 2, column \d+: nested more than 64 levels deep$"):
        load_strategy(path)
    path.write_text("version: 1\n" + "#" * 16 * 2**20 + "\n")
    with pytest.raises(UserError, match=r"strategy.yml: larger than 16 MiB, the most this kind of file may be"):
        load_strategy(path)
