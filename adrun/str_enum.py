"""`StrEnum` on every Python adrun supports: the standard one from 3.11, an equivalent before.

Roles, modes, job states and failure kinds are enums whose members are their text, so the
environment, YAML, JSON and SQLite keep holding plain strings.
"""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        """Python 3.10's stand-in: members are strings whose `str()` is their value."""

        def __str__(self) -> str:
            return str(self.value)


__all__ = ["StrEnum"]
