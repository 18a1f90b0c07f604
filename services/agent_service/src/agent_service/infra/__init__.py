"""Outside connections: the peers' HTTP clients (peers), metrics and traces (telemetry), the shared Redis client."""

__all__: list[str] = []
