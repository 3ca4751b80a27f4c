"""What `adrun run` and `adrun strategy` show in the terminal, and adrun's one-line messages.

Every command's messages (`adrun: error: ...`, warnings, status lines) go through here. The other
commands' tables are rendered next to their data: `adrun profile`'s in adrun/profile/view.py,
`adrun jobs`' in adrun/jobs/view.py, `adrun cluster check`'s in launch/check/report.py.

adrun's own messages go to stderr; the tasks' output goes to stdout with a `[tag]` prefix, so
`adrun train.py > out.txt` keeps the script's output and nothing else. This module only renders:
what to show comes from the launcher's data (`adrun.launch.job.results`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from adrun.exit_codes import ERROR_PREFIX
from adrun.launch.job.failures import NodeLost, TaskKilled, TaskRaised, TaskRefused, TaskStalled
from adrun.placement import ps, worker

if TYPE_CHECKING:
    from adrun.graph_item import GraphItem
    from adrun.launch.job.failures import Failure
    from adrun.launch.job.metrics import Throughput
    from adrun.launch.job.results import Attempt, JobResult, Stream, TaskOutcome
    from adrun.launch.job.tasks import Task
    from adrun.spec import ClusterSpec
    from adrun.strategies.document import AllReduceSync, PSSync, Strategy, VariablePlan

console = Console(stderr=True, highlight=False)
task_console = Console(highlight=False, markup=False, emoji=False, soft_wrap=True)

_TAG_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "bright_cyan", "bright_magenta", "bright_green")
_PLAIN_STATUS_INTERVAL_S = 10.0


def print_status(message: str) -> None:
    """One line of adrun's own progress on stderr."""
    console.print(Text.assemble(("adrun: ", "bold"), message), soft_wrap=True)


def print_user_error(message: str) -> None:
    """The whole report of a user mistake: one `adrun: error:` line, never a traceback."""
    console.print(Text(f"{ERROR_PREFIX}{message}", style="red"), soft_wrap=True)


def print_warning(message: str) -> None:
    """Something looks wrong but adrun goes on: one `adrun: warning:` line."""
    console.print(Text(f"adrun: warning: {message}", style="yellow"), soft_wrap=True)


def print_failure(failure: Failure) -> None:
    """The root cause of a failed job: which task ended how, where, and its last words (stdout,
    then stderr without TensorFlow's start-up noise, so a traceback comes last)."""
    task = failure.task
    fields = Table.grid(padding=(0, 2))
    fields.add_row("task", f"{task.tag} ({task.role} {task.index})")
    fields.add_row("host", task.host)
    cause = failure.cause
    if isinstance(cause, TaskStalled):
        fields.add_row("exit", Text(f"none: it stalled, and adrun stopped the job ({cause.stopped_by})", style="bold red"))
        fields.add_row("stall", cause.detail)
    elif isinstance(cause, NodeLost):
        fields.add_row("exit", Text(f"unknown: {cause.how}", style="bold red"))
    elif isinstance(cause, TaskKilled):
        fields.add_row("exit", Text(f"killed by {cause.signal} (status {cause.returncode})", style="bold red"))
    elif cause.returncode == 0:
        fields.add_row("exit", Text("0, but a parameter server must serve until the workers finish", style="bold red"))
    else:
        fields.add_row("exit", Text(f"code {cause.returncode}", style="bold red"))
    if isinstance(cause, TaskRaised):
        fields.add_row("raised", cause.error.exception)
    elif isinstance(cause, TaskRefused):
        fields.add_row("refused", cause.message)
    parts: list[Table | Text] = [fields]
    if failure.stdout_tail:
        parts += [Text(""), Text("last output lines:", style="bold"), Text("\n".join(failure.stdout_tail))]
    tail = Text("\n".join(failure.stderr_tail)) if failure.stderr_tail else Text("(nothing on stderr)", style="dim")
    heading = Text.assemble(("last stderr lines", "bold"), (" (TensorFlow's start-up messages left out)", "dim"),
                            (":", "bold"))
    parts += [Text(""), heading, tail]
    body = Group(*parts)
    console.print(Panel(body, title=f"root cause: {task.label} failed", title_align="left", border_style="red"))


