"""Ports, file hashes and a job's processes as a node sees them: the one implementation the
launcher and the node programs share.

Why standard library only: `probe.py` and `remote_agent.py` run on nodes with nothing but the
node's Python, and carry this module's source with them (`command.shipped_source`); the launcher
imports it as a plain module for this machine (`adrun.launch.job`: ports, provision, local,
teardown). So a port counts as free by the same test here and on every node, a file has one
digest everywhere, and a job's processes are found and signalled the same way on every host.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat

CHUNK = 1 << 16


def bind_as_grpc(port: int) -> socket.socket:
    """A listening socket on `port` of every interface (0: a port the kernel chooses); raises OSError.

    Bound the way TF's gRPC server binds: on all interfaces, since a port taken on any address
    makes the server fail at start-up; with SO_REUSEADDR for a fixed port, as gRPC sets it, so a
    port left in TIME_WAIT by an earlier job still counts as free. Listening makes the claim
    exclusive even against other SO_REUSEADDR sockets.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def taken_ports(ports: list[int]) -> list[int]:
    """Those of `ports` that `bind_as_grpc` cannot bind now (each released again at once)."""
    taken = []
    for port in ports:
        try:
            bind_as_grpc(port).close()
        except OSError:
            taken.append(port)
    return taken


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel reports free, all held until all are chosen."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            held.append(bind_as_grpc(0))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def file_sha256(path: str) -> str | None:
    """The file's sha256 as hex, read in chunks; None when there is no such file."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def private_dir(path: str) -> str | None:
    """Make `path` a directory whose files no other user can read, replace or redirect; None
    when it is one, else why not (naming the directory to look at).

    Why: a run's files (its strategy document) go to a shared place such as /tmp, where whoever
    creates a directory first owns it and everything later put in it. So every missing directory
    is created 0700; the last one must be this user's (a looser mode of its own is tightened to
    0700), and every directory above it must belong to root or this user and be writable by no one
    else unless sticky (as /tmp is), so nobody else can swap it. The path is resolved first: a
    symbolic link planted by someone else leads to a directory that fails these checks.
    """
    me = os.geteuid()
    resolved = os.path.realpath(path)
    current = "/"
    for name in resolved.split("/")[1:]:
        current = os.path.join(current, name)
        try:
            os.mkdir(current, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            return f"cannot create {current}: {e.strerror}"
        st = os.lstat(current)
        if not stat.S_ISDIR(st.st_mode):
            return f"{current} is not a directory"
        if current == resolved:
            break
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            return (f"{current} belongs to uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}, so another user "
                    "could replace what adrun puts below it; choose a directory of your own (TMPDIR)")
    st = os.lstat(resolved)
    if st.st_uid != me:
        return (f"{resolved} belongs to uid {st.st_uid}, not to you (uid {me}): another user created it first, "
                "and would own what adrun puts there; remove it, or point TMPDIR at a directory of your own")
    if st.st_mode & 0o077:
        os.chmod(resolved, 0o700)
    return None


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to process group `pgid`, if it still exists and may be signalled."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still exists (one we may not signal counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_pids(job_id: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ADRUN_JOB_ID=job_id, except this one.

    By environment, never by name: every process of a job inherits ADRUN_JOB_ID, even one that
    left its task's process group.
    """
    needle = b"ADRUN_JOB_ID=" + job_id.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if state != b"Z":
            found.append(int(entry))
    return found
