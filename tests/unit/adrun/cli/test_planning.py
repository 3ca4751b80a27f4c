"""From `--strategy NAME|FILE` to a plan (adrun/cli/planning.py): one path for every choice. What
`--strategy` names is checked before anything is gathered; the facts gathered are those the chosen
builder declares it needs (the capture and the gathering are replaced by recorders here); the plan
is the builder's, or the document checked against the captured graph. Remembered plans:
tests/unit/adrun/cli/test_remembered_plans.py."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from adrun.cli.planning import DEFAULT_BUILDER, chosen_plan, plan_script
from adrun.errors import UserError
from adrun.gathering import FactSources
from adrun.graph_item import GraphItem
from adrun.strategies import build_strategy
from adrun.strategies.auto import Auto, AutoOptions
from adrun.strategies.document import dump_strategy
from adrun.strategies.fit import fit
from adrun.strategies.planning_facts import PlanningFacts
from tests.support.cost_facts import hosts_spec, network, profile, var

SPEC = hosts_spec(2)
GRAPH = GraphItem(batch_size=8, variables=[var("emb", [1000, 8], "sparse"), var("w", [8, 4])])
OTHER = GraphItem(batch_size=8, variables=[var("v", [4, 4])])


@pytest.fixture
def gathered(monkeypatch):
    """Replaces the capture and the gathering: records the needs it was asked for ("capture" for a
    capture), answers with every fact of GRAPH."""
    asked: list = []

    def capture(sources):
        asked.append("capture")
        return GRAPH

    def gather_facts(needs, sources, graph=None, known_network=None, run=None):
        asked.append(needs)
        return PlanningFacts(spec=sources.spec, graph=GRAPH, profile=profile(GRAPH, 0.01, {"emb": 5}),
                             network=network(SPEC, 1e8), fit=fit([]))

    class Started:
        """The script's one process for a builder that profiles: its graph is a capture."""

        def graph(self):
            return capture(None)

    @contextmanager
    def started(sources):
        yield Started()

    monkeypatch.setattr("adrun.gathering.gather_facts", gather_facts)
    monkeypatch.setattr("adrun.gathering.capture", capture)
    monkeypatch.setattr("adrun.gathering.started", started)
    return asked


def sources() -> FactSources:
    return FactSources(Path("train.py"), [], SPEC, "job", remote=None, records=None)


def test_a_builder_name_gathers_what_that_builder_needs_and_builds(gathered):
    item, plan = plan_script(chosen_plan("PartitionedPS", {"max_shards": "2"}), sources())
    assert gathered == [frozenset()] and item == GRAPH
    assert plan == build_strategy("PartitionedPS", GRAPH, SPEC, {"max_shards": "2"})

    item, plan = plan_script(chosen_plan("Auto", {"allow_lossy": "true"}), sources())
    assert gathered[-1] == Auto.needs
    assert plan.builder == "Auto" and plan.options == AutoOptions(allow_lossy=True).model_dump()


def test_without_a_strategy_the_default_builder_plans_with_the_options(gathered):
    chosen = chosen_plan(None, {"allow_lossy": "true"})
    assert DEFAULT_BUILDER == "Auto" and chosen.needs == Auto.needs and chosen.source == ""
    _, plan = plan_script(chosen, sources())
    assert gathered == ["capture", Auto.needs]  # no records: one process, its graph then the facts (profile)
    assert plan.builder == "Auto" and plan.options == AutoOptions(allow_lossy=True).model_dump()
    assert plan.reason.startswith("predicted step ")


def test_a_bad_option_of_the_default_builder_is_refused_before_anything_is_gathered(gathered):
    with pytest.raises(UserError, match="allow_lossi"):
        chosen_plan(None, {"allow_lossi": "true"})
    assert gathered == []


def test_a_document_is_checked_against_the_captured_graph(gathered, tmp_path):
    path = tmp_path / "plan.yml"
    dump_strategy(build_strategy("PS", GRAPH, SPEC), path)
    item, plan = plan_script(chosen_plan(str(path), {}), sources())
    assert gathered == ["capture"] and plan == build_strategy("PS", GRAPH, SPEC)

    dump_strategy(build_strategy("PS", OTHER, SPEC), path)
    with pytest.raises(UserError, match=f"{path}: planned for a different graph"):
        plan_script(chosen_plan(str(path), {}), sources())


@pytest.mark.parametrize("strategy,options,message", [
    ("Horovod", {}, "unknown strategy builder 'Horovod'"),
    ("PS", {"chunk": "2"}, "unknown option 'chunk' for strategy builder PS"),
    ("Auto", {"allow_speed": "true"}, "Auto options: unknown field 'allow_speed'"),
    ("plan.yml", {"sync": "false"}, "--strategy-opt applies to a builder name, not to a strategy document"),
    ("missing.yml", {}, "missing.yml"),
])
def test_what_strategy_names_is_refused_before_anything_is_gathered(gathered, strategy, options, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        chosen_plan(strategy, options)
    assert gathered == []


@pytest.mark.parametrize("builder,reads_records", [("PS", False), ("Auto", True)])
def test_strategy_build_opens_the_records_only_for_a_builder_that_reads_them(gathered, records_db, tmp_path,
                                                                            builder, reads_records):
    from click.testing import CliRunner

    from adrun.cli import main
    from adrun.strategies.document import load_strategy

    script, output = tmp_path / "train.py", tmp_path / "plan.yml"
    script.write_text("")
    spec = tmp_path / "cluster.yml"
    spec.write_text("version: 1\nnodes:\n  - {address: 10.0.0.1, chief: true, workers: 1, ps: 1}\n"
                    "  - {address: 10.0.0.2, workers: 1, ps: 1}\nnetwork: {bandwidth_mbit: 100, latency_ms: 1}\n")
    result = CliRunner().invoke(main, ["strategy", "build", builder, "--spec", str(spec), "-o", str(output),
                                       str(script)])
    assert result.exit_code == 0, result.output
    # Auto captures first: its plan may be remembered for the graph (not here: none was made before)
    assert gathered == (["capture", Auto.needs] if reads_records else [frozenset()])
    assert load_strategy(output).builder == builder
    assert records_db.exists() == reads_records
