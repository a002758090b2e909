"""A2A push notifications through the official `a2a-sdk` client, received by a loopback webhook.

Run by tests/api/a2a.rs (`push_notifications`) against a real `agentry serve` that allows private
addresses (the receiver is on 127.0.0.1). The receiver, in this script, records every POST and
checks it as a receiver should: the config's token in `X-A2A-Notification-Token`, its Bearer
credentials in `Authorization`, and the Standard Webhooks signature with the `standardwebhooks`
package and the tenant's secret (read over REST with the tenant admin's key). `/flaky/…` answers
500 twice before 200. The script prints what it saw as one JSON object; the Rust test asserts.

Environment: AGENTRY_BASE, AGENTRY_TENANT, AGENTRY_KEY (a member), AGENTRY_ADMIN_KEY (the tenant's
admin), AGENTRY_MEMBER2_KEY (another member), AGENTRY_OTHER_TENANT and AGENTRY_OTHER_KEY.
"""

import asyncio
import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from google.protobuf import json_format, struct_pb2
from standardwebhooks import Webhook

from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError

BASE = os.environ["AGENTRY_BASE"]
TENANT = os.environ["AGENTRY_TENANT"]
KEY = os.environ["AGENTRY_KEY"]
ADMIN_KEY = os.environ["AGENTRY_ADMIN_KEY"]
MEMBER2_KEY = os.environ["AGENTRY_MEMBER2_KEY"]
OTHER_TENANT = os.environ["AGENTRY_OTHER_TENANT"]
OTHER_KEY = os.environ["AGENTRY_OTHER_KEY"]
AGENT = f"{BASE}/a2a/{TENANT}/default"

out = {}
received = []  # every POST: path, headers, body, and what the checks found
lock = threading.Lock()
flaky_answers = {}
webhook = None  # set once the secret is read


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            webhook.verify(body, headers)
            verified = True
        except Exception as e:  # noqa: BLE001 - what failed is the finding
            verified = f"{type(e).__name__}: {e}"
        status = 200
        if self.path.startswith("/flaky"):
            with lock:
                n = flaky_answers.get(self.path, 0)
                flaky_answers[self.path] = n + 1
            if n < 2:
                status = 500
        with lock:
            received.append(
                {
                    "path": self.path,
                    "status": status,
                    "token": headers.get("x-a2a-notification-token"),
                    "authorization": headers.get("authorization"),
                    "content_type": headers.get("content-type"),
                    "webhook_id": headers.get("webhook-id"),
                    "verified": verified,
                    "body": json.loads(body) if body else None,
                    "at": time.time(),
                }
            )
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def d(msg):
    return json_format.MessageToDict(msg)


def failure(e):
    return {"class": type(e).__name__, "message": str(e), "data": getattr(e, "data", None)}


async def expect_error(coro):
    try:
        result = await coro
        return {"class": None, "result": str(result)[:300]}
    except (A2AError, A2AClientError) as e:
        return failure(e)


def http(key):
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)


async def client_for(card, key):
    return ClientFactory(ClientConfig(httpx_client=http(key), streaming=False)).create(card)


def text_message(text, task_id=None):
    return Message(
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        message_id=str(uuid.uuid4()),
        task_id=task_id or "",
    )


def data_message(data, task_id):
    value = json_format.ParseDict(data, struct_pb2.Value())
    return Message(
        role=Role.ROLE_USER, parts=[Part(data=value)], message_id=str(uuid.uuid4()), task_id=task_id
    )


async def send(client, message, push=None):
    config = SendMessageConfiguration()
    if push is not None:
        config.task_push_notification_config.CopyFrom(push)
    events = [e async for e in client.send_message(SendMessageRequest(message=message, configuration=config))]
    assert len(events) == 1, events
    return events[0].task


def deliveries(path):
    with lock:
        return [r for r in received if r["path"] == path]


def states_of(path):
    """The task states the receiver acknowledged at `path`, in the order it got them."""
    return [
        r["body"]["statusUpdate"]["status"]["state"]
        for r in deliveries(path)
        if r["status"] == 200 and r["body"] and "statusUpdate" in r["body"]
    ]


async def until(check, timeout=40):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        await asyncio.sleep(0.2)
    return False


