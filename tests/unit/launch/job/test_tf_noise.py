"""TensorFlow's start-up noise (adrun.launch.job.tf_noise) on stderr captured from real TF 2.21 runs
on this kind of machine (tests/unit/launch/job/tf_stderr/): what is folded, what is kept, how many."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.launch.job.tf_noise import PATTERNS, NoiseFilter

CAPTURED = Path(__file__).parent / "tf_stderr"


def split(name: str) -> tuple[list[str], list[str]]:
    """(noise, kept) lines of a captured file, read as one stream."""
    noise = NoiseFilter()
    folded, kept = [], []
    for line in (CAPTURED / name).read_text().splitlines():
        (folded if noise.is_noise(line) else kept).append(line)
    return folded, kept


def test_a_worker_that_raises_keeps_its_output_and_whole_traceback():
    """tests/scripts/tiny_model.py --fail-on 1 under adrun: w1's log (both streams)."""
    folded, kept = split("adrun_worker_raises.txt")
    assert len(folded) == 7
    assert kept[:2] == ["step 1", "failing-at 1795386592.265"]
    assert kept[2] == "Traceback (most recent call last):"
    assert kept[-1] == "RuntimeError: boom from w1"
    assert len(kept) == 2 + 6


def test_a_plain_run_prints_nothing_but_noise_on_stderr():
    folded, kept = split("plain_tiny_model.txt")
    assert (len(folded), kept) == (10, [])


def test_deprecation_warnings_fold_with_their_instructions():
    """A 2017-style LSTM script: 10 deprecation warnings (8 with instructions, 2 Python warnings
    with their source line), then the script's own lines and TF's runtime warnings, kept."""
    folded, kept = split("ptb_lstm_plain.txt")
    assert kept == [
        "WARNING:tensorflow:Standard services need a 'logdir' passed to the SessionManager",
        "epoch 1: train perplexity 11.7544, valid perplexity 10.6644",
        "test perplexity 6.8718",
        "W0000 00:00:1795377426.697809   22915 local_rendezvous.cc:412] Local rendezvous is aborting with status: "
        "CANCELLED: Enqueue operation was cancelled",
        "\t [[{{node Model/TrainInput/input_producer/input_producer_EnqueueMany}}]]",
    ]
    assert len(folded) == 49 - len(kept)
    assert "Instructions for updating:" in folded and "Please switch to tf.train.MonitoredTrainingSession" in folded


def test_runtime_lines_of_tf_and_a_thread_traceback_are_kept():
    """The TF PS recipe's worker: its gRPC server start is folded, the master's device scan and a
    queue-runner thread's traceback (interleaved with a C++ log line) are kept."""
    folded, kept = split("tf_ps_recipe_worker.txt")
    assert len(folded) == 17
    assert kept[0].endswith("master.cc:243] Scanning workers for devices: 2 total workers")
    assert kept[1:3] == ["Exception in thread QueueRunnerThread-sync_token_q-sync_token_q_EnqueueMany:",
                         "Traceback (most recent call last):"]
    assert kept[-2].startswith("tensorflow.python.framework.errors_impl.CancelledError: Step was cancelled")
    assert len(kept) == 38 - 17


def test_every_pattern_is_seen_in_a_real_capture():
    kinds = {NoiseFilter.kind(line) for path in CAPTURED.glob("*.txt") for line in path.read_text().splitlines()}
    assert kinds - {None} == set(PATTERNS)


@pytest.mark.parametrize("after", [
    "Traceback (most recent call last):",
    "ERROR:root:the script's own logging",
    "E0000 00:00:1795377426.697809   22915 master_session.cc:2166] UNAVAILABLE: failed to connect",
    "/work/train.py:12: RuntimeWarning: overflow encountered in exp",
])
def test_instructions_end_at_the_next_record(after):
    noise = NoiseFilter()
    lines = ["WARNING:tensorflow:From /x.py:3: to_float (from tensorflow.python.ops.math_ops) is deprecated and "
             "will be removed in a future version.", "Instructions for updating:", "Use `tf.cast` instead.", after]
    assert [noise.is_noise(line) for line in lines] == [True, True, True, False]


def test_instructions_are_bounded_and_a_blank_line_ends_them():
    noise = NoiseFilter()
    header = "WARNING:tensorflow:From /x.py:3: f (from m) is deprecated and will be removed after 2017-03-02."
    long = [header, "Instructions for updating:"] + [f"instruction {i}" for i in range(8)]
    assert [noise.is_noise(line) for line in long] == [True, True] + [True] * 6 + [False, False]
    blank = [header, "Instructions for updating:", "Use g.", "", "the script's own line"]
    assert [noise.is_noise(line) for line in blank] == [True, True, True, False, False]


def test_continuation_lines_are_only_noise_right_after_their_record():
    noise = NoiseFilter()
    lines = ["Instructions for updating:", "  indented script output",
             "/t/var.py:79: UserWarning: `tf.nn.rnn_cell.LSTMCell` is deprecated and will be removed.",
             "  lstm = make(HIDDEN)", "  indented script output"]
    assert [noise.is_noise(line) for line in lines] == [False, False, True, True, False]
