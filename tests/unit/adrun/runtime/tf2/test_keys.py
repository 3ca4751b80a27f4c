"""Step keys (adrun/runtime/tf2/keys.py): a non-leader worker sends the group leader one
`CompleteInstance` RPC per (group key, instance key) it has not used before (TF's
CollectiveParamResolverDistributed::InstanceIsCached), so the RPCs of a step are the new keys its
collectives take. Counted here from the keys an NCF-like traced step hands its collectives, run
with stand-in collectives: six on the first step, none on a step whose shapes were seen, two per
embedding whose padded row count is new. The step's check of the workers' applies carries the
embeddings' row counts (reduction.py, `same_on_every_worker`), so those take no gathers of their own."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
import tensorflow as tf

from adrun.runtime.tf2.keys import STEP_KEYS_START, StepKeys
from adrun.runtime.tf2.reduction import TF2Collectives, mean_gradients
from adrun.runtime.tf2.routes import Route, Routes
from adrun.strategies.document import AllReduceSync, VariablePlan
from tests.support.graph_walk import ops_run_by

LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
SHAPE = tf.constant([1000, 4], tf.int64)


class LocalRoutes(Routes):
    def device(self, route: Route) -> str:
        return LOCAL_CPU


class StandIns:
    """CollectiveReduceV2 / CollectiveGatherV2 of a worker whose peer holds the same tensors (a
    reduce returns its input, a gather it N times); each records its (group, instance) key tensor."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, peer_offset: int = 0) -> None:
        self.keys: list[tf.Tensor] = []
        self.ops: list[str] = []
        self._peer_offset = peer_offset
        monkeypatch.setattr(tf.raw_ops, "CollectiveReduceV2", self._reduce)
        monkeypatch.setattr(tf.raw_ops, "CollectiveGatherV2", self._gather)

    def _record(self, kind: str, group_key: int, instance_key: int | tf.Tensor) -> None:
        self.ops.append(kind)
        self.keys.append(tf.stack([tf.constant(group_key, tf.int64), tf.cast(instance_key, tf.int64)]))

    def _reduce(self, input: tf.Tensor, group_size: int, group_key: int, instance_key: int | tf.Tensor,
                **_: object) -> tf.Tensor:
        self._record("reduce", group_key, instance_key)
        return tf.identity(input)

    def _gather(self, input: tf.Tensor, group_size: int, group_key: int, instance_key: int | tf.Tensor,
                **_: object) -> tf.Tensor:
        self._record("gather", group_key, instance_key)
        return tf.concat([input] + [input + self._peer_offset] * (group_size - 1), 0)


def plan(name: str, grad: str) -> VariablePlan:
    return VariablePlan(name=name, shape=[1000, 4] if grad == "sparse" else [3], dtype="float32", grad=grad,
                        sync=AllReduceSync(group=0))


NCF_LIKE = [plan(f"dense_{i}", "dense") for i in range(6)] + [plan("user", "sparse"), plan("item", "sparse")]


def ncf_collectives(keys: StepKeys | None = None, count_slots: int = 2) -> TF2Collectives:
    """A worker's collectives for NCF_LIKE (two sparse variables in its plan)."""
    routes = LocalRoutes(0)
    return TF2Collectives(2, keys=keys or StepKeys(LOCAL_CPU), routes=lambda: routes, count_slots=count_slots)


def ncf_like_step(collectives: TF2Collectives, keys_of: StandIns) -> Callable:
    """Six dense gradients in one packed all-reduce and two embeddings' rows gathered (indices and
    values each, their counts in the apply's check), as ncf's AllReduce step; returns the step's
    means and its collectives' keys."""

    @tf.function(input_signature=[tf.TensorSpec(None)] + [tf.TensorSpec([None], tf.int64)] * 2)
    def step(dense: tf.Tensor, user_ids: tf.Tensor, item_ids: tf.Tensor) -> tuple:
        keys_of.keys.clear()
        keys_of.ops.clear()
        grads = [dense * i for i in range(6)] + [tf.IndexedSlices(tf.ones([tf.size(ids), 4]), ids, SHAPE)
                                                 for ids in (user_ids, item_ids)]
        means, _ = mean_gradients(collectives, list(zip(NCF_LIKE, grads, strict=True)), True, "ncf-like")
        return means[:6], [m.values for m in means[6:]], tf.stack(keys_of.keys)

    return step


def new_keys_per_step(step: Callable, batches: list[tuple[list[int], list[int]]]) -> list[int]:
    """How many (group, instance) keys each step uses that no earlier step used."""
    seen: set[tuple[int, int]] = set()
    out = []
    for users, items in batches:
        *_, keys = step(tf.ones([3]), tf.constant(users, tf.int64), tf.constant(items, tf.int64))
        used = {tuple(k) for k in keys.numpy().tolist()}
        out.append(len(used - seen))
        seen |= used
    return out


