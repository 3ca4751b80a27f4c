"""bench/cluster/run.py's plan of runs: which configurations, in which order, with how many steps,
and how long bench/cluster/estimate.py says they take."""

from __future__ import annotations

import pytest

from bench.cluster.estimate import UNKNOWN_HOOK_OVERHEAD_S, UNKNOWN_RUN_S, estimate
from bench.cluster.results import BenchResults, HookOverhead, RunConfig, RunResult
from bench.cluster.run import (
    BUILDERS,
    QUICK,
    Block,
    _given_plans,
    _runtimes,
    chosen_blocks,
    default_markdown,
    kept_plan,
    matrix,
    run_lengths,
    schedule,
    scheduler_autogroups,
    with_given_plans,
    with_runtimes,
)
from tests.support.paths import REPO


def block(workloads=("sparse",), profiles=("commodity",), hosts=(2,), builders=(), peers=()) -> Block:
    return Block(tuple(workloads), tuple(profiles), tuple(hosts), tuple(builders), tuple(peers))


def test_quick_matrix_is_sparse_commodity_two_hosts_every_builder_and_tf_ps():
    configs = matrix(chosen_blocks(True, None, None, None, None, None), False)
    assert [(c.kind, c.system, c.options) for c in configs] == [("adrun", b, ()) for b in BUILDERS] + [("peer", "tf_ps", ())]
    assert {(c.workload, c.profile, c.hosts) for c in configs} == {("sparse", "commodity", 2)}
    assert chosen_blocks(True, "dense", None, "4", None, None) == (QUICK,)  # --quick wins


def test_full_matrix_answers_each_question_of_the_issue_once():
    configs = matrix(chosen_blocks(False, None, None, None, None, None), False)
    assert len(configs) == len(set(configs)) == 50
    # Auto on every workload and link at 2 hosts, beside the builders it must match or beat
    assert {(c.workload, c.profile) for c in configs if c.system == "Auto"} == {
        (w, p) for w in ("sparse", "dense", "ncf") for p in ("commodity", "datacenter")}
    two_hosts = {(c.workload, c.profile) for c in configs if c.hosts == 2 and c.system == "tf_mwms"}
    assert two_hosts == {(w, p) for w in ("sparse", "dense", "ncf") for p in ("commodity", "datacenter")}
    scaling = {(c.hosts, c.system) for c in configs if c.workload == "sparse" and c.profile == "commodity"}
    assert {(h, s) for h in (1, 2, 4) for s in ("AllReduce", "Parallax", "tf_ps", "tf_mwms")} <= scaling
    assert {c.hosts for c in configs if c.workload != "sparse" or c.profile != "commodity"} == {2}
    assert all(c.options == () for c in configs)


def test_selection_options_make_one_block_of_their_product():
    assert chosen_blocks(False, None, None, "4,2", "AllReduce", "") == (
        block(("sparse", "dense", "ncf", "embed"), ("commodity", "datacenter"), (2, 4), ("AllReduce",), ()),)
    with pytest.raises(ValueError):
        chosen_blocks(False, None, None, "two", None, None)


def test_variants_only_for_chosen_builders():
    configs = matrix((block(["dense"], ["datacenter"], [4], ["AllReduce"]),), True)
    assert [c.label for c in configs] == ["AllReduce", "AllReduce (compressor=fp16)", "AllReduce (chunk_size=1)"]


def test_schedule_interleaves_round_robin_and_alternates_steps():
    configs = matrix((block(builders=["PS", "AllReduce", "Parallax"]),), False)
    order = schedule(configs, 3, {"sparse": (30, 5)})
    labels = [c.label for _, c, _, _ in order]
    assert labels == ["PS", "AllReduce", "Parallax", "AllReduce", "Parallax", "PS", "Parallax", "PS", "AllReduce"]
    assert [(rep, steps, warmup) for rep, _, steps, warmup in order] == [(0, 30, 5)] * 3 + [(1, 60, 5)] * 3 + [(2, 30, 5)] * 3


