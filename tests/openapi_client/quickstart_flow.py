"""The quickstart flow through a client generated from the server's own /openapi.json by
openapi-python-client: as the platform admin a tenant, a user and a key; as that user /me, a
session, a chat over REST and the session's messages; and the refusals a hostile or careless
caller gets, each parsed as the document says it is.

Run by tests/api/first_run.rs: `python quickstart_flow.py BASE_URL` with the generated package
`agentry_client` on PYTHONPATH and the platform admin key in AGENTRY_ADMIN_KEY. Every response
is parsed strictly: a status the document does not list raises (raise_on_unexpected_status).
"""

import os
import sys
import uuid

from agentry_client import AuthenticatedClient, Client
from agentry_client.api.admin import create_key, create_tenant, create_user, list_tenants
from agentry_client.api.auth import who_am_i
from agentry_client.api.chat import chat
from agentry_client.api.sessions import create_session, get_session, list_messages
from agentry_client.models import (
    ChatRequest,
    ChatResponse,
    CreateApiKeyRequest,
    CreatedApiKey,
    CreateSessionRequest,
    CreateTenantRequest,
    CreateUserRequest,
    ErrorResponse,
    PageMessageInfo,
    PageTenantInfo,
    SessionInfo,
    TenantInfo,
    UserInfo,
    UserRole,
    WhoAmI,
)

checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def parsed(response, status, kind):
    check(
        response.status_code == status,
        f"expected {status}, got {response.status_code}: {response.content[:300]!r}",
    )
    check(
        isinstance(response.parsed, kind),
        f"expected a {kind.__name__}, got {type(response.parsed).__name__}: {response.content[:300]!r}",
    )
    return response.parsed


def main():
    base = sys.argv[1]
    admin = AuthenticatedClient(
        base_url=base, token=os.environ["AGENTRY_ADMIN_KEY"], raise_on_unexpected_status=True
    )
    name = f"acme-{uuid.uuid4().hex[:8]}"

    # As the platform admin: a tenant, a user who is its admin, a key for them.
    tenant = parsed(
        create_tenant.sync_detailed(
            client=admin, body=CreateTenantRequest(name=name, max_users=5)
        ),
        201,
        TenantInfo,
    )
    check(tenant.name == name and tenant.max_users == 5, f"tenant {tenant}")
    page = parsed(list_tenants.sync_detailed(client=admin, limit=1000), 200, PageTenantInfo)
    check(any(t.id == tenant.id for t in page.items), "the new tenant is listed")
    user = parsed(
        create_user.sync_detailed(
            tenant.id, client=admin, body=CreateUserRequest(name="alice", role=UserRole.ADMIN)
        ),
        201,
        UserInfo,
    )
    check(user.role == UserRole.ADMIN and user.tenant_id == tenant.id, f"user {user}")
    created = parsed(
        create_key.sync_detailed(
            tenant.id, client=admin, body=CreateApiKeyRequest(user_id=user.id, name="laptop")
        ),
        201,
        CreatedApiKey,
    )
    check(created.key.startswith(created.prefix), "the key starts with its prefix")

    # As the user: who am I, a session, a chat over REST, its messages.
    me = AuthenticatedClient(base_url=base, token=created.key, raise_on_unexpected_status=True)
    who = parsed(who_am_i.sync_detailed(client=me), 200, WhoAmI)
    check(who.tenant_name == name and who.user_id == user.id, f"/me {who}")
    session = parsed(
        create_session.sync_detailed(client=me, body=CreateSessionRequest()), 201, SessionInfo
    )
    answer = parsed(
        chat.sync_detailed(
            client=me, body=ChatRequest(message="hello", session_id=session.session_id)
        ),
        200,
        ChatResponse,
    )
    kinds = [e["event_type"] for e in (e.to_dict() for e in answer.events)]
    check(kinds and kinds[-1] == "done", f"the run ends with done: {kinds}")
    check("text" in kinds, f"the model answered: {kinds}")
    done = answer.events[-1].to_dict()
    check(done["data"]["status"] == "completed", f"done: {done}")
    again = parsed(get_session.sync_detailed(session.session_id, client=me), 200, SessionInfo)
    check(again.session_id == session.session_id, "the session reads back")
    messages = parsed(
        list_messages.sync_detailed(session.session_id, client=me), 200, PageMessageInfo
    )
    roles = [m.role for m in messages.items]
    check(roles[:1] == ["user"] and "assistant" in roles, f"messages: {roles}")

    # Refusals, parsed as the document's ErrorResponse.
    refused = parsed(
        create_tenant.sync_detailed(client=me, body=CreateTenantRequest(name="mine")),
        403,
        ErrorResponse,
    )
    check(refused.error_code.value == "forbidden", f"a tenant key creating tenants: {refused}")
    nobody = Client(base_url=base, raise_on_unexpected_status=True)
    refused = parsed(who_am_i.sync_detailed(client=nobody), 401, ErrorResponse)
    check(refused.error_code.value == "unauthorized", f"no key: {refused}")
    refused = parsed(
        chat.sync_detailed(
            client=me, body=ChatRequest(message="hi", session_id=str(uuid.uuid4()))
        ),
        404,
        ErrorResponse,
    )
    check(refused.error_code.value == "not_found", f"someone else's session: {refused}")
    refused = parsed(
        create_user.sync_detailed(tenant.id, client=admin, body=CreateUserRequest(name="alice")),
        409,
        ErrorResponse,
    )
    check(refused.error_code.value == "conflict", f"a second alice: {refused}")

    print(f"{checks} passed, 0 failed")


if __name__ == "__main__":
    main()
