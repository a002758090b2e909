"""Drives Agentry's A2A agents with the official `a2a-sdk` client.

Run by tests/api/a2a.rs against a real `agentry serve` (the scripted model behind it). It uses
the SDK (and raw httpx only for what the SDK does not send on purpose: a missing A2A-Version
header) and reports what it saw as one JSON object on stdout; the Rust test asserts on every
value. Environment: AGENTRY_BASE (`http://127.0.0.1:PORT`), AGENTRY_TENANT (the tenant's id),
AGENTRY_KEY (a member's key), AGENTRY_MEMBER2_KEY (another member of the tenant),
AGENTRY_OTHER_TENANT and AGENTRY_OTHER_KEY (another tenant and a key of it).
"""

import asyncio
import json
import os
import uuid

import httpx
from google.protobuf import json_format, struct_pb2

import a2a
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError

BASE = os.environ["AGENTRY_BASE"]
TENANT = os.environ["AGENTRY_TENANT"]
KEY = os.environ["AGENTRY_KEY"]
MEMBER2_KEY = os.environ["AGENTRY_MEMBER2_KEY"]
OTHER_TENANT = os.environ["AGENTRY_OTHER_TENANT"]
OTHER_KEY = os.environ["AGENTRY_OTHER_KEY"]

AGENT = f"{BASE}/a2a/{TENANT}/default"
out = {"sdk_version": getattr(a2a, "__version__", None)}


def d(msg):
    """A protobuf message as its ProtoJSON dict (camelCase, enums by name)."""
    return json_format.MessageToDict(msg)


def failure(e):
    """What an SDK exception carries."""
    return {
        "class": type(e).__name__,
        "message": str(e),
        "data": getattr(e, "data", None),
    }


def http(key):
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)


async def client_for(card, key, streaming):
    return ClientFactory(ClientConfig(httpx_client=http(key), streaming=streaming)).create(card)


def text_message(text, task_id=None, context_id=None):
    return Message(
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        message_id=str(uuid.uuid4()),
        task_id=task_id or "",
        context_id=context_id or "",
    )


def data_message(data, task_id):
    value = json_format.ParseDict(data, struct_pb2.Value())
    return Message(
        role=Role.ROLE_USER,
        parts=[Part(data=value)],
        message_id=str(uuid.uuid4()),
        task_id=task_id,
    )


def task_view(t):
    """A task's state, its artifacts' text and what the SDK parsed."""
    return {
        "id": t.id,
        "context": t.context_id,
        "state": TaskState.Name(t.status.state),
        "text": "".join(p.text for a in t.artifacts for p in a.parts),
        "artifacts": len(t.artifacts),
        "status_message": d(t.status.message) if t.status.HasField("message") else None,
        "history": [d(m) for m in t.history],
        "raw": d(t),
    }


async def send(client, message, **config):
    """SendMessage (the non-streaming client): the task it answers."""
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(**config))
    events = [e async for e in client.send_message(request)]
    assert len(events) == 1, events
    return events[0].task


async def stream(client, message):
    """SendStreamingMessage: the events in order, the text of the artifact chunks, the final
    task as the updates build it."""
    kinds, chunks, states, first = [], [], [], None
    request = SendMessageRequest(message=message)
    async for ev in client.send_message(request):
        kind = ev.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task" and first is None:
            first = task_view(ev.task)
        if kind == "artifact_update":
            u = ev.artifact_update
            chunks.append(
                {
                    "text": "".join(p.text for p in u.artifact.parts),
                    "append": u.append,
                    "last": u.last_chunk,
                    "artifact": u.artifact.artifact_id,
                }
            )
        if kind == "status_update":
            states.append(TaskState.Name(ev.status_update.status.state))
            last_status = ev.status_update
    return {
        "kinds": kinds,
        "first": first,
        "chunks": chunks,
        "text": "".join(c["text"] for c in chunks),
        "states": states,
        "task": first["id"] if first else None,
        "final_message": d(last_status.status.message)
        if states and last_status.status.HasField("message")
        else None,
    }


async def expect_error(coro):
    try:
        result = await coro
        return {"class": None, "result": str(result)[:200]}
    except (A2AError, A2AClientError) as e:
        return failure(e)


