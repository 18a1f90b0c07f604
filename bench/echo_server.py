"""The tests' echo MCP server (``tests/support/echo_mcp_server.py``), run quietly for benchmarks.

Same tools, same SDK; only the logging differs: no access log line per request (uvicorn's
default for ``MCPServer.run``), so the upstream spends its core on MCP, not on printing.
Run: ``python -m bench.echo_server --transport stdio|streamable-http [--port N] [--tool-prefix P]``.
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from bench.processes import ROOT

sys.path.insert(0, str(ROOT / "tests"))

from support.echo_mcp_server import build_echo_server

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--port", type=int, default=8199)
    parser.add_argument("--tool-prefix", default="")
    args = parser.parse_args()
    server = build_echo_server("echo", tool_prefix=args.tool_prefix)
    logging.getLogger().setLevel(logging.WARNING)
    if args.transport == "stdio":
        server.run("stdio")
        return
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
