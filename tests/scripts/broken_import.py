"""Fails at the top, as a script with a typo or a missing package does."""

import sys

print("about to fail", file=sys.stderr)
import tensorflow_but_misspelled  # noqa: F401,E402
