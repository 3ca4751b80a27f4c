"""How the hook refuses a script, in every mode: one `adrun: error:` line for the script's reader, a
RefusalEvent for the launcher (which quotes it as the job's error, capture's included), and exit
PLAN_MISMATCH_EXIT_CODE. Graph mode's patches, TF2 mode's version check and profile mode's refusal of
TF2 scripts all refuse through here."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn

from adrun.errors import UserError
from adrun.exit_codes import ERROR_PREFIX, PLAN_MISMATCH_EXIT_CODE
from adrun.runtime.reporting import report
from adrun.task_events import MESSAGE_CHARS, RefusalEvent


def refuse(message: str) -> NoReturn:
    """Refuse the script with `message` and end the process."""
    sys.stdout.flush()
    sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
    sys.stderr.flush()
    report(RefusalEvent(message[:MESSAGE_CHARS]))
    os._exit(PLAN_MISMATCH_EXIT_CODE)


def refusing(patch: Callable[[], None]) -> Callable[[], None]:
    """`patch`, with a UserError it raises turned into the script's refusal (a patch runs inside the
    script's import, where a raised error would reach the user as a trace of the import)."""

    def run() -> None:
        try:
            patch()
        except UserError as error:
            refuse(str(error))

    return run
