"""The agent loop and what it runs with: the tool-result cache, tool results rendered, LLM calls metered."""

__all__: list[str] = []
