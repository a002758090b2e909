#!/usr/bin/env python3
"""A real OAuth 2.1 authorization server (and optionally an OAuth-protected MCP server) for tests.

Built on the official Python MCP SDK (`mcp`, in the tests' one venv `.cache/venv`,
installed by scripts/install-api-test-deps.sh) with starlette/uvicorn, PyJWT and cryptography as the SDK
itself uses them. Run it with that venv's python:

    .cache/venv/bin/python tests/support/oauth_fixture.py [options]

It binds 127.0.0.1 on free ports and prints ONE JSON line on stdout once it answers:

    {"issuer": "http://127.0.0.1:PORT", "metadata_url": ".../.well-known/oauth-authorization-server",
     "authorization_endpoint", "token_endpoint", "registration_endpoint", "jwks_uri",
     "introspection_endpoint", "revocation_endpoint", "test_url": ".../test",
     "clients": {"<id>": "<secret>", ...},
     and with --protected-mcp: "mcp_url", "resource_metadata_url"}

Then it serves until killed (SIGTERM/SIGKILL) or, with --exit-on-eof, until its stdin closes.

The authorization server (issuer http://127.0.0.1:PORT, no path):
- RFC 8414 metadata at /.well-known/oauth-authorization-server (the same document at
  /.well-known/openid-configuration);
- RFC 7591 dynamic client registration at /register (public clients with
  token_endpoint_auth_method "none", confidential ones get a secret; a client may register for
  client_credentials only); `--client ID:SECRET` pre-registers a confidential client allowed
  authorization_code, refresh_token and client_credentials (secret by Basic or in the form);
- /authorize (the SDK's handler: registered redirect_uri, PKCE S256 required, scope within the
  client's) approves at once, as the test user: the `user` query parameter, else the current
  default (`--user`, or POST /test/defaults). Test-only query parameters: `user`, `claims` (a JSON
  object merged into the token's claims), `deny` (an OAuth error code: redirect with that error
  instead of a code). It redirects with `code`, `state` and `iss` (RFC 9207);
- /token: authorization_code (PKCE verified, redirect_uri must match, codes single use,
  5 minutes), refresh_token (rotated: the old one stops working), client_credentials (a
  confidential client; `sub` = the client id). Access tokens are RS256 JWTs (`typ` at+jwt, RFC
  9068) with iss, sub, aud (the RFC 8707 `resource` asked for, else --audience, else none),
  scope, client_id, iat, nbf, exp (--token-ttl seconds), jti, plus `--claim` and per-request
  claims; `expires_in` is returned, so a client knows when to refresh;
- /jwks: the public keys (RS256, with `kid`);
- /introspect (RFC 7662; the caller authenticates as any confidential client) and /revoke
  (RFC 7009; revokes an access token by its jti, or a refresh token).

Test-only routes (under /test; never in a real authorization server):
- POST /test/mint {claims...,"ttl": s, "key": "current"|"unknown"|"forged"|"opaque"}: a token signed by
  the server's key ("unknown": by a key it never published, with a kid of its own; "forged": by
  such a key but under the server's current kid; "opaque": a random string whose claims only
  /introspect tells) with the usual claims, overridden by the body's (a claim set to null is
  removed; "ttl" may be negative for an already expired token);
- POST /test/rotate {"keep_old": bool}: a new signing key with a new kid (the JWKS lists it; the
  old key stays listed only with keep_old);
- POST /test/defaults {"user": ..., "claims": {...}}: the user and claims of later /authorize
  requests that name none;
- GET /test/requests: what the token endpoint and the protected MCP server saw, oldest first:
  [{"endpoint": "token", "grant_type", "client_id", "ok"}, {"endpoint": "mcp", "sub", ...},
  {"endpoint": "introspect", "client_id", "active"}].

With --protected-mcp it also serves, on a second port, an MCP server (the SDK's MCPServer,
Streamable HTTP at /mcp) that accepts only this issuer's tokens whose `aud` is its own URL
(--mcp-required-scope adds scope checks): a 401 carries `WWW-Authenticate: Bearer
resource_metadata=...`, and RFC 9728 metadata is at /.well-known/oauth-protected-resource/mcp
naming this issuer. Its tools: `whoami` (the token's sub, client_id, scopes and claims as JSON) and
`echo` (`<sub>: <message>`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextvars
import hashlib
import hmac
import json
import secrets
import socket
import sys
import time
import uuid
from typing import Any
from urllib.parse import unquote

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from pydantic import AnyHttpUrl, ValidationError
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata

CODE_TTL = 300

# The test-only parameters of the /authorize request being handled (the SDK's handler calls the
# provider without the request).
_authorize_extras: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("authorize_extras", default={})


class Code(AuthorizationCode):
    claims: dict[str, Any] = {}


class Refresh(RefreshToken):
    claims: dict[str, Any] = {}


class SigningKey:
    def __init__(self) -> None:
        self.kid = secrets.token_hex(8)
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self) -> dict[str, Any]:
        jwk = RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        jwk.update({"kid": self.kid, "alg": "RS256", "use": "sig"})
        return jwk


class AuthServer:
    """The authorization server's state: clients, codes, refresh tokens, keys, what it saw."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.issuer = ""  # set once the port is known
        self.ttl = args.token_ttl
        self.refresh_ttl = args.refresh_ttl
        self.audience = args.audience
        self.scopes: list[str] = args.scopes.split() if args.scopes else []
        self.default_user = args.user
        self.default_claims: dict[str, Any] = dict(parse_claim(c) for c in args.claim)
        # Claims POST /test/defaults set for later /authorize requests.
        self.authorize_claims: dict[str, Any] = {}
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, Code] = {}
        self.refresh: dict[str, Refresh] = {}
        self.revoked_jti: set[str] = set()
        # Opaque access tokens (POST /test/mint {"key": "opaque"}) and their claims: only
        # introspection can tell what they are.
        self.opaque: dict[str, dict[str, Any]] = {}
        self.keys = [SigningKey()]
        self.seen: list[dict[str, Any]] = []
        for spec in args.client:
            client_id, _, secret = spec.partition(":")
            if not client_id or not secret:
                raise SystemExit(f"--client wants ID:SECRET, got {spec!r}")
            self.clients[client_id] = OAuthClientInformationFull(
                client_id=client_id,
                client_secret=secret,
                client_secret_expires_at=0,
                redirect_uris=None,
                token_endpoint_auth_method="client_secret_basic",
                grant_types=["authorization_code", "refresh_token", "client_credentials"],
                scope=" ".join(self.scopes) or None,
            )

    # --- tokens -------------------------------------------------------------------------------

    def sign(self, claims: dict[str, Any], key: SigningKey | None = None) -> str:
        key = key or self.keys[-1]
        return jwt.encode(claims, key.private, algorithm="RS256", headers={"kid": key.kid, "typ": "at+jwt"})

    def claims_for(
        self, sub: str, client_id: str, scopes: list[str], resource: str | None, extra: dict[str, Any], ttl: int
    ) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": sub,
            "client_id": client_id,
            "scope": " ".join(scopes),
            "iat": now,
            "nbf": now,
            "exp": now + ttl,
            "jti": uuid.uuid4().hex,
        }
        aud = resource or self.audience
        if aud:
            claims["aud"] = aud
        claims.update(self.default_claims)
        claims.update(extra)
        return {k: v for k, v in claims.items() if v is not None}

    def issue(
        self,
        sub: str,
        client_id: str,
        scopes: list[str],
        resource: str | None,
        extra: dict[str, Any],
        with_refresh: bool,
    ) -> dict[str, Any]:
        token = self.sign(self.claims_for(sub, client_id, scopes, resource, extra, self.ttl))
        out: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": self.ttl}
        if scopes:
            out["scope"] = " ".join(scopes)
        if with_refresh:
            rt = secrets.token_urlsafe(32)
            self.refresh[rt] = Refresh(
                token=rt,
                client_id=client_id,
                scopes=scopes,
                expires_at=int(time.time()) + self.refresh_ttl,
                resource=resource,
                subject=sub,
                claims=extra,
            )
            out["refresh_token"] = rt
        return out

    def verify(self, token: str, audience: str | None) -> dict[str, Any] | None:
        """The claims of a token this server issued and did not revoke, else None."""
        if token in self.opaque:
            claims = self.opaque[token]
            if claims.get("exp", 0) < time.time() or claims.get("jti") in self.revoked_jti:
                return None
            if audience is not None and claims.get("aud") != audience:
                return None
            return claims
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            return None
        key = next((k for k in self.keys if k.kid == kid), None)
        if key is None:
            return None
        try:
            claims = jwt.decode(
                token,
                key.private.public_key(),
                algorithms=["RS256"],
                issuer=self.issuer,
                audience=audience,
                options={"verify_aud": audience is not None, "require": ["exp", "iss", "sub"]},
            )
        except jwt.PyJWTError:
            return None
        if claims.get("jti") in self.revoked_jti:
            return None
        return claims

    # --- the SDK's provider protocol (what /authorize needs) ----------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        extras = _authorize_extras.get()
        if extras.get("deny"):
            raise AuthorizeError(error=extras["deny"], error_description="denied by the test")
        code = secrets.token_urlsafe(32)
        self.codes[code] = Code(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + CODE_TTL,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=extras.get("user") or self.default_user,
            claims={**self.authorize_claims, **extras.get("claims", {})},
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=self.issuer)


