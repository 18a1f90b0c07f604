"""Every HTTP face of agent-service: runs, stored runs, usage, console, the OpenAI front, caller auth, one services
container.
"""

__all__: list[str] = []
