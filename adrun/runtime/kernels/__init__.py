"""Graph-rewriting kernels: each sees a graph, a Strategy and this task's TaskContext."""
