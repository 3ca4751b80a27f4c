"""A benchmark's results file: each invocation appends one entry, the earlier ones kept."""

import json

from bench.results_log import append_entry


def test_entries_are_appended_with_label_time_and_machine_first(tmp_path):
    out = tmp_path / "results.json"
    first = append_entry(out, "before", {"median_s": 31.9})
    append_entry(out, "after", {"median_s": 8.9, "hosts": 4})
    entries = json.loads(out.read_text())
    assert [list(entry)[:3] for entry in entries] == [["label", "when", "machine"]] * 2
    assert [(entry["label"], entry["median_s"]) for entry in entries] == [("before", 31.9), ("after", 8.9)]
    assert entries[0] == first and entries[1]["hosts"] == 4
    assert entries[0]["when"].endswith(" UTC")
