"""A small MCP server (the SDK's ``MCPServer``) with resources, a resource template, a prompt and
progress-reporting tools: exact answers for the tests of the gateway's MCP face.

Two instances built with different names share the resource ``shared://readme``, the template
``shared://chapter/{number}`` and the prompt ``greet``, each answering with its own name, so a
test can tell which server an aggregated name or URI went to.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

__all__ = ["SHARED_README", "build_library_server"]

SHARED_README = "shared://readme"


def build_library_server(name: str) -> MCPServer:
    server = MCPServer(name)

    @server.resource(SHARED_README, mime_type="text/plain")
    def readme() -> str:
        return f"the readme of {name}"

    @server.resource(f"{name}://note", mime_type="text/plain")
    def note() -> str:
        return f"a note only {name} has"

    @server.resource("shared://chapter/{number}", mime_type="text/plain")
    def chapter(number: str) -> str:
        return f"chapter {number} of {name}"

    @server.resource(f"{name}://page/{{number}}", mime_type="text/plain")
    def page(number: str) -> str:
        return f"page {number} of {name}"

    @server.prompt()
    def greet(who: str) -> str:
        """Greet someone."""
        return f"{name} greets {who}"

    @server.tool()
    async def count_to(n: int, ctx: Context) -> str:
        """Count to n, reporting each step as progress."""
        for step in range(1, n + 1):
            await ctx.report_progress(step, n, f"counted {step} of {n}")
        return f"counted to {n}"

    @server.tool()
    def progress_requested(ctx: Context) -> bool:
        """Whether the call carried a progress token."""
        return progress_token_from_params(ctx.request_context.params) is not None

    return server
