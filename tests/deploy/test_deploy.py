"""Deployment files, checked offline: the Dockerfile (parsed; no Docker engine here), the
docker-compose.yml (`docker-compose config` and its content) and the Helm chart (rendered and
linted with the Helm v4 Go SDK, every manifest validated against the Kubernetes schemas).

Run by scripts/test.sh from the venv scripts/install-api-test-deps.sh makes:
    AGENTRY_BIN=target/debug/agentry .cache/venv/bin/pytest tests/deploy
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import tomllib

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from conftest import ROOT

CHART = ROOT / "helm" / "agentry"
# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and the newest schemas known.
KUBE_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]
HEALTH = {"/api/v1/health/live", "/api/v1/health/ready"}


# ---------------------------------------------------------------------------------------------
# Dockerfile


def dockerfile_stages() -> list[dict]:
    """The Dockerfile as stages: [{name, base, instructions: [(INSTR, args)]}]."""
    text = (ROOT / "Dockerfile").read_text()
    logical, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        logical.append(buf + line)
        buf = ""
    assert not buf, "the Dockerfile ends inside a continued line"
    stages: list[dict] = []
    for line in logical:
        instr, _, args = line.strip().partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            stages.append({"name": name, "base": words[0], "instructions": []})
        elif instr == "ARG" and not stages:
            continue
        else:
            assert stages, f"{instr} before the first FROM"
            stages[-1]["instructions"].append((instr, args.strip()))
    return stages


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [l.strip().rstrip("/") for l in lines if l.strip() and not l.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(p, pat.lstrip("/")) for pat in patterns for p in prefixes)


def workspace_bins() -> set[str]:
    bins = set()
    for manifest in ROOT.glob("services/*/Cargo.toml"):
        for b in tomllib.loads(manifest.read_text()).get("bin", []):
            bins.add(b["name"])
    return bins


def test_dockerfile_builds_in_one_stage_and_runs_agentry_serve_as_non_root_with_a_healthcheck():
    stages = dockerfile_stages()
    names = [s["name"] for s in stages]
    assert names[0] == "build" and stages[0]["base"].startswith("rust:"), names
    assert names[-1] == "agentry", "the default (last) stage is the server"
    assert "fake-model" in names, "compose's fake-model profile builds this target"
    # The Rust toolchain is at least the workspace's rust-version.
    want = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["rust-version"]
    arg = re.search(r"^ARG RUST_VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert arg, "ARG RUST_VERSION pins the toolchain"
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))
    assert as_tuple(arg.group(1)) >= as_tuple(want), (arg.group(1), want)

    # The build stage builds binaries that exist, with the lock file.
    build = " ".join(a for i, a in stages[0]["instructions"] if i == "RUN")
    built = set(re.findall(r"--bin (\S+)", build))
    assert "--locked" in build and "--release" in build, build
    assert built >= {"agentry", "agentry-fake-model"} and built <= workspace_bins(), built

    # Every workspace member is in the build context the build stage copies.
    copied = {
        w
        for i, a in stages[0]["instructions"]
        if i == "COPY"
        for w in shlex.split(a)[:-1]
        if not w.startswith("--")
    }
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    for member in members:
        assert member.split("/")[0] in copied, f"workspace member {member} is not copied"

    patterns = dockerignore()
    for must in ["target", ".git", ".cache", ".env"]:
        assert must in patterns, f".dockerignore keeps {must} out of the build context"
    seen_stages: list[str] = []
    for stage in stages:
        for instr, args in stage["instructions"]:
            if instr not in ("COPY", "ADD"):
                continue
            words = shlex.split(args)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            sources = paths[:-1]
            assert sources, args
            frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if frm:
                assert frm[0] in seen_stages, f"COPY --from={frm[0]} names an earlier stage"
                continue
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"
                assert not ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
        seen_stages.append(stage["name"])

    # Both runtime images run unprivileged, with tini as PID 1 (signals reach the process).
    for stage in stages[1:]:
        if not any(i == "ENTRYPOINT" for i, _ in stage["instructions"]):
            continue
        users = [a for i, a in stage["instructions"] if i == "USER"]
        assert users, f"stage {stage['name']} sets USER"
        user = users[-1].split(":")[0]
        assert user not in ("root", "0"), f"stage {stage['name']} runs as {user}"
        entry = json.loads(next(a for i, a in stage["instructions"] if i == "ENTRYPOINT"))
        assert entry[0].endswith("tini"), entry

    server = stages[-1]
    instr = dict(server["instructions"])  # the last of each kind
    entry = json.loads(instr["ENTRYPOINT"])
    assert entry[-1] == "/usr/local/bin/agentry", entry
    assert json.loads(instr["CMD"]) == ["serve"]
    health = instr["HEALTHCHECK"]
    assert any(h in health for h in HEALTH), health
    assert "curl" in health and "-f" in health, "a failing status fails the check"
    runs = " ".join(a for i, a in server["instructions"] if i == "RUN")
    assert re.search(r"apt-get install[^&]*\bbubblewrap\b", runs), "bwrap is in the image"
    env = instr["ENV"]
    assert "AGENTRY_SERVER__HOST=0.0.0.0" in env, "reachable from outside the container"
    assert "AGENTRY_DATA_DIR=/var/lib/agentry" in env
    assert instr["VOLUME"] == '["/var/lib/agentry"]'


def test_dockerfile_env_keys_are_real_config_keys(config_keys):
    for stage in dockerfile_stages():
        for instr, args in stage["instructions"]:
            if instr == "ENV":
                for key in re.findall(r"(AGENTRY_\w+)=", args):
                    assert key in config_keys, f"Dockerfile ENV {key} is not a configuration key"


# ---------------------------------------------------------------------------------------------
# docker-compose.yml


def compose(*args: str, env_file: str | None = ".env.example") -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed (scripts/test.sh installs the Debian package)"
    cmd = [exe, "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yml")]
    if env_file:
        cmd += ["--env-file", str(ROOT / env_file)]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd="/")


def test_docker_compose_config_validates_and_needs_the_admin_key():
    ok = compose("config")
    assert ok.returncode == 0, ok.stderr
    rendered = yaml.safe_load(ok.stdout)
    assert set(rendered["services"]) == {
        "agentry", "agentry-2", "postgres", "redis", "jaeger", "fake-model"
    }
    key = rendered["services"]["agentry"]["environment"]["AGENTRY_AUTH__ADMIN_KEY"]
    assert len(key) >= 16, "the example admin key is long enough for the server to accept it"
    # Without an env file that sets the admin key, compose refuses, saying what to do.
    missing = compose("config", env_file="Dockerfile")
    assert missing.returncode != 0
    assert "AGENTRY_AUTH__ADMIN_KEY" in missing.stderr, missing.stderr


def test_every_compose_service_has_a_healthcheck_and_waits_for_healthy_dependencies():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = doc["services"]
    stages = {s["name"] for s in dockerfile_stages()}
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check and check.get("test"), f"service {name} has a healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), check
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on an unknown service {dep}"
            assert cond == {"condition": "service_healthy"}, f"{name} → {dep}: {cond}"
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in doc["volumes"], f"{name}: volume {source} is declared"
        if "build" in svc:
            assert svc["build"]["target"] in stages, f"{name} builds a Dockerfile stage"
    agentry = services["agentry"]
    assert any(p in " ".join(agentry["healthcheck"]["test"]) for p in HEALTH)
    assert agentry["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }
    assert services["fake-model"]["profiles"] == ["fake-model"], "optional, off by default"
    # Traces go to the Jaeger of the file, over OTLP/HTTP, and its UI is published.
    jaeger = services["jaeger"]
    assert "profiles" not in jaeger, "traces are there from the first `up`"
    assert jaeger["image"].startswith("jaegertracing/all-in-one:"), jaeger["image"]
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert any(str(p).endswith(":16686") for p in jaeger["ports"]), jaeger["ports"]
    endpoint = agentry["environment"]["AGENTRY_OTEL__ENDPOINT"]
    assert endpoint == "${AGENTRY_OTEL__ENDPOINT:-http://jaeger:4318}", endpoint
    # A collector that is down must not stop Agentry: it is not a dependency.
    assert "jaeger" not in agentry["depends_on"]
    assert "profiles" not in agentry, "Agentry starts without any provider key"


def test_the_scale_profile_adds_a_second_replica_of_one_cluster():
    """`--profile scale` starts agentry-2: the same image and settings as agentry, in cluster
    mode on the same PostgreSQL and Redis, with its own replica id, data volume and port."""
    ok = compose("config")
    assert ok.returncode == 0, ok.stderr
    services = yaml.safe_load(ok.stdout)["services"]
    one, two = services["agentry"], services["agentry-2"]
    assert two.get("profiles") == ["scale"], "off unless asked for"
    assert "profiles" not in one
    assert one["image"] == two["image"] and one["build"] == two["build"]
    env1, env2 = dict(one["environment"]), dict(two["environment"])
    ids = (env1.pop("AGENTRY_CLUSTER__REPLICA_ID"), env2.pop("AGENTRY_CLUSTER__REPLICA_ID"))
    assert ids[0] != ids[1], ids
    # Each replica is reached by its own name (a /mcp session it holds is proxied there).
    urls = (env1.pop("AGENTRY_CLUSTER__ADVERTISE_URL"), env2.pop("AGENTRY_CLUSTER__ADVERTISE_URL"))
    assert urls == ("http://agentry:8000", "http://agentry-2:8000"), urls
    assert env1 == env2, "both replicas run with the same settings"
    # Cluster mode needs a shared database that is not SQLite and a shared Redis.
    assert env1["AGENTRY_DATABASE__URL"].startswith("postgres://")
    assert env1["AGENTRY_REDIS__URL"].startswith("redis://redis:")
    for svc in (one, two):
        assert svc["depends_on"]["redis"] == {"condition": "service_healthy"}
        assert svc["healthcheck"] == one["healthcheck"]
    hosts = env1["AGENTRY_MCP__SERVER_ALLOWED_HOSTS"].split(",")
    assert {"agentry", "agentry-2"} <= set(hosts), "each replica answers /mcp by its name"
    vol = lambda svc: [v["source"] if isinstance(v, dict) else v.split(":")[0] for v in svc["volumes"]]
    assert set(vol(one)).isdisjoint(vol(two)), "each replica has its own data volume"
    port = lambda svc: {p["published"] if isinstance(p, dict) else p.split(":")[0] for p in svc["ports"]}
    assert port(one).isdisjoint(port(two)), (port(one), port(two))


def test_compose_and_env_example_set_only_real_config_keys(config_keys):
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("agentry", "agentry-2"):
        env = doc["services"][name]["environment"]
        unknown = sorted(k for k in env if k not in config_keys)
        assert not unknown, f"{name}: not configuration keys (agentry config --keys): {unknown}"
    example = (ROOT / ".env.example").read_text()
    for key in re.findall(r"^#?(AGENTRY_\w+)=", example, re.M):
        assert key in config_keys, f".env.example: {key} is not a configuration key"
    # Every variable the compose file reads is documented in .env.example.
    used = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    documented = set(re.findall(r"^#?(\w+)=", example, re.M))
    assert used <= documented, f"not in .env.example: {sorted(used - documented)}"


# ---------------------------------------------------------------------------------------------
# Helm chart


def manifests(rendered: dict[str, str]) -> list[dict]:
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc["__path"] = path
                docs.append(doc)
    return docs


def render(values: dict | None = None) -> dict[str, str]:
    return helm.Chart.load(str(CHART)).render(
        values, name="agentry", namespace="agents", is_install=True
    )


def production_values() -> dict:
    return yaml.safe_load((ROOT / "tests" / "deploy" / "values-production.yaml").read_text())


def validate_all(docs: list[dict]) -> None:
    for doc in docs:
        body = {k: v for k, v in doc.items() if k != "__path"}
        if body["apiVersion"].startswith("monitoring.coreos.com/"):
            # A CRD: no schema ships with kubernetes-validate; check its shape here.
            assert body["kind"] == "ServiceMonitor"
            endpoint = body["spec"]["endpoints"][0]
            assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
            if "authorization" in endpoint:
                assert endpoint["authorization"]["type"] == "Bearer"
                assert set(endpoint["authorization"]["credentials"]) == {"name", "key"}
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(body, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{doc['__path']} ({body['kind']}) on Kubernetes {version}: {e}")


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {[d['__path'] for d in found]}"
    return found[0]


def check_pod(deploy: dict, config_keys: set[str]) -> dict:
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["args"] == ["--config", "/etc/agentry/agentry.toml", "serve"]
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"]:
        assert container[probe]["httpGet"]["path"] in HEALTH, probe
        assert container[probe]["httpGet"]["port"] == "http"
    assert container["readinessProbe"]["httpGet"]["path"] == "/api/v1/health/ready"
    assert container["resources"]["requests"]["memory"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert not mounts["/var/lib/agentry"].get("readOnly"), "the data dir is writable"
    assert "/tmp" in mounts, "a writable /tmp under a read-only root"
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names)) or "AGENTRY_LOG__LEVEL" in names
    # POD_IP comes from the downward API, only to build AGENTRY_CLUSTER__ADVERTISE_URL.
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["AGENTRY_CLUSTER__ADVERTISE_URL"]["value"] == "http://$(POD_IP):8000"
    unknown = sorted(set(n for n in names if n not in config_keys and n != "POD_IP"))
    assert not unknown, f"not configuration keys (agentry config --keys): {unknown}"
    assert env["AGENTRY_DATA_DIR"]["value"] == "/var/lib/agentry"
    assert env["AGENTRY_SERVER__HOST"]["value"] == "0.0.0.0"
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > int(env["AGENTRY_SERVER__SHUTDOWN_TIMEOUT_SECS"]["value"])
    return env


def test_chart_lints_clean_in_strict_mode():
    for values in [None, production_values()]:
        report = helm.lint(str(CHART), values, strict=True)
        assert not report["errors"], report
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not problems, problems


def test_chart_with_default_values_renders_valid_manifests(config_keys):
    rendered = render()
    docs = manifests(rendered)
    validate_all(docs)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "Pod", "Service", "ServiceAccount"], kinds
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"]["type"] == "Recreate", "one replica per database"
    env = check_pod(deploy, config_keys)
    assert "AGENTRY_AUTH__ADMIN_KEY" not in env and "AGENTRY_REDIS__URL" not in env
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]
    toml = one(docs, "ConfigMap")["data"]["agentry.toml"]
    assert tomllib.loads(toml)["hitl"]["timeout_secs"] == 300
    test_pod = one(docs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    command = " ".join(test_pod["spec"]["containers"][0]["command"])
    assert "http://agentry:8000/api/v1/health/ready" in command, command
    notes = rendered["agentry/templates/NOTES.txt"]
    # No admin key in the values: the first replica generates one (stored hashed) and logs it once.
    assert "generated" in notes and "reset-admin-key" in notes and "auth.adminKey" in notes, notes
    assert "api-keys" in notes and "agentry chat" in notes, "how to get the first key"


def test_chart_with_three_replicas_ingress_hpa_and_existing_secrets(config_keys):
    rendered = render(production_values())
    docs = manifests(rendered)
    validate_all(docs)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Ingress", "Ingress",
         "PersistentVolumeClaim", "Pod", "PodDisruptionBudget", "Service", "ServiceAccount",
         "ServiceMonitor"]
    ), kinds
    deploy = one(docs, "Deployment")
    assert "replicas" not in deploy["spec"], "the autoscaler owns the replica count"
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    env = check_pod(deploy, config_keys)
    refs = {k: v["valueFrom"]["secretKeyRef"] for k, v in env.items() if "secretKeyRef" in v.get("valueFrom", {})}
    assert refs["AGENTRY_AUTH__ADMIN_KEY"] == {"name": "agentry-admin", "key": "admin-key"}
    assert refs["AGENTRY_DATABASE__URL"] == {"name": "agentry-db", "key": "url"}
    assert refs["AGENTRY_REDIS__URL"] == {"name": "agentry-redis", "key": "redis-url"}
    assert refs["AGENTRY_LLM__API_KEY"]["name"] == "agentry-llm"
    assert refs["AGENTRY_METRICS__TOKEN"] == {"name": "agentry-metrics", "key": "metrics-token"}
    # Traces to Langfuse: the endpoint in plain text, its auth header from the Secret.
    assert env["AGENTRY_OTEL__ENDPOINT"]["value"] == "https://cloud.langfuse.com/api/public/otel"
    assert refs["AGENTRY_OTEL__HEADERS"] == {"name": "agentry-langfuse", "key": "otlp-headers"}
    monitor = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor["authorization"]["credentials"] == refs["AGENTRY_METRICS__TOKEN"]
    assert env["AGENTRY_METRICS__TENANT_LABELS"]["value"] == "true"
    assert not [d for d in docs if d["kind"] == "Secret"], "nothing in plain text: no chart Secret"
    hosts = env["AGENTRY_MCP__SERVER_ALLOWED_HOSTS"]["value"].split(",")
    assert {"agentry.example.com", "mcp.example.com", "agentry.agents.svc"} <= set(hosts)
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    ingresses = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Ingress"}
    main, mcp = ingresses["agentry"], ingresses["agentry-mcp"]
    for ing in (main, mcp):
        notes = ing["metadata"]["annotations"]
        assert notes["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
        assert ing["spec"]["tls"][0]["secretName"] == "agentry-tls"
    assert mcp["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/mcp"
    assert "upstream-hash-by" in " ".join(mcp["metadata"]["annotations"])
    notes = rendered["agentry/templates/NOTES.txt"]
    assert "secret agentry-admin" in notes and "admin-key" in notes, notes


def test_chart_creates_its_secret_from_plain_values_only_for_what_was_given():
    docs = manifests(render({"auth": {"adminKey": "a-long-enough-admin-key"}}))
    validate_all(docs)
    secret = one(docs, "Secret")
    assert list(secret["data"]) == ["admin-key"]
    import base64

    assert base64.b64decode(secret["data"]["admin-key"]) == b"a-long-enough-admin-key"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"replicaCount": 3}, "more than one replica requires Redis"),
        (
            {"autoscaling": {"enabled": True, "maxReplicas": 4}, "externalRedis": {"url": "redis://r"}},
            "more than one replica requires a shared database",
        ),
        ({"replicaCount": 0}, "minimum"),
        ({"auth": {"adminKey": "short"}}, "/auth/adminKey"),
        ({"replicaCont": 2}, "replicaCont"),
        ({"extraEnv": [{"name": "PATH", "value": "/x"}]}, "/extraEnv/0/name"),
    ],
)
def test_chart_refuses_values_that_cannot_work_with_a_clear_message(values, message):
    with pytest.raises(helm.HelmError) as err:
        render(values)
    assert message in str(err.value), str(err.value)
