"""adrun: run an unmodified TensorFlow graph-mode script data-parallel on a cluster."""

__version__ = "0.1.0"
