"""Job control: the registry of jobs started on this machine, `adrun jobs`, `stop` and `logs`."""
