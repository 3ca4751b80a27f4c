"""One attempt of a job, for the restart loop: its machines prepared, its tasks planned on ports
chosen now and closed to every host outside the job while they run (`fencing`), supervised, and
the bytes each machine moved meanwhile."""

from __future__ import annotations

import threading

from .backends import JobNodes
from .config import JobConfig
from .fencing import JobFences, close_ports
from .plan import plan_job
from .results import JobResult
from .supervisor import JobListener, supervise


def run_attempt(config: JobConfig, nodes: JobNodes, listener: JobListener, attempt: int = 0,
                interrupt: threading.Event | None = None) -> JobResult:
    """Start attempt `attempt` of `config`'s job on `nodes` (other machines already connected
    and checked) on ports chosen now, closed to every host outside the job while it runs (a
    warning names each machine left open), and return how it ended, with each machine's network
    bytes meanwhile. Its processes see the attempt as ADRUN_RESTART_COUNT."""
    before = nodes.prepare(config.strategy_file)
    launches = plan_job(config.spec, config.script, config.script_args, job_id=config.job_id,
                        strategy_file=config.strategy_file, nodes=nodes, restart_count=attempt,
                        settings=config.settings)
    fences = JobFences() if config.allow_exposed else close_ports(launches, config.job_id, attempt)
    try:
        if (exposed := fences.warning()) is not None:
            listener.warning(exposed)
        result = supervise(launches, config, listener, attempt=attempt, interrupt=interrupt)
    finally:
        fences.close()
    after = nodes.traffic()
    result.traffic.update({name: (sent - before[name][0], recv - before[name][1])
                           for name, (sent, recv) in after.items() if name in before})
    return result
