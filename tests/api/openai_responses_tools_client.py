"""Drives Agentry's `/v1/responses` client function tools with the official `openai` package.

Run by tests/api/openai_responses.rs (`client_function_tools`) against a real `agentry serve`
whose model is the fake model server (`/tool NAME {json}` in a user message makes it call
NAME). The script runs the client's function itself, as a client does, and reports what it
saw as one JSON object on stdout; the Rust test asserts on every value. Environment:
AGENTRY_OPENAI_BASE (`http://127.0.0.1:PORT/v1`), AGENTRY_KEY (a tenant member's key),
AGENTRY_OTHER_KEY (a key of another tenant).
"""

import json
import os
import sys
import uuid

import openai
from openai_report import failure, response

BASE = os.environ["AGENTRY_OPENAI_BASE"]
KEY = os.environ["AGENTRY_KEY"]
OTHER_KEY = os.environ["AGENTRY_OTHER_KEY"]

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
out = {"sdk_version": openai.__version__}

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
ASK = '/tool get_weather {"city": "Paris"}'


def get_weather(city):
    """The client's function: it runs here, never on the server."""
    return f"sunny in {city}, 21 C"


def run_calls(r):
    """What a client does with a response: run each function call, return the outputs."""
    outputs = []
    for item in r.output:
        if item.type == "function_call":
            args = json.loads(item.arguments)
            outputs.append(
                {"type": "function_call_output", "call_id": item.call_id, "output": get_weather(**args)}
            )
    return outputs


def attempt(name, **kw):
    try:
        r = client.responses.create(model="default", **kw)
        out[name] = {"no error": response(r)}
    except openai.APIError as e:
        out[name] = failure(e)


def stream(**kw):
    """A streamed response: event types, numbers, the function call's argument events."""
    types, seqs, args, final = [], [], {"delta": "", "done": None, "done_name": None}, None
    with client.responses.create(model="default", stream=True, **kw) as events:
        for ev in events:
            types.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.function_call_arguments.delta":
                args["delta"] += ev.delta
            if ev.type == "response.function_call_arguments.done":
                args["done"] = ev.arguments
                args["done_name"] = getattr(ev, "name", None)
            if ev.type == "response.output_item.added" and ev.item.type == "function_call":
                args["added_status"] = ev.item.status
            if ev.type in ("response.completed", "response.failed"):
                final = ev.response
    return {"types": types, "seqs": seqs, "args": args, "final": response(final)}, final


# Non-streamed: the call ends the response; its output, by previous_response_id, continues the
# same run to the answer.
called = client.responses.create(model="default", input=ASK, tools=[WEATHER])
out["called"] = response(called)
answered = client.responses.create(
    model="default", previous_response_id=called.id, input=run_calls(called), tools=[WEATHER]
)
out["answered"] = response(answered)
out["called_retrieved"] = response(client.responses.retrieve(called.id))
out["answered_retrieved"] = response(client.responses.retrieve(answered.id))
out["answered_input_items"] = [
    i.model_dump() for i in client.responses.input_items.list(answered.id).data
]
# The same output again: the call is answered already.
attempt("answered_twice", previous_response_id=called.id, input=run_calls(called), tools=[WEATHER])

# Streamed, both ways.
s, final = stream(input='/tool get_weather {"city": "Oslo"}', tools=[WEATHER])
out["stream_called"] = s
s, _ = stream(previous_response_id=final.id, input=run_calls(final), tools=[WEATHER])
out["stream_answered"] = s

# Stateless, as the Agents SDK sends it: the whole conversation again, no previous_response_id.
first_input = [{"role": "user", "content": '/tool get_weather {"city": "Lima"}'}]
called = client.responses.create(model="default", input=first_input, tools=[WEATHER])
out["stateless_called"] = response(called)
conversation = first_input + [i.model_dump(exclude_none=True) for i in called.output]
conversation += run_calls(called)
out["stateless_input"] = conversation
answered = client.responses.create(model="default", input=conversation, tools=[WEATHER])
out["stateless_answered"] = response(answered)

# A later turn, stateless: the whole conversation (the earlier call and its output included)
# and a new user message make a new conversation holding that call and its output.
later = conversation + [i.model_dump(exclude_none=True) for i in answered.output]
later.append({"role": "user", "content": "/echo and tomorrow?"})
out["stateless_later"] = response(client.responses.create(model="default", input=later))

# A question of the assistant's (its ask_question tool): the response ends with a function_call
# named ask_user whose arguments are the question; the client's answer, a
# function_call_output, goes to the question and the same run goes on.
QUESTION = {"question": "Which colour?", "question_type": "choice", "options": ["red", "blue"]}
asked = client.responses.create(model="default", input="/tool ask_question " + json.dumps(QUESTION))
out["question_asked"] = response(asked)
call = next(i for i in asked.output if i.type == "function_call")
answer = [{"type": "function_call_output", "call_id": call.call_id, "output": "blue"}]
replied = client.responses.create(model="default", previous_response_id=asked.id, input=answer)
out["question_answered"] = response(replied)
out["question_answered_retrieved"] = response(client.responses.retrieve(replied.id))
out["question_input_items"] = [
    i.model_dump() for i in client.responses.input_items.list(replied.id).data
]
# Streamed: the question's function_call arrives as a client function's does.
s, final = stream(input="/tool ask_question " + json.dumps({"question": "Tea or coffee?"}))
out["question_stream"] = s
call = next(i for i in final.output if i.type == "function_call")
replied = client.responses.create(
    model="default",
    previous_response_id=final.id,
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "tea"}],
)
out["question_stream_answered"] = response(replied)

# Refusals: a name of one of the assistant's tools, a schema that is not one, an unknown call.
attempt(
    "colliding_name",
    input="hi",
    tools=[{**WEATHER, "name": "read_file"}],
)
attempt(
    "bad_schema",
    input="hi",
    tools=[{**WEATHER, "parameters": {"type": "object", "properties": {"city": {"type": 12}}}}],
)
attempt(
    "not_an_object_schema",
    input="hi",
    tools=[{**WEATHER, "parameters": ["city"]}],
)
attempt(
    "unknown_call_id",
    previous_response_id=out["called"]["id"],
    input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
)
attempt(
    "unknown_call_id_stateless",
    input=first_input
    + [{"type": "function_call_output", "call_id": f"call_{uuid.uuid4()}", "output": "x"}],
)
# Another tenant cannot answer this user's call.
pending = client.responses.create(model="default", input=ASK, tools=[WEATHER])
out["pending"] = response(pending)
other = openai.OpenAI(base_url=BASE, api_key=OTHER_KEY, max_retries=0)
try:
    other.responses.create(model="default", input=run_calls(pending))
    out["other_tenant"] = "no error"
except openai.APIError as e:
    out["other_tenant"] = failure(e)

json.dump(out, sys.stdout)
