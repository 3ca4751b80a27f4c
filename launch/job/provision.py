"""Getting remote nodes ready for a job, and the job's last word on them.

Order matters for the user: `connect` and `preflight` run before the graph capture (seconds),
so a wrong key, a missing interpreter or a missing script fails at once, naming the node.
`prepare_launch` runs right before the tasks start: it ships the strategy document, chooses or
checks ports on each node, and samples byte counters. `sweep` looks on every node for leftovers
of the job and ends them; `close` (or leaving the `with` block) closes the connections. Every node is handled in parallel.

`--sync-code` copies the script's directory (recursively, without .git, __pycache__, .venv and
*.pyc files, at most SYNC_LIMIT bytes, refusing a symbolic link that leads outside it) to the same
path on every node, or under `ssh.workdir`; files already identical there (sha256) are not sent again.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import psutil

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node

from .plan import TaskLaunch
from .remote import NodeLink, RemoteProcess
from ..nodes.command import node_workdir
from ..nodes.hosts import is_local_host
from ..nodes.node_tools import file_sha256

SYNC_LIMIT = 50 << 20
SYNC_EXCLUDED_DIRS = frozenset({".git", "__pycache__", ".venv"})
SYNC_EXCLUDED_SUFFIXES = (".pyc",)
REACH_TIMEOUT_S = 20.0  # a helper's round trip (a fresh Python on the node) before a restart

T = TypeVar("T")
R = TypeVar("R")


def _each(items: Iterable[T], fn: Callable[[T], R]) -> list[R]:
    """`fn` over `items` in parallel; the first error (in item order) is raised after all ran."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(len(items), 32)) as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]


def sync_files(script: Path) -> list[Path]:
    """What `--sync-code` copies: the script's directory without excluded entries; UserError
    when it is larger than SYNC_LIMIT (a data set or checkpoints do not belong in it), or when a
    symbolic link in it leads to a file outside it.

    Why refuse the link rather than skip it: its content (a key in the home directory, say) must
    never reach every node, and a file left out would make the nodes run different code than
    this machine, failing later and less clearly. Links within the directory are copied as the
    files they point to; links to directories are not followed (as before: nothing is sent).
    """
    root = script.resolve().parent
    files, total = [], 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SYNC_EXCLUDED_DIRS)
        for name in sorted(names):
            path = Path(folder) / name
            if name.endswith(SYNC_EXCLUDED_SUFFIXES) or not path.is_file():
                continue
            target = path.resolve()
            if not target.is_relative_to(root):
                raise UserError(f"--sync-code: {path} is a symbolic link to {target}, outside {root}; adrun "
                                "sends nothing from outside the script's directory to the nodes: copy the file "
                                "into the directory, or remove the link")
            files.append(path)
            total += path.stat().st_size
    if total > SYNC_LIMIT:
        raise UserError(f"--sync-code: {root} holds {total / 2**20:.0f} MiB, more than {SYNC_LIMIT >> 20} MiB; "
                        "keep data and checkpoints elsewhere, or copy the code to the nodes yourself")
    return files


