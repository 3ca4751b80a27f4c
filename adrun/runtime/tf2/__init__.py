"""TF2 mode: Keras 3 `fit`, `train_step`, `tf.function` and eager loops, tf_keras (Keras 2).

There is no Session to capture or rewrite, so adrun works at the optimizer (docs/architecture.md,
"TF2 mode"): capture records the model at the first optimizer apply and exits (`capture.py`); a run
starts TF's collective runtime at `import tensorflow` (`collective_runtime.py`), gives every worker
worker 0's initial values as variables are created (`broadcast.py`), and replaces the gradients of
each outermost optimizer apply (`optimizer_hooks.py`) by their mean over the workers per the plan
(`sync.py`, `reduction.py`). `install.py` is what the import hook calls.
"""
