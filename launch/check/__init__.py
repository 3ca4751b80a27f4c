"""`adrun cluster check`: probe every node of a spec and judge what it reports."""
