"""`adrun profile`: the profiling run, its samples, trial runs, and the report."""
