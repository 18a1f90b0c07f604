"""Who may call: the callers file (keys, tenants and their rules) and the caller keys kept in the run store."""

__all__: list[str] = []
