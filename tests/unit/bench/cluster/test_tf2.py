"""The TF2 benchmark's pure parts (bench/cluster/tf2_analysis.py, tf2_report.py): adrun against the
TF2 peers, TF2 mode against graph mode, the goals, the Keras 3 fit failure, merging invocations."""

from __future__ import annotations

import shlex

import pytest
from click.testing import CliRunner

from bench import paths
from bench.cluster import report
from bench.cluster.lower_bound import FAMILY_METHOD
from bench.cluster.results import (BenchResults, HookOverhead, HostBytes, LowerBound, Profile, RunConfig, RunResult,
                                   WorkerResult, load_results, save_results)
from bench.cluster.tf2 import keras_model, script_args
from bench.cluster.tf2_analysis import failure_reason, mode_rows, peer_rows, tf2_goals
from bench.cluster.tf2_report import main, merge_results, render, write_tf2_report


def cfg(system: str, workload: str = "sparse_keras", kind: str = "adrun", hosts: int = 2, **options: str) -> RunConfig:
    return RunConfig(workload=workload, profile="commodity", hosts=hosts, kind=kind, system=system,
                     options=tuple(options.items()))


AR, FP16 = cfg("AllReduce"), cfg("AllReduce", compressor="fp16")
GRAPH_AR = cfg("AllReduce", workload="sparse")
LOOP, TF_KERAS, KERAS3 = cfg("tf2_mwms_loop", kind="peer"), cfg("tf_keras_mwms_fit", kind="peer"), cfg("keras3_mwms_fit", kind="peer")
KERAS3_ERROR = ("exit 1: ValueError: Attempt to convert a value (PerReplica:{\n...\n--- w0\nTraceback (most recent call last):\n"
                "ValueError: Attempt to convert a value (PerReplica:{\n  0: <tf.Tensor ...>\n}) with an unsupported type")


def run(config: RunConfig, rep: int, rate: float | None, steps: int, sent_per_step: int = 1000) -> RunResult:
    """Both workers at `rate` examples/s (None: the run failed as Keras 3 fit does); each host sent
    500 start-up bytes plus `sent_per_step` per step."""
    workers = [] if rate is None else [
        WorkerResult(workload=config.workload, worker=i, steps=steps - 5, seconds=1.0, batch_size=128,
                     examples_per_s=rate, steps_per_s=rate / 128) for i in range(2)]
    return RunResult(config=config, repetition=rep, steps=steps, warmup=5, exit_code=0 if rate else 1,
                     error=None if rate else KERAS3_ERROR, workers=workers, wall_s=20.0,
                     bytes=[HostBytes(host=h, sent=500 + sent_per_step * steps, received=0) for h in (1, 2)])


def invocation(runs: list[RunResult], command: str, started: str, bounds: list[LowerBound] = ()) -> BenchResults:
    return BenchResults(started=started, finished=started.replace("T00", "T01"), command=command, machine={"cpus": "2"},
                        versions={}, profiles=[Profile(name="commodity", rate_mbit=100)], notes=["shared", command],
                        runs=runs, lower_bounds=list(bounds))


@pytest.fixture
def results() -> BenchResults:
    """Three interleaved repetitions (30, 60, 30 steps): per worker AllReduce 100/110/105 (1,100 bytes
    a step), fp16 120/130/90 (1,000), the graph twin 100/100/110, the custom loop 50/60/55, tf_keras
    fit 40/45/50; Keras 3 fit fails every time."""
    runs = []
    for rep, steps, rates in ((0, 30, (100, 120, 100, 50, 40)), (1, 60, (110, 130, 100, 60, 45)), (2, 30, (105, 90, 110, 55, 50))):
        for config, rate, sent in zip((AR, FP16, GRAPH_AR, LOOP, TF_KERAS), rates, (1100, 1000, 1100, 2000, 2000), strict=True):
            runs.append(run(config, rep, rate, steps, sent))
        runs.append(run(KERAS3, rep, None, steps))
    bounds = [LowerBound(workload="sparse_keras", hosts=2, system="AllReduce (compressor=fp16)", sent_per_host=[800.0, 800.0],
                         method=FAMILY_METHOD)]
    return invocation(runs, "python -m bench.cluster.run --tf2", "2026-01-01T00:00:00", bounds)


def test_names_of_the_keras_workloads():
    assert (keras_model("ncf_keras"), keras_model("ncf"), keras_model("embed_keras")) == ("ncf", None, None)
    assert script_args("transformer_keras") == ["keras_fit.py", "--model", "transformer"]
    assert script_args("sparse") == ["sparse.py"]


