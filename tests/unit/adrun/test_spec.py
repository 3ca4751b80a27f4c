"""ClusterSpec: the templates load, and every mistake is reported as `<file>: <path>: <reason>`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.placement import replica_devices
from adrun.spec import ClusterSpec, Node, default_local_spec, load_spec, spec_to_yaml
from tests.support.paths import REPO


def write(tmp_path: Path, text: str, name: str = "cluster.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(UserError) as info:
        load_spec(write(tmp_path, text))
    return str(info.value)


TWO_NODES = """\
version: 1
nodes:
  - address: 10.0.0.1
    chief: {chief0}
    workers: 2
  - address: {addr1}
    chief: {chief1}
    ps: 1
"""


@pytest.mark.parametrize("template", sorted((REPO / "cluster_templates").glob("*.yml")), ids=lambda p: p.name)
def test_templates_load(template: Path) -> None:
    spec = load_spec(template)
    assert spec.num_workers >= 1
    assert load_spec(template) == spec


def test_local_template_is_two_workers_one_ps() -> None:
    spec = load_spec(REPO / "cluster_templates" / "local.yml")
    assert (spec.num_workers, spec.num_ps, spec.chief.address) == (2, 1, "localhost")


def test_two_nodes_template() -> None:
    spec = load_spec(REPO / "cluster_templates" / "two-nodes.yml")
    assert [n.address for n in spec.nodes] == ["10.0.0.1", "10.0.0.2"]
    assert spec.chief.address == "10.0.0.1"
    assert spec.nodes[1].ssh is not None and spec.nodes[1].ssh.forward_env == ["WANDB_API_KEY"]
    assert spec.nodes[0].env == {"OMP_NUM_THREADS": "4"}  # YAML number kept as environment text


def test_defaults_and_single_node_is_chief(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "version: 1\nnodes:\n  - address: localhost\n"))
    node = spec.nodes[0]
    assert (node.workers, node.ps, node.gpus, node.env, node.ssh) == (1, 0, 0, {}, None)
    assert spec.chief is node


def test_default_local_spec() -> None:
    spec = default_local_spec()
    assert (spec.num_workers, spec.num_ps) == (2, 1)
    assert spec.chief.address == "localhost"
    assert spec.chief.cpus is None or spec.chief.cpus >= 1


def test_yaml_round_trip(tmp_path: Path) -> None:
    spec = load_spec(REPO / "cluster_templates" / "two-nodes.yml")
    assert load_spec(write(tmp_path, spec_to_yaml(spec))) == spec


def test_field_error_names_path_and_reason(tmp_path: Path) -> None:
    text = "version: 1\nnodes:\n  - address: localhost\n    workers: -1\n"
    assert load_error(tmp_path, text) == f"{tmp_path / 'cluster.yml'}: nodes[0].workers: must be >= 0, got -1"


def test_unknown_field_suggests_spelling(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: localhost\n    wokers: 2\n")
    assert message.endswith("cluster.yml: nodes[0]: unknown field 'wokers' (did you mean 'workers'?)")


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = (
        "version: 2\nnodes:\n  - address: localhost\n    workers: two\n"
        "    ssh: {port: 0, host_key_policy: maybe}\n"
    )
    lines = load_error(tmp_path, text).splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "version: must be 1, got 2",
        "nodes[0].workers: expected a whole number, got 'two'",
        "nodes[0].ssh.port: must be >= 1, got 0",
        "nodes[0].ssh.host_key_policy: must be 'strict', 'accept-new' or 'off', got 'maybe'",
    ]


def test_missing_required_fields(tmp_path: Path) -> None:
    message = load_error(tmp_path, "nodes:\n  - workers: 1\n")
    assert "cluster.yml: version: required field is missing" in message
    assert "cluster.yml: nodes[0].address: required field is missing" in message


def test_empty_node_list(tmp_path: Path) -> None:
    assert "nodes: needs at least 1 entry" in load_error(tmp_path, "version: 1\nnodes: []\n")


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: [localhost\n    workers: 2\n")
    assert message.startswith(f"{tmp_path / 'cluster.yml'}: line ")
    assert "YAML syntax error" in message


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: a\n    workers: 1\n    workers: 2\n")
    assert "cluster.yml: line 5, column 5: YAML syntax error: duplicate key 'workers'" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"missing.yml: file not found"):
        load_spec(tmp_path / "missing.yml")


def test_not_a_mapping(tmp_path: Path) -> None:
    assert "expected a mapping of fields at the top level, got a list" in load_error(tmp_path, "- 1\n")
    assert "the file is empty" in load_error(tmp_path, "# nothing\n")


def test_two_chiefs(tmp_path: Path) -> None:
    message = load_error(tmp_path, TWO_NODES.format(chief0="true", chief1="true", addr1="10.0.0.2"))
    assert message.endswith("cluster.yml: nodes: 2 nodes have `chief: true` (nodes[0], nodes[1]); mark exactly one")


def test_no_chief_with_several_nodes(tmp_path: Path) -> None:
    message = load_error(tmp_path, TWO_NODES.format(chief0="false", chief1="false", addr1="10.0.0.2"))
    assert "cluster.yml: nodes: no node has `chief: true`" in message


@pytest.mark.parametrize("address", ["localhost", "127.0.0.2", "::1"])
def test_loopback_in_multi_node(tmp_path: Path, address: str) -> None:
    message = load_error(tmp_path, TWO_NODES.format(chief0="true", chief1="false", addr1=f"'{address}'"))
    assert f"cluster.yml: nodes[1].address: '{address}' reaches only the machine it runs on" in message


def test_duplicate_address(tmp_path: Path) -> None:
    message = load_error(tmp_path, TWO_NODES.format(chief0="true", chief1="false", addr1="10.0.0.1"))
    assert "cluster.yml: nodes[1].address: duplicate address '10.0.0.1' (also nodes[0])" in message


def test_no_worker_at_all(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: localhost\n    workers: 0\n    ps: 1\n")
    assert "cluster.yml: nodes: no worker process in the whole cluster" in message


def test_ports_must_fit(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: h\n    workers: 2\n    base_port: 65535\n")
    assert "nodes[0].base_port: 2 processes from port 65535 would need port 65536 > 65535" in message
    assert "nodes[0].base_port: must be >= 1024, got 80" in load_error(
        tmp_path, "version: 1\nnodes:\n  - address: h\n    base_port: 80\n"
    )


def test_env_names_checked(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: h\n    env: {1BAD: x}\n")
    assert "nodes[0].env.1BAD: '1BAD' is not a valid environment variable name" in message


def test_env_cannot_set_adruns_own_variables(tmp_path: Path) -> None:
    """A node's copy of a setting or contract variable would be dropped (launch/env.py): refused instead."""
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: h\n"
                                   "    env: {ADRUN_OP_TIMEOUT: '5', ADRUN_ROLE: ps, ADRUN_OWN_FLAG: '1', OMP_NUM_THREADS: 2}\n")
    assert "nodes[0].env.ADRUN_OP_TIMEOUT: ADRUN_OP_TIMEOUT is adrun's own variable" in message
    assert "set it in the launcher's environment instead" in message
    assert "nodes[0].env.ADRUN_ROLE: ADRUN_ROLE is adrun's own variable, written into every task by adrun; " \
           "a node cannot set it" in message
    assert "ADRUN_OWN_FLAG" not in message and "OMP_NUM_THREADS" not in message  # not adrun's: the node's to set


