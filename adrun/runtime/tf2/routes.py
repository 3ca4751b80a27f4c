"""On which device, in which group and by which implementation a TF2 worker's collectives run.

TF's collective runtime uses NCCL for a collective only when asked (the op's `communication_hint`
"nccl", or `experimental.collective_nccl` in the server's config), the group's devices are GPUs and
TF was built with NCCL (`CollectiveParamResolverLocal::AssignCollectiveType`); otherwise a ring
(reduce, gather) or a tree (broadcast) over gRPC. The default hint, "auto", is not NCCL.
MultiWorkerMirroredStrategy in TF2 passes its `CommunicationImplementation` as that hint
(`cross_device_utils.CollectiveReplicaLauncher`), so it too uses NCCL only when told NCCL.

A group (one group key) has one device type: a device of another type joining it fails the
collective. So each collective is routed by its dtype to one of two groups, each pinned to one
device of the worker:
- the GPU group: floating-point tensors on the worker's `GPU:0`, hint "nccl", when every worker of
  the job has a GPU. The plan says so (its `replica_devices`, from the spec's `gpus`), the same for
  every worker: a worker routing to a group its peers never join would wait for ever;
- the host group: everything else (integers, which TF keeps in host memory on a GPU device, where
  NCCL cannot read them), and everything when a worker has no GPU, on `CPU:0`, hint "auto" (ring).
NCCL needs every rank to launch its collectives in the same order: TF2 mode's collectives carry one
ordering token (keys.py), so they run in program order on every worker. This module decides; it
imports no TensorFlow, so the choice is tested with device lists (tests/unit/test_tf2_routes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adrun.errors import UserError
from adrun.placement import worker

HOST_GROUP_KEY = 1  # graph mode's collectives use the same key (kernels/allreduce_sync.py GROUP_KEY)
GPU_GROUP_KEY = 2
NCCL_DTYPES = frozenset({"float16", "float32", "float64"})  # what TF's NCCL kernels reduce on a GPU


@dataclass(frozen=True)
class Route:
    """One group of collectives: the local device its ops run on, its key, its implementation hint."""

    device: str  # "CPU:0" or "GPU:0", as the process sees it (CUDA_VISIBLE_DEVICES numbers from 0)
    group_key: int
    communication_hint: str  # "auto": ring on the host; "nccl"


HOST = Route("CPU:0", HOST_GROUP_KEY, "auto")
NCCL = Route("GPU:0", GPU_GROUP_KEY, "nccl")


@dataclass(frozen=True)
class Routes:
    """Where worker `task_index`'s collectives run: `gpu` for floating-point tensors when the job
    runs on GPUs, the host route for the rest."""

    task_index: int
    gpu: Route | None = None

    def of(self, dtype: str) -> Route:
        """The route of a tensor of `dtype` (a numpy dtype name: "float32")."""
        return self.gpu if self.gpu is not None and dtype in NCCL_DTYPES else HOST

    def device(self, route: Route) -> str:
        """`route`'s device as TF names it in this worker's cluster: `/job:worker/task:1/device:GPU:0`."""
        return worker(self.task_index).device(route.device)


def job_on_gpus(replica_devices: Sequence[Sequence[str]] | None) -> bool:
    """Whether every worker of the plan runs on a GPU (TF2 mode: one device per worker)."""
    if not replica_devices:
        return False
    return all(devices and devices[0].startswith("GPU:") for devices in replica_devices)


def choose_routes(task_index: int, replica_devices: Sequence[Sequence[str]] | None, visible_gpus: int,
                  cuda_visible_devices: str | None, gpu: Route = NCCL) -> Routes:
    """Worker `task_index`'s routes for a plan with `replica_devices`, in a process that sees
    `visible_gpus` GPUs. `gpu` is the GPU group's route (tests route it to a virtual CPU device).

    UserError when the plan puts the job on GPUs and this process sees none: its peers would send
    their floating-point collectives to a GPU group it never joins."""
    if not job_on_gpus(replica_devices):
        return Routes(task_index)
    if visible_gpus == 0:
        shown = "unset" if cuda_visible_devices is None else repr(cuda_visible_devices)
        raise UserError(
            f"worker {task_index}: the plan runs every worker on a GPU (the spec's nodes[].gpus), but this "
            f"process sees none (CUDA_VISIBLE_DEVICES {shown}; adrun gives each worker its own GPU): check the "
            "node's NVIDIA driver with `adrun cluster check`, or set gpus: 0 for that node")
    return Routes(task_index, gpu)
