"""completion_service."""