def parse_claim(spec: str) -> tuple[str, Any]:
    name, sep, raw = spec.partition("=")
    if not sep or not name:
        raise SystemExit(f"--claim wants NAME=VALUE, got {spec!r}")
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


def oauth_error(error: str, description: str, status: int = 400) -> JSONResponse:
    return JSONResponse(
        {"error": error, "error_description": description},
        status_code=status,
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )


def client_credentials_of(request: Request, form: Any) -> tuple[str | None, str | None]:
    """The client id and secret a request presents: HTTP Basic (RFC 6749 §2.3.1) or the form."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(header[6:]).decode()
            cid, _, secret = decoded.partition(":")
            return unquote(cid), unquote(secret)
        except (ValueError, UnicodeDecodeError):
            return None, None
    cid = form.get("client_id")
    secret = form.get("client_secret")
    return (str(cid) if cid else None), (str(secret) if secret else None)


def build_app(srv: AuthServer) -> Starlette:
    authorize_handler = AuthorizationHandler(srv)  # type: ignore[arg-type]

    def metadata() -> dict[str, Any]:
        base = srv.issuer
        doc = OAuthMetadata(
            issuer=AnyHttpUrl(base),
            authorization_endpoint=AnyHttpUrl(base + "/authorize"),
            token_endpoint=AnyHttpUrl(base + "/token"),
            registration_endpoint=AnyHttpUrl(base + "/register"),
            scopes_supported=srv.scopes or None,
            response_types_supported=["code"],
            grant_types_supported=["authorization_code", "refresh_token", "client_credentials"],
            token_endpoint_auth_methods_supported=["client_secret_basic", "client_secret_post", "none"],
            code_challenge_methods_supported=["S256"],
            introspection_endpoint=AnyHttpUrl(base + "/introspect"),
            revocation_endpoint=AnyHttpUrl(base + "/revoke"),
        ).model_dump(mode="json", exclude_none=True)
        doc["jwks_uri"] = base + "/jwks"
        doc["issuer"] = base  # exactly, without a trailing slash (RFC 8414 §3.3 compares strings)
        doc["authorization_response_iss_parameter_supported"] = True
        doc["subject_types_supported"] = ["public"]
        doc["id_token_signing_alg_values_supported"] = ["RS256"]
        return doc

    async def well_known(_: Request) -> Response:
        return JSONResponse(metadata())

    async def jwks(_: Request) -> Response:
        return JSONResponse({"keys": [k.jwk() for k in srv.keys]})

    async def authorize(request: Request) -> Response:
        params = request.query_params if request.method == "GET" else await request.form()
        extras: dict[str, Any] = {}
        if params.get("user"):
            extras["user"] = str(params["user"])
        if params.get("claims"):
            try:
                claims = json.loads(str(params["claims"]))
            except json.JSONDecodeError:
                claims = None
            if not isinstance(claims, dict):
                return oauth_error("invalid_request", "the test parameter `claims` must be a JSON object")
            extras["claims"] = claims
        if params.get("deny"):
            extras["deny"] = str(params["deny"])
        token = _authorize_extras.set(extras)
        try:
            return await authorize_handler.handle(request)
        finally:
            _authorize_extras.reset(token)

    async def register(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return oauth_error("invalid_client_metadata", "the body is not JSON")
        if not isinstance(body, dict):
            return oauth_error("invalid_client_metadata", "the body is not a JSON object")
        grants = body.get("grant_types") or ["authorization_code", "refresh_token"]
        method = body.get("token_endpoint_auth_method") or "client_secret_basic"
        if method not in ("none", "client_secret_basic", "client_secret_post"):
            return oauth_error("invalid_client_metadata", f"token_endpoint_auth_method {method!r} is not supported")
        unknown = set(grants) - {"authorization_code", "refresh_token", "client_credentials"}
        if unknown:
            return oauth_error("invalid_client_metadata", f"unsupported grant_types: {sorted(unknown)}")
        if "authorization_code" in grants and not body.get("redirect_uris"):
            return oauth_error("invalid_redirect_uri", "authorization_code needs redirect_uris")
        if "client_credentials" in grants and method == "none":
            return oauth_error("invalid_client_metadata", "client_credentials needs a confidential client")
        scope = body.get("scope")
        if scope is None:
            scope = " ".join(srv.scopes) or None
        elif srv.scopes and not set(str(scope).split()) <= set(srv.scopes):
            return oauth_error("invalid_client_metadata", f"scope must be within {srv.scopes}")
        client_id = uuid.uuid4().hex
        now = int(time.time())
        record = {
            **body,
            "client_id": client_id,
            "client_id_issued_at": now,
            "grant_types": grants,
            "token_endpoint_auth_method": method,
            "scope": scope,
        }
        if method != "none":
            record["client_secret"] = secrets.token_hex(32)
            record["client_secret_expires_at"] = 0
        try:
            client = OAuthClientInformationFull.model_validate(record)
        except ValidationError as e:
            return oauth_error("invalid_client_metadata", str(e))
        srv.clients[client_id] = client
        return JSONResponse(client.model_dump(mode="json", exclude_none=True), status_code=201)

    def authenticate(request: Request, form: Any) -> OAuthClientInformationFull | str:
        """The client the request authenticates as, or why not."""
        cid, secret = client_credentials_of(request, form)
        if not cid:
            return "no client_id"
        client = srv.clients.get(cid)
        if client is None:
            return "unknown client"
        if client.client_secret:
            if not secret or not hmac.compare_digest(secret, client.client_secret):
                return "wrong or missing client secret"
        elif client.token_endpoint_auth_method != "none":
            return "the client has no secret"
        return client

    async def token(request: Request) -> Response:
        form = await request.form()
        grant = str(form.get("grant_type") or "")
        client = authenticate(request, form)
        entry: dict[str, Any] = {"endpoint": "token", "grant_type": grant, "ok": False}
        srv.seen.append(entry)
        if isinstance(client, str):
            return oauth_error("invalid_client", client, 401)
        entry["client_id"] = client.client_id
        if grant not in client.grant_types:
            return oauth_error("unauthorized_client", f"the client may not use {grant!r}")
        if grant == "authorization_code":
            code = srv.codes.pop(str(form.get("code") or ""), None)
            if code is None or code.client_id != client.client_id:
                return oauth_error("invalid_grant", "unknown or already used authorization code")
            if code.expires_at < time.time():
                return oauth_error("invalid_grant", "the authorization code expired")
            if code.redirect_uri_provided_explicitly and str(form.get("redirect_uri")) != str(code.redirect_uri):
                return oauth_error("invalid_grant", "redirect_uri differs from the authorization request's")
            verifier = str(form.get("code_verifier") or "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if not verifier or not hmac.compare_digest(digest, code.code_challenge):
                return oauth_error("invalid_grant", "PKCE: code_verifier does not match code_challenge")
            resource = str(form.get("resource") or "") or code.resource
            out = srv.issue(
                code.subject or srv.default_user,
                client.client_id,
                code.scopes,
                resource,
                code.claims,
                "refresh_token" in client.grant_types,
            )
        elif grant == "refresh_token":
            rt = srv.refresh.get(str(form.get("refresh_token") or ""))
            if rt is None or rt.client_id != client.client_id:
                return oauth_error("invalid_grant", "unknown or already used refresh token")
            if rt.expires_at and rt.expires_at < time.time():
                return oauth_error("invalid_grant", "the refresh token expired")
            scopes = str(form["scope"]).split() if form.get("scope") else rt.scopes
            if not set(scopes) <= set(rt.scopes):
                return oauth_error("invalid_scope", "a refresh cannot widen the scope")
            del srv.refresh[rt.token]  # rotation: a refresh token works once
            resource = str(form.get("resource") or "") or rt.resource
            out = srv.issue(rt.subject or srv.default_user, client.client_id, scopes, resource, rt.claims, True)
        elif grant == "client_credentials":
            if not client.client_secret:
                return oauth_error("unauthorized_client", "client_credentials needs a confidential client")
            allowed = (client.scope or "").split()
            scopes = str(form["scope"]).split() if form.get("scope") else allowed
            if not set(scopes) <= set(allowed):
                return oauth_error("invalid_scope", f"the client was registered for {allowed}")
            resource = str(form.get("resource") or "") or None
            out = srv.issue(client.client_id, client.client_id, scopes, resource, {}, False)
        else:
            return oauth_error("unsupported_grant_type", f"grant_type {grant!r} is not supported")
        entry["ok"] = True
        return JSONResponse(out, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    async def introspect(request: Request) -> Response:
        form = await request.form()
        client = authenticate(request, form)
        if isinstance(client, str) or not client.client_secret:
            return oauth_error("invalid_client", "introspection needs a confidential client", 401)
        claims = srv.verify(str(form.get("token") or ""), None)
        srv.seen.append({"endpoint": "introspect", "client_id": client.client_id, "active": claims is not None})
        if claims is None:
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "token_type": "Bearer", **claims})

    async def revoke(request: Request) -> Response:
        form = await request.form()
        client = authenticate(request, form)
        if isinstance(client, str):
            return oauth_error("invalid_client", client, 401)
        value = str(form.get("token") or "")
        rt = srv.refresh.get(value)
        if rt is not None and rt.client_id == client.client_id:
            del srv.refresh[value]
        claims = srv.verify(value, None)
        if claims is not None and claims.get("client_id") == client.client_id:
            srv.revoked_jti.add(claims["jti"])
        return Response(status_code=200)

    async def test_mint(request: Request) -> Response:
        body = await json_body(request)
        ttl = int(body.pop("ttl", srv.ttl))
        key_choice = body.pop("key", "current")
        claims = srv.claims_for(
            str(body.pop("sub", srv.default_user)),
            str(body.pop("client_id", "minted")),
            str(body.pop("scope", " ".join(srv.scopes))).split(),
            None,
            {},
            ttl,
        )
        claims.update(body)
        claims = {k: v for k, v in claims.items() if v is not None}
        if key_choice == "opaque":
            token = secrets.token_urlsafe(32)
            srv.opaque[token] = claims
            return JSONResponse({"access_token": token, "claims": claims})
        key = None
        if key_choice in ("unknown", "forged"):
            key = SigningKey()
            if key_choice == "forged":
                key.kid = srv.keys[-1].kid  # the server's kid, another key: a forged signature
        return JSONResponse({"access_token": srv.sign(claims, key), "claims": claims})

    async def test_rotate(request: Request) -> Response:
        body = await json_body(request)
        new = SigningKey()
        srv.keys = ([*srv.keys] if body.get("keep_old") else []) + [new]
        return JSONResponse({"kid": new.kid})

    async def test_defaults(request: Request) -> Response:
        body = await json_body(request)
        if "user" in body:
            srv.default_user = str(body["user"])
        if "claims" in body:
            srv.authorize_claims = dict(body["claims"] or {})
        return JSONResponse({"user": srv.default_user, "claims": srv.authorize_claims})

    async def test_requests(_: Request) -> Response:
        return JSONResponse(srv.seen)

    def cors(handler: Any, methods: list[str]) -> Any:
        # Browser clients (MCP Inspector) call these from another origin.
        return CORSMiddleware(
            app=_endpoint(handler),
            allow_origins=["*"],
            allow_methods=methods,
            allow_headers=["*"],
            expose_headers=["*"],
        )

    routes = [
        Route("/.well-known/oauth-authorization-server", cors(well_known, ["GET", "OPTIONS"])),
        Route("/.well-known/openid-configuration", cors(well_known, ["GET", "OPTIONS"])),
        Route("/jwks", cors(jwks, ["GET", "OPTIONS"])),
        Route("/authorize", authorize, methods=["GET", "POST"]),
        Route("/register", cors(register, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/token", cors(token, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/introspect", cors(introspect, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/revoke", cors(revoke, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/test/mint", test_mint, methods=["POST"]),
        Route("/test/rotate", test_rotate, methods=["POST"]),
        Route("/test/defaults", test_defaults, methods=["POST"]),
        Route("/test/requests", test_requests, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _endpoint(handler: Any) -> Any:
    from starlette.routing import request_response

    return request_response(handler)


async def json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("a JSON object is expected")
    return body


class FixtureTokenVerifier:
    """The protected MCP server's check: this issuer's signature, not expired, `aud` = its URL."""

    def __init__(self, srv: AuthServer, resource: str) -> None:
        self.srv = srv
        self.resource = resource

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = self.srv.verify(token, self.resource)
        self.srv.seen.append(
            {"endpoint": "mcp", "ok": claims is not None, "sub": (claims or {}).get("sub")}
        )
        if claims is None:
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=self.resource,
            subject=str(claims["sub"]),
            claims=claims,
        )


def build_protected_mcp(srv: AuthServer, mcp_url: str, required_scopes: list[str]) -> Starlette:
    verifier = FixtureTokenVerifier(srv, mcp_url)
    server = MCPServer(
        "oauth-fixture-mcp",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=srv.issuer,  # a str: AnyHttpUrl() would add a trailing slash
            resource_server_url=mcp_url,
            required_scopes=required_scopes or None,
            validate_token_resource=False,  # the verifier checks `aud` itself
        ),
    )

    def caller() -> dict[str, Any]:
        from mcp.server.auth.middleware.auth_context import get_access_token

        at = get_access_token()
        if at is None:
            raise RuntimeError("no access token in the request context")
        return {"sub": at.subject, "client_id": at.client_id, "scopes": at.scopes, "claims": at.claims}

    @server.tool(description="Who the bearer token says the caller is: sub, client_id, scopes, claims.")
    def whoami() -> str:
        return json.dumps(caller())

    @server.tool(description="Echo a message, prefixed with the token's subject.")
    def echo(message: str) -> str:
        return f"{caller()['sub']}: {message}"

    return server.streamable_http_app(streamable_http_path="/mcp")


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--user", default="alice", help="the default test user (token `sub`)")
    p.add_argument("--claim", action="append", default=[], help="NAME=VALUE added to every token (JSON value or string)")
    p.add_argument("--token-ttl", type=int, default=3600, help="access token lifetime, seconds")
    p.add_argument("--refresh-ttl", type=int, default=86400, help="refresh token lifetime, seconds")
    p.add_argument("--audience", default=None, help="`aud` when the client names no resource")
    p.add_argument("--scopes", default="", help="space-separated scopes the server supports")
    p.add_argument("--client", action="append", default=[], help="pre-register a confidential client ID:SECRET")
    p.add_argument("--protected-mcp", action="store_true", help="also serve an OAuth-protected MCP server")
    p.add_argument("--mcp-required-scope", action="append", default=[], help="a scope the MCP server requires")
    p.add_argument("--exit-on-eof", action="store_true", help="exit when stdin closes")
    args = p.parse_args()

    srv = AuthServer(args)
    as_sock = bound_socket()
    srv.issuer = f"http://127.0.0.1:{as_sock.getsockname()[1]}"
    info: dict[str, Any] = {
        "issuer": srv.issuer,
        "metadata_url": srv.issuer + "/.well-known/oauth-authorization-server",
        "authorization_endpoint": srv.issuer + "/authorize",
        "token_endpoint": srv.issuer + "/token",
        "registration_endpoint": srv.issuer + "/register",
        "jwks_uri": srv.issuer + "/jwks",
        "introspection_endpoint": srv.issuer + "/introspect",
        "revocation_endpoint": srv.issuer + "/revoke",
        "test_url": srv.issuer + "/test",
        "clients": {c.client_id: c.client_secret for c in srv.clients.values()},
    }
    servers = [(uvicorn.Server(uvicorn.Config(build_app(srv), log_level="warning", lifespan="off")), as_sock)]
    if args.protected_mcp:
        mcp_sock = bound_socket()
        base = f"http://127.0.0.1:{mcp_sock.getsockname()[1]}"
        info["mcp_url"] = base + "/mcp"
        info["resource_metadata_url"] = base + "/.well-known/oauth-protected-resource/mcp"
        app = build_protected_mcp(srv, info["mcp_url"], args.mcp_required_scope)
        servers.append((uvicorn.Server(uvicorn.Config(app, log_level="warning")), mcp_sock))

    tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in servers]
    while not all(s.started for s, _ in servers):
        if any(t.done() for t in tasks):
            for t in tasks:
                if t.done() and t.exception():
                    raise t.exception()  # type: ignore[misc]
            raise SystemExit("the fixture's server stopped while starting")
        await asyncio.sleep(0.02)
    print(json.dumps(info), flush=True)

    if args.exit_on_eof:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
        for s, _ in servers:
            s.should_exit = True
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
