"""Drives Agentry's `/v1/responses` with the official `openai` package.

Run by tests/api/openai_responses.rs against a real `agentry serve` (the scripted model behind
it). It only uses the SDK and reports what it saw as one JSON object on stdout; the Rust test
asserts on every value. Environment: AGENTRY_OPENAI_BASE (`http://127.0.0.1:PORT/v1`),
AGENTRY_KEY (a tenant member's key), AGENTRY_OTHER_KEY (a key of another tenant).
"""

import json
import os
import sys
import time

import openai
from openai_report import failure, response

BASE = os.environ["AGENTRY_OPENAI_BASE"]
KEY = os.environ["AGENTRY_KEY"]
OTHER_KEY = os.environ["AGENTRY_OTHER_KEY"]

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
out = {"sdk_version": openai.__version__}


def stream(**kw):
    """A streamed response: the event types in order, their sequence numbers, the text."""
    types, seqs, deltas, final = [], [], [], None
    with client.responses.create(model="default", stream=True, **kw) as events:
        for ev in events:
            types.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
            if ev.type in ("response.completed", "response.failed"):
                final = response(ev.response)
    return {"types": types, "seqs": seqs, "text": "".join(deltas), "final": final}


# Non-streamed, with instructions and metadata echoed.
r = client.responses.create(
    model="default",
    input="hello there",
    instructions="Answer briefly.",
    metadata={"purpose": "test"},
)
out["plain"] = response(r)

# Multi-turn by previous_response_id: the same conversation.
r2 = client.responses.create(
    model="default", input="/echo second turn", previous_response_id=r.id
)
out["second"] = response(r2)

# Retrieved: the same response, rebuilt from the run's events.
out["retrieved"] = response(client.responses.retrieve(r.id))
out["input_items"] = [i.model_dump() for i in client.responses.input_items.list(r2.id).data]

# Streamed.
out["stream"] = stream(input="stream this answer please")

# A tool run: its mcp_call item, then the answer.
r = client.responses.create(model="default", input='/tool list_directory {"path": "."}')
out["tool"] = response(r)
out["tool_stream"] = stream(input='/tool list_directory {"path": "."}')

# A call that needs a person's approval: the response ends with an mcp_approval_request…
write = '/tool write_file {"file_path": "approved.txt", "content": "yes"}'
asked = client.responses.create(model="default", input=write)
out["asked"] = response(asked)
request = next(i for i in asked.output if i.type == "mcp_approval_request")
# …and the next request approves it: the run goes on in the new response.
approved = client.responses.create(
    model="default",
    previous_response_id=asked.id,
    input=[
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    ],
)
out["approved"] = response(approved)
out["approved_input_items"] = [
    i.model_dump() for i in client.responses.input_items.list(approved.id).data
]
out["approved_retrieved"] = response(client.responses.retrieve(approved.id))
# The same decision again: the approval is over.
try:
    client.responses.create(
        model="default",
        previous_response_id=asked.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
    )
    out["approved_twice"] = "no error"
except openai.APIError as e:
    out["approved_twice"] = failure(e)

# Rejected, streamed: the run ends, nothing is written.
asked = stream(input='/tool write_file {"file_path": "rejected.txt", "content": "no"}')
out["asked_stream"] = asked
request_id = next(
    i["id"] for i in asked["final"]["items"] if i["type"] == "mcp_approval_request"
)
out["rejected"] = response(
    client.responses.create(
        model="default",
        previous_response_id=asked["final"]["id"],
        input=[
            {
                "type": "mcp_approval_response",
                "approval_request_id": request_id,
                "approve": False,
                "reason": "not today",
            }
        ],
    )
)

# Background: answered at once, polled to completion with retrieve.
bg = client.responses.create(
    model="default", input="/sleep 300\nin the background", background=True
)
out["background_created"] = {**response(bg), "background": bg.background}
polled, done = [bg.status], bg
for _ in range(400):
    done = client.responses.retrieve(bg.id)
    polled.append(done.status)
    if done.status not in ("queued", "in_progress"):
        break
    time.sleep(0.02)
out["background_polled"] = polled
out["background_done"] = {**response(done), "background": done.background}
# Its events, resumed after the second one: numbered as its stream would have been.
types, seqs = [], []
for ev in client.responses.retrieve(bg.id, stream=True, starting_after=1):
    types.append(ev.type)
    seqs.append(ev.sequence_number)
out["background_resumed"] = {"types": types, "seqs": seqs}

# Background, cancelled while the model still thinks; cancelling again changes nothing.
slow = client.responses.create(
    model="default", input="/sleep 30000\nnever answered", background=True
)
out["slow_created"] = response(slow)
out["cancelled"] = response(client.responses.cancel(slow.id))
out["cancelled_retrieved"] = response(client.responses.retrieve(slow.id))
out["cancelled_again"] = response(client.responses.cancel(slow.id))
try:
    openai.OpenAI(base_url=BASE, api_key=OTHER_KEY, max_retries=0).responses.cancel(slow.id)
    out["cancel_other_tenant"] = "no error"
except openai.APIError as e:
    out["cancel_other_tenant"] = failure(e)

# A bad key, an unknown model, another tenant's response, an unknown one.
try:
    openai.OpenAI(base_url=BASE, api_key="agk_nope", max_retries=0).responses.create(
        model="default", input="hi"
    )
    out["bad_key"] = "no error"
except openai.APIError as e:
    out["bad_key"] = failure(e)
try:
    client.responses.create(model="no-such-assistant", input="hi")
    out["unknown_model"] = "no error"
except openai.APIError as e:
    out["unknown_model"] = failure(e)
other = openai.OpenAI(base_url=BASE, api_key=OTHER_KEY, max_retries=0)
try:
    other.responses.retrieve(out["plain"]["id"])
    out["other_tenant"] = "no error"
except openai.APIError as e:
    out["other_tenant"] = failure(e)
try:
    other.responses.create(
        model="default", input="/echo hijack", previous_response_id=out["plain"]["id"]
    )
    out["other_tenant_continue"] = "no error"
except openai.APIError as e:
    out["other_tenant_continue"] = failure(e)

# Deleted: the conversation goes, and the response with it.
client.responses.delete(out["tool"]["id"])
try:
    client.responses.retrieve(out["tool"]["id"])
    out["deleted"] = "no error"
except openai.APIError as e:
    out["deleted"] = failure(e)

json.dump(out, sys.stdout)
