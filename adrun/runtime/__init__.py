"""What runs inside the user's processes: hook, capture, transform kernels, session, metrics."""
