"""Drives Agentry's `/v1/chat/completions` and `/v1/models` with the official `openai` package.

Run by tests/api/openai_compat.rs against a real `agentry serve` (the fake model behind it).
It only uses the SDK and reports what it saw as one JSON object on stdout; the Rust test
asserts on every value. Environment: AGENTRY_OPENAI_BASE (`http://127.0.0.1:PORT/v1`),
AGENTRY_KEY (a tenant member's key).
"""

import json
import os
import sys

import openai
from openai_report import failure

BASE = os.environ["AGENTRY_OPENAI_BASE"]
KEY = os.environ["AGENTRY_KEY"]

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
out = {"sdk_version": openai.__version__}


def user(text):
    return [{"role": "user", "content": text}]


def completion(r):
    extra = r.model_extra or {}
    return {
        "id": r.id,
        "object": r.object,
        "model": r.model,
        "content": r.choices[0].message.content,
        "role": r.choices[0].message.role,
        "finish_reason": r.choices[0].finish_reason,
        "usage": r.usage.model_dump() if r.usage else None,
        "session": extra.get("agentry_session_id"),
    }


def stream(messages, **kw):
    deltas, finish, usage, roles, ids = [], None, None, [], set()
    for chunk in client.chat.completions.create(
        model="default", messages=messages, stream=True, **kw
    ):
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "text": "".join(deltas),
        "deltas": len(deltas),
        "finish_reason": finish,
        "usage": usage,
        "roles": roles,
        "ids": sorted(ids),
    }


out["models"] = [m.id for m in client.models.list().data]

# Stateless, non-streaming: the whole conversation arrives in `messages`.
r = client.chat.completions.create(
    model="default",
    messages=[
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]},
    ],
)
out["plain"] = completion(r)

# Continuing that Agentry session, by header and by field.
session = out["plain"]["session"]
r = client.chat.completions.create(
    model="default",
    messages=user("/echo continued by header"),
    extra_headers={"X-Agentry-Session": session},
)
out["by_header"] = completion(r)
r = client.chat.completions.create(
    model="default",
    messages=user("/echo continued by field"),
    extra_body={"agentry_session_id": session},
)
out["by_field"] = completion(r)

# Streaming, with usage at the end.
out["stream"] = stream(
    user("stream this answer please"), stream_options={"include_usage": True}
)

# A tool run (no approval needed): the assistant calls it and answers with its result.
r = client.chat.completions.create(
    model="default", messages=user('/tool list_directory {"path": "."}')
)
out["tool"] = completion(r)
out["tool_stream"] = stream(user('/tool list_directory {"path": "."}'))

# A tool that needs a person's approval: a clear error naming it, not a hang.
needs_approval = user('/tool write_file {"file_path": "blocked.txt", "content": "x"}')
try:
    client.chat.completions.create(model="default", messages=needs_approval)
    out["approval"] = "no error"
except openai.APIError as e:
    out["approval"] = failure(e)
try:
    stream(needs_approval)
    out["approval_stream"] = "no error"
except openai.APIError as e:
    out["approval_stream"] = failure(e)

# A bad key, an unknown model, an empty message.
try:
    openai.OpenAI(base_url=BASE, api_key="agk_nope", max_retries=0).models.list()
    out["bad_key"] = "no error"
except openai.APIError as e:
    out["bad_key"] = failure(e)
try:
    client.chat.completions.create(model="no-such-assistant", messages=user("hi"))
    out["unknown_model"] = "no error"
except openai.APIError as e:
    out["unknown_model"] = failure(e)
try:
    client.chat.completions.create(model="default", messages=user("   "))
    out["empty"] = "no error"
except openai.APIError as e:
    out["empty"] = failure(e)

json.dump(out, sys.stdout)
