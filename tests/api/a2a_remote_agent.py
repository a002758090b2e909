"""A scripted remote A2A agent on the official `a2a-sdk` server (A2A v1.0, JSON-RPC binding).

Run by tests/api/a2a_remote.rs: Agentry registers it by URL and its `task` tool delegates to it.
It listens on REMOTE_HOST (a loopback address) on a free port and prints
`LISTENING http://host:port` first. Every JSON-RPC call must carry `Authorization: Bearer
$REMOTE_TOKEN` (401 otherwise). What the first text of a new task says picks the script:

- `stream: X`  the answer `Remote says: X` as three artifact chunks, then completed;
- `ask: X`     input-required ("Which colour for: X?"); the next message on the same task is
               the answer: `Painting X <answer>`, completed;
- `hang: X`    working, then nothing until it is cancelled.

Beside the agent: `GET /seen` (what it saw: each task's user texts in order and whether it was
cancelled; for each JSON-RPC call whether the token was right), a v0.3-style card under `/v03/`
(no `supportedInterfaces`), and under `/dead/` a card whose JSON-RPC interface is a port nothing
listens on.
"""

import asyncio
import os
import socket

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)

HOST = os.environ.get("REMOTE_HOST", "127.0.0.2")
TOKEN = os.environ["REMOTE_TOKEN"]

# task id -> {"messages": [user texts], "cancelled": bool, "request": first text}
TASKS: dict[str, dict] = {}
AUTH: list[bool] = []


class Scripted(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message)
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        seen = TASKS.setdefault(task.id, {"messages": [], "cancelled": False, "request": text})
        seen["messages"].append(text)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        first = seen["request"]
        if len(seen["messages"]) > 1 and first.startswith("ask: "):
            # The answer to the question.
            answer = f"Painting {first[len('ask: '):]} {text}"
            await updater.add_artifact([new_text_part(answer)], name="answer")
            await updater.complete()
            return
        if text.startswith("stream: "):
            await updater.start_work()
            pieces = ["Remote ", "says: ", text[len("stream: "):]]
            for i, piece in enumerate(pieces):
                await updater.add_artifact(
                    [new_text_part(piece)],
                    artifact_id="answer",
                    name="answer",
                    append=i > 0,
                    last_chunk=i == len(pieces) - 1,
                )
                await asyncio.sleep(0.05)
            await updater.complete()
        elif text.startswith("ask: "):
            await updater.start_work()
            question = f"Which colour for: {text[len('ask: '):]}?"
            await updater.requires_input(updater.new_agent_message([new_text_part(question)]))
        elif text.startswith("hang: "):
            await updater.start_work(updater.new_agent_message([new_text_part("working on it")]))
            await asyncio.sleep(3600)
        else:
            await updater.failed(updater.new_agent_message([new_text_part(f"no script for {text!r}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        TASKS.setdefault(context.task_id, {"messages": [], "cancelled": False, "request": ""})[
            "cancelled"
        ] = True
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id, task.context_id if task else context.context_id)
        await updater.cancel()


class CheckToken:
    """Every JSON-RPC call (a POST) must carry the token; each is recorded."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            ok = dict(scope["headers"]).get(b"authorization") == f"Bearer {TOKEN}".encode()
            AUTH.append(ok)
            if not ok:
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def card(base: str) -> AgentCard:
    return AgentCard(
        name="Scripted remote agent",
        description="Streams, asks once, or hangs, as its message says",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="scripted",
                name="Scripted",
                description="stream: / ask: / hang:",
                tags=["test"],
            )
        ],
    )


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    base = f"http://{HOST}:{sock.getsockname()[1]}"
    agent_card = card(base)
    handler = DefaultRequestHandler(
        agent_executor=Scripted(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )

    async def seen(_: Request) -> JSONResponse:
        return JSONResponse(
            {
                "tasks": {k: {"messages": v["messages"], "cancelled": v["cancelled"]} for k, v in TASKS.items()},
                "auth": AUTH,
            }
        )

    async def old_card(_: Request) -> JSONResponse:
        return JSONResponse(
            {"name": "Old agent", "url": f"{base}/", "protocolVersion": "0.3.0", "version": "1", "skills": []}
        )

    async def dead_card(_: Request) -> JSONResponse:
        return JSONResponse(
            {
                "name": "Dead agent",
                "description": "Nothing answers its endpoint",
                "version": "1",
                "supportedInterfaces": [
                    {"url": f"http://{HOST}:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
                "capabilities": {"streaming": True},
                "skills": [],
            }
        )

    routes = [
        Route("/seen", seen, methods=["GET"]),
        Route("/v03/.well-known/agent-card.json", old_card, methods=["GET"]),
        Route("/dead/.well-known/agent-card.json", dead_card, methods=["GET"]),
        *create_agent_card_routes(agent_card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
    ]
    app = CheckToken(Starlette(routes=routes))

    print(f"LISTENING {base}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
