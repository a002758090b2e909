"""Shared fixtures: the repository root, the real configuration keys from the binary."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def config_keys() -> set[str]:
    """Every configuration key as an environment variable, as the real binary lists them."""
    binary = os.environ.get("AGENTRY_BIN", str(ROOT / "target" / "debug" / "agentry"))
    assert os.access(binary, os.X_OK), (
        f"{binary} is not an executable: build it (cargo build --bin agentry) or set AGENTRY_BIN"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRY_")}
    out = subprocess.run(
        [binary, "config", "--keys"], env=env, capture_output=True, text=True, check=True
    )
    keys = set(out.stdout.split())
    assert "AGENTRY_SERVER__PORT" in keys and len(keys) > 30, out.stdout
    return keys
