"""Plain values and rules of agent-service: tenancy, a run's records, personas, limits, names, errors. No I/O;
imports only suite_common (the bottom layer).
"""

__all__: list[str] = []