def test_a_step_s_collectives_take_known_keys_from_its_second_step_on(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_ins = StandIns(monkeypatch)
    step = ncf_like_step(ncf_collectives(), stand_ins)
    batches = [([1, 2, 3], [4, 5]), ([7, 8, 9], [1, 2]), ([3, 3, 4], [6, 7]), ([1, 2, 3, 4], [8, 9])]
    # the check (with both row counts) + 1 packed all-reduce + 2 x (indices, values); step 3: user ids
    # summed per index (2 rows: new padded shapes for the user gathers); step 4: 4 user rows, again new
    assert new_keys_per_step(step, batches) == [6, 0, 2, 2]
    assert sorted(stand_ins.ops) == ["gather"] * 5 + ["reduce"]


def test_keys_are_the_same_in_every_trace_and_on_every_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys depend on labels and shapes only: a second trace on one worker (Keras making its train
    function again), or another worker tracing later or more often, gives the same keys (a run-time
    counter gave keys by call order)."""
    stand_ins = StandIns(monkeypatch)
    mine = ncf_collectives()
    batch = (tf.ones([3]), tf.constant([1, 2], tf.int64), tf.constant([3], tf.int64))
    *_, first = ncf_like_step(mine, stand_ins)(*batch)
    *_, again = ncf_like_step(mine, stand_ins)(*batch)
    *_, peer = ncf_like_step(ncf_collectives(), stand_ins)(*batch)
    assert first.numpy().tolist() == again.numpy().tolist() == peer.numpy().tolist()
    assert len({k[1] for k in first.numpy().tolist()}) == 6
    assert min(k[1] for k in first.numpy().tolist()) >= STEP_KEYS_START


def test_one_label_twice_in_one_function_takes_two_keys_and_eager_calls_keep_one() -> None:
    keys = StepKeys(LOCAL_CPU)
    t = tf.ones([2])

    @tf.function
    def twice() -> None:
        first, second = keys.label("adrun/x"), keys.label("adrun/x")
        assert first != second
        assert keys.instance_key(first, t) != keys.instance_key(second, t)

    twice.get_concrete_function()
    assert keys.label("adrun/x") == keys.label("adrun/x") == "adrun/x"


def test_two_labels_hashing_to_one_key_are_refused() -> None:
    first, second = "adrun/allreduce/uejgtcuo", "adrun/allreduce/iiwucoup"  # found by a birthday search
    range_ = (1 << 31) - 1 - STEP_KEYS_START
    assert zlib.crc32(first.encode()) % range_ == zlib.crc32(second.encode()) % range_
    keys = StepKeys(LOCAL_CPU)
    keys.instance_key(first, tf.ones([2]))
    with pytest.raises(RuntimeError, match=f"collectives '{first}' and '{second}' hash to one instance key"):
        keys.instance_key(second, tf.ones([2]))


def test_host_collectives_run_at_once_and_another_device_s_in_program_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host collective has a token of its own label, so TF chains none after another; collectives
    of a non-host device share that device's token (NCCL launches in one order on every rank)."""
    keys = StepKeys(LOCAL_CPU)
    assert keys.ordering_token(LOCAL_CPU, "a")[0] is not keys.ordering_token(LOCAL_CPU, "b")[0]
    assert keys.ordering_token(LOCAL_CPU, "a")[0] is keys.ordering_token(LOCAL_CPU, "a")[0]
    other = "/job:localhost/replica:0/task:0/device:CPU:1"
    assert keys.ordering_token(other, "a")[0] is keys.ordering_token(other, "b")[0]

    collectives = ncf_collectives(keys, count_slots=1)

    @tf.function
    def step(dense: tf.Tensor, ids: tf.Tensor) -> tuple:
        grads = [dense, tf.IndexedSlices(tf.ones([tf.size(ids), 4]), ids, SHAPE)]
        means, _ = mean_gradients(collectives, list(zip([plan("a", "dense"), plan("table", "sparse")], grads,
                                                        strict=True)), True, "a, table")
        return means[0], means[1].values

    graph = step.get_concrete_function(tf.TensorSpec([3]), tf.TensorSpec([None], tf.int64)).graph
    found = [op for op in graph.get_operations() if op.type in ("CollectiveReduceV2", "CollectiveGatherV2")]
    assert len(found) == 4  # the check with the table's count, the all-reduce, the table's indices and values
    assert [c for op in found for c in op.control_inputs if c in found] == []


def test_workers_whose_applies_differ_fail_an_eager_apply_before_its_other_collectives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stand_ins = StandIns(monkeypatch, peer_offset=1)  # the peer's hash differs
    grads = [tf.ones([3])] * 6 + [tf.IndexedSlices(tf.ones([2, 4]), tf.constant([1, 2], tf.int64), SHAPE)] * 2
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"adrun: the optimizer steps of the workers differ(.|\n)*"
                                                             r"This apply reduces dense_0 \(dense\)"):
        mean_gradients(ncf_collectives(), list(zip(NCF_LIKE, grads, strict=True)), True, "dense_0 (dense), ...")
    assert stand_ins.ops == ["gather"]  # the check alone: no gather or all-reduce a peer might not join


