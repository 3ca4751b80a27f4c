"""bench/cluster's pure parts: results JSON round trip, figures from hand-made runs, goals, markdown,
and the naive lower bound against hand-computed bytes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bench.cluster import report
from bench.cluster.analysis import goals, summarize
from bench.cluster.lower_bound import FAMILY_METHOD
from bench.cluster.report import default_markdown, main, render_markdown
from bench.cluster.results import (
    BenchResults, HookOverhead, HostBytes, LowerBound, Profile, RunConfig, RunResult, WorkerResult, load_results,
    save_results,
)

PS = RunConfig(workload="sparse", profile="commodity", hosts=2, kind="adrun", system="PS")
AR = RunConfig(workload="sparse", profile="commodity", hosts=2, kind="adrun", system="AllReduce",
               options=(("compressor", "fp16"),))
TF_PS = RunConfig(workload="sparse", profile="commodity", hosts=2, kind="peer", system="tf_ps")


def run(config: RunConfig, rep: int, per_worker: tuple[float, float] | None, steps: int = 30,
        sent_per_step: int = 500) -> RunResult:
    """A repetition whose workers ran at `per_worker` examples/s (None: a failed run) and whose hosts
    sent 1000 start-up bytes plus `sent_per_step` per step (host 2: twice that)."""
    workers = [] if per_worker is None else [
        WorkerResult(workload=config.workload, worker=i, steps=steps - 5, seconds=1.0, batch_size=128,
                     examples_per_s=rate, steps_per_s=rate / 128) for i, rate in enumerate(per_worker)]
    return RunResult(
        config=config, repetition=rep, steps=steps, warmup=5, exit_code=0 if per_worker else 1,
        error=None if per_worker else "exit 1: worker 1 crashed\nTraceback ...", workers=workers, wall_s=30.0,
        bytes=[HostBytes(host=h, sent=h * (1000 + sent_per_step * steps), received=7) for h in (1, 2)],
    )


@pytest.fixture
def results() -> BenchResults:
    runs = []
    for rep, (steps, ps, ar, peer) in enumerate([(30, (50, 50), (80, 90), (25, 25)), (60, (60, 60), (85, 90), (30, 30)),
                                                 (30, (55, 55), None, (20, 20))]):
        runs += [run(PS, rep, ps, steps), run(AR, rep, ar, steps, 250), run(TF_PS, rep, peer, steps)]
    return BenchResults(
        started="2026-01-01T00:00:00", finished="2026-01-01T01:00:00", command="python -m bench.cluster.run --quick",
        machine={"cpus": "2"}, versions={"tensorflow": "2.21.0"}, profiles=[Profile(name="commodity", rate_mbit=100)],
        runs=runs, hook_overhead=HookOverhead(plain_examples_per_s=100.0, adrun_examples_per_s=98.0, ratio=0.98, cpu_ratio=1.01,
                                                 source="x"),
        lower_bounds=[LowerBound(workload="sparse", hosts=2, system="AllReduce (compressor=fp16)",
                                 sent_per_host=[250.0, 250.0], method=FAMILY_METHOD)],
    )


def test_json_round_trip(results, tmp_path):
    save_results(results, tmp_path / "r.json")
    assert load_results(tmp_path / "r.json") == results


def test_figures_from_runs(results):
    ps, ar, peer = summarize(results)
    assert (ps.config, ps.runs, ps.ok, ps.median, ps.low, ps.high) == (PS, 3, 3, 110, 100, 120)
    assert ps.spread == pytest.approx(20 / 110)
    assert (ar.ok, ar.median, ar.low, ar.high) == (2, 172.5, 170, 175)
    assert peer.median == 50
    # start-up bytes cancel: the slope of sent bytes against steps is the per-step figure, per host
    assert ps.sent_per_step == pytest.approx([500, 1000])
    assert ar.sent_per_step == pytest.approx([250, 500])  # the failed repetition is left out
    assert ps.bound is None and ps.bytes_ratio is None
    assert ar.bytes_ratio == pytest.approx(750 / 500)


def test_goals(results):
    by_name = {g.name: g for g in goals(results)}
    g = by_name["sparse, commodity, 2 hosts: adrun's best / tf_ps"]
    assert (g.measured, g.met) == (pytest.approx(172.5 / 50), True)
    assert "AllReduce (compressor=fp16) 172 vs tf_ps 50" in g.detail
    assert by_name["sparse, commodity, 4 hosts: adrun's best / tf_mwms"].met is None
    assert by_name["dense, commodity: adrun's best / best peer (worst host count)"].measured is None
    b = by_name["bytes per step / lower bound (adrun's fastest configuration, worst group)"]
    assert (b.measured, b.met) == (pytest.approx(1.5), False)
    h = by_name["hook overhead, 1 worker no PS (1 - adrun/plain)"]
    assert (h.measured, h.met) == (pytest.approx(0.02), True)


def test_markdown(results, tmp_path):
    text = render_markdown(results, [tmp_path / "r-sparse-commodity-2h.png"], tmp_path / "r.md", tmp_path / "r.json")
    assert "| sparse, commodity, 2 hosts: adrun's best / tf_ps | ≥ 1.5 | 3.450 | met |" in text
    assert "| bytes per step / lower bound (adrun's fastest configuration, worst group) | ≤ 1.15 | 1.500 | **not met** |" in text
    assert "| sparse, commodity, 4 hosts: adrun's best / tf_ps | ≥ 2 | - | not measured | not measured |" in text
    assert "| PS | 3/3 | 110 | 100 – 120 | 18% | 0 / 1 | - | - |" in text  # KiB per host
    assert "| tf_ps (peer) | 3/3 | 50 | 40 – 60 |" in text
    assert "| sparse | commodity | 2 | AllReduce (compressor=fp16) 172 | tf_ps 50 | 3.45 | 3.45 | - |" in text
    assert "AllReduce (compressor=fp16) on sparse/commodity/2 hosts, repetition 2: exit 1: worker 1 crashed" in text
    assert "![r-sparse-commodity-2h](r-sparse-commodity-2h.png)" in text
    assert "plain 100 examples/s, under adrun 98: ratio 0.980; CPU time per step adrun / plain 1.010 (x)" in text


def test_scaling_uses_the_one_host_runs_for_every_profile(results, tmp_path):
    one_host = RunConfig(workload="sparse", profile="commodity", hosts=1, kind="adrun", system="PS")
    peer_one_host = one_host.model_copy(update={"kind": "peer", "system": "tf_ps"})
    datacenter = PS.model_copy(update={"profile": "datacenter"})
    results.runs += [run(one_host, rep, (70,)) for rep in range(3)] + [run(peer_one_host, rep, (40,)) for rep in range(3)]
    results.runs += [run(datacenter, rep, (90, 90)) for rep in range(3)]
    text = render_markdown(results, [], tmp_path / "r.md", tmp_path / "r.json")
    scaling = text[text.index("## Scaling"):text.index("## Hook overhead")]
    assert "**sparse, commodity**" in scaling and "**sparse, datacenter**" in scaling
    datacenter_rows = scaling[scaling.index("**sparse, datacenter**"):]
    assert "| adrun (best) | 70 (PS) | 180 (PS) |" in datacenter_rows
    assert "| tf_ps | 40 | - |" in datacenter_rows


def test_busy_machine_is_said(results, tmp_path):
    assert "the machine was busy" not in render_markdown(results, [], tmp_path / "r.md", tmp_path / "r.json")
    results.machine.update({"cpus": "2", "load average at start": "1.0 1.0 1.0", "load average at end": "14.5 9.0 3.0"})
    assert ("- Note: the machine was busy (load average up to 14.5 on 2 CPUs)"
            in render_markdown(results, [], tmp_path / "r.md", tmp_path / "r.json"))
    results.machine.update({"load average at end": "1.0 1.0 1.0"})
    for load, r in zip([1.0, 3.0, 8.5], results.runs, strict=False):
        r.load_average = load
    assert ("- Note: the machine was busy (load average up to 8.5, median 3.0 after the runs on 2 CPUs)"
            in render_markdown(results, [], tmp_path / "r.md", tmp_path / "r.json"))


AUTOGROUP_WARNING = "> **Warning**: may have been exposed to other sessions' work: the scheduler's autogroups were on"


def _with_loads(results: BenchResults, autogroups: str | None, start: float, per_run: list[float]) -> BenchResults:
    machine = {"cpus": "2", "load average at start": f"{start} 0.3 0.2", "load average at end": "3.5 2.5 1.3"}
    runs = [r.model_copy(update={"load_average": load}) for r, load in zip(results.runs, per_run, strict=False)]
    return results.model_copy(update={"machine": machine | ({"scheduler autogroups": autogroups} if autogroups else {}),
                                      "runs": runs})


def test_a_run_beside_other_sessions_work_under_autogroups_says_so_in_the_report_and_the_json(results, tmp_path):
    """With autogroups on, other sessions' work takes CPU shares from the benchmark however niced:
    the report's head and the results JSON (`autogroup_warning`) say it may have, when the load
    average at the start, before any run (so other work than the benchmark's), was above 1."""
    exposed = _with_loads(results, "on", 1.6, [0.8, 3.0, 1.2])
    text = render_markdown(exposed, [], tmp_path / "r.md", tmp_path / "r.json")
    warning = next(line for line in text.splitlines() if line.startswith(AUTOGROUP_WARNING))
    assert "load average was 1.6 at the start, before any run" in warning
    assert "`sysctl -w kernel.sched_autogroup_enabled=0`" in warning and "bench/README.md" in warning
    assert text.index(warning) < text.index("- Command:")  # at the head, before the facts
    save_results(exposed, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["autogroup_warning"] == warning.removeprefix("> **Warning**: ")
    assert load_results(tmp_path / "r.json") == exposed  # the field is the results' own, recomputed on load


@pytest.mark.parametrize("autogroups, start", [
    ("off", 3.0),  # nice protects the benchmark from other sessions' niced work
    ("on", 0.8),  # nothing beyond about one CPU's worth of work ran before the runs
    (None, 3.0),  # results from before bench.cluster.run recorded the fact
    ("absent", 3.0),  # a kernel without autogroups
])
def test_no_autogroup_warning_when_autogroups_were_off_or_the_load_at_the_start_was_at_most_one(
        results, tmp_path, autogroups, start):
    """The loads after the runs and at the end (up to 5.0 and 3.5 here) count the benchmark's own
    processes, so they do not raise the warning."""
    quiet = _with_loads(results, autogroups, start, [3.0, 5.0, 4.0])
    assert quiet.autogroup_warning is None
    assert "autogroups were on" not in render_markdown(quiet, [], tmp_path / "r.md", tmp_path / "r.json")
    save_results(quiet, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["autogroup_warning"] is None

def test_a_plan_made_per_link_is_judged_against_its_own_bound():
    """Auto's plan is made on each profile's link, so each profile's runs have their own bound."""
    auto = {p: RunConfig(workload="sparse", profile=p, hosts=2, kind="adrun", system="Auto") for p in ("commodity", "datacenter")}
    results = BenchResults(
        started="2026-01-01T00:00:00", command="x", machine={}, versions={},
        profiles=[Profile(name="commodity", rate_mbit=100), Profile(name="datacenter", rate_mbit=1000)],
        runs=[run(auto[p], rep, (50, 50)) for p in auto for rep in range(3)],
        lower_bounds=[LowerBound(workload="sparse", hosts=2, system="Auto", profile=p, sent_per_host=[n, n], method=FAMILY_METHOD)
                      for p, n in (("commodity", 100.0), ("datacenter", 300.0))],
    )
    assert {s.config.profile: s.bound.sent_per_host[0] for s in summarize(results)} == {"commodity": 100.0, "datacenter": 300.0}


def test_a_report_names_its_own_markdown_in_its_regenerate_line(results, tmp_path, monkeypatch):
    """Following a report's own instruction rewrites that report, not bench/RESULTS-cluster.md."""
    monkeypatch.setattr(report, "REPO", tmp_path)
    (tmp_path / "bench" / "results").mkdir(parents=True)
    text = render_markdown(results, [], tmp_path / "bench" / "RESULTS-cluster-x.md",
                           tmp_path / "bench" / "results" / "cluster-x.json")
    assert ("Generated from `results/cluster-x.json`; regenerate with `.venv/bin/python -m bench.cluster.report "
            "bench/results/cluster-x.json --markdown bench/RESULTS-cluster-x.md`.") in text


def test_a_report_outside_the_repository_names_its_files_absolutely(results, tmp_path, monkeypatch):
    """The regenerate command runs from the repository root: a report written to /tmp/lead/x.md is
    named so, not as lead/x.md (relative to the folder above the report's)."""
    monkeypatch.setattr(report, "REPO", tmp_path / "repo")
    lead = tmp_path / "lead"
    text = render_markdown(results, [], lead / "x.md", lead / "x.json")
    assert (f"regenerate with `.venv/bin/python -m bench.cluster.report {lead}/x.json --markdown {lead}/x.md`."
            in text)
    assert report.command_path(tmp_path / "repo" / "bench" / "x.md") == "bench/x.md"


def test_the_report_command_writes_beside_the_json_unless_told(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative default would land here, not in the repository
    json_path = tmp_path / "cluster-x.json"
    save_results(results, json_path)
    CliRunner().invoke(main, [str(json_path), "--no-plots"], catch_exceptions=False)
    assert (tmp_path / "cluster-x.md").is_file()
    CliRunner().invoke(main, [str(json_path), "--no-plots", "--markdown", str(tmp_path / "named.md")],
                       catch_exceptions=False)
    assert (tmp_path / "named.md").read_text() != ""
    assert default_markdown(json_path) == tmp_path / "cluster-x.md"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster-x.json", "cluster-x.md", "named.md"]
