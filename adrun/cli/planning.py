"""Capture and plan: what `adrun run` and `adrun strategy build` both do before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from adrun.errors import UserError

if TYPE_CHECKING:
    from adrun.graph_item import GraphItem
    from adrun.launch.job.provision import RemoteNodes
    from adrun.records.store import Records
    from adrun.spec import ClusterSpec
    from adrun.strategies.document import Strategy


def plan_script(strategy: str | None, options: dict[str, str], script: Path, script_args: list[str], spec: ClusterSpec,
                job_id: str, *, remote: RemoteNodes, records: Records | None,
                measure_network: bool) -> tuple[GraphItem, Strategy]:
    """Capture the script's graph and turn it into a Strategy for this cluster.

    Everything that can be checked without the script (builder name and options, the document)
    is checked before the capture, which takes seconds. Auto profiles the script instead (the
    profile holds the captured graph) and plans with the records and the network facts
    (adrun/auto_plan.py). No `strategy`: the default builder for the script's kind (`default_builder`).
    """
    from adrun import ui
    from adrun.capture_run import capture_graph
    from adrun.strategies import configured_builder
    from adrun.strategies.auto import AUTO
    from adrun.strategies.document import check_matches, load_strategy

    if strategy == AUTO:
        from adrun.auto_plan import auto_options, plan_automatically

        auto = plan_automatically(script, script_args, spec, remote, records, auto_options(options), job_id,
                                  measure_network=measure_network)
        return auto.profile.graph, auto.plan
    if strategy is not None and _names_document(strategy):
        if options:
            raise UserError("--strategy-opt applies to a builder name, not to a strategy document")
        plan = load_strategy(Path(strategy))
        ui.print_status(f"capturing the graph of {script} ...")
        item = capture_graph(script, script_args, spec.num_workers, job_id)
        check_matches(plan, item, spec, source=strategy)
        return item, plan
    builder = configured_builder(strategy, options) if strategy is not None else None
    ui.print_status(f"capturing the graph of {script} ...")
    item = capture_graph(script, script_args, spec.num_workers, job_id)
    if builder is None:
        builder = configured_builder(default_builder(item), options)
    return item, builder.build(item, spec)


# --- the default builder by script kind (tf2core) ---
def default_builder(item: GraphItem) -> str:
    """What a script gets without --strategy: PSLoadBalancing for graph mode; AllReduce for TF2
    scripts, since TF2 mode synchronizes by collectives only (strategies/document.py, TF2_NO_PS)."""
    return "AllReduce" if item.kind == "tf2" else "PSLoadBalancing"
# --- end of the default builder by script kind ---


def _names_document(strategy: str) -> bool:
    """Whether `--strategy` names a strategy document rather than a builder. A name the file system
    cannot even look up (too long, say) is no document: it is then reported as an unknown builder."""
    if strategy.endswith((".yml", ".yaml")):
        return True
    try:
        return Path(strategy).is_file()
    except OSError:
        return False
