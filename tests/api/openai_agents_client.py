"""Drives Agentry's `/v1/responses` with the OpenAI Agents SDK (`openai-agents`).

Run by tests/api/openai_responses.rs (`agents_sdk`) against a real `agentry serve` whose model
is the fake model server (`/tool NAME {json}` in a user message makes it call NAME). An
`Agent` whose model is `OpenAIResponsesModel` on an `AsyncOpenAI` client pointed at Agentry has
one `@function_tool`, which the SDK runs itself: `Runner.run` and `Runner.run_streamed` must end
with the tool's result in the final answer. Tracing is off (nothing leaves loopback). Reports
what it saw as one JSON object on stdout. Environment: AGENTRY_OPENAI_BASE
(`http://127.0.0.1:PORT/v1`), AGENTRY_KEY (a tenant member's key).
"""

import asyncio
import json
import os
import sys

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

import agents

BASE = os.environ["AGENTRY_OPENAI_BASE"]
KEY = os.environ["AGENTRY_KEY"]

set_tracing_disabled(True)

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls.append(city)
    return f"sunny in {city}, 21 C"


questions = []


@function_tool
def ask_user(question: str, question_type: str, options: list[str]) -> str:
    """Ask the user of this app a question of the assistant's (Agentry asks them as ask_user)."""
    questions.append({"question": question, "question_type": question_type, "options": options})
    return "blue"


async def main():
    out = {"agents_version": getattr(agents, "__version__", None)}
    client = AsyncOpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=60)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIResponsesModel(model="default", openai_client=client),
        tools=[get_weather],
    )

    result = await Runner.run(agent, '/tool get_weather {"city": "Paris"}')
    out["run"] = {
        "final_output": result.final_output,
        "calls": list(calls),
        "items": [type(i).__name__ for i in result.new_items],
        "responses": [r.response_id for r in result.raw_responses],
    }

    calls.clear()
    streamed = Runner.run_streamed(agent, '/tool get_weather {"city": "Oslo"}')
    events = []
    async for ev in streamed.stream_events():
        if ev.type == "raw_response_event":
            events.append(f"raw:{ev.data.type}")
        elif ev.type == "run_item_stream_event":
            events.append(f"item:{ev.name}")
        else:
            events.append(ev.type)
    out["streamed"] = {
        "final_output": streamed.final_output,
        "calls": list(calls),
        "events": events,
        "responses": [r.response_id for r in streamed.raw_responses],
    }
    # A question of the assistant's (its ask_question tool) comes as a call of ask_user, a
    # function the SDK runs; the next turn sends the whole conversation again (tool calls
    # included) and goes on in a new conversation holding it.
    asker = Agent(
        name="asker",
        instructions="Ask when in doubt.",
        model=OpenAIResponsesModel(model="default", openai_client=client),
        tools=[ask_user],
    )
    question = {"question": "Which colour?", "question_type": "choice", "options": ["red", "blue"]}
    result = await Runner.run(asker, "/tool ask_question " + json.dumps(question))
    out["question"] = {
        "final_output": result.final_output,
        "questions": list(questions),
        "items": [type(i).__name__ for i in result.new_items],
        "responses": [r.response_id for r in result.raw_responses],
    }
    later = result.to_input_list() + [{"role": "user", "content": "/echo and now?"}]
    out["question_later_input"] = [i.get("type", "message") for i in later]
    result = await Runner.run(asker, later)
    out["question_later"] = {
        "final_output": result.final_output,
        "responses": [r.response_id for r in result.raw_responses],
    }
    await client.close()
    return out


json.dump(asyncio.run(main()), sys.stdout)
