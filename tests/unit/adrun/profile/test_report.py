"""`adrun profile`'s report from hand-made facts: the sections' numbers, the trials' rank agreement
and error, the recommendation, the JSON round trip, and what the terminal shows."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from adrun.graph_item import GraphItem, PooledBags, VariableInfo
from adrun.launch.job.report import JobReport, TaskReport
from adrun.profile.report import (
    Candidate,
    FitSection,
    ProfileReport,
    TrialResult,
    cluster_section,
    model_section,
    recommend,
    same_plan,
    trials_section,
)
from adrun.profile.view import BAR_WIDTH, MAX_VARIABLE_ROWS, _bar, render
from adrun.spec import ClusterSpec, Node
from adrun.strategies import build_strategy
from adrun.strategies.facts import HostLink, Link, ModelProfile, NetworkFacts, NodeBytes, Prediction, RowsTouched
from adrun.profile.trials import trial_result

TWO_HOSTS = ClusterSpec(version=1, nodes=[Node(address="10.0.0.1", chief=True, workers=2, ps=1),
                                          Node(address="10.0.0.2", workers=2, ps=1)])


def graph(extra_dense: int = 0) -> GraphItem:
    return GraphItem(
        variables=[
            VariableInfo(name="emb", shape=[1000, 16], dtype="float32", trainable=True, grad="sparse"),
            VariableInfo(name="head", shape=[16, 1], dtype="float32", trainable=True, grad="dense"),
            VariableInfo(name="global_step", shape=[], dtype="int64", trainable=False),
            *(VariableInfo(name=f"d{i}", shape=[4], dtype="float64", trainable=True, grad="dense")
              for i in range(extra_dense)),
        ],
        optimizer="AdagradOptimizer", batch_size=64,
    )


def model(extra_dense: int = 0) -> ModelProfile:
    return ModelProfile(graph=graph(extra_dense), compute_s=0.004, steps_measured=20,
                        rows_touched={"emb": RowsTouched(mean=300.0, max=340)})


def network() -> NetworkFacts:
    return NetworkFacts(local=Link(bytes_per_s=2.5e9, latency_s=2e-5, source="measured"),
                        links=[HostLink(src="10.0.0.1", dst="10.0.0.2", bytes_per_s=1.25e7, latency_s=1e-3,
                                        source="spec")])


def prediction(builder: str, step_s: float, bound: str = "compute") -> Prediction:
    return Prediction(builder=builder, step_s=step_s, compute_s=0.004, examples_per_s=4 * 64 / step_s,
                      node_bytes={"10.0.0.1": NodeBytes(sent=1e6, received=2e6)}, busiest_link="10.0.0.1 -> 10.0.0.2",
                      busiest_link_bytes=2.5e6, bound=bound)


def candidate(builder: str, predicted: float, measured: float | None = None, failed: bool = False) -> Candidate:
    trial = None
    if failed:
        trial = TrialResult(job_id=f"j-{builder}", succeeded=False, steps=3,
                            root_cause="w1 (worker 1 on 10.0.0.2) exited with code 1",
                            root_cause_stderr=["Traceback ...", "ValueError: boom"])
    elif measured is not None:
        trial = TrialResult(job_id=f"j-{builder}", succeeded=True, steps=120, step_s=measured,
                            examples_per_s=4 * 64 / measured)
    return Candidate(builder=builder, prediction=prediction(builder, predicted), trial=trial)


def test_model_section_sizes_each_variable_by_what_a_step_moves() -> None:
    section = model_section(model(), "train.py", ["--steps", "5"])
    assert [v.name for v in section.variables] == ["emb", "head"]  # global_step has no gradient
    emb, head = section.variables
    assert emb.grad == "sparse" and emb.rows_touched_mean == 300.0 and emb.rows_touched_max == 340
    assert emb.mb == pytest.approx(1000 * 16 * 4 / 1e6)
    assert emb.step_mb == pytest.approx(300 * 16 * 4 / 1e6)  # the rows touched, not the table
    assert head.rows_touched_mean is None and head.step_mb == pytest.approx(64 / 1e6)
    assert emb.step_share == pytest.approx(19200 / (19200 + 64))
    assert emb.step_share + head.step_share == pytest.approx(1.0)
    assert section.total_mb == pytest.approx((64000 + 64) / 1e6)
    assert (section.batch_size, section.compute_s, section.optimizer) == (64, 0.004, "AdagradOptimizer")


def test_a_table_whose_lookups_pool_shows_its_sums() -> None:
    """[64 examples, 16] float32 sums, shown beside the rows it touches; the terminal says what
    they are. Examples unknown: no sums shown (the table is counted by its rows)."""
    def with_pooled(bags: PooledBags):
        return model().model_copy(update={"graph": graph().model_copy(update={"variables": [
            v.model_copy(update={"pooled": bags}) if v.name == "emb" else v for v in graph().variables]})})

    pooled = with_pooled(PooledBags(examples=64, ids=640))
    emb, head = model_section(pooled, "train.py", []).variables
    assert emb.pooled_mb == pytest.approx(64 * 16 * 4 / 1e6) and head.pooled_mb is None
    assert model_section(with_pooled(PooledBags(ids=640)), "train.py", []).variables[0].pooled_mb is None
    assert emb.step_mb == pytest.approx(300 * 16 * 4 / 1e6)
    assert model_section(model(), "train.py", []).variables[0].pooled_mb is None
    value = report([candidate("Auto", 0.010)])
    value.model = model_section(pooled, "train.py", [])
    text = rendered(value)
    assert "sparse, pooled (4.1 kB sums)" in text and "pooled: on PS tasks its lookups move per-example sums" in text
    assert "pooled" not in rendered(report([candidate("Auto", 0.010)]))


def test_cluster_section_in_mbit_and_milliseconds() -> None:
    section = cluster_section(TWO_HOSTS, network())
    assert (section.num_workers, section.num_ps) == (4, 2)
    assert [(n.address, n.chief, n.workers, n.ps) for n in section.nodes] == [
        ("10.0.0.1", True, 2, 1), ("10.0.0.2", False, 2, 1)]
    inside, between = section.links
    assert (inside.src, inside.dst, inside.mbit_s, inside.latency_ms) == ("each host", "each host", 20000, 0.02)
    assert (between.src, between.dst, between.source) == ("10.0.0.1", "10.0.0.2", "spec")
    assert between.mbit_s == pytest.approx(100) and between.latency_ms == pytest.approx(1.0)


def test_trials_section_rank_agreement_and_error_over_succeeded_trials() -> None:
    candidates = [candidate("A", 1.0, 1.1), candidate("B", 2.0, 2.5), candidate("C", 3.0, 2.0),
                  candidate("D", 4.0, failed=True), candidate("E", 5.0)]
    section = trials_section(candidates, steps=30)
    assert (section.steps, section.tried, section.succeeded) == (30, 4, 3)
    # pairs AB, AC concordant, BC discordant: (2 - 1) / 3
    assert section.kendall_tau == pytest.approx(1 / 3)
    assert section.mean_relative_error == pytest.approx((0.1 / 1.1 + 0.5 / 2.5 + 1.0 / 2.0) / 3)


def test_trials_section_without_two_measurements_has_no_rank_agreement() -> None:
    section = trials_section([candidate("A", 1.0, 2.0), candidate("B", 2.0, failed=True)], steps=10)
    assert section.kendall_tau is None and section.mean_relative_error == pytest.approx(0.5)


def test_recommend_measured_best_else_predicted_best() -> None:
    chosen, by = recommend([candidate("A", 1.0, 3.0), candidate("B", 2.0, 2.5), candidate("C", 3.0, failed=True)])
    assert (chosen.builder, by) == ("B", "trials")
    chosen, by = recommend([candidate("A", 1.0, failed=True), candidate("B", 2.0)])
    assert (chosen.builder, by) == ("A", "prediction")


def report(candidates: list[Candidate], extra_dense: int = 0) -> ProfileReport:
    chosen, by = recommend(candidates)
    tried = any(c.trial for c in candidates)
    return ProfileReport(
        model=model_section(model(extra_dense), "train.py", []), cluster=cluster_section(TWO_HOSTS, network()),
        fit=FitSection(records_used=7, error_before=0.42, error_after=0.12), candidates=candidates,
        trials=trials_section(candidates, 30) if tried else None, recommended=chosen.builder, recommended_by=by,
        recommended_plan=build_strategy("PSLoadBalancing", graph(extra_dense), TWO_HOSTS), elapsed_s=12.5,
    )


def test_report_json_round_trip() -> None:
    original = report([candidate("Auto", 0.01, 0.012), candidate("PS", 0.02, failed=True)])
    assert ProfileReport.model_validate_json(original.model_dump_json()) == original


def rendered(value: ProfileReport, plan_path: str | None = None) -> str:
    out = io.StringIO()
    render(value, Console(file=out, width=200, color_system=None), plan_path)
    return out.getvalue()


def test_terminal_report_without_trials() -> None:
    text = rendered(report([candidate("Auto", 0.010), candidate("AllReduce", 0.020)]))
    assert "model: train.py · 2 variables" in text and "batch 64" in text and "compute 4.0 ms/step" in text
    assert "│ emb " in text and "300.0 (340)" in text and "19.2 kB" in text and "100%" in text
    assert "cluster: 4 workers, 2 PS on 2 node(s)" in text and "10.0.0.1 → 10.0.0.2" in text and "100 Mbit/s" in text
    full, half = "█" * BAR_WIDTH, "█" * (BAR_WIDTH // 2)
    assert row(text, "Auto") == ["Auto", "10.0 ms", "25,600", full, "2.5 MB", "compute"]
    assert row(text, "AllReduce") == ["AllReduce", "20.0 ms", "12,800", half, "2.5 MB", "compute"]
    assert "fitted on 7 record(s) of this cluster: mean relative error of the step time 12% (analytical: 42%)" in text
    assert "trials:" not in text
    assert "recommended: Auto (fastest predicted)" in text and "-o plan.yml; measure the best with --trials K" in text


def test_a_tf2_script_is_named_so_in_the_report() -> None:
    value = report([candidate("Auto", 0.010)])
    assert value.model.kind == "graph" and "(TF2 script)" not in rendered(value)
    value.model.kind = "tf2"
    assert "model: train.py (TF2 script) · 2 variables" in rendered(value)
    assert ProfileReport.model_validate_json(value.model_dump_json()).model.kind == "tf2"


def row(text: str, builder: str, table: str = "strategies:") -> list[str]:
    """The cells of `builder`'s row in the table after the line starting with `table`."""
    after = text[text.index(table):]
    line = next(line for line in after.splitlines() if line.split() and line.split()[0] == builder)
    return [cell.strip() for cell in line.strip().split("   ") if cell.strip()]


