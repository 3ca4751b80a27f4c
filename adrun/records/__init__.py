"""The local record of finished runs (SQLite) that the cost model learns from."""
