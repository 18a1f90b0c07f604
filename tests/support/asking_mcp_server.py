"""An MCP server whose tools ask their user questions (``elicitation``, form mode), over stdio or streamable HTTP.

    python tests/support/asking_mcp_server.py [--transport stdio|streamable-http] [--port N]

In process: serve ``build_asking_server().streamable_http_app()`` with ``serve_app``. Built on the SDK's
``MCPServer`` resolvers, so the question travels as the negotiated protocol wants: inside the call's
``InputRequiredResult`` at 2026-07-28, as an ``elicitation/create`` request during the call before (the
handshake-era form is served by ``raw_mcp_server.py --mode elicit``).

Tools:

- ``greet()``: asks for a ``Contact`` (``name`` required; ``greeting`` defaults to ``"hello"``, ``times`` to 1)
  and answers with the outcome as JSON: ``{"action": "accept", "name": ..., "greeting": ..., "times": ...}``, or
  ``{"action": "decline"}`` / ``{"action": "cancel"}``;
- ``greet_twice()``: asks twice in a row (two ``Contact``s), answering both outcomes as a JSON list.
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated, Any

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

__all__ = ["ASKING_TOOLS", "build_asking_server", "main"]

ASKING_TOOLS = ("greet", "greet_twice")


class Contact(BaseModel):
    name: str
    greeting: str = "hello"
    times: int = 1


class OtherContact(Contact):
    """The second question of ``greet_twice`` (a question is asked once per distinct resolver)."""


def _outcome(answer: ElicitationResult[Any]) -> dict[str, Any]:
    if isinstance(answer, AcceptedElicitation):
        return {"action": "accept", **answer.data.model_dump()}
    return {"action": answer.action}


def ask_contact() -> Elicit[Contact]:
    return Elicit("Who should be greeted?", Contact)


def ask_other() -> Elicit[OtherContact]:
    return Elicit("And who else?", OtherContact)


def build_asking_server(name: str = "asking", *, handshake_era: bool = False) -> MCPServer:
    """``handshake_era``: the server does not answer ``server/discover``, so a client falls back to ``initialize``
    (2025-11-25) and the questions come as ``elicitation/create`` requests during the call (over streamable HTTP,
    on the call's own response stream)."""
    server = MCPServer(name)
    if handshake_era:
        server._lowlevel_server._request_handlers.pop("server/discover")

    def greet(answer: Annotated[ElicitationResult[Contact], Resolve(ask_contact)]) -> str:
        """Ask who to greet, and say what the answer was."""
        return json.dumps(_outcome(answer), sort_keys=True)

    def greet_twice(
        first: Annotated[ElicitationResult[Contact], Resolve(ask_contact)],
        second: Annotated[ElicitationResult[OtherContact], Resolve(ask_other)],
    ) -> str:
        """Ask two questions, and say what both answers were."""
        return json.dumps([_outcome(first), _outcome(second)], sort_keys=True)

    server.add_tool(greet)
    server.add_tool(greet_twice)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--port", type=int, default=8198)
    args = parser.parse_args(argv)
    server = build_asking_server()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
