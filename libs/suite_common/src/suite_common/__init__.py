"""Shared building blocks of the agent-loop suite. Never imports a service."""
