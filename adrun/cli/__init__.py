"""The `adrun` command line, one module per command group.

`adrun [run options] SCRIPT [ARGS]...` runs a script on a cluster (`run`); `adrun strategy ...`
builds and shows strategy documents (`strategy`); `adrun profile` recommends one (`profile`);
`adrun cluster check` inspects the nodes (`cluster`); `adrun jobs`, `stop` and `logs` reach the jobs
of this machine (`jobs`). `options` holds what several commands share, `planning` the capture and
plan that run and strategy build both make. User mistakes end as one `adrun: error:` line and a
non-zero exit.
"""

from adrun.cli.app import main
from adrun.cli import cluster, jobs, profile, run, strategy  # noqa: F401  (each adds its commands to `main`)

__all__ = ["main"]
