"""Device strings of the cluster's jobs (TF's own `/job:.../task:...` names)."""


def ps_device(task: int) -> str:
    return f"/job:ps/task:{task}/device:CPU:0"


def worker_device(task: int, local: str = "CPU:0") -> str:
    """A device of worker `task`: its first CPU by default, else `local` (e.g. `GPU:1`)."""
    return f"/job:worker/task:{task}/device:{local}"


CHIEF_DEVICE = worker_device(0)
COLLECTIVE_GROUP_LEADER = "/job:worker/replica:0/task:0"