async def main():
    global webhook
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{server.server_address[1]}"

    # The tenant's signing secret, over REST (a tenant admin's).
    async with http(ADMIN_KEY) as admin:
        r = await admin.get(f"{BASE}/api/v1/tenant/webhook-secret")
        out["secret_status"] = r.status_code
        secret = r.json()["secret"]
        out["secret_prefix"] = secret[:6]
        out["secret_again_same"] = (await admin.get(f"{BASE}/api/v1/tenant/webhook-secret")).json()["secret"] == secret
    async with http(KEY) as member:
        out["secret_member_status"] = (await member.get(f"{BASE}/api/v1/tenant/webhook-secret")).status_code
    webhook = Webhook(secret)

    async with httpx.AsyncClient(timeout=30) as anon:
        card = await A2ACardResolver(anon, AGENT).get_agent_card()
    out["capabilities"] = d(card.capabilities)
    plain = await client_for(card, KEY)

    # 1. A task that completes, its config (token and Bearer credentials) given with the message.
    push = TaskPushNotificationConfig(
        url=f"{hook}/plain",
        token="tok-plain",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-plain"),
    )
    done = await send(plain, text_message("hello push"), push=push)
    out["plain_task"] = {"id": done.id, "state": TaskState.Name(done.status.state)}
    await until(lambda: "TASK_STATE_COMPLETED" in states_of("/plain"))
    out["plain_states"] = states_of("/plain")
    out["plain_deliveries"] = deliveries("/plain")

    # 2. A task with an approval: input-required, approved, completed — config with the message.
    push = TaskPushNotificationConfig(id="appr", url=f"{hook}/approval", token="tok-approval")
    asked = await send(
        plain, text_message('/tool write_file {"file_path": "pushed.txt", "content": "x"}'), push=push
    )
    out["asked_state"] = TaskState.Name(asked.status.state)
    await until(lambda: "TASK_STATE_INPUT_REQUIRED" in states_of("/approval"))
    approved = await send(plain, data_message({"type": "approve"}, asked.id))
    out["approved_state"] = TaskState.Name(approved.status.state)
    await until(lambda: "TASK_STATE_COMPLETED" in states_of("/approval"))
    out["approval_task"] = asked.id
    out["approval_states"] = states_of("/approval")
    out["approval_deliveries"] = deliveries("/approval")

    # 3. The config methods: get, list, create on an existing task, delete.
    got = await plain.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
    )
    out["got"] = d(got)
    plain_list = await plain.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=done.id)
    )
    out["plain_list"] = d(plain_list)
    # A receiver that fails twice: the notification (the task's standing) arrives on the third
    # attempt, with the same webhook-id each time.
    created = await plain.create_task_push_notification_config(
        TaskPushNotificationConfig(
            task_id=done.id,
            id="flaky",
            url=f"{hook}/flaky/1",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-flaky"),
        )
    )
    out["created"] = d(created)
    await until(lambda: len([r for r in deliveries("/flaky/1") if r["status"] == 200]) >= 1)
    out["flaky_deliveries"] = deliveries("/flaky/1")
    listed = await plain.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=done.id, page_size=1)
    )
    out["list_page"] = d(listed)

    # 4. Nobody else reaches a config: another member of the tenant, another tenant at its own
    # agent (TaskNotFound), another tenant at this agent (404).
    member2 = await client_for(card, MEMBER2_KEY)
    out["member2_get"] = await expect_error(
        member2.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    out["member2_list"] = await expect_error(
        member2.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=asked.id))
    )
    out["member2_delete"] = await expect_error(
        member2.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    out["member2_create"] = await expect_error(
        member2.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=asked.id, url=f"{hook}/stolen")
        )
    )
    async with httpx.AsyncClient(timeout=30) as anon:
        other_card = await A2ACardResolver(anon, f"{BASE}/a2a/{OTHER_TENANT}/default").get_agent_card()
    other = await client_for(other_card, OTHER_KEY)
    out["other_get"] = await expect_error(
        other.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    out["other_delete"] = await expect_error(
        other.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    other_here = await client_for(card, OTHER_KEY)
    out["other_here_get"] = await expect_error(
        other_here.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    # Still there for its owner.
    out["still_there"] = d(
        await plain.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )

    # 5. Deleted: gone (and deleting again is fine).
    await plain.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
    )
    out["deleted_get"] = await expect_error(
        plain.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    out["deleted_again"] = await expect_error(
        plain.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="appr")
        )
    )
    out["no_such_task"] = await expect_error(
        plain.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=str(uuid.uuid4()), id="appr")
        )
    )
    # A bad config is refused before a task starts.
    out["bad_url"] = await expect_error(
        send(plain, text_message("never run"), push=TaskPushNotificationConfig(url="ftp://127.0.0.1/x"))
    )

    for c in (plain, member2, other, other_here):
        await c.close()
    server.shutdown()
    print(json.dumps(out))


asyncio.run(main())
