"""Everything adrun does to machines: reaching nodes (`nodes/`), checking a cluster (`check/`),
running a job's processes (`job/`), and the env contract every process gets (`env.py`).

Imported as `adrun.launch`; never imports TensorFlow or adrun's runtime (docs/architecture.md).
"""
