# syntax=docker/dockerfile:1
#
# The Agentry image: a Rust build stage and a small Debian runtime that runs `agentry serve` as
# an unprivileged user. docs/deploy.md has the build and run commands:
#
#   docker build -t agentry:dev .                          # the server (the last stage)
#   docker build -t agentry-fake-model:dev --target fake-model .   # the fake model (demos, CI)
#
# The build stage compiles both binaries once; the two runtime stages copy one each.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
# aws-lc-rs (TLS) and mimalloc compile C; cmake, clang and perl are what aws-lc-sys may ask for.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake clang perl make pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the workspace's manifests name (the gateway's manifest declares the end-to-end tests
# under tests/, so they are part of the context); .dockerignore keeps target/ and the rest out.
COPY Cargo.toml Cargo.lock ./
COPY schema schema
COPY services services
COPY actors actors
COPY tests tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin agentry --bin agentry-fake-model \
    && mkdir -p /out \
    && cp target/release/agentry target/release/agentry-fake-model /out/

# What both runtime images share: CA certificates (https model endpoints), curl for the
# HEALTHCHECK, and the unprivileged user.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 agentry \
    && useradd --system --uid 10001 --gid agentry --home-dir /var/lib/agentry --shell /usr/sbin/nologin agentry \
    && mkdir -p /var/lib/agentry \
    && chown agentry:agentry /var/lib/agentry

# The fake model server (`docker compose --profile fake-model`): a real OpenAI/Anthropic-wire
# HTTP server with scripted answers, so a demo needs no provider key. Never for production.
FROM runtime AS fake-model
COPY --from=build /out/agentry-fake-model /usr/local/bin/agentry-fake-model
USER 10001:10001
EXPOSE 9100
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/agentry-fake-model"]
CMD ["--host", "0.0.0.0", "--port", "9100"]

# The server. bubblewrap is the sandbox that tenant processes (shell, stdio MCP servers) run
# in; it needs unprivileged user namespaces, which Docker's default seccomp profile refuses —
# docs/deploy.md says what to set instead.
FROM runtime AS agentry
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/agentry /usr/local/bin/agentry
ENV AGENTRY_SERVER__HOST=0.0.0.0 \
    AGENTRY_SERVER__PORT=8000 \
    AGENTRY_DATA_DIR=/var/lib/agentry \
    AGENTRY_LOG__FORMAT=json
VOLUME ["/var/lib/agentry"]
WORKDIR /var/lib/agentry
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS -o /dev/null http://127.0.0.1:8000/api/v1/health/ready || exit 1
# tini forwards SIGTERM to the server (graceful shutdown) and reaps the sandboxed children.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/agentry"]
CMD ["serve"]
