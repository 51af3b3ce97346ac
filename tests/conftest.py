"""What the Python tests share: `medusa serve` on the default model, on a free port, with a fresh
history."""

import os
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEDUSA = ROOT / "target" / "release" / "medusa"


@contextmanager
def running_server(api_key=None):
    """Yields the server's base URL and the lines it printed between `listening on` and `ready`
    (the web UI's link, with a key)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env.pop("MEDUSA_HEADS", None)
        env.pop("MEDUSA_API_KEY", None)
        if api_key:
            env["MEDUSA_API_KEY"] = api_key
        server = subprocess.Popen(
            [str(MEDUSA), "serve", "--port", "0", "--ctx-size", "1024",
             "--db", str(Path(tmp) / "history.sqlite")],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        try:
            line = server.stdout.readline().strip()
            assert line.startswith("listening on "), line
            # It listens while the model loads; the tests start once it serves (the web UI's
            # link comes between with a key).
            printed = []
            ready = server.stdout.readline()
            while ready and not ready.startswith("ready: "):
                printed.append(ready.strip())
                ready = server.stdout.readline()
            assert ready.startswith("ready: "), "the server ended before its model loaded"
            yield line.removeprefix("listening on "), printed
        finally:
            server.terminate()
            server.wait(timeout=60)


@pytest.fixture(scope="module")
def serve():
    """`running_server` for module-scoped fixtures."""
    return running_server
