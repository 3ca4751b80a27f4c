"""Keras progress bars in the live view: one readable line per epoch instead of a redrawn bar.

Keras 3 draws its bar as if on a terminal even into a pipe (its `Progbar` counts "posix" in
`sys.modules` as a dynamic display): each update backspaces over the previous one, returns with
`\\r` and redraws, with ANSI bold and colours, and ends the line only when the epoch ends. So an
epoch reaches adrun as one line holding every redraw, and printed behind a `[w1] ` tag its `\\r`s
and backspaces overwrite the tag and the other workers' lines. tf_keras's bar does the same without
colours.

What the live view shows of such a line is what a terminal would have left on screen: the last
redraw, without escape codes. The chief's lines are shown as they are (the `Epoch 2/3` header, then
its bar's final state); another worker's epoch becomes one line, `Epoch 2/3: 6/6 - 0s 20ms/step -
loss: ...` (its header held back to label it, the bar's glyphs dropped). With `--verbose` every
worker's lines are shown as the chief's. Log files (`--log-dir`) keep the raw bytes.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EPOCH = re.compile(r"^Epoch \d+/\d+$")
_PROGRESS = re.compile(r"^\s*\d+/(\d+|Unknown)\b")  # "6/6 ━━━ ...", "6/6 [====] ...", "      3/Unknown ..."
_BAR = re.compile(r" ?(━+|\[[=>.]*\])( -)? ?")  # Keras 3's bar glyphs, tf_keras's "[=====>....] -"


def on_screen(line: str) -> str:
    """What `line` leaves on a terminal line: `\\r` returns to its start, a backspace moves one
    left, later characters overwrite earlier ones; escape codes are dropped."""
    if "\r" not in line and "\b" not in line and "\x1b" not in line:
        return line
    screen: list[str] = []
    column = 0
    for char in _ANSI.sub("", line):
        if char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        else:
            if column < len(screen):
                screen[column] = char
            else:
                screen.append(char)
            column += 1
    return "".join(screen).rstrip()


class ProgressBars:
    """One task's lines as the live view shows them (see the module's docstring)."""

    def __init__(self, is_chief: bool, show_all: bool) -> None:
        self._whole = is_chief or show_all
        self._epoch: str | None = None  # a non-chief's last epoch header, held to label its epoch line

    def shown(self, line: str) -> list[str]:
        """The lines to show for `line`: none (a held epoch header), or one."""
        text = on_screen(line)
        if self._whole:
            return [text]
        if _EPOCH.match(text):
            self._epoch = text
            return []
        if _PROGRESS.match(text):
            condensed = _BAR.sub(" - ", text.strip(), count=1)
            label, self._epoch = self._epoch, None
            return [f"{label}: {condensed}" if label else condensed]
        return [text]