def print_summary(result: JobResult) -> None:
    """One row per task (exit, steps, rates), a cluster total row, and the wall time."""
    if result.failed:
        title = Text("job failed", style="bold red")
    elif result.interrupted:
        title = Text("job interrupted", style="bold yellow")
    else:
        title = Text("job succeeded", style="bold green")
    caption = f"wall time {result.elapsed_s:.1f} s"
    payload = max((r.wire_bytes for r in result.metrics.workers.values()), default=0)
    if payload:
        caption += f" · all-reduce payload {payload:,} B/step per worker"
    table = Table(title=title, caption=caption, title_justify="left")
    for name in ("task", "role", "exit"):
        table.add_column(name)
    for name in ("steps", "steps/s", "examples/s"):
        table.add_column(name, justify="right")
    rates = result.metrics.workers
    for outcome in result.outcomes:
        rate = rates.get(outcome.task.index) if outcome.task.role == "worker" else None
        failed = result.failed is not None and result.failed.task == outcome.task
        table.add_row(
            outcome.task.label,
            outcome.task.role,
            Text(_exit_text(outcome), style="red" if failed else ""),
            str(rate.steps) if rate else "-",
            _rate(rate.steps_per_s if rate else None),
            _rate(rate.examples_per_s if rate else None),
        )
    table.add_section()
    table.add_row(
        "cluster",
        "",
        str(result.exit_code),
        str(sum(r.steps for r in rates.values())) if rates else "-",
        _rate(result.metrics.steps_per_s),
        _rate(result.metrics.examples_per_s),
        style="bold",
    )
    console.print(table)
    if len(result.attempts) > 1:
        console.print(_attempts_table(result.attempts))
    if len(result.traffic) > 1:  # a one-node job talks over loopback, which is not counted
        console.print(_traffic_table(result.traffic))


def print_result(result: JobResult) -> None:
    """How a job ended: the summary, then the root cause when it failed."""
    print_summary(result)
    if result.failed:
        print_failure(result.failed)


def _attempts_table(attempts: Sequence[Attempt]) -> Table:
    """One row per attempt: how it ended and the steps it ran. adrun cannot know which of them
    the next attempt redid (that depends on the script's last checkpoint), so it says how many
    ran, not how many were lost."""
    table = Table(title="attempts", title_justify="left")
    table.add_column("attempt", justify="right")
    table.add_column("exit", justify="right")
    table.add_column("root cause")
    table.add_column("steps run", justify="right")
    table.add_column("then")
    for attempt in attempts:
        cause = attempt.failed.summary if attempt.failed else "-"
        table.add_row(str(attempt.number), str(attempt.exit_code), cause, str(attempt.steps), attempt.verdict or "-")
    return table


def _traffic_table(traffic: dict[str, tuple[int, int]]) -> Table:
    """Bytes each node's interfaces (loopback excepted) sent and received during the run: all
    of the node's traffic, not only the job's, which is what a saturated link cares about."""
    table = Table(title="network per node", title_justify="left")
    table.add_column("node")
    table.add_column("sent", justify="right")
    table.add_column("received", justify="right")
    for node, (sent, received) in traffic.items():
        table.add_row(node, _bytes(sent), _bytes(received))
    return table


