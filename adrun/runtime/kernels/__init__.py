"""Graph-rewriting kernels: each sees a graph, a Strategy and this task's TaskContext.

One module here is no kernel: `plan_lookup.py` answers which synchronizer a variable or shard has
from the Strategy alone, without TensorFlow; it sits with the kernels because they are its only
users (through `TaskContext.plan`).
"""