def test_one_host_runs_once_whatever_the_profiles():
    configs = matrix((block(profiles=["commodity", "datacenter"], hosts=[1, 2], builders=["PS"]),), False)
    assert [(c.profile, c.hosts) for c in configs] == [("commodity", 1), ("commodity", 2), ("datacenter", 2)]


def test_run_lengths():
    assert run_lengths(["sparse", "dense"], False, None, None) == {"sparse": (40, 5), "dense": (16, 3)}
    assert run_lengths(["sparse", "dense"], True, None, None) == {"sparse": (30, 5), "dense": (30, 5)}
    assert run_lengths(["dense"], False, 50, None) == {"dense": (50, 3)}


def _config(system: str, workload: str = "sparse", profile: str = "commodity", hosts: int = 2) -> RunConfig:
    return RunConfig(workload=workload, profile=profile, hosts=hosts, kind="adrun", system=system)


def _history(runs: list[tuple[RunConfig, int, float]], hook_s: float | None = None) -> BenchResults:
    return BenchResults(started="x", command="x", machine={}, versions={}, profiles=[],
                        runs=[RunResult(config=c, repetition=0, steps=n, warmup=1, exit_code=0, wall_s=w) for c, n, w in runs],
                        hook_overhead=HookOverhead(source="x", wall_s=hook_s))


def test_estimate_takes_the_most_specific_earlier_runs():
    ps, ar = _config("PS"), _config("AllReduce")
    history = [_history([(ps, 30, 30.0), (ps, 30, 40.0), (ps, 30, 100.0), (ps, 60, 50.0),
                         (_config("PS", profile="datacenter"), 80, 20.0), (_config("PS", hosts=4), 30, 70.0)],
                        hook_s=200.0)]
    plan = [(ps, 30), (ps, 60), (_config("PS", profile="datacenter"), 60), (ar, 30), (_config("PS", "dense"), 30),
            (_config("PS", hosts=8), 30)]
    got = estimate(plan, history, hook_overhead=True)
    # exact median 40; exact 50; PS 2 hosts 60 steps on any profile 50; any 2-host sparse run: median
    # of 30, 40, 100, 50, 20 = 40; any 2-host run 40; nothing on 8 hosts: the fixed guess; hook 200
    assert got.seconds == pytest.approx(40 + 50 + 50 + 40 + 40 + UNKNOWN_RUN_S + 200)
    assert (got.runs, got.exact) == (6, 2)
    assert estimate([], [], hook_overhead=True).seconds == UNKNOWN_HOOK_OVERHEAD_S


def test_tf2_workloads_run_by_name_only_and_only_tf2_peers_train_them(monkeypatch):
    """The Keras workloads are no part of the default matrix; a peer trains only workloads of its
    kind, and a chosen peer that trains none of the chosen workloads is refused before any host
    is built."""
    from click.testing import CliRunner

    import bench.cluster.run as run

    assert set(run.TF2_WORKLOADS).isdisjoint({w for b in run.FULL for w in b.workloads})
    assert run.LENGTHS["dense_keras"] == run.LENGTHS["dense"] and run.LENGTHS["ncf_keras"] == run.LENGTHS["ncf"]
    mixed = matrix((block(["dense", "dense_keras"], builders=["AllReduce"], peers=["tf_mwms", "tf2_mwms_loop"]),), False)
    assert [(c.workload, c.system) for c in mixed] == [("dense", "AllReduce"), ("dense", "tf_mwms"),
                                                       ("dense_keras", "AllReduce"), ("dense_keras", "tf2_mwms_loop")]
    monkeypatch.setattr(run, "missing_requirements", lambda: None)
    refused = CliRunner().invoke(run.main, ["--workloads", "dense_keras", "--peers", "tf_ps"])
    assert refused.exit_code == 2
    assert "peer(s) tf_ps train none of the chosen workloads" in refused.output