def test_workers_whose_applies_agree_pass_the_check_and_get_every_worker_s_row_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    StandIns(monkeypatch)
    counts = [tf.constant([3], tf.int64), tf.constant([5], tf.int64)]
    checked, gathered = ncf_collectives().same_on_every_worker("user, item", counts)
    assert checked is None  # eager: checked, nothing to wait for
    assert [g.numpy().tolist() for g in gathered] == [[3, 3], [5, 5]]  # the peer's rows equal this worker's
    assert TF2Collectives(1).same_on_every_worker("user, item", counts) == (None, [None, None])


def test_an_apply_s_check_has_one_shape_whatever_it_applies_and_counts_past_its_slots_are_gathered_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker's check must pair up however its apply differs (or it waits for a peer that
    never comes): zero-padded to the plan's sparse variables, one key; a gradient beyond them (one
    variable twice in an apply) gets its count from a gather of its own."""
    stand_ins = StandIns(monkeypatch)
    collectives = ncf_collectives()
    keys = []
    for counts in ([], [tf.constant([3], tf.int64)], [tf.constant([3], tf.int64)] * 2):
        stand_ins.keys.clear()
        _, gathered = collectives.same_on_every_worker("differs", counts)
        keys.append(stand_ins.keys[0].numpy().tolist())
        assert len(gathered) == len(counts)
    assert keys[0] == keys[1] == keys[2]
    _, gathered = collectives.same_on_every_worker("twice", [tf.constant([3], tf.int64)] * 3)
    assert gathered[2] is None
    rows = collectives.sparse_rows("user", tf.IndexedSlices(tf.ones([3, 4]), tf.constant([1, 2, 3], tf.int64), SHAPE),
                                   gathered[2])
    assert rows.indices.numpy().tolist() == [1, 2, 3] * 2
    assert stand_ins.ops[-3:] == ["gather"] * 3  # its count, indices and values


@pytest.mark.parametrize("count_slots", [2, 1])  # 1: the item embedding's count is gathered alone
def test_a_traced_step_enters_no_sparse_gather_before_its_check(count_slots: int) -> None:
    """A worker whose apply differs fails at the check, before a gather its peers do not join; the
    dense all-reduce does not wait for it (the check's small gather is not on its path)."""
    collectives = ncf_collectives(count_slots=count_slots)
    checks = []

    @tf.function
    def step(dense: tf.Tensor, user_ids: tf.Tensor, item_ids: tf.Tensor) -> list:
        grads = [dense * i for i in range(6)] + [tf.IndexedSlices(tf.ones([tf.size(ids), 4]), ids, SHAPE)
                                                 for ids in (user_ids, item_ids)]
        means, checked = mean_gradients(collectives, list(zip(NCF_LIKE, grads, strict=True)), True, "ncf-like")
        checks.append(checked)
        with tf.control_dependencies([checked]):
            return [tf.identity(m) for m in means[:6]] + [tf.identity(m.values) for m in means[6:]]

    graph = step.get_concrete_function(tf.TensorSpec([3]), *[tf.TensorSpec([None], tf.int64)] * 2).graph
    [check] = [c for c in checks if c.graph is graph]
    gathers = [op for op in graph.get_operations() if op.type == "CollectiveGatherV2"]
    [reduce] = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    assert len(gathers) == 5 + (2 - count_slots)
    assert len([op for op in gathers if check in ops_run_by(op)]) == len(gathers) - 1  # all but the check's own
    assert check not in ops_run_by(reduce)


def test_a_shape_known_when_traced_and_one_known_when_run_take_one_key() -> None:
    """One worker may trace a gather's rows as known and another (after a retrace with relaxed shapes)
    as unknown: both must reach the same key; eagerly, each shape has its own key (TF's resolver
    refuses a second shape under one key)."""
    keys = StepKeys(LOCAL_CPU)
    rows = tf.ones([5, 4])
    known = keys.instance_key("adrun/allgather/t/values", rows)

    @tf.function(input_signature=[tf.TensorSpec([None, 4])])
    def unknown(t: tf.Tensor) -> tf.Tensor:
        return keys.instance_key("adrun/allgather/t/values", t)

    assert isinstance(known, int)
    assert int(unknown(rows)) == known
    assert keys.instance_key("adrun/allgather/t/values", tf.ones([6, 4])) != known