def test_unquoted_off_host_key_policy(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "version: 1\nnodes:\n  - address: h\n    ssh: {host_key_policy: off}\n"))
    assert spec.nodes[0].ssh is not None and spec.nodes[0].ssh.host_key_policy == "off"


def test_properties() -> None:
    spec = ClusterSpec(
        version=1,
        nodes=[Node(address="10.0.0.1", workers=3, ps=1), Node(address="10.0.0.2", chief=True, workers=1, ps=2)],
    )
    assert (spec.num_workers, spec.num_ps, spec.chief.address) == (4, 3, "10.0.0.2")


def test_yaml_merge_keys_allowed(tmp_path: Path) -> None:
    text = (
        "version: 1\nnodes:\n  - &first {address: 10.0.0.1, chief: true, workers: 2, ps: 1}\n"
        "  - <<: *first\n    address: 10.0.0.2\n    chief: false\n"
    )
    spec = load_spec(write(tmp_path, text))
    assert (spec.num_workers, spec.num_ps, spec.chief.address) == (4, 2, "10.0.0.1")


def test_replicas_default_to_the_gpus_shared_out_else_one() -> None:
    assert Node(address="h", workers=2).replicas_per_worker == 1
    assert Node(address="h", workers=2, gpus=4).replicas_per_worker == 2
    assert Node(address="h", workers=1, replicas=3).replicas_per_worker == 3


