"""`adrun profile`'s command line: options before SCRIPT (also `--trials` with and without its
count), everything after SCRIPT the script's own."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from adrun.cli import main
from adrun.cli.profile import profile
from adrun.cli.strategy import strategy_build


def parsed(command: click.Command, *args: str) -> dict:
    with command.make_context(command.name, list(args)) as ctx:
        return ctx.params


@pytest.mark.parametrize("args, trials, script_args", [
    (["train.py"], None, ()),
    (["--trials", "train.py", "--steps", "5"], "all", ("--steps", "5")),
    (["--trials", "3", "train.py"], 3, ()),
    (["--trials=2", "train.py"], 2, ()),
    (["--trials", "all", "train.py"], "all", ()),
    (["train.py", "--trials", "3"], None, ("--trials", "3")),  # after SCRIPT: the script's
    (["--json", "--trials", "--trial-steps", "7", "train.py", "-o", "x"], "all", ("-o", "x")),
])
def test_trials_with_and_without_a_count(args: list[str], trials, script_args: tuple) -> None:
    params = parsed(profile, *args)
    assert params["trials"] == trials and params["script"] == "train.py" and params["script_args"] == script_args


def test_options_before_or_after_script_name_only_up_to_it() -> None:
    params = parsed(profile, "-o", "plan.yml", "train.py", "--epochs", "2")
    assert params["output"] == "plan.yml" and params["script_args"] == ("--epochs", "2")
    params = parsed(profile, "--spec", "c.yml", "--trial-steps", "9", "--no-record", "--json", "--sync-code",
                    "train.py")
    assert params["sync_code"]
    assert (params["spec_path"], params["trial_steps"], params["no_record"], params["as_json"]) == (
        "c.yml", 9, True, True)


@pytest.mark.parametrize("args, message", [
    (["--trials", "0", "train.py"], "expected a whole number of trials (at least 1) or 'all', got '0'"),
    (["--trial-steps", "1", "train.py"], "1 is not in the range x>=2"),
])
def test_impossible_counts_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(click.BadParameter, match=message.replace("(", r"\(").replace(")", r"\)")):
        parsed(profile, *args)


def test_strategy_build_still_takes_its_name_and_script() -> None:
    params = parsed(strategy_build, "PS", "-o", "plan.yml", "train.py", "--x", "1")
    assert (params["name"], params["output"], params["script"], params["script_args"]) == (
        "PS", "plan.yml", "train.py", ("--x", "1"))


def test_profile_is_a_command_not_a_script() -> None:
    assert "profile" in main.commands


def test_a_job_id_that_cannot_name_a_job_is_refused_first() -> None:
    result = CliRunner().invoke(main, ["profile", "--job-id", "no spaces", "missing.py"])
    assert result.exit_code == 2
    assert "adrun: error: --job-id 'no spaces': use 1 to 64 letters" in result.output


def test_autos_options_are_checked_before_anything_runs() -> None:
    params = parsed(profile, "--strategy-opt", "allow_lossy=true", "train.py")
    assert params["strategy_opts"] == ("allow_lossy=true",)
    result = CliRunner().invoke(main, ["profile", "--strategy-opt", "allow_lossy=maybe", "missing.py"])
    assert result.exit_code == 2 and "adrun: error: Auto options" in result.output and "allow_lossy" in result.output


def test_a_bad_setting_in_the_environment_is_refused_before_anything_runs(monkeypatch) -> None:
    monkeypatch.setenv("ADRUN_MAX_STEPS", "ten")
    result = CliRunner().invoke(main, ["profile", "missing.py"])  # refused before the script is looked for
    assert result.exit_code == 2
    assert "adrun: error: ADRUN_MAX_STEPS='ten'" in result.output and "missing.py" not in result.output


def test_host_counts_are_parsed_before_the_script() -> None:
    params = parsed(profile, "--hosts", "8,2,4", "--plot", "s.png", "train.py", "--hosts", "3")
    assert params["host_counts"] == [2, 4, 8] and params["plot"] == "s.png"
    assert params["script_args"] == ("--hosts", "3")  # after SCRIPT: the script's


@pytest.mark.parametrize("value, message", [
    ("2,x", "'x' is not a whole number of hosts from 1 to 64 (in '2,x')"),
    ("0", "'0' is not a whole number of hosts from 1 to 64 (in '0')"),
    ("2,,4", "expected comma-separated host counts such as 2,4,8, got '2,,4'"),
])
def test_bad_host_counts_are_one_message_and_exit_2(value: str, message: str, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = CliRunner().invoke(main, ["profile", "--hosts", value, str(script)])
    assert result.exit_code == 2
    assert f"Invalid value for '--hosts': {message}" in result.output
    assert result.output.count("Error") == 1 and "Traceback" not in result.output


def _one_node_spec(tmp_path, network: str = "") -> str:
    spec = tmp_path / "one.yml"
    spec.write_text("version: 1\nnodes:\n  - {address: localhost, workers: 2, ps: 1}\n" + network)
    return str(spec)


def test_hosts_without_a_path_between_hosts_are_refused_before_profiling(tmp_path, monkeypatch) -> None:
    import adrun.profile.command as command

    monkeypatch.setattr(command, "profile", lambda *a, **k: pytest.fail("profiled"))
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    result = CliRunner().invoke(main, ["profile", "--spec", _one_node_spec(tmp_path), "--hosts", "2,4", str(script)])
    assert result.exit_code == 2
    assert "adrun: error: --hosts: the cluster spec has one node" in result.output
    assert "network: {bandwidth_mbit: ..., latency_ms: ...}" in result.output


@pytest.mark.parametrize("args, message", [
    (["--plot", "s.png"], "--plot s.png: the plot shows the --hosts predictions; give --hosts too"),
    (["--hosts", "2", "--plot", "no/such/dir/s.png"], "--plot no/such/dir/s.png: directory no/such/dir does not exist"),
])
def test_a_plot_needs_host_counts_and_a_directory(args: list[str], message: str, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    spec = _one_node_spec(tmp_path, "network: {bandwidth_mbit: 100, latency_ms: 0.1}\n")
    result = CliRunner().invoke(main, ["profile", "--spec", spec, *args, str(script)])
    assert result.exit_code == 2 and f"adrun: error: {message}" in result.output


def test_a_plot_without_matplotlib_names_the_install_before_profiling(tmp_path, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    spec = _one_node_spec(tmp_path, "network: {bandwidth_mbit: 100, latency_ms: 0.1}\n")
    result = CliRunner().invoke(main, ["profile", "--spec", spec, "--hosts", "2", "--plot", str(tmp_path / "s.png"),
                                       str(script)])
    assert result.exit_code == 2
    assert "adrun: error: --plot needs matplotlib, which adrun does not install by default: " \
           "pip install 'adrun[plot]'" in result.output