def test_tf2_blocks_add_each_graph_twin_under_allreduce_alone():
    """--tf2: the chosen Keras workloads with the TF2 builders, variants and peers; the graph-mode
    twin of each (the transformer has none) under AllReduce only, never with variants or peers."""
    blocks = chosen_blocks(False, "sparse_keras,transformer_keras", "commodity", None, None, None, tf2=True)
    configs = matrix(blocks, True)
    keras = [(c.workload, c.hosts, c.label) for c in configs if c.workload == "sparse_keras" and c.hosts == 2]
    assert keras == [("sparse_keras", 2, "AllReduce"), ("sparse_keras", 2, "PartitionedAR"), ("sparse_keras", 2, "Auto"),
                     ("sparse_keras", 2, "AllReduce (compressor=fp16)"), ("sparse_keras", 2, "AllReduce (chunk_size=1)"),
                     ("sparse_keras", 2, "tf2_mwms_loop"), ("sparse_keras", 2, "tf_keras_mwms_fit"),
                     ("sparse_keras", 2, "keras3_mwms_fit")]
    assert [(c.workload, c.hosts, c.label) for c in configs if c.workload == "sparse"] == [
        ("sparse", 2, "AllReduce"), ("sparse", 4, "AllReduce")]
    assert {c.workload for c in configs} == {"sparse_keras", "transformer_keras", "sparse"}
    assert chosen_blocks(False, "transformer_keras", None, "2", "AllReduce", "", tf2=True) == (
        block(["transformer_keras"], ["commodity", "datacenter"], [2], ["AllReduce"]),)


def test_a_given_plan_runs_in_every_group_after_its_builders(tmp_path):
    blocks = (block(["embed"], ["commodity"], [2, 4], ["AllReduce", "Auto"]),)
    given = with_given_plans(matrix(blocks, False), blocks, {"Mixed": tmp_path / "mixed.yml"})
    assert [(c.hosts, c.system) for c in given] == [(2, "AllReduce"), (2, "Auto"), (4, "AllReduce"), (4, "Auto"),
                                                    (2, "Mixed"), (4, "Mixed")]
    assert all(c.kind == "adrun" and c.workload == "embed" for c in given)
    # without any builder (--builders ''), the given plan alone
    alone = (block(["embed"], ["commodity"], [4]),)
    assert [(c.hosts, c.system) for c in with_given_plans(matrix(alone, False), alone, {"Mixed": tmp_path})] == [
        (4, "Mixed")]


