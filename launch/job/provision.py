"""A job's SSH connections to its other nodes: opened and checked before the job, reopened
when one died, closed after.

Order matters for the user: `connect` and `preflight` run before the graph capture (seconds),
so a wrong key, a missing interpreter or a missing script fails at once, naming the node.
`unreachable` asks every node before a restart; `close` (or leaving the `with` block) closes the
connections. Every node is handled in parallel. What an attempt does on a node through its
connection (ports, tasks, the final sweep, byte counters) is `backends.SshNode`'s.

`--sync-code` copies the script's directory (recursively, without .git, __pycache__, .venv and
*.pyc files, at most SYNC_LIMIT bytes, refusing a symbolic link that leads outside it) to the same
path on every node, or under `ssh.workdir`; files already identical there (sha256) are not sent again.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node

from ..nodes.parallel import each
from .remote import NodeLink
from ..nodes.command import node_workdir
from ..nodes.hosts import is_local_host
from ..nodes.node_tools import file_sha256

SYNC_LIMIT = 50 << 20
SYNC_EXCLUDED_DIRS = frozenset({".git", "__pycache__", ".venv"})
SYNC_EXCLUDED_SUFFIXES = (".pyc",)
REACH_TIMEOUT_S = 20.0  # a helper's round trip (a fresh Python on the node) before a restart



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

    def __enter__(self) -> RemoteNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        links = each(self.nodes, lambda node: _open_or_error(node))
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
                return taken_message(node, found["taken"])
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

        problems = [p for p in each(self.links.values(), check) if p]
        if problems:
            raise UserError("\n  ".join(problems))

    def reconnect(self, address: str) -> NodeLink:
        """The connection to `address` opened again (`NodeLink.open`: UserError saying why it
        cannot be), replacing the one that died."""
        link = self.links[address]
        link.close()
        self.links[address] = NodeLink.open(link.node)
        return self.links[address]

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
            try:
                self.reconnect(link.address)
            except UserError as e:
                return f"node {link.address} cannot be reached: {e}"
            return None

        return [line for line in each(list(self.links.values()), check) if line]

    def close(self) -> None:
        for link in self.links.values():
            link.close()

    def _remote_path(self, link: NodeLink, script: Path) -> str:
        if script.is_absolute():
            return str(script)
        return posixpath.join(node_workdir(link.node, local=False), *script.parts)


def taken_message(node: Node, taken: list[int]) -> str:
    ports = ", ".join(map(str, taken))
    return (f"port {ports} on {node.address} is already in use: choose another base_port in the spec "
            f"or stop that process (`ss -ltnp` on {node.address})")


def _open_or_error(node: Node) -> NodeLink | UserError:
    try:
        return NodeLink.open(node)
    except UserError as e:
        return e
