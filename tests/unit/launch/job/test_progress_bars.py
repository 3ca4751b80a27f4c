"""Keras progress bars in the live view (launch/job/progress_bars.py), on recorded Keras 3 and
tf_keras output: the chief's bar as a terminal would leave it, one line per epoch for another
worker, every worker's bar with --verbose, the raw bytes in the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.progress_bars import ProgressBars, on_screen
from adrun.launch.job.supervisor import supervise
from tests.support.job_configs import job_config
from tests.support.supervision import Recorder

pytestmark = pytest.mark.timeout(60)

RECORDED = Path(__file__).parent / "keras_output"
KERAS3 = (RECORDED / "fit_verbose1.bin").read_bytes().decode()
TF_KERAS = (RECORDED / "tf_keras_fit_verbose1.bin").read_bytes().decode()
CHIEF_VIEW = [
    "Epoch 1/3",
    "6/6 ━━━━━━━━━━━━━━━━━━━━ 1s 89ms/step - loss: 5.8291 - mae: 2.2256 - val_loss: 3.6233 - val_mae: 1.7371",
    "Epoch 2/3",
    "6/6 ━━━━━━━━━━━━━━━━━━━━ 0s 20ms/step - loss: 3.5870 - mae: 1.7109 - val_loss: 2.1767 - val_mae: 1.3014",
    "Epoch 3/3",
    "6/6 ━━━━━━━━━━━━━━━━━━━━ 0s 30ms/step - loss: 2.2646 - mae: 1.2973 - val_loss: 1.3367 - val_mae: 0.9786",
]
OTHER_VIEW = [
    "Epoch 1/3: 6/6 - 1s 89ms/step - loss: 5.8291 - mae: 2.2256 - val_loss: 3.6233 - val_mae: 1.7371",
    "Epoch 2/3: 6/6 - 0s 20ms/step - loss: 3.5870 - mae: 1.7109 - val_loss: 2.1767 - val_mae: 1.3014",
    "Epoch 3/3: 6/6 - 0s 30ms/step - loss: 2.2646 - mae: 1.2973 - val_loss: 1.3367 - val_mae: 0.9786",
]


def _view(output: str, is_chief: bool, show_all: bool = False) -> list[str]:
    bars = ProgressBars(is_chief, show_all)
    return [shown for line in output.split("\n")[:-1] for shown in bars.shown(line)]


def test_the_chief_shows_each_epochs_header_and_its_bars_final_state():
    assert "\r" in KERAS3 and "\b" in KERAS3 and "\x1b[" in KERAS3  # what a pipe gets from Keras 3
    assert _view(KERAS3, is_chief=True) == CHIEF_VIEW


def test_another_worker_shows_one_line_per_epoch():
    assert _view(KERAS3, is_chief=False) == OTHER_VIEW
    assert _view(TF_KERAS, is_chief=False) == ["Epoch 1/2: 8/8 - 1s 2ms/step - loss: 8.5100",
                                              "Epoch 2/2: 8/8 - 0s 865us/step - loss: 4.4253"]


def test_verbose_shows_every_workers_bars_as_the_chiefs():
    assert _view(KERAS3, is_chief=False, show_all=True) == CHIEF_VIEW


def test_other_lines_pass_unchanged_and_keras_verbose_2_lines_are_labelled():
    bars = ProgressBars(is_chief=False, show_all=False)
    assert bars.shown("step 3: loss 0.25") == ["step 3: loss 0.25"]
    assert bars.shown("Epoch 1/2") == []
    assert bars.shown("8/8 - 1s - 91ms/step - loss: 4.7125") == ["Epoch 1/2: 8/8 - 1s - 91ms/step - loss: 4.7125"]
    assert bars.shown("4/4 - 0s - loss: 1.5") == ["4/4 - 0s - loss: 1.5"]  # evaluate: no epoch to name


def test_on_screen_overwrites_as_a_terminal_does():
    assert on_screen("abcdef\rXY") == "XYcdef"
    assert on_screen("abc\b\bZ") == "aZc"
    assert on_screen("\x1b[1m1/6\x1b[0m done") == "1/6 done"


def test_the_live_view_condenses_other_workers_and_the_log_keeps_the_bytes(make, job_id, tmp_path):  # noqa: F811
    code = f"import sys; sys.stdout.buffer.write(open({str(RECORDED / 'fit_verbose1.bin')!r}, 'rb').read())"
    rec = Recorder()
    result = supervise([make("worker", 0, code), make("worker", 1, code)], job_config(job_id, log_dir=tmp_path / "logs"), rec)
    assert result.state == "succeeded"
    assert [line for tag, _, line in rec.lines if tag == "w0"] == CHIEF_VIEW
    assert [line for tag, _, line in rec.lines if tag == "w1"] == OTHER_VIEW
    assert (tmp_path / "logs" / "w1.log").read_bytes() == KERAS3.encode()

    rec = Recorder()
    supervise([make("worker", 0, code), make("worker", 1, code)], job_config(job_id, show_tf_noise=True), rec)
    assert [line for tag, _, line in rec.lines if tag == "w1"] == CHIEF_VIEW


def test_a_failed_workers_stdout_tail_shows_its_bar_as_it_was_left(make, job_id):  # noqa: F811
    partial = "\r\x1b[1m1/6\x1b[0m ━━━ 1s" + "\b" * 11 + "\r\x1b[1m2/6\x1b[0m ━━━━━━ 1s"  # no newline yet
    code = f"import os, sys; sys.stdout.write({KERAS3 + partial!r}); sys.stdout.flush(); os._exit(3)"
    result = supervise([make("worker", 0, code)], job_config(job_id), Recorder())
    assert result.failed.stdout_tail[-2:] == [CHIEF_VIEW[-1], "2/6 ━━━━━━ 1s"]