def test_terminal_report_with_trials_shows_measured_beside_predicted_and_failures() -> None:
    value = report([candidate("Auto", 0.010, 0.020), candidate("AllReduce", 0.020, 0.016),
                    candidate("PS", 0.030, failed=True), candidate("Parallax", 0.040)])
    text = rendered(value, "plan.yml")
    assert "trials: 3 strategies, 30 steps per worker each" in text
    assert row(text, "Auto", "trials:") == [
        "Auto", "10.0 ms", "20.0 ms", "-50%", "12,800", "█" * round(BAR_WIDTH * 0.8)]
    assert row(text, "AllReduce", "trials:") == [
        "AllReduce", "20.0 ms", "16.0 ms", "+25%", "16,000", "█" * BAR_WIDTH]
    assert row(text, "PS", "trials:") == ["PS", "30.0 ms", "failed"]
    assert "Parallax" not in text.split("trials:")[1]  # not tried
    assert "2 of 3 measured; rank agreement (Kendall τ) -1.00; mean relative error of the predicted step 38%" in text
    assert "✗ PS trial failed: w1 (worker 1 on 10.0.0.2) exited with code 1: ValueError: boom" in text
    assert "recommended: AllReduce (fastest measured)" in text
    assert "wrote plan.yml: run it with adrun --strategy plan.yml" in text


