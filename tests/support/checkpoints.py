"""What a plain run of tests/scripts/checkpoint_model.py saves: its variables and their full shapes,
which a checkpoint written under any plan must hold too."""

from __future__ import annotations

PLAIN_GRAPH = {"emb": [30, 4], "emb/Adagrad": [30, 4], "dense/w": [4, 1], "dense/w/Adagrad": [4, 1], "global_step": []}