class RemoteNodes:
    """The SSH connections of one job, by node address (empty for a job on this machine only)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.nodes = [node for node in spec.nodes if not is_local_host(node.address)]
        self.links: dict[str, NodeLink] = {}
        self.ports: dict[str, list[int]] = {}

    def __enter__(self) -> RemoteNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        links = _each(self.nodes, lambda node: _open_or_error(node))
        self.links = {link.address: link for link in links if isinstance(link, NodeLink)}
        errors = [str(e) for e in links if isinstance(e, UserError)]
        if errors:
            raise UserError("cannot reach every node:\n  " + "\n  ".join(errors))

    def preflight(self, script: Path, sync: bool) -> None:
        """Fixed ports (base_port) free on every node, and the script there (same path, or under
        ssh.workdir) identical to this one's; with `sync`, copy the script's directory where it
        is missing or different. All problems of all nodes are reported together."""
        local_files = sync_files(script) if sync else [script.resolve()]
        local_root = script.resolve().parent

        def check(link: NodeLink) -> str | None:
            node = link.node
            remote_root = posixpath.dirname(self._remote_path(link, script))
            targets = {posixpath.join(remote_root, *f.relative_to(local_root).parts): f for f in local_files}
            count = node.workers + node.ps if node.base_port is not None else 0
            found = link.helper("prepare", {"ports": {"base": node.base_port, "count": count}, "files": list(targets)})
            if found.get("taken"):
                return _taken_message(node, found["taken"])
            hashes = found["hashes"]
            stale = {remote: local for remote, local in targets.items() if hashes[remote] != file_sha256(str(local))}
            if not stale:
                return None
            if sync:
                for remote, local in stale.items():
                    link.put(local, remote)
                return None
            remote = next(iter(stale))
            state = "not found" if hashes[remote] is None else "differs from the copy here"
            return (f"{script} {state} on {link.address} (at {remote}): copy it there, set ssh.workdir, "
                    f"or pass --sync-code to copy {local_root} to every node")

        problems = [p for p in _each(self.links.values(), check) if p]
        if problems:
            raise UserError("\n  ".join(problems))

    def prepare_launch(self, strategy_file: Path) -> dict[str, tuple[int, int]]:
        """Ship the strategy document to the same path in a directory only the node's user may read
        (refused when someone else owns it), choose or check each node's ports; byte counters now."""

        def prepare(link: NodeLink) -> tuple[int, int]:
            node = link.node
            remote = str(strategy_file.resolve())
            count = node.workers + node.ps
            found = link.helper("prepare", {"ports": {"base": node.base_port, "count": count}, "files": [remote],
                                            "private_dir": posixpath.dirname(remote)})
            if found["private_dir"] is not None:
                raise UserError(f"run directory refused on {link.address}: {found['private_dir']}")
            if found["hashes"][remote] != file_sha256(str(strategy_file)):
                link.put(strategy_file, remote)
            if found.get("taken"):
                raise UserError(_taken_message(node, found["taken"]))
            self.ports[link.address] = found["ports"]
            return found["net"]["sent"], found["net"]["recv"]

        return dict(zip(self.links, _each(self.links.values(), prepare), strict=True))

    def start(self, launch: TaskLaunch, job_id: str) -> RemoteProcess:
        return self.links[launch.task.host].start(launch.argv, launch.env, str(launch.cwd), job_id)

    def traffic(self) -> dict[str, tuple[int, int]]:
        """(bytes sent, bytes received) of each reachable node's interfaces but loopback."""

        def sample(link: NodeLink) -> tuple[int, int] | None:
            if not link.alive:
                return None
            net = link.helper("netio", {}, timeout=20)
            return net["sent"], net["recv"]

        samples = _each(self.links.values(), _quietly(sample))
        return {address: s for address, s in zip(self.links, samples, strict=True) if s is not None}

    def sweep(self, job_id: str) -> list[str]:
        """Kill the job's leftovers on every node (by ADRUN_JOB_ID, like `teardown.kill_leftovers`);
        a node whose connection died is reached again. Returns a line per node that could not
        be swept, since the keeper's own guarantees then are all that is left."""

        def clean(link: NodeLink) -> str | None:
            try:
                if not link.alive:
                    link.close()
                    link = NodeLink.open(link.node)
                    self.links[link.address] = link
                left = link.helper("sweep", {"job_id": job_id}, timeout=20)["left"]
                return f"{link.address}: processes {left} survived SIGKILL" if left else None
            except UserError as e:
                return f"{link.address}: {e}"

        return [line for line in _each(list(self.links.values()), clean) if line]

    def unreachable(self) -> list[str]:
        """Every node that does not answer now, named, with why and what to do: a connection that
        looks open must run a helper within REACH_TIMEOUT_S, and one that does not is opened
        again with `cluster check`'s SSH check (`NodeLink.open`). Asked before a restart, so a
        node that is gone ends the job instead of being retried."""

        def check(link: NodeLink) -> str | None:
            if link.alive:
                try:
                    link.helper("netio", {}, timeout=REACH_TIMEOUT_S)
                    return None
                except UserError:
                    pass
            link.close()
            try:
                self.links[link.address] = NodeLink.open(link.node)
            except UserError as e:
                return f"node {link.address} cannot be reached: {e}"
            return None

        return [line for line in _each(list(self.links.values()), check) if line]

    def close(self) -> None:
        for link in self.links.values():
            link.close()

    def _remote_path(self, link: NodeLink, script: Path) -> str:
        if script.is_absolute():
            return str(script)
        return posixpath.join(node_workdir(link.node, local=False), *script.parts)


def _taken_message(node: Node, taken: list[int]) -> str:
    ports = ", ".join(map(str, taken))
    return (f"port {ports} on {node.address} is already in use: choose another base_port in the spec "
            f"or stop that process (`ss -ltnp` on {node.address})")


def _open_or_error(node: Node) -> NodeLink | UserError:
    try:
        return NodeLink.open(node)
    except UserError as e:
        return e


def _quietly(fn: Callable[[T], R]) -> Callable[[T], R | None]:
    def wrapper(item: T) -> R | None:
        try:
            return fn(item)
        except Exception:  # a missing byte count must not turn a finished job into a failure
            return None

    return wrapper


def local_traffic() -> tuple[int, int]:
    """(bytes sent, bytes received) of this machine's interfaces but loopback."""
    counters = psutil.net_io_counters(pernic=True)
    return (sum(c.bytes_sent for name, c in counters.items() if name != "lo"),
            sum(c.bytes_recv for name, c in counters.items() if name != "lo"))