def test_terminal_report_when_no_trial_measured() -> None:
    text = rendered(report([candidate("Auto", 0.010, failed=True), candidate("PS", 0.020)]))
    assert "no trial measured a rate: predictions unchecked" in text
    assert "recommended: Auto (fastest predicted, no trial measured a rate)" in text


def test_terminal_model_table_sums_the_rows_it_does_not_show() -> None:
    text = rendered(report([candidate("Auto", 0.01)], extra_dense=MAX_VARIABLE_ROWS + 3))
    hidden = (MAX_VARIABLE_ROWS + 5) - MAX_VARIABLE_ROWS
    assert f"… {hidden} more" in text


@pytest.mark.parametrize("fraction, bar", [(1.0, "█" * BAR_WIDTH), (0.5, "█" * (BAR_WIDTH // 2)),
                                           (1 / (8 * BAR_WIDTH), "▏"), (0.0, ""), (1.7, "█" * BAR_WIDTH)])
def test_bar_in_eighths(fraction: float, bar: str) -> None:
    assert _bar(fraction) == bar


def job(succeeded: bool = True, rates: tuple[float | None, ...] = (50.0, 40.0)) -> JobReport:
    tasks = [TaskReport(task=f"w{i}", role="worker", index=i, host="localhost", exit_code=0 if succeeded else 1,
                        signal=None, stopped_by_adrun=False, steps=30, steps_per_s=rate)
             for i, rate in enumerate(rates)]
    tasks.append(TaskReport(task="ps0", role="ps", index=0, host="localhost", exit_code=None, signal="SIGTERM",
                            stopped_by_adrun=True))
    return JobReport(job_id="j", builder="PS", strategy_file="s.yml", exit_code=0 if succeeded else 1,
                     succeeded=succeeded, interrupted=False,
                     root_cause=None if succeeded else "w1 (worker 1 on localhost) exited with code 1",
                     root_cause_stderr=[] if succeeded else ["ValueError: boom"], elapsed_s=9.0, steps=60,
                     steps_per_s=90.0, examples_per_s=5760.0, tasks=tasks)


def test_trial_result_step_time_is_the_inverse_of_the_workers_mean_rate() -> None:
    result = trial_result(job())
    assert result.succeeded and result.step_s == pytest.approx(1 / 45) and result.examples_per_s == 5760.0
    assert result.elapsed_s == 9.0
    failed = trial_result(job(succeeded=False))
    assert not failed.succeeded and failed.step_s is None
    assert failed.root_cause == "w1 (worker 1 on localhost) exited with code 1"
    assert failed.root_cause_stderr == ["ValueError: boom"]
    unmeasured = trial_result(job(rates=(None, None)))
    assert not unmeasured.succeeded and unmeasured.root_cause.startswith(
        "the workers ended before a second training step, so no rate could be measured")


def test_report_of_the_cost_models_ranking_shows_every_builder_and_auto() -> None:
    from adrun.strategies import BUILDERS
    from adrun.strategies.auto import Auto
    from adrun.strategies.fit import fit
    from adrun.strategies.planning_facts import PlanningFacts

    ranked = Auto().rank(PlanningFacts(spec=TWO_HOSTS, graph=graph(), profile=model(), network=network(), fit=fit([])))
    candidates = [Candidate(builder=plan.builder, prediction=p) for plan, p in ranked]
    value = report(candidates)
    assert {c.builder for c in value.candidates} == {*BUILDERS, "Auto"}
    assert ProfileReport.model_validate_json(value.model_dump_json()) == value
    text = rendered(value)
    table = text.split("strategies: fastest predicted first")[1].split("cost model")[0]
    rows = table.split("─ \n")[1].splitlines()
    assert [line.split()[0] for line in rows if line.strip()] == [c.builder for c in candidates]


def test_same_plan_compares_what_is_synchronized_how_not_who_built_it() -> None:
    one_ps = ClusterSpec(version=1, nodes=[Node(address="localhost", workers=2, ps=1)])
    ps, balanced, allreduce = (build_strategy(name, graph(), one_ps) for name in ("PS", "PSLoadBalancing", "AllReduce"))
    assert same_plan(ps, balanced)  # one PS: both put everything on it
    assert not same_plan(ps, allreduce)
    noted = allreduce.model_copy(update={
        "builder": "Auto", "variables": [v.model_copy(update={"note": "all-reduce, 90% of the sync time"})
                                         for v in allreduce.variables]})
    assert same_plan(allreduce, noted)
    two_ps = build_strategy("PSLoadBalancing", graph(), TWO_HOSTS)
    assert not same_plan(build_strategy("PS", graph(), TWO_HOSTS), two_ps)


def test_a_plan_tried_under_another_name_counts_once() -> None:
    twin = candidate("Auto", 1.0)
    twin.same_plan_as = "AllReduce"
    candidates = [candidate("AllReduce", 1.0, 2.0), twin, candidate("PS", 3.0, 2.5)]
    section = trials_section(candidates, steps=30)
    assert (section.tried, section.succeeded) == (2, 2)
    assert section.mean_relative_error == pytest.approx((0.5 + 0.2) / 2)
    text = rendered(report(candidates))
    assert "Auto = AllReduce" in text.split("strategies:")[1]
    assert row(text, "Auto", "trials:") == ["Auto", "1,000.0 ms", "as AllReduce"]


def test_builders_that_cannot_plan_here_are_named_with_the_reason() -> None:
    value = report([candidate("AllReduce", 0.01)])
    why = "strategy PS puts variables on parameter servers, but the cluster spec has no PS process"
    value.unavailable = {"PS": why}
    assert ProfileReport.model_validate_json(value.model_dump_json()) == value
    assert ("not on this cluster: PS: strategy PS puts variables on parameter servers, but the cluster spec has no "
            "PS process") in rendered(value)


def test_report_with_scaling_round_trips_and_shows_a_table_per_host_count() -> None:
    from adrun.profile.scaling import scaling_section
    from adrun.strategies.auto import Auto
    from adrun.strategies.fit import fit
    from adrun.strategies.planning_facts import PlanningFacts

    facts = PlanningFacts(spec=TWO_HOSTS, graph=graph(), profile=model(), network=network(), fit=fit([]))
    original = report([candidate("Auto", 0.010), candidate("AllReduce", 0.020)]).model_copy(
        update={"scaling": scaling_section(facts, Auto(), [2, 8])})
    assert ProfileReport.model_validate_json(original.model_dump_json()) == original
    text = rendered(original)
    assert "scaling: predicted examples/s on more hosts of this kind" in text and "100 Mbit/s, 1.00 ms" in text
    assert "2 hosts" in text and "8 hosts" in text and "published: Horovod" in text
    auto = next(c for c in original.scaling.curves if c.builder == "Auto")
    assert f"{auto.points[1].examples_per_s:,.0f}" in text  # Auto's 8-host figure, as the JSON has it