@pytest.mark.parametrize("parse, item, message", [
    (_given_plans, "Mixed", "--plan 'Mixed': expected LABEL=FILE"),
    (_given_plans, "AllReduce=x.yml",
     "--plan 'AllReduce=x.yml': the label 'AllReduce' is already a builder, a peer or another --plan"),
    (_given_plans, "Mixed=missing.yml", "--plan 'Mixed=missing.yml': "),
    (_runtimes, "main", "--runtime 'main': expected LABEL=CHECKOUT"),
    (_runtimes, "main=nowhere", "--runtime 'main=nowhere': nowhere/.venv/bin/python not found"),
])
def test_a_bad_given_plan_or_runtime_is_one_message_and_exit_2(parse, item, message, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        parse((item,))
    assert exit_info.value.code == 2
    assert f"bench-cluster: error: {message}" in capsys.readouterr().err


def test_one_variant_at_a_time():
    """--variant AllReduce:compressor=fp16 adds that row alone (--variants adds every known one);
    a malformed item or unknown builder is one message and exit 2."""
    from click.testing import CliRunner

    import bench.cluster.run as run

    configs = matrix((block(builders=["AllReduce", "PS"]),), (("AllReduce", (("compressor", "fp16"),)),))
    assert [c.label for c in configs] == ["AllReduce", "PS", "AllReduce (compressor=fp16)"]
    for item in ("AllReduce", "Nope:compressor=fp16", "AllReduce:compressor"):
        refused = CliRunner().invoke(run.main, ["--workloads", "sparse", "--variant", item])
        assert refused.exit_code == 2 and f"--variant {item!r}: expected BUILDER:KEY=VALUE" in refused.output


def test_a_runtime_twin_follows_each_adrun_configuration_and_runs_its_plan(tmp_path):
    """--runtime main=CHECKOUT: every adrun configuration (not a peer) runs again right after
    itself under the other checkout's adrun, with the same plan document, labelled apart."""
    configs = with_runtimes(matrix((block(builders=["PartitionedPS", "Auto"], peers=["tf_ps"]),), False),
                            {"main": tmp_path})
    assert [c.label for c in configs] == ["PartitionedPS", "PartitionedPS @main", "Auto", "Auto @main", "tf_ps"]
    assert configs[1].planned == configs[0] and configs[3].planned == configs[2]
    assert schedule(configs, 3, {"sparse": (40, 5)})[5][1].label == "PartitionedPS @main"  # rep 2 starts one along


def test_a_runtime_twin_runs_the_other_checkouts_interpreter_in_that_checkout(tmp_path):
    from bench.cluster.launch import Launcher

    launcher = Launcher(cluster=None, repo=tmp_path / "here", scratch=tmp_path, workloads=tmp_path, python="/here/python",
                        runtimes={"main": tmp_path / "main"})
    config = RunConfig(workload="embed", profile="commodity", hosts=4, kind="adrun", system="PartitionedPS")
    assert launcher.adrun_from(config) == ("/here/python", tmp_path / "here")
    assert launcher.adrun_from(config.model_copy(update={"runtime": "main"})) == (
        str(tmp_path / "main" / ".venv" / "bin" / "python"), tmp_path / "main")


def test_each_plan_is_kept_beside_the_results_where_the_cost_model_check_reads_it(tmp_path):
    out = tmp_path / "results" / "cluster-x.json"
    auto = RunConfig(workload="ncf", profile="commodity", hosts=4, kind="adrun", system="Auto")
    fp16 = RunConfig(workload="sparse", profile="", hosts=2, kind="adrun", system="AllReduce",
                     options=(("compressor", "fp16"),))
    assert kept_plan(out, auto) == tmp_path / "results" / "plans" / "cluster-x" / "ncf-4-commodity-Auto.yml"
    assert kept_plan(out, fp16).name == "sparse-2-AllReduce_compressor_fp16.yml"
    assert kept_plan(out, fp16).parent.is_dir()


def test_the_report_goes_beside_the_results_unless_none_are_named(tmp_path):
    # a run written to a scratch file leaves the repository's reports alone
    assert default_markdown(tmp_path / "x" / "cluster-simdc.json", tf2=False) == tmp_path / "x" / "cluster-simdc.md"
    assert default_markdown(tmp_path / "t.json", tf2=True) == tmp_path / "t.md"
    # without --out: the repository's report of that kind of run, as the Makefile's targets expect; a
    # quick run its own, so that it does not replace the full benchmark's
    assert default_markdown(None, tf2=False) == REPO / "bench" / "RESULTS-cluster.md"
    assert default_markdown(None, tf2=True) == REPO / "bench" / "RESULTS-cluster-tf2.md"
    assert default_markdown(None, quick=True) == REPO / "bench" / "RESULTS-cluster-quick.md"


@pytest.mark.parametrize(("content", "expected"), [("1\n", "on"), ("0\n", "off"), (None, "absent")])
def test_the_machine_facts_say_whether_the_scheduler_groups_sessions(content, expected, tmp_path):
    setting = tmp_path / "sched_autogroup_enabled"
    if content is not None:
        setting.write_text(content)
    assert scheduler_autogroups(setting) == expected
