"""Graph-rewriting kernels: each sees a graph, a Strategy and this task's TaskContext.

Which synchronizer a variable or shard has is a question of the Strategy alone, answered
without TensorFlow by `adrun.strategies.plan_lookup` (through `TaskContext.plan`).
"""
