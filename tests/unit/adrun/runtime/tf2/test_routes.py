"""Which device, group and implementation a TF2 worker's collectives use (adrun/runtime/tf2/routes.py),
from the plan's replica devices and what the process sees: NCCL on the GPU for floating-point
tensors when every worker has a GPU, the host ring otherwise and for integers."""

from __future__ import annotations

import pytest

from adrun.errors import UserError
from adrun.runtime.tf2.routes import GPU_GROUP_KEY, HOST, HOST_GROUP_KEY, NCCL, Routes, choose_routes, job_on_gpus

ON_GPUS = [["GPU:0"], ["GPU:0"], ["GPU:0"], ["GPU:0"]]  # a spec node `gpus: 4`: one worker per GPU


def test_every_worker_on_a_gpu_puts_floats_on_nccl_and_integers_on_the_host() -> None:
    routes = choose_routes(2, ON_GPUS, visible_gpus=1, cuda_visible_devices="2")
    for dtype in ("float16", "float32", "float64"):
        assert routes.of(dtype) == NCCL
        assert routes.device(routes.of(dtype)) == "/job:worker/task:2/device:GPU:0"
    for dtype in ("int32", "int64", "bfloat16"):  # integers live in host memory; TF's NCCL kernels reduce no bfloat16
        assert routes.of(dtype) == HOST
        assert routes.device(routes.of(dtype)) == "/job:worker/task:2/device:CPU:0"
    assert (NCCL.communication_hint, NCCL.group_key) == ("nccl", GPU_GROUP_KEY)
    assert (HOST.communication_hint, HOST.group_key) == ("auto", HOST_GROUP_KEY)
    assert NCCL.group_key != HOST.group_key  # a group has one device type


@pytest.mark.parametrize("replica_devices", [
    [["CPU:0"], ["CPU:0"]],  # no GPU anywhere
    [["GPU:0"], ["CPU:0"]],  # one worker without a GPU: nobody may use the GPU group
    None,  # a hand-written plan without replica devices
])
def test_a_job_not_wholly_on_gpus_keeps_every_collective_on_the_host(replica_devices) -> None:
    routes = choose_routes(0, replica_devices, visible_gpus=1, cuda_visible_devices="0")
    assert routes == Routes(0)
    assert {routes.of(d) for d in ("float32", "int64")} == {HOST}


def test_a_gpu_plan_in_a_process_that_sees_no_gpu_is_refused_naming_the_worker() -> None:
    with pytest.raises(UserError) as raised:
        choose_routes(1, ON_GPUS[:2], visible_gpus=0, cuda_visible_devices="")
    message = str(raised.value)
    assert message.startswith("worker 1: the plan runs every worker on a GPU (the spec's nodes[].gpus), but this "
                              "process sees none (CUDA_VISIBLE_DEVICES '';")
    assert "set gpus: 0 for that node" in message


def test_job_on_gpus_reads_the_first_device_of_each_worker() -> None:
    assert job_on_gpus(ON_GPUS)
    assert not job_on_gpus([])
    assert not job_on_gpus([["GPU:0"], ["CPU:0"]])
