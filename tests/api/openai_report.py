"""What the `openai` client scripts report of the package's objects.

Shared by tests/api/openai_client.py, openai_responses_client.py and
openai_responses_tools_client.py (run from this folder, so `import openai_report` finds it): an
SDK exception, a response's output items and a Response, each as plain JSON for the Rust tests
to assert on.
"""


def failure(e):
    """What an SDK exception carries."""
    return {
        "class": type(e).__name__,
        "status": getattr(e, "status_code", None),
        "code": getattr(e, "code", None),
        "type": getattr(e, "type", None),
        "param": getattr(e, "param", None),
        "message": getattr(e, "message", str(e)),
        "body": getattr(e, "body", None),
    }


def items(r):
    """The output items, as the SDK parsed them."""
    seen = []
    for item in r.output:
        d = {"type": item.type, "id": item.id}
        for field in ("call_id", "server_label", "name", "arguments", "output", "status", "role"):
            if hasattr(item, field):
                d[field] = getattr(item, field)
        if getattr(item, "error", None) is not None:
            d["error"] = item.error.model_dump() if hasattr(item.error, "model_dump") else item.error
        seen.append(d)
    return seen


def response(r):
    """A Response object: what the tests compare, and the Agentry session and run it names."""
    extra = r.model_extra or {}
    return {
        "id": r.id,
        "object": r.object,
        "status": r.status,
        "model": r.model,
        "text": r.output_text,
        "items": items(r),
        "tools": [t.model_dump() for t in (r.tools or [])],
        "usage": r.usage.model_dump() if r.usage else None,
        "error": r.error.model_dump() if r.error else None,
        "metadata": r.metadata,
        "previous_response_id": r.previous_response_id,
        "session": extra.get("agentry_session_id"),
        "run": extra.get("agentry_run_id"),
    }
