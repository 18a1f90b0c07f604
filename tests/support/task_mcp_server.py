"""A stdio MCP server (protocol 2025-11-25) whose ``research`` tool can only run as a task.

    python tests/support/task_mcp_server.py

Written by hand with the standard library (like ``raw_mcp_server.py``): mcp 2.3, the SDK of the
tests, has the task types but serves no ``tasks/*`` methods. It offers tasks for ``tools/call``
(``capabilities.tasks.requests.tools.call``) and lists:

- ``research(topic, steps=3, step_seconds=0.05, outcome="completed", report="progress")``,
  ``execution.taskSupport`` ``"required"``: called with ``task`` it answers at once with the task
  it created (its ``pollInterval`` 50 ms), then works ``steps`` steps of ``step_seconds`` each,
  reporting each step as ``report`` says: ``progress``, ``notifications/progress`` (``N``,
  ``STEPS``) for the call's progress token when it carried one, at the end of step N; ``status``,
  a ``statusMessage`` of ``"step N of STEPS"`` during step N. It then ends as ``outcome`` says:
  ``completed`` (its result says ``researched TOPIC``), ``failed`` (with no result:
  ``tasks/result`` answers with an error), ``failed_quietly`` (the same, with no status
  message either) or ``cancelled`` (by the server itself).
  Called without ``task`` it answers with error -32601, as the spec says;
- ``task_log(wait_for="")``: the task requests it has received, one line each (``tasks/get ID``,
  ``tasks/result ID``, ``tasks/cancel ID``; ``created ID TOPIC`` for a task created), as text;
  with ``wait_for``, once a line contains it (it waits up to 10 s, answering from a thread);
- ``say(text)``: a tool called directly.

``tasks/result`` waits for the task to end (from a thread of its own: the server keeps
answering); ``tasks/cancel`` stops a task that is working and makes it ``cancelled``.
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["TASK_SCRIPT", "main"]

TASK_SCRIPT = Path(__file__)

_PROTOCOL_VERSION = "2025-11-25"
_POLL_INTERVAL_MS = 50
_ENDED = ("completed", "failed", "cancelled")
_LOG_WAIT_SECONDS = 10.0

_RESEARCH = {
    "name": "research",
    "description": "Research a topic, step by step (a task).",
    "inputSchema": {
        "type": "object",
        "properties": {
            "topic": {"type": "string"},
            "steps": {"type": "integer", "minimum": 1},
            "step_seconds": {"type": "number", "minimum": 0},
            "outcome": {"enum": ["completed", "failed", "failed_quietly", "cancelled"]},
            "report": {"enum": ["progress", "status"]},
        },
        "required": ["topic"],
    },
    "execution": {"taskSupport": "required"},
}
_TOOLS = [
    _RESEARCH,
    {"name": "task_log", "inputSchema": {"type": "object", "properties": {"wait_for": {"type": "string"}}}},
    {
        "name": "say",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Task:
    task_id: str
    ttl: int | None
    status: str = "working"
    status_message: str | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def wire(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttl": self.ttl,
            "pollInterval": _POLL_INTERVAL_MS,
        }
        if self.status_message is not None:
            task["statusMessage"] = self.status_message
        return task


class TaskServer:
    def __init__(self) -> None:
        self.tasks: dict[str, _Task] = {}
        self.log: list[str] = []
        self._lock = threading.Condition()
        self._writing = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self._writing:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def answer(self, request_id: Any, result: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def refuse(self, request_id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def _set(self, task: _Task, status: str, message: str | None, result: dict[str, Any] | None = None) -> None:
        with self._lock:
            if task.status in _ENDED:
                return  # cancelled meanwhile: it stays so
            task.status, task.status_message, task.updated_at = status, message, _now()
            task.result = result
            self._lock.notify_all()

    def research(self, task: _Task, arguments: dict[str, Any], token: Any) -> None:
        steps, step_seconds = int(arguments.get("steps", 3)), float(arguments.get("step_seconds", 0.05))
        report = arguments.get("report", "progress")
        for step in range(1, steps + 1):
            if report == "status":
                self._set(task, "working", f"step {step} of {steps}")
            if task.stop.wait(step_seconds):
                return
            if report == "progress" and token is not None:
                progress = {"progressToken": token, "progress": step, "total": steps}
                self.send({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
        outcome = arguments.get("outcome", "completed")
        if outcome == "completed":
            text = f"researched {arguments['topic']}"
            self._set(task, "completed", None, {"content": [{"type": "text", "text": text}]})
        elif outcome == "failed":
            self._set(task, "failed", "the sources could not be reached")
        elif outcome == "failed_quietly":
            self._set(task, "failed", None)
        else:
            self._set(task, "cancelled", "the server gave up")

    def call(self, request_id: Any, params: dict[str, Any]) -> None:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "research":
            if not isinstance(params.get("task"), dict):
                self.refuse(request_id, -32601, "research can only run as a task")
                return
            task = _Task(task_id=uuid.uuid4().hex, ttl=params["task"].get("ttl"))
            with self._lock:
                self.tasks[task.task_id] = task
                self.log.append(f"created {task.task_id} {arguments.get('topic')}")
                self._lock.notify_all()
            token = (params.get("_meta") or {}).get("progressToken")
            self.answer(request_id, {"task": task.wire()})
            threading.Thread(target=self.research, args=(task, arguments, token), daemon=True).start()
            return
        if name == "task_log":
            wanted = str(arguments.get("wait_for", ""))
            threading.Thread(target=self.task_log, args=(request_id, wanted), daemon=True).start()
            return
        if name == "say":
            text = str(arguments.get("text", ""))
        else:
            self.refuse(request_id, -32602, f"no tool {name}")
            return
        self.answer(request_id, {"content": [{"type": "text", "text": text}]})

    def task_log(self, request_id: Any, wanted: str) -> None:
        with self._lock:
            self._lock.wait_for(lambda: any(wanted in line for line in self.log), timeout=_LOG_WAIT_SECONDS)
            text = "\n".join(self.log)
        self.answer(request_id, {"content": [{"type": "text", "text": text}]})

    def result(self, request_id: Any, task: _Task) -> None:
        with self._lock:
            self._lock.wait_for(lambda: task.status in _ENDED)
            result = task.result
        if result is None:
            self.refuse(request_id, -32603, f"the task {task.status} without a result")
            return
        self.answer(request_id, {**result, "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task.task_id}}})

    def handle(self, message: dict[str, Any]) -> None:
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            return  # a notification (initialized, cancelled): nothing to answer
        if method == "initialize":
            capabilities: dict[str, Any] = {"tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}}
            result = {
                "protocolVersion": _PROTOCOL_VERSION,
                "capabilities": capabilities,
                "serverInfo": {"name": "task-server", "version": "0.0.1"},
            }
            self.answer(request_id, result)
        elif method == "ping":
            self.answer(request_id, {})
        elif method == "tools/list":
            self.answer(request_id, {"tools": _TOOLS})
        elif method == "tools/call":
            self.call(request_id, params)
        elif method in ("tasks/get", "tasks/result", "tasks/cancel"):
            self.task_request(request_id, method, str(params.get("taskId")))
        else:
            self.refuse(request_id, -32601, "Method not found")

    def task_request(self, request_id: Any, method: str, task_id: str) -> None:
        with self._lock:
            self.log.append(f"{method} {task_id}")
            self._lock.notify_all()
            task = self.tasks.get(task_id)
        if task is None:
            self.refuse(request_id, -32602, f"no task {task_id}")
        elif method == "tasks/get":
            with self._lock:
                self.answer(request_id, task.wire())
        elif method == "tasks/result":
            threading.Thread(target=self.result, args=(request_id, task), daemon=True).start()
        elif task.status in _ENDED:
            self.refuse(request_id, -32602, f"the task has ended ({task.status})")
        else:
            task.stop.set()
            self._set(task, "cancelled", "cancelled by the client")
            with self._lock:
                self.answer(request_id, task.wire())

    def serve(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self.handle(json.loads(line))


def main() -> None:
    TaskServer().serve()


if __name__ == "__main__":
    main()
