"""agent_service."""
