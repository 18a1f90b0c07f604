"""``make run``: the whole suite on this machine, in the foreground, on embedded defaults.

Starts completion-service, mcp-client-service (which spawns the two tool servers over stdio)
and agent-service as child processes, waits until each says it is ready and the document search
has answered once (it loads its embedding model and indexes the demo corpus first: the banner's
own ``curl`` then answers in well under a second), prints where they listen and a ``curl`` that runs
an agent, and stops them all on Ctrl-C.

agent-service asks for a caller key: the first start makes one (``.data/caller-key``, 0600) and the callers
file that names it (``.data/callers.toml``, tenant ``local``, the key as its sha256, the tenant's admin: the
console's Servers and Runtime sections are there); later starts reuse them, so a key once copied keeps working.
The banner prints the key, and its ``curl`` sends it. The first start also makes the key that encrypts the header
values of the MCP servers added at runtime (``.data/mcp-secrets-key``, 0600), unless MCP_CLIENT_SECRETS_KEY is set.

Ports come from AGENT_PORT, COMPLETION_PORT and MCP_CLIENT_PORT (8000, 8001, 8002 by default).
WEB_SEARCH_SEARXNG_URL, if set, is handed to the web search tool. Every other setting of the
services is read from the environment as usual (for example COMPLETION_OPENAI_API_KEY).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import httpx

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 300.0


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _mcp_config(data_dir: Path) -> Path:
    """The checked-in server list, with settings from this environment passed to the tools."""
    config = json.loads((ROOT / "deploy/local/mcp_servers.json").read_text())
    searxng = os.environ.get("WEB_SEARCH_SEARXNG_URL")
    if searxng:
        config["mcpServers"]["web-search"].setdefault("env", {})["WEB_SEARCH_SEARXNG_URL"] = searxng
    path = data_dir / "mcp_servers.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def _caller_key(data_dir: Path) -> tuple[str, Path]:
    """The local caller key (made on the first start, then reused) and the callers file that names it."""
    key_file, callers = data_dir / "caller-key", data_dir / "callers.toml"
    if key_file.is_file():
        key = key_file.read_text().strip()
    else:
        key = "local-" + secrets.token_urlsafe(32)
        # Created readable by its owner only, before the key is written into it.
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as output:
            output.write(key + "\n")
    digest = hashlib.sha256(key.encode()).hexdigest()
    callers.write_text(
        "# Written by make run (deploy/local/run_suite.py) from .data/caller-key; see docs/callers.md.\n"
        "[tenants.local]\n\n"
        '[personas.concise]  # a run names it with "persona": "concise" (GET /api/v1/agent/personas lists them)\n'
        'description = "One-sentence answers"\n'
        'system_prompt = "Answer in one short sentence."\n'
        'model = "demo"\n\n'
        f'[[keys]]\nname = "local"\ntenant = "local"\nsha256 = "{digest}"\ntrusted = true\nrole = "admin"\n'
    )
    return key, callers


def _secrets_key(data: Path) -> str:
    """The gateway's key for tenant servers' header values: made once (a Fernet key), kept readable by its owner."""
    key_file = data / "mcp-secrets-key"
    if key_file.is_file():
        return key_file.read_text().strip()
    from cryptography.fernet import Fernet  # the gateway's own dependency: only this function needs it

    key = Fernet.generate_key().decode()
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as output:
        output.write(key + "\n")
    return key


def _banner(agent: int, completion: int, mcp: int, key: str) -> str:
    body = json.dumps(
        {
            "model": "demo",
            "stream": True,
            "tools": ["search_documents"],
            "messages": [
                {"role": "user", "content": "Search the documents: what happens when a run reaches its deadline?"}
            ],
        }
    )
    openai = "configured" if os.environ.get("COMPLETION_OPENAI_API_KEY") else "not configured (model `demo` only)"
    return f"""
================================================================================
 The agent-loop suite is ready.

   agent-service       http://127.0.0.1:{agent}   POST /api/v1/agent/run
   completion-service  http://127.0.0.1:{completion}   OpenAI: {openai}
   mcp-client-service  http://127.0.0.1:{mcp}   tools: search_documents, web_search (stdio)

 Open the console (a chat page):  http://127.0.0.1:{agent}/console
 Caller key (.data/caller-key; the console asks for it once):  {key}

 Run an agent (the `demo` model is a deterministic stand-in, not an LLM):

   curl -N http://127.0.0.1:{agent}/api/v1/agent/run \\
     -H 'content-type: application/json' \\
     -H "Authorization: Bearer {key}" \\
     -d '{body}'

 Ctrl-C stops everything.
