"""Default times of a job, in seconds, defined once: the CLI shows them in its help and the
launcher's own callers (`adrun profile`'s trials, the benchmarks, tests) fall back to them.

Imports nothing, so `adrun --help` stays fast and launch/ can use it.
"""

from __future__ import annotations

STALL_TIMEOUT_S: float = 300  # --stall-timeout: no training step for this long is a stall
RESTART_BACKOFF_S: float = 5  # --restart-backoff: the wait before each restart
TASK_TIMEOUT_S: float = 600  # ADRUN_INIT_TIMEOUT and ADRUN_OP_TIMEOUT unless set
