"""A benchmark's results file: each invocation appends one entry, the earlier ones kept; a loopback
benchmark's invocation written whole with its command line and CPU count."""

import json
import os
import sys

from bench.results_log import append_entry, run_labelled_hosts_benchmark, write_invocation


def test_entries_are_appended_with_label_time_and_machine_first(tmp_path):
    out = tmp_path / "results.json"
    first = append_entry(out, "before", {"median_s": 31.9})
    append_entry(out, "after", {"median_s": 8.9, "hosts": 4})
    entries = json.loads(out.read_text())
    assert [list(entry)[:3] for entry in entries] == [["label", "when", "machine"]] * 2
    assert [(entry["label"], entry["median_s"]) for entry in entries] == [("before", 31.9), ("after", 8.9)]
    assert entries[0] == first and entries[1]["hosts"] == 4
    assert entries[0]["when"].endswith(" UTC")


def test_an_invocation_is_written_with_its_command_cpus_facts_then_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench/collective_cpu.py", "--rounds", "3"])
    out = tmp_path / "new" / "collective-cpu.json"
    write_invocation(out, [{"round": 0, "cpu_ms": 1.5}], elements=256)
    written = json.loads(out.read_text())
    assert list(written) == ["command", "cpus", "elements", "results"]
    assert written == {"command": "bench/collective_cpu.py --rounds 3", "cpus": os.cpu_count(), "elements": 256,
                       "results": [{"round": 0, "cpu_ms": 1.5}]}


def test_a_hosts_benchmark_measures_what_its_command_line_asks_and_appends_it_under_the_label(tmp_path, monkeypatch,
                                                                                              capsys):
    out = tmp_path / "start.json"
    asked = []

    def measure(hosts: int, rate_mbit: float, reps: int) -> dict:
        asked.append((hosts, rate_mbit, reps))
        return {"hosts": hosts, "summary": {"median_s": 6.0}}

    monkeypatch.setattr(sys, "argv", ["bench/network_start.py", "--hosts", "8", "--label", "probes", "--out", str(out)])
    run_labelled_hosts_benchmark("what it measures", measure, out=tmp_path / "unused.json", hosts=4, reps=3)
    assert asked == [(8, 100.0, 3)]  # the given host count, the defaults for the rest
    [entry] = json.loads(out.read_text())
    assert (entry["label"], entry["hosts"], entry["summary"]) == ("probes", 8, {"median_s": 6.0})
    assert json.loads(capsys.readouterr().out) == {"label": "probes", "median_s": 6.0}