def test_a_node_with_gpus_runs_one_worker_per_gpu_unless_told_otherwise(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "version: 1\nnodes:\n  - address: h\n    gpus: 4\n"))
    [node] = spec.nodes
    assert (node.workers, node.replicas_per_worker) == (4, 1)
    assert replica_devices(spec) == [["GPU:0"]] * 4  # what a TF2 script needs: one device per process
    assert Node(address="h", gpus=4, replicas=2).workers == 2  # one worker per two GPUs
    assert Node(address="h", gpus=4, workers=1).replicas_per_worker == 4  # in-graph replicas, as asked
    assert Node(address="h", gpus=0).workers == 1


def test_the_default_local_spec_gives_each_gpu_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import adrun.spec

    monkeypatch.setattr(adrun.spec, "_visible_gpus", lambda: 3)
    [node] = adrun.spec.default_local_spec().nodes
    assert (node.workers, node.ps, node.gpus, node.replicas_per_worker) == (3, 1, 3, 1)
    monkeypatch.setattr(adrun.spec, "_visible_gpus", lambda: 0)
    [node] = adrun.spec.default_local_spec().nodes
    assert (node.workers, node.ps, node.gpus) == (2, 1, 0)


def test_replica_devices_follow_worker_order() -> None:
    spec = ClusterSpec(version=1, nodes=[
        Node(address="10.0.0.1", workers=1, replicas=3),
        Node(address="10.0.0.2", workers=2, gpus=4, chief=True),
    ])
    # the chief node's workers come first: they are workers 0 and 1
    assert replica_devices(spec) == [["GPU:0", "GPU:1"], ["GPU:0", "GPU:1"], ["CPU:0", "CPU:1", "CPU:2"]]


def test_more_gpu_replicas_than_gpus(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: h\n    workers: 2\n    gpus: 3\n    replicas: 2\n")
    assert message.endswith("cluster.yml: nodes[0].replicas: 2 replica(s) for each of 2 worker(s) need 4 GPUs; "
                            "the node has 3")


# --- bulk-broken files: each ends as one message, never a traceback, a hang or a silent acceptance ---

ONE_NODE = "version: 1\nnodes:\n  - address: h\n"


def test_address_longer_than_dns_allows(tmp_path: Path) -> None:
    # Before: accepted, then the launcher's resolver died with a raw `UnicodeError` (idna).
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: " + "a" * 200_000 + "\n")
    assert message == f"{tmp_path / 'cluster.yml'}: nodes[0].address: 200000 characters; a hostname has at most 253"


@pytest.mark.parametrize("address,reason", [
    ("a..b", "'a..b' is not a hostname or IP address (a hostname is dot-separated parts of 1-63"),
    ("http://x", "'http://x' is not a hostname or IP address"),
    ("-h", "'-h' is not a hostname or IP address"),
    ("a" * 64 + ".com", f"'{'a' * 64}.com' is not a hostname or IP address"),
    ("höst", "'höst' is not a hostname or IP address (a hostname is dot-separated parts of 1-63 ASCII "
             "letters, digits, '-' or '_'; a non-ASCII name is written in its xn-- form)"),
    ("10.000.0.1", "'10.000.0.1' is not a valid IPv4 address"),
    ("'[fd00::1]'", "write the IPv6 address without brackets: fd00::1"),
    ('"h\\0"', "'h\\x00' is not a hostname or IP address"),
])
def test_malformed_address(tmp_path: Path, address: str, reason: str) -> None:
    message = load_error(tmp_path, f"version: 1\nnodes:\n  - address: {address}\n")
    assert message.startswith(f"{tmp_path / 'cluster.yml'}: nodes[0].address: {reason}"), message


@pytest.mark.parametrize("address", ["trainer-0.lab.example", "node_3", "xn--hst-sna", "10.0.0.1", "fd00::1",
                                     "a" * 63 + ".example"])
def test_wellformed_address(tmp_path: Path, address: str) -> None:
    assert load_spec(write(tmp_path, f"version: 1\nnodes:\n  - address: '{address}'\n")).nodes[0].address == address


def test_duplicate_address_in_another_spelling(tmp_path: Path) -> None:
    text = "version: 1\nnodes:\n  - {address: 'fd00::1', chief: true}\n  - {address: 'FD00:0::1'}\n"
    assert load_error(tmp_path, text).endswith("cluster.yml: nodes[1].address: duplicate address 'FD00:0::1' (also nodes[0])")


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a: ", "}")], ids=["lists", "mappings"])
def test_deep_nesting(tmp_path: Path, opener: str, closer: str) -> None:
    # Before: a raw RecursionError from PyYAML's composer.
    message = load_error(tmp_path, "version: 1\nnodes: " + opener * 5000 + "1" + closer * 5000 + "\n")
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/cluster.yml: line 2, column \d+: nested more than 64 levels deep",
                        message), message


