"""The session files `aaco ui` serves: each report and trace by its name, with the header
ui.perfetto.dev needs; nothing else in or out of the folder; and the server stops with its
parent (a real child process, killed)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import psutil
import pytest

from aaco_pipelines.instance.report_server import (
    PERFETTO_ORIGIN,
    listen,
    perfetto_link,
    server,
    short_perfetto_link,
)


@pytest.fixture
def served(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "s1.html").write_text("<html>report of s1</html>")
    (folder / "s1.perfetto.json").write_text('{"traceEvents": []}')
    (folder / "notes.txt").write_text("not a session file")
    (tmp_path / "secret.html").write_text("outside the folder")
    (folder / "link.html").symlink_to(tmp_path / "secret.html")
    (folder / "sub").mkdir()
    (folder / "sub" / "s2.html").write_text("in a subfolder")
    httpd = server(folder, listen("127.0.0.1", 0))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _get(url: str, method: str = "GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, b""


def test_a_report_and_a_trace_are_served_by_name_with_perfettos_header(served):
    status, headers, body = _get(f"{served}/s1.html")
    assert (status, body) == (200, b"<html>report of s1</html>")
    assert headers["Content-Type"].startswith("text/html")
    status, headers, body = _get(f"{served}/s1.perfetto.json")
    assert (status, body) == (200, b'{"traceEvents": []}')
    assert headers["Access-Control-Allow-Origin"] == PERFETTO_ORIGIN
    status, headers, body = _get(f"{served}/s1.html", "HEAD")
    assert (status, headers["Content-Length"], body) == (200, "25", b"")
    link = perfetto_link(served, "s1.perfetto.json")
    assert link == f"https://ui.perfetto.dev/#!/?url={served}/s1.perfetto.json"
    # the page's shorter link redirects there; only for a trace it has
    assert _redirect(short_perfetto_link(served, "s1.perfetto.json")) == (302, link)
    assert _redirect(f"{served}/perfetto/missing.perfetto.json")[0] == 404
    assert _redirect(f"{served}/perfetto/..%2Fsecret.html")[0] == 404


def _redirect(url: str) -> tuple[int, str | None]:
    """The status and Location of one GET, the redirect not followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", parts.path)
    response = connection.getresponse()
    connection.close()
    return response.status, response.getheader("Location")


@pytest.mark.parametrize(
    "path",
    [
        "/",  # no listing
        "/sub/",
        "/sub/s2.html",  # only the folder itself
        "/notes.txt",  # only session files
        "/link.html",  # a link out of the folder
        "/../secret.html",
        "/%2e%2e%2fsecret.html",
        "/..%2Fsecret.html",
        "/missing.html",
        "/.hidden.html",
    ],
)
def test_nothing_but_a_session_file_in_the_folder_is_served(served, path):
    status, _, body = _get(served + path)
    assert status == 404 and b"outside" not in body


def test_the_server_stops_with_the_process_that_started_it(tmp_path):
    """`aaco ui` starts it and execs Dagster: when that process dies (kill -9), the server
    goes too, and its port is free again."""
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from aaco_pipelines.instance.report_server import spawn\n"
        f"child, url = spawn(Path({str(tmp_path)!r}), '127.0.0.1', 0, dict(os.environ))\n"
        "print(child.pid, url, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid, url = parent.stdout.readline().split()
        (tmp_path / "s.html").write_text("ok")
        deadline = time.monotonic() + 20
        while _get(f"{url}/s.html")[0] != 200:  # the child has started serving
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        parent.kill()
        parent.wait()
    child = psutil.Process(int(pid))
    child.wait(timeout=15)  # raises when it outlives its parent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/s.html", timeout=5)
    assert not psutil.pid_exists(int(pid)) or child.status() == psutil.STATUS_ZOMBIE
