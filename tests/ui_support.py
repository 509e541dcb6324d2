"""Support for the UI end-to-end test: the real `aaco ui` process tree, its GraphQL API, headless
Chromium, and process-tree bookkeeping through /proc (no extra dependencies)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

# Debian's chromium, started the way this closed network needs: no sandbox (root in a container),
# no GPU, and none of the background connections that would be refused here.
MODEL_ASSET_KEYS = [  # what the measure_model job materializes per partition
    "onnx_graph",
    "benchmark_run",
    "collected_traces",
    "tracelake_session",
    "kernel_attribution",
    "critical_path",
    "bottleneck_report",
    "performance_drift",
]
PER_SESSION_KEYS = MODEL_ASSET_KEYS[1:]  # onnx_graph is the model version's, not a session's
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# Started through this trampoline so that SIGINT/SIGTERM reach `dagster dev` as KeyboardInterrupt
# even when the test runner inherited them ignored (a shell's background job ignores SIGINT, and
# Dagster maps SIGTERM onto whatever SIGINT does).
_DEFAULT_SIGNALS = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.signal(signal.SIGTERM, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 60) -> str:
    if not path.exists():
        return f"({path} does not exist)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


# --- /proc bookkeeping -----------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a live process, from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[2])


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group."""
    members = []
    for pid in _pids():
        stat = _stat(pid)
        if stat and stat[1] == pgid and stat[0] != "Z":
            members.append(pid)
    return members


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment has name=value: finds descendants that left the group
    (the measuring process runs in its own session so that it can be killed as a whole)."""
    needle = f"{name}={value}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        stat = _stat(pid)
        if needle in environ.split(b"\0") and stat and stat[0] != "Z":
            found.append(pid)
    return found


def describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        lines.append(f"  {pid}: {cmd[:160]}")
    return "\n".join(lines)


def wait_until_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.2)
    return not group_members(pgid)


def stop_group(process: subprocess.Popen, term_timeout: float = 30.0, kill_timeout: float = 10.0):
    """SIGTERM the process group, SIGKILL whatever is left after term_timeout. Returns the
    signals that had to be sent (["SIGTERM"] when the group shut down cleanly)."""
    pgid = process.pid  # start_new_session=True: the leader's pid is the group's id
    sent = []
    for sig, timeout in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, kill_timeout)):
        if not group_members(pgid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        sent.append(sig.name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process.poll()  # the leader is our child: reap it
            if not group_members(pgid):
                break
            time.sleep(0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    return sent


# --- the Dagster UI --------------------------------------------------------------------------


class GraphQLError(AssertionError):
    pass


class DagsterUI:
    """`aaco ui` (dagster dev: webserver, daemon, code server) in its own process group."""

    def __init__(
        self,
        repo: Path,
        env: dict[str, str],
        log: Path,
        port: int | None = None,
        dagster_log: Path | None = None,
    ):
        """`log`: what `aaco ui` prints; `dagster_log`: where it appends Dagster's own stream
        (`aaco ui --log`; None: into `log` as well)."""
        self.repo = repo
        self.env = env
        self.log = log
        self.dagster_log = dagster_log
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.signals_needed: list[str] = []

    def start(self) -> DagsterUI:
        aaco = str(Path(sys.executable).with_name("aaco"))
        command = [
            sys.executable, "-c", _DEFAULT_SIGNALS, aaco, "ui",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--workspace", str(self.repo / "workspace.yaml"),
        ]  # fmt: skip
        if self.dagster_log is not None:
            command += ["--log", str(self.dagster_log)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.repo,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def stop(self) -> list[str]:
        if self.process is not None:
            self.signals_needed = stop_group(self.process, term_timeout=45)
        return self.signals_needed

    def logs(self) -> list[Path]:
        return [p for p in (self.log, self.dagster_log) if p is not None and p.exists()]

    def log_tail(self, lines: int = 60) -> str:
        parts = []
        for log in self.logs():
            text = log.read_text(errors="replace")
            errors = [line for line in text.splitlines() if "ERROR" in line or "Errno" in line]
            summary = "\n".join(errors[:10])
            parts.append(
                f"--- first ERROR lines of {log} ---\n{summary}\n"
                f"--- last lines of {log} ---\n{tail(log, lines)}"
            )
        return "\n".join(parts)

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"aaco ui exited with code {self.process.returncode}\n{self.log_tail()}"
            )
        if any(b"address already in use" in log.read_bytes() for log in self.logs()):
            raise AssertionError(f"port {self.port} was taken\n{self.log_tail()}")

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 30.0) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.load(response)
        if payload.get("errors"):
            raise GraphQLError(f"GraphQL errors: {json.dumps(payload['errors'], indent=1)}")
        return payload["data"]

    def wait_for(self, what: str, probe, timeout: float, interval: float = 0.5):
        """Call probe() until it returns something truthy; connection errors count as not yet."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                result = probe()
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                result, last = None, exc
            if result:
                return result
            time.sleep(interval)
        raise AssertionError(
            f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})\n"
            f"{self.log_tail()}"
        )


# --- headless Chromium -----------------------------------------------------------------------


def run_chromium(
    chromium: str, url: str, args: list[str], profile_root: Path, timeout: float = 90.0
) -> bytes:
    """One headless Chromium invocation with a fresh profile, in its own process group that is
    killed if it outlives the call. Returns stdout."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=profile_root))
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(process, term_timeout=5)
        raise AssertionError(f"chromium did not finish within {timeout:.0f} s: {command}") from None
    # The browser's helpers (zygote, renderer, GPU/network services) exit with it.
    if not wait_until_gone(process.pid, timeout=10):
        leftover = describe(group_members(process.pid))
        stop_group(process, term_timeout=5)
        raise AssertionError(f"chromium left processes behind:\n{leftover}")
    if process.returncode != 0:
        raise AssertionError(
            f"chromium exited with {process.returncode}: {command}\n{err.decode(errors='replace')[-3000:]}"
        )
    return out


class _SvgText(HTMLParser):
    """Text inside the graph's <foreignObject> nodes (the asset graph draws each node as HTML
    inside SVG), so names in the sidebar or a table do not count."""

    VOID = frozenset("area base br col embed hr img input link meta source wbr".split())

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if (tag == "foreignobject" or self.depth) and tag not in self.VOID:
            self.depth += 1

    def handle_startendtag(self, tag, attrs):
        pass  # <x/>: opens nothing

    def handle_endtag(self, tag):
        if self.depth and tag not in self.VOID:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and data.strip():
            self.texts.append(data.strip())


def graph_node_texts(html: str) -> set[str]:
    parser = _SvgText()
    parser.feed(html)
    return set(parser.texts)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])