def print_plan(plan: Strategy, item: GraphItem | None, spec: ClusterSpec | None) -> None:
    """A strategy document as a table: one row per variable with its synchronization.

    A partitioned variable's row also names its shards (`emb → emb/part_0..part_2`): TF's names,
    which is what the script sees when it lists `tf.trainable_variables()`. `item` (the captured
    GraphItem) adds variable sizes and `spec` the cluster line, when given; the plan's `reason`, when
    its builder gave one, is a line of its own.
    """
    sizes = {v.name: v.nbytes for v in item.variables} if item is not None else {}
    table = Table(
        title=f"strategy {plan.builder}{' (TF2 script)' if plan.kind == 'tf2' else ''}: {plan.num_workers} workers, "
              f"{plan.num_ps} PS",
        title_justify="left",
    )
    for name in ("variable", "shape", "dtype", "grad"):
        table.add_column(name)
    if sizes:
        table.add_column("size", justify="right")
    table.add_column("sync")
    for var in plan.variables:
        row = [_name_text(var), str(list(var.shape)), var.dtype, var.grad]
        if sizes:
            row.append(_bytes(sizes[var.name]) if var.name in sizes else "-")
        table.add_row(*row, _plan_text(var))
    captions = []
    if spec is not None:
        nodes = ", ".join(f"{n.address} ({n.workers} workers, {n.ps} PS)" for n in spec.nodes)
        captions.append(f"cluster: {nodes}")
    if plan.replica_devices and any(len(d) > 1 for d in plan.replica_devices):
        captions.append(f"in-graph replicas: {_replicas_text(plan.replica_devices)}")
    table.caption = "\n".join(captions) or None
    console.print(table)
    if plan.reason:
        console.print(f"why {plan.builder}: {plan.reason}", soft_wrap=True, markup=False, highlight=False)


def _replicas_text(replica_devices: list[list[str]]) -> str:
    """`w0-w1: CPU:0 CPU:1 · w2: CPU:0`: each run of workers with the same replica devices."""
    runs: list[tuple[int, int, list[str]]] = []
    for i, devices in enumerate(replica_devices):
        if runs and runs[-1][2] == devices:
            runs[-1] = (runs[-1][0], i, devices)
        else:
            runs.append((i, i, devices))
    return " · ".join(
        f"{f'w{a}' if a == b else f'w{a}-w{b}'}: {' '.join(devices)}" for a, b, devices in runs
    )


class JobView:
    """Shows a running job: task lines on stdout, a live throughput line on a stderr terminal.

    Implements `adrun.launch.job.restarts.AttemptListener` (a `JobListener` that also hears of
    attempts). Use as a context manager around `run_job()` (as `adrun.shown_job` does) so the live
    line is cleared before the summary is printed. With `quiet`, only
    adrun's own messages are shown. When stderr is not a terminal, the status is a plain line
    at most every 10 s.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._live: Live | None = None
        self._task_console = task_console
        self._tag_styles: dict[str, str] = {}
        self._last_plain_status = time.monotonic()
        self._max_restarts = 0
        self._attempt = ""  # "attempt 1/3  " in the status line when restarts are allowed

    def __enter__(self) -> JobView:
        if not self.quiet and console.is_terminal:
            self._live = Live(
                Text(""),
                console=console,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
            if task_console.is_terminal:
                # Same terminal: task lines must pass through the live display to land above it.
                self._task_console = console
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._task_console = task_console

    def job_started(self, job_id: str, tasks: Sequence[Task]) -> None:
        for i, task in enumerate(tasks):
            self._tag_styles[task.label] = _TAG_COLORS[i % len(_TAG_COLORS)]
        print_status(f"job {job_id}: " + ", ".join(f"{t.tag} {t.address}" for t in tasks))

    def task_output(self, task: Task, stream: Stream, line: str) -> None:
        style = self._tag_styles.get(task.label, "")
        # stderr tags are dimmed so a script's own stdout stands out among TF's stderr logging.
        tag_style = f"bold {style}" if stream == "stdout" else f"dim {style}"
        self._task_console.print(Text.assemble((f"[{task.label}] ", tag_style), line), soft_wrap=True)

    def noise_folded(self, task: Task, count: int) -> None:
        """adrun's word about the task's output, so on stderr: `> out.txt` keeps the script's lines only."""
        style = self._tag_styles.get(task.label, "")
        lines = "line" if count == 1 else "lines"
        console.print(Text.assemble((f"[{task.label}] ", f"dim {style}"), (
            f"({count} {lines} of TensorFlow start-up messages folded; --verbose shows them)", "dim")), soft_wrap=True)

    def progress(self, throughput: Throughput, elapsed_s: float) -> None:
        if self.quiet:
            return
        status = Text.assemble((self._attempt, "dim"), _status_text(throughput, elapsed_s))
        if self._live is not None:
            self._live.update(status, refresh=True)
        elif throughput.workers and time.monotonic() - self._last_plain_status >= _PLAIN_STATUS_INTERVAL_S:
            console.print(Text.assemble(("adrun: ", "bold"), status), soft_wrap=True)
            self._last_plain_status = time.monotonic()

    def stopping(self, reason: str) -> None:
        print_status(reason)

    def attempt_started(self, number: int, max_restarts: int) -> None:
        self._max_restarts = max_restarts
        left = max_restarts - number
        self._attempt = f"attempt {number}, {left} restart{'' if left == 1 else 's'} left  " if max_restarts else ""
        if number:
            print_status(f"restart {number} of at most {max_restarts}: attempt {number} (ADRUN_RESTART_COUNT={number})")

    def attempt_ended(self, attempt: Attempt, next_in_s: float | None) -> None:
        """A failed attempt's root cause at once (it would be lost after a restart), then what adrun does."""
        if attempt.failed is None:
            return
        if next_in_s is not None:
            print_failure(attempt.failed)
            print_status(f"attempt {attempt.number} ran {attempt.steps} steps (summed over the workers); "
                         f"{attempt.verdict}; "
                         f"starting attempt {attempt.number + 1} in {next_in_s:g} s")
        elif self._max_restarts:
            print_status(f"attempt {attempt.number}: {attempt.verdict}")

    def warning(self, message: str) -> None:
        print_warning(message)