def test_adrun_against_the_best_tf2_peer(results):
    [row] = peer_rows(results)
    # medians of the summed workers: fp16 240 beats AllReduce 210; the loop 110 beats tf_keras 90;
    # Keras 3 fit never completed, so it is no contender
    assert row.group == ("sparse_keras", "commodity", 2)
    assert (row.adrun.config, row.adrun.median, row.peer.config, row.peer.median) == (FP16, 240, LOOP, 110)
    assert row.ratio == pytest.approx(240 / 110)
    assert row.by_peer == pytest.approx({"tf2_mwms_loop": 240 / 110, "tf_keras_mwms_fit": 240 / 90, "keras3_mwms_fit": None})


def test_tf2_mode_against_graph_mode_compares_allreduce_with_allreduce(results):
    [row] = mode_rows(results)
    assert (row.tf2.config, row.graph.config) == (AR, GRAPH_AR)  # not the faster fp16 row
    assert row.ratio == pytest.approx(210 / 200)


def test_goals_say_each_figure_and_what_was_not_measured(results):
    goals = {g.name.split(":")[0]: g for g in tf2_goals(results)}
    two = goals["sparse_keras, commodity, 2 hosts"]
    assert (two.target, two.measured, two.met) == (1.5, pytest.approx(240 / 110), True)
    assert two.detail == "AllReduce (compressor=fp16) 240 vs tf2_mwms_loop 110 examples/s"
    assert goals["sparse_keras, commodity, 4 hosts"].met is None
    assert goals["dense_keras, commodity"].measured is None and goals["dense_keras, datacenter"].detail == "not measured"
    # fp16's slope is exactly 1,000 bytes a step per host against a bound of 800
    bytes_goal = next(g for g in goals.values() if g.name.startswith("bytes per step"))
    assert (bytes_goal.measured, bytes_goal.met) == (pytest.approx(1.25), False)
    mode = next(g for g in goals.values() if g.name.startswith("TF2 mode / graph mode"))
    assert (mode.measured, mode.met) == (pytest.approx(1.05), True)
    autos = [g for g in goals.values() if g.name.startswith("Auto")]
    assert [(g.met, g.detail.split(":")[0]) for g in autos] == [(None, "not measured")] * 2


def test_auto_is_judged_against_the_best_built_in_plan_it_may_choose(results):
    """Default Auto (median 200) against the best lossless plan (AllReduce 210), not fp16 (240);
    Auto with allow_lossy=true (230) against every plan, fp16 included."""
    auto = [run(cfg("Auto"), rep, rate, steps) for rep, (rate, steps) in enumerate(((100, 30), (110, 60), (95, 30)))]
    lossy = [run(cfg("Auto", allow_lossy="true"), rep, rate, steps)
             for rep, (rate, steps) in enumerate(((115, 30), (120, 60), (110, 30)))]
    with_auto = results.model_copy(update={"runs": results.runs + auto + lossy})
    default, allowed = [g for g in tf2_goals(with_auto) if g.name.startswith("Auto")]
    assert "lossless" in default.name and (default.measured, default.met) == (pytest.approx(200 / 210), True)
    assert default.detail == "sparse_keras, commodity, 2: Auto 200 vs AllReduce 210"
    assert "allow_lossy" in allowed.name and (allowed.measured, allowed.met) == (pytest.approx(230 / 240), True)
    assert allowed.detail.endswith("vs AllReduce (compressor=fp16) 240")


def test_the_keras3_failure_is_its_exception_line():
    assert failure_reason(KERAS3_ERROR) == "ValueError: Attempt to convert a value (PerReplica:{"
    assert failure_reason("exit 1: tensorflow.python.framework.errors_impl.UnavailableError: peer gone\nmore") == (
        "tensorflow.python.framework.errors_impl.UnavailableError: peer gone")
    assert failure_reason("exit -9: killed") is None and failure_reason(None) is None


def test_merged_invocations_keep_every_run_and_say_every_command(results):
    dense = [run(cfg("AllReduce", workload="dense_keras"), rep, 30, steps) for rep, steps in ((0, 16), (1, 32), (2, 16))]
    later = invocation(dense, "python -m bench.cluster.run --tf2 --workloads dense_keras", "2026-01-02T00:00:00")
    merged = merge_results([results, later])
    assert merged.runs == results.runs + dense and merged.lower_bounds == results.lower_bounds
    assert (merged.started, merged.finished) == ("2026-01-01T00:00:00", "2026-01-02T01:00:00")
    assert merged.command == "python -m bench.cluster.run --tf2` and `python -m bench.cluster.run --tf2 --workloads dense_keras"
    assert merged.notes == ["shared", "python -m bench.cluster.run --tf2", "python -m bench.cluster.run --tf2 --workloads dense_keras"]
    assert merge_results([results, later.model_copy(update={"finished": None})]).finished is None
    # a configuration measured again keeps only the later invocation's runs; the others stay
    again = invocation([run(AR, 0, 150, 30)], "python -m bench.cluster.run --tf2 --builders AllReduce", "2026-01-03T00:00:00")
    remeasured = merge_results([results, again])
    assert [r for r in remeasured.runs if r.config == AR] == again.runs
    assert [r for r in remeasured.runs if r.config != AR] == [r for r in results.runs if r.config != AR]
    with pytest.raises(ValueError, match="no results"):
        merge_results([])


