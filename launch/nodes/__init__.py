"""Reaching a node: SSH, a shell on it, the probe program, and measured transfers between nodes."""