def _status_text(throughput: Throughput, elapsed_s: float) -> Text:
    minutes, seconds = divmod(int(elapsed_s), 60)
    clock = f"{minutes}:{seconds:02d}"
    if not throughput.workers:
        return Text(f"{clock}  waiting for the first training steps", style="dim")
    parts = [f"{worker(i).tag} {_rate(r.steps_per_s)} steps/s" for i, r in sorted(throughput.workers.items())]
    cluster = f"cluster {_rate(throughput.steps_per_s)} steps/s"
    if throughput.examples_per_s is not None:
        cluster += f", {_rate(throughput.examples_per_s)} examples/s"
    return Text.assemble((clock, "dim"), "  ", "  ".join(parts), "  |  ", (cluster, "bold"))


def _exit_text(outcome: TaskOutcome) -> str:
    if outcome.stopped:
        return "stopped"
    if outcome.returncode is None:
        return "?"
    return outcome.signal_name or str(outcome.returncode)


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def _name_text(var: VariablePlan) -> str:
    """A variable's name, and for a partitioned one the names of its shards (TF's `<name>/part_<i>`)."""
    if var.partition is None:
        return var.name
    first, *_, last = var.shard_names()
    return f"{var.name} → {first}..{last.rsplit('/', 1)[1]}"


def _plan_text(var: VariablePlan) -> str:
    """The synchronization of one variable: its synchronizer, or its shards', plus the builder's note."""
    if var.sync is not None:  # the whole variable; else its partition's shards
        text = _sync_text(var.sync)
    else:
        assert var.partition is not None  # a VariablePlan has exactly one of them
        shards = "; ".join(_sync_text(s) for s in var.partition.shards)
        text = f"{len(var.partition.shards)} shards on axis {var.partition.axis}: {shards}"
    return f"{text}\n[dim]{var.note}[/dim]" if var.note else text


def _sync_text(sync: PSSync | AllReduceSync) -> str:
    if sync.kind == "ps":
        if not sync.sync:
            mode = "async"
        else:
            mode = f"sync, staleness {sync.staleness}" if sync.staleness else "sync"
        proxy = ", local proxy" if sync.local_proxy else ""
        return f"{ps(sync.ps_task).tag} ({mode}{proxy})"
    compressor = f", {sync.compressor}" if sync.compressor and sync.compressor != "none" else ""
    return f"allreduce group {sync.group}{compressor}"
