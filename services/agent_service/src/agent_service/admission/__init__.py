"""Before a run starts: its plan (planning), the monthly budgets, the per-tenant run slots, the tool rules checked."""

__all__: list[str] = []