def test_report_tables(results, tmp_path):
    text = render(results, [], tmp_path / "tf2.md", tmp_path / "results" / "tf2.json", preface="Reading: fp16 wins.",
                  regenerate="python -m bench.cluster.tf2_report x.json")
    assert "Reading: fp16 wins." in text
    assert "Generated from `results/tf2.json`; regenerate with `python -m bench.cluster.tf2_report x.json`." in text
    assert "| sparse_keras | commodity | 2 | AllReduce (compressor=fp16) 240 | tf2_mwms_loop 110 | 2.18 | 2.18 | 2.67 |" in text
    assert "| sparse_keras | commodity | 2 | 210 | 200 | 1.050 | 1 / 1 | 1 / 1 |" in text
    assert "- 3 of 3 runs: `ValueError: Attempt to convert a value (PerReplica:{`" in text
    assert "| sparse_keras, commodity, 2 hosts: adrun's best / best TF2 peer | ≥ 1.5 | 2.182 | met |" in text


def test_a_tf2_runs_report_names_the_command_that_rewrites_it(results, tmp_path, monkeypatch):
    """bench.cluster.run --tf2 writes its report with write_tf2_report: following the report's own
    "regenerate with" line (bench.cluster.tf2_report, not bench.cluster.report, whose report has
    other tables) from the repository root rewrites that same report and leaves its results, the
    hook overhead included, as they were."""
    monkeypatch.setattr(report, "REPO", tmp_path)
    json_path, markdown = tmp_path / "bench" / "results" / "tf2-x.json", tmp_path / "bench" / "RESULTS-tf2-x.md"
    measured = results.model_copy(update={"hook_overhead": HookOverhead(
        plain_examples_per_s=100.0, adrun_examples_per_s=98.0, ratio=0.98, cpu_ratio=1.01, source="x")})
    save_results(measured, json_path)
    write_tf2_report(json_path, markdown)
    written = markdown.read_text()
    command = written.split("regenerate with `", 1)[1].split("`", 1)[0]
    assert command == (".venv/bin/python -m bench.cluster.tf2_report bench/results/tf2-x.json "
                       "--merged bench/results/tf2-x.json --markdown bench/RESULTS-tf2-x.md")
    markdown.unlink()
    monkeypatch.chdir(tmp_path)
    CliRunner().invoke(main, shlex.split(command)[3:], catch_exceptions=False)
    assert markdown.read_text() == written
    assert load_results(json_path) == measured


def test_a_merged_report_keeps_the_last_hook_overhead(results):
    first, last = (HookOverhead(plain_examples_per_s=100.0, adrun_examples_per_s=r * 100, ratio=r, source="x") for r in (0.9, 0.95))
    parts = [results.model_copy(update={"hook_overhead": first}), results.model_copy(update={"hook_overhead": last}), results]
    assert merge_results(parts).hook_overhead == last


def test_a_later_invocations_autogroup_warning_is_a_note_of_the_merged_report(results, tmp_path):
    """The merged results keep the first invocation's machine facts, which warn at the head; a later
    invocation's warning would otherwise be lost."""
    quiet = results.model_copy(update={"machine": {"scheduler autogroups": "on", "load average at start": "0.5 0.5 0.5"}})
    exposed = quiet.model_copy(update={"command": "python -m bench.cluster.run --tf2 --hosts 4",
                                       "machine": {"scheduler autogroups": "on", "load average at start": "2.5 2.0 1.0"}})
    merged = merge_results([quiet, exposed])
    assert merged.autogroup_warning is None
    assert merged.notes[-1] == f"`python -m bench.cluster.run --tf2 --hosts 4`: {exposed.autogroup_warning}"
    text = render(merged, [], tmp_path / "tf2.md", tmp_path / "results" / "tf2.json")
    assert "- Note: `python -m bench.cluster.run --tf2 --hosts 4`: may have been exposed to other sessions' work" in text
    assert merge_results([merged]).notes == merged.notes  # following the report's regenerate line keeps it once


def test_the_default_report_is_the_repositorys_wherever_the_command_runs():
    default = next(p.default for p in main.params if p.name == "markdown")
    assert default == paths.BENCH / "RESULTS-cluster-tf2.md" and default.is_absolute()


def test_a_tf2_report_warns_of_other_sessions_work_under_autogroups(results, tmp_path):
    exposed = results.model_copy(update={"machine": {"scheduler autogroups": "on", "load average at start": "2.5 2.0 1.0"}})
    text = render(exposed, [], tmp_path / "tf2.md", tmp_path / "results" / "tf2.json")
    assert ("> **Warning**: may have been exposed to other sessions' work: the scheduler's autogroups were on and the "
            "1-minute load average was 2.5 at the start, before any run.") in text