================================================================================
""".rstrip()


def _wait_ready(processes: dict[str, subprocess.Popen[bytes]], urls: dict[str, str]) -> None:
    pending = dict(urls)
    give_up = time.monotonic() + READY_TIMEOUT_SECONDS
    with httpx.Client(timeout=2.0) as http:
        while pending:
            for name, process in processes.items():
                if process.poll() is not None:
                    raise SystemExit(f"{name} exited with code {process.returncode} while starting; see its log above")
            for name, url in list(pending.items()):
                try:
                    if http.get(url).status_code == 200:
                        del pending[name]
                except httpx.HTTPError:
                    pass
            if time.monotonic() > give_up:
                raise SystemExit(f"not ready after {READY_TIMEOUT_SECONDS:.0f} s: {', '.join(pending)}")
            time.sleep(0.25)


def _warm_document_search(mcp: int, secret: str) -> str | None:
    """One search through the gateway, so that the banner's first search does not wait for the RAG tool to load its
    model and index the corpus; ``None`` once it has answered, else what to tell the user."""
    header = os.environ.get("MCP_CLIENT_SECRET_HEADER", "X-MCP-Service-Secret")
    body = {"name": "search_documents", "arguments": {"queries": ["how does a run end?"], "top_k": 1}}
    try:
        response = httpx.post(
            f"http://127.0.0.1:{mcp}/mcp/v1/tools/call-tool",
            json=body,
            headers={header: secret},
            timeout=READY_TIMEOUT_SECONDS,
        )
    except httpx.HTTPError as error:
        return f"the document search did not answer ({type(error).__name__})"
    if response.status_code != 200 or response.json().get("isError"):
        return f"the document search is not ready (HTTP {response.status_code}); its first call may take a while"
    return None


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> int:
    agent, completion, mcp = _port("AGENT_PORT", 8000), _port("COMPLETION_PORT", 8001), _port("MCP_CLIENT_PORT", 8002)
    data_dir = ROOT / ".data" / "local"
    data_dir.mkdir(parents=True, exist_ok=True)
    key, callers = _caller_key(ROOT / ".data")
    secret = os.environ.get("MCP_CLIENT_SERVICE_SECRET") or secrets.token_urlsafe(32)
    venv_bin = str(Path(sys.executable).parent)
    base = {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "AGENT_LOG_FORMAT": os.environ.get("AGENT_LOG_FORMAT", "console"),
        "COMPLETION_LOG_FORMAT": os.environ.get("COMPLETION_LOG_FORMAT", "console"),
        "MCP_CLIENT_LOG_FORMAT": os.environ.get("MCP_CLIENT_LOG_FORMAT", "console"),
    }
    services = {
        "completion-service": ("completion_service", {"COMPLETION_PORT": str(completion)}, completion),
        "mcp-client-service": (
            "mcp_client_service",
            {
                "MCP_CLIENT_PORT": str(mcp),
                "MCP_CLIENT_SERVICE_SECRET": secret,
                "MCP_CLIENT_SERVERS_FILE": str(_mcp_config(data_dir)),
                # Local mode: a tool server added to the list may listen on this machine's loopback.
                "MCP_CLIENT_SSRF_ALLOW_LOOPBACK": os.environ.get("MCP_CLIENT_SSRF_ALLOW_LOOPBACK", "true"),
                "MCP_CLIENT_SECRETS_KEY": os.environ.get("MCP_CLIENT_SECRETS_KEY") or _secrets_key(ROOT / ".data"),
            },
            mcp,
        ),
        "agent-service": (
            "agent_service",
            {
                "AGENT_PORT": str(agent),
                "AGENT_COMPLETION_URL": f"http://127.0.0.1:{completion}",
                "AGENT_MCP_CLIENT_URL": f"http://127.0.0.1:{mcp}",
                "AGENT_MCP_SERVICE_SECRET": secret,
                "AGENT_CALLERS_FILE": str(callers),
            },
            agent,
        ),
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def on_signal(signum: int, _: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    print("Starting the suite (the first start loads the embedding model; allow a minute)...", flush=True)
    try:
        for name, (module, env, _port_number) in services.items():
            processes[name] = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env={**base, **env})
        _wait_ready(processes, {name: f"http://127.0.0.1:{port}/readyz" for name, (_, _, port) in services.items()})
        print("Loading the document search (its embedding model; on a first start, the demo corpus's index)...")
        started = time.monotonic()
        problem = _warm_document_search(mcp, secret)
        if problem is None:
            print(f"The document search answered after {time.monotonic() - started:.1f} s.", flush=True)
        else:
            print(f"Note: {problem}.", flush=True)
        print(_banner(agent, completion, mcp, key), flush=True)
        while all(process.poll() is None for process in processes.values()):
            time.sleep(0.5)
        failed = next(name for name, process in processes.items() if process.poll() is not None)
        print(f"{failed} stopped unexpectedly; stopping the rest.", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nStopping...", flush=True)
        return 0
    finally:
        _stop(processes)


if __name__ == "__main__":
    sys.exit(main())
