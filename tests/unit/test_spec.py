"""ClusterSpec: the templates load, and every mistake is reported as `<file>: <path>: <reason>`."""

from __future__ import annotations

from pathlib import Path

import pytest

from adrun.errors import UserError
from adrun.spec import ClusterSpec, Node, default_local_spec, load_spec, spec_to_yaml

REPO = Path(__file__).resolve().parents[2]


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


def test_replica_devices_follow_worker_order() -> None:
    spec = ClusterSpec(version=1, nodes=[
        Node(address="10.0.0.1", workers=1, replicas=3),
        Node(address="10.0.0.2", workers=2, gpus=4, chief=True),
    ])
    # the chief node's workers come first: they are workers 0 and 1
    assert spec.replica_devices() == [["GPU:0", "GPU:1"], ["GPU:0", "GPU:1"], ["CPU:0", "CPU:1", "CPU:2"]]


def test_more_gpu_replicas_than_gpus(tmp_path: Path) -> None:
    message = load_error(tmp_path, "version: 1\nnodes:\n  - address: h\n    workers: 2\n    gpus: 3\n    replicas: 2\n")
    assert message.endswith("cluster.yml: nodes[0].replicas: 2 replica(s) for each of 2 worker(s) need 4 GPUs; "
                            "the node has 3")