def test_alias_bomb(tmp_path: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]" for prev, name in zip("abcdefg", "bcdefgh")
    ]
    text = "\n".join(levels) + "\nversion: 1\nnodes: *h\n"  # 9**8 = 43 million values from 400 bytes
    message = load_error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'cluster.yml'}: line ")
    assert message.endswith(f": YAML aliases expand the document to more than {len(text) + 10_000} values (one per "
                            "character of the file, plus 10000); write repeated parts out or repeat less")


def test_alias_inside_its_own_anchor(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes: &n\n  - *n\n")
    assert message == f"{tmp_path / 'cluster.yml'}: line 3, column 5: alias *n refers to a node that contains it"


def test_huge_file(tmp_path: Path) -> None:
    path = write(tmp_path, ONE_NODE + "#" * 2**20 + "\n")
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: larger than 1 MiB, the most this kind of file may be (is it the right file?)"


def test_endless_file() -> None:
    with pytest.raises(UserError, match=r"^/dev/zero: larger than 1 MiB"):
        load_spec("/dev/zero")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yml"
    path.write_bytes(b"version: 1\nnodes:\n  - address: h\xff\n")
    with pytest.raises(UserError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: not a UTF-8 text file (invalid start byte at byte 32)"


def test_directory_and_unreadable_names(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r": is a directory, expected a file$"):
        load_spec(tmp_path)
    with pytest.raises(UserError, match=r": cannot read it: File name too long$"):
        load_spec(tmp_path / ("x" * 5000))


def test_character_yaml_does_not_allow(tmp_path: Path) -> None:
    message = load_error(tmp_path, ONE_NODE.replace("h\n", "h\x07\n"))
    assert message.endswith("cluster.yml: line 3, column 15: YAML syntax error: the character U+0007 is not allowed "
                            "in YAML (special characters are not allowed)")


@pytest.mark.parametrize("value,shown,kind", [
    ("!!int abc", "'abc'", "int"),
    ("!!float abc", "'abc'", "float"),
    ("2001-13-45", "'2001-13-45'", "timestamp"),
    ("9" * 5000, f"'{'9' * 29}... (5002 characters)", "int"),
])
def test_value_its_yaml_type_cannot_hold(tmp_path: Path, value: str, shown: str, kind: str) -> None:
    # Before: a raw ValueError from PyYAML's constructor.
    message = load_error(tmp_path, f"version: {value}\nnodes: []\n")
    assert message == (f"{tmp_path / 'cluster.yml'}: line 1, column 10: YAML syntax error: {shown} is not a valid "
                       f"{kind} (quote it to write text)")


def test_field_name_that_is_no_text(tmp_path: Path) -> None:
    message = load_error(tmp_path, "1: x\n" + ONE_NODE)
    assert message == f"{tmp_path / 'cluster.yml'}: unknown field 1 (known fields: version, nodes, network)"


# --- counts: whole numbers only, bounded by what a node holds ---------------------------------------


@pytest.mark.parametrize("field,node_text", [
    ("workers", "workers: true"),
    ("ps", "ps: true"),
    ("cpus", "cpus: true"),
    ("gpus", "gpus: true"),
    ("replicas", "replicas: true"),
    ("base_port", "base_port: true"),
    ("ssh.port", "ssh: {port: true}"),
    ("workers", "workers: 2.0"),
    ("workers", "workers: '2'"),
])
def test_counts_are_whole_numbers_not_booleans(tmp_path: Path, field: str, node_text: str) -> None:
    # Before: `true` passed as 1, `2.0` and '2' as 2.
    got = node_text.split(": ")[-1].rstrip("}")
    message = load_error(tmp_path, f"{ONE_NODE}    {node_text}\n")
    assert message == f"{tmp_path / 'cluster.yml'}: nodes[0].{field}: expected a whole number, got {got}"


def test_version_and_chief_refuse_lookalikes(tmp_path: Path) -> None:
    assert load_error(tmp_path, ONE_NODE.replace("version: 1", "version: true")).endswith(": version: must be 1, got true")
    assert load_error(tmp_path, ONE_NODE.replace("version: 1", "version: 1.0")).endswith(": version: must be 1, got 1.0")
    assert load_error(tmp_path, ONE_NODE + "    chief: 1\n").endswith(": nodes[0].chief: expected true or false, got 1")


def test_processes_bounded_by_the_node_cpus(tmp_path: Path) -> None:
    message = load_error(tmp_path, ONE_NODE + "    cpus: 2\n    workers: 100000\n")
    assert message == (f"{tmp_path / 'cluster.yml'}: nodes[0].workers: 100000 worker(s) + 0 PS = 100000 processes; "
                       "a node with 2 CPU(s) runs at most 8 (4 per CPU)")
    # the PS processes are what tips it over: the message names `ps`
    message = load_error(tmp_path, ONE_NODE + "    cpus: 2\n    workers: 6\n    ps: 3\n")
    assert message.endswith("nodes[0].ps: 6 worker(s) + 3 PS = 9 processes; a node with 2 CPU(s) runs at most 8 (4 per CPU)")
    spec = load_spec(write(tmp_path, ONE_NODE + "    cpus: 2\n    workers: 6\n    ps: 2\n"))
    assert (spec.num_workers, spec.num_ps) == (6, 2)
    # the default spec on a 1-CPU machine: 2 workers + 1 PS
    assert Node(address="localhost", workers=2, ps=1, cpus=1).cpus == 1


def test_processes_bounded_per_node_without_cpus(tmp_path: Path) -> None:
    message = load_error(tmp_path, ONE_NODE + "    workers: 100000\n")
    assert message.endswith("nodes[0].workers: 100000 worker(s) + 0 PS = 100000 processes; a node runs at most 256")
    assert load_spec(write(tmp_path, ONE_NODE + "    workers: 255\n    ps: 1\n")).num_workers == 255
    # `cpus` large enough that 4 per CPU exceeds the ceiling: the ceiling still holds
    assert "a node runs at most 256" in load_error(tmp_path, ONE_NODE + "    cpus: 128\n    workers: 257\n")


def test_replicas_bounded(tmp_path: Path) -> None:
    message = load_error(tmp_path, ONE_NODE + "    replicas: 4096\n")
    assert message == (f"{tmp_path / 'cluster.yml'}: nodes[0].replicas: 4096 in-graph replicas per worker; at most 64 "
                       "(each is a copy of the training step on a device of its own)")
    assert replica_devices(load_spec(write(tmp_path, ONE_NODE + "    replicas: 64\n")))[0][-1] == "CPU:63"


@pytest.mark.parametrize("node_text,reason", [
    ("gpus: 65", "nodes[0].gpus: must be <= 64, got 65"),
    ("cpus: 8193", "nodes[0].cpus: must be <= 8192, got 8193"),
    ("memory_gb: .nan", "nodes[0].memory_gb: must be a finite number, got nan"),
    ("memory_gb: .inf", "nodes[0].memory_gb: must be a finite number, got inf"),
    ("memory_gb: 5000000", "nodes[0].memory_gb: must be <= 4194304.0, got 5000000"),
    ("gpus: -1", "nodes[0].gpus: must be >= 0, got -1"),
    ("ssh: {port: 70000}", "nodes[0].ssh.port: must be <= 65535, got 70000"),
])
def test_impossible_node_values(tmp_path: Path, node_text: str, reason: str) -> None:
    assert load_error(tmp_path, f"{ONE_NODE}    {node_text}\n") == f"{tmp_path / 'cluster.yml'}: {reason}"


@pytest.mark.parametrize("node_text,reason", [
    ('env: {A: "x\\0y"}', "nodes[0].env.A: contains a NUL character (\\0), which no path, command or environment "
                          "value can hold"),
    ('env: {A: "x\\uD800"}', "nodes[0].env.A: contains '\\ud800', a lone UTF-16 surrogate with no UTF-8 form"),
    ('python: "/usr/bin/py\\uD800"', "nodes[0].python: contains a lone UTF-16 surrogate (such as '\\ud800'), which "
                                     "has no UTF-8 form"),
    ('ssh: {forward_env: ["\\uD800"]}', "nodes[0].ssh.forward_env[0]: '\\ud800' is not a valid environment variable name"),
])
def test_text_no_process_can_take(tmp_path: Path, node_text: str, reason: str) -> None:
    # Before: accepted, then the launcher died starting the processes (`embedded null byte`,
    # `surrogates not allowed`), after the capture.
    message = load_error(tmp_path, f"{ONE_NODE}    {node_text}\n")
    assert message.startswith(f"{tmp_path / 'cluster.yml'}: {reason}"), message
    message.encode("utf-8")  # printable: no surrogate reaches the terminal


def test_many_problems_are_cut_short(tmp_path: Path) -> None:
    nodes = "".join(f"  - {{address: 10.0.0.{i}, workers: x}}\n" for i in range(1, 31))
    lines = load_error(tmp_path, "version: 1\nnodes:\n" + nodes).splitlines()
    assert len(lines) == 21
    assert lines[0].endswith("cluster.yml: nodes[0].workers: expected a whole number, got 'x'")
    assert lines[-1].endswith("cluster.yml: ... and 10 more problems")