async def main():
    # Cards: the public one from the well-known path, the same for an assistant that does not
    # exist; the extended one with a key.
    async with httpx.AsyncClient(timeout=30) as anon:
        card = await A2ACardResolver(anon, AGENT).get_agent_card()
        ghost = await A2ACardResolver(anon, f"{BASE}/a2a/{TENANT}/no-such-agent").get_agent_card()
    out["card"] = d(card)
    out["ghost_card"] = d(ghost)

    plain = await client_for(card, KEY, streaming=False)
    streaming = await client_for(card, KEY, streaming=True)
    extended = await plain.get_extended_agent_card(GetExtendedAgentCardRequest())
    out["extended_card"] = d(extended)

    # SendMessage, blocking: the answer as an artifact; GetTask reads the same task back.
    t = await send(plain, text_message("hello there"))
    out["plain"] = task_view(t)
    got = await plain.get_task(GetTaskRequest(id=t.id))
    out["got"] = task_view(got)
    out["got_no_history"] = task_view(await plain.get_task(GetTaskRequest(id=t.id, history_length=0)))
    # The same context: a new task in the conversation.
    second = await send(plain, text_message("/echo second turn", context_id=t.context_id))
    out["second"] = task_view(second)

    # SendStreamingMessage: the task, then the answer in chunks, then completed.
    out["stream"] = await stream(streaming, text_message("stream this answer please"))

    # A tool run.
    out["tool"] = task_view(await send(plain, text_message('/tool list_directory {"path": "."}')))

    # An approval, approved: input-required with the request as data, then completed.
    write = '/tool write_file {"file_path": "approved.txt", "content": "yes"}'
    asked = await send(plain, text_message(write))
    out["asked"] = task_view(asked)
    approved = await send(plain, data_message({"type": "approve"}, asked.id))
    out["approved"] = task_view(approved)
    out["approved_got"] = task_view(await plain.get_task(GetTaskRequest(id=asked.id)))
    out["approved_again"] = await expect_error(
        send(plain, data_message({"type": "approve"}, asked.id))
    )

    # Rejected, streamed: the stream ends at input-required; the decision ends the task.
    asked = await stream(streaming, text_message(
        '/tool write_file {"file_path": "rejected.txt", "content": "no"}'
    ))
    out["asked_stream"] = asked
    out["rejected"] = await stream(
        streaming, data_message({"type": "reject", "message": "not today"}, asked["task"])
    )
    out["rejected_got"] = task_view(await plain.get_task(GetTaskRequest(id=asked["task"])))
    # A text answer to an approval is refused, saying what to send.
    asked = await send(plain, text_message(
        '/tool write_file {"file_path": "text.txt", "content": "?"}'
    ))
    out["approval_by_text"] = await expect_error(send(plain, text_message("yes", task_id=asked.id)))
    await send(plain, data_message({"type": "reject"}, asked.id))

    # A question: input-required, answered with text.
    asked = await send(plain, text_message('/tool ask_question {"question": "Favourite colour?"}'))
    out["question"] = task_view(asked)
    out["answered"] = task_view(await send(plain, text_message("blue", task_id=asked.id)))

    # An approval edited: the call runs with the new arguments.
    asked = await send(plain, text_message(
        '/tool write_file {"file_path": "original.txt", "content": "a"}'
    ))
    out["edited"] = task_view(await send(plain, data_message(
        {"type": "edit", "args": {"file_path": "edited.txt", "content": "b"}}, asked.id
    )))

    # A task waiting for an approval: listed as input-required, then cancelled while it waits.
    waiting = await send(plain, text_message(
        '/tool write_file {"file_path": "waiting.txt", "content": "never"}'
    ))
    listed = await plain.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED))
    out["waiting_listed"] = [x.id for x in listed.tasks]
    out["waiting"] = task_view(waiting)
    out["waiting_cancelled"] = task_view(await plain.cancel_task(CancelTaskRequest(id=waiting.id)))

    # CancelTask on a task that is still thinking; again: not cancelable.
    slow = await send(plain, text_message("/sleep 30000\nnever answered"), return_immediately=True)
    out["slow"] = task_view(slow)
    out["cancelled"] = task_view(await plain.cancel_task(CancelTaskRequest(id=slow.id)))
    out["cancelled_got"] = task_view(await plain.get_task(GetTaskRequest(id=slow.id)))
    out["cancelled_again"] = await expect_error(plain.cancel_task(CancelTaskRequest(id=slow.id)))

    # SubscribeToTask after a dropped stream: the task as it stands, then the rest.
    events = streaming.send_message(
        SendMessageRequest(message=text_message("/sleep 1500\nslow answer"))
    )
    first = await events.__anext__()
    await events.aclose()
    dropped = first.task.id
    kinds, chunks, states, first_state = [], [], [], None
    async for ev in streaming.subscribe(SubscribeToTaskRequest(id=dropped)):
        kind = ev.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task" and first_state is None:
            first_state = TaskState.Name(ev.task.status.state)
        if kind == "artifact_update":
            chunks.append("".join(p.text for p in ev.artifact_update.artifact.parts))
        if kind == "status_update":
            states.append(TaskState.Name(ev.status_update.status.state))
    out["resubscribed"] = {
        "first_kind": kinds[0] if kinds else None,
        "first_state": first_state,
        "text": "".join(chunks),
        "states": states,
        "got": task_view(await plain.get_task(GetTaskRequest(id=dropped))),
    }
    out["subscribe_terminal"] = await expect_error(
        anext_of(streaming.subscribe(SubscribeToTaskRequest(id=dropped)))
    )

    # ListTasks: every task of this user at this agent, two by two, newest update first.
    pages, token = [], ""
    for _ in range(50):
        page = await plain.list_tasks(ListTasksRequest(page_size=2, page_token=token))
        pages.append(
            {
                "ids": [x.id for x in page.tasks],
                "states": [TaskState.Name(x.status.state) for x in page.tasks],
                "times": [x.status.timestamp.ToJsonString() for x in page.tasks],
                "next": page.next_page_token,
                "size": page.page_size,
                "total": page.total_size,
                "artifacts": [len(x.artifacts) for x in page.tasks],
            }
        )
        token = page.next_page_token
        if not token:
            break
    out["pages"] = pages
    ctx = await plain.list_tasks(ListTasksRequest(context_id=t.context_id))
    out["list_context"] = [x.id for x in ctx.tasks]
    done = await plain.list_tasks(
        ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, include_artifacts=True)
    )
    out["list_completed"] = {
        "states": sorted({TaskState.Name(x.status.state) for x in done.tasks}),
        "texts": [ "".join(p.text for a in x.artifacts for p in a.parts) for x in done.tasks],
    }
    out["list_bad_size"] = await expect_error(plain.list_tasks(ListTasksRequest(page_size=500)))

    # Another member of the tenant sees none of these tasks.
    member2 = await client_for(card, MEMBER2_KEY, streaming=False)
    out["member2_list"] = d(await member2.list_tasks(ListTasksRequest()))
    out["member2_get"] = await expect_error(member2.get_task(GetTaskRequest(id=t.id)))
    out["member2_context"] = await expect_error(
        send(member2, text_message("hi", context_id=t.context_id))
    )

    # Another tenant: this tenant's agent is not there for its key (404); at its own agent,
    # this tenant's task and context are not found.
    other = await client_for(card, OTHER_KEY, streaming=False)
    out["other_tenant_agent"] = await expect_error(other.get_task(GetTaskRequest(id=t.id)))
    async with httpx.AsyncClient(timeout=30) as anon:
        other_card = await A2ACardResolver(anon, f"{BASE}/a2a/{OTHER_TENANT}/default").get_agent_card()
    other_own = await client_for(other_card, OTHER_KEY, streaming=False)
    out["other_tenant_task"] = await expect_error(other_own.get_task(GetTaskRequest(id=t.id)))
    out["other_tenant_cancel"] = await expect_error(
        other_own.cancel_task(CancelTaskRequest(id=t.id))
    )
    out["other_tenant_context"] = await expect_error(
        send(other_own, text_message("hi", context_id=t.context_id))
    )
    out["other_tenant_continue"] = await expect_error(
        send(other_own, data_message({"type": "approve"}, t.id))
    )

    # A bad key.
    bad = await client_for(card, "agk_nope", streaming=False)
    out["bad_key"] = await expect_error(bad.get_task(GetTaskRequest(id=t.id)))
    out["bad_key_send"] = await expect_error(send(bad, text_message("hi")))

    # What the SDK never sends wrong, on the wire: no A2A-Version, an unknown method, a push
    # config to a private address (this server does not allow them), a file part.
    async with http(KEY) as raw:
        url = card.supported_interfaces[0].url

        async def rpc(method, params, version="1.0"):
            headers = {"A2A-Version": version} if version else {}
            r = await raw.post(
                url,
                json={"jsonrpc": "2.0", "id": "x1", "method": method, "params": params},
                headers=headers,
            )
            return {"status": r.status_code, "body": r.json()}

        out["wire"] = {
            "no_version": await rpc("GetTask", {"id": t.id}, version=None),
            "version_2": await rpc("GetTask", {"id": t.id}, version="2.0"),
            "unknown_method": await rpc("tasks/get", {"id": t.id}),
            "push": await rpc("CreateTaskPushNotificationConfig", {"taskId": t.id, "url": "http://127.0.0.1:9/hook"}),
            "file_part": await rpc(
                "SendMessage",
                {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"url": "http://127.0.0.1:9/f.png"}]}},
            ),
            "no_parts": await rpc("SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}}),
            "wrong_tenant_field": await rpc("GetTask", {"id": t.id, "tenant": OTHER_TENANT}),
            "tenant_field": await rpc("GetTask", {"id": t.id, "tenant": TENANT}),
            "bad_json": await bad_json(raw, url),
        }

    await plain.close()
    await streaming.close()
    print(json.dumps(out))


async def anext_of(gen):
    return await gen.__anext__()


async def bad_json(raw, url):
    r = await raw.post(
        url, content=b"{not json", headers={"content-type": "application/json", "A2A-Version": "1.0"}
    )
    return {"status": r.status_code, "body": r.json()}


asyncio.run(main())
