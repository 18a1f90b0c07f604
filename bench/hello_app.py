"""The floor: a Starlette hello endpoint served exactly as the services are (uvicorn, uvloop, httptools).

What one loopback HTTP hop into the system-under-test core costs before a service does any work.
Run: ``python -m bench.hello_app PORT``.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["app"]


async def hello(_: Request) -> JSONResponse:
    return JSONResponse({"hello": "world"})


app = Starlette(routes=[Route("/hello", hello, methods=["GET"]), Route("/healthz", hello, methods=["GET"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_config=None, access_log=False)
