"""adrun's exit codes and the prefix of its error lines, each defined once.

The launcher (launch/, the CLI) and the runtime inside every task agree on them: a worker the
hook refused exits with PLAN_MISMATCH_EXIT_CODE and the restart rule reads it back. This module
imports nothing, so launch/ (which never imports TensorFlow or the runtime) and the hook can
both use it. README.md ("Reading the output", "Long jobs") lists what each code means to a user.
The two standard-library programs adrun sends to other nodes (launch/nodes/probe.py,
launch/job/remote_agent.py) cannot import adrun there; their few codes are their own, each
defined once in that program.
"""

from __future__ import annotations

ERROR_PREFIX = "adrun: error: "  # a user error on the terminal; the hook's refusals in a task's stderr

HOOK_DONE_EXIT_CODE = 0  # capture / profile mode: the hook wrote its file and ended the script
USER_ERROR_EXIT_CODE = 2  # a mistake in the input: adrun.errors.UserError (click's own usage errors too)
PLAN_MISMATCH_EXIT_CODE = 65  # the hook refused the script (EX_DATAERR): a worker's, also during capture
STALL_EXIT_CODE = 124  # a job ended because a worker stalled, as timeout(1) reports a timeout
INTERRUPTED_EXIT_CODE = 130  # Ctrl-C or `adrun stop`: 128 + SIGINT, as a shell reports it
BROKEN_PIPE_EXIT_CODE = 141  # the reader of stdout left: 128 + SIGPIPE, as a shell reports it
SIGNAL_EXIT_BASE = 128  # a task killed by signal n makes the launcher exit 128 + n, shell-style
