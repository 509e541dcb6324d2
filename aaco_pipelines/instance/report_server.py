"""The sessions' report and trace files over HTTP, so an asset page links to them.

`aaco ui` serves AACO_HOME/reports/ beside Dagster: the HTML report opens from its asset page,
and the Perfetto trace opens in ui.perfetto.dev, which may fetch a trace only from
http://127.0.0.1:9001 (its content security policy; Perfetto's own open-trace script serves a
file there the same way), hence the default port. Only a session file directly in the folder
is served, by its name (no directory listing, no path that leaves the folder, no other kind of
file), on loopback unless the user binds elsewhere.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPORTS_URL_ENV = "AACO_REPORTS_URL"  # set for Dagster by `aaco ui`: where the files are served
REPORTS_PORT_ENV = "AACO_REPORTS_PORT"
DEFAULT_PORT = 9001  # the one port ui.perfetto.dev fetches a trace from
PERFETTO_ORIGIN = "https://ui.perfetto.dev"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".perfetto.json": "application/json",
    ".perfetto-trace": "application/octet-stream",
}
PARENT_POLL_S = 1.0


OPEN_IN_PERFETTO = "perfetto/"  # /perfetto/<trace name>: a redirect to ui.perfetto.dev


def perfetto_link(files_url: str, trace_name: str) -> str:
    """ui.perfetto.dev opening a trace the server serves (it fetches it itself)."""
    return f"{PERFETTO_ORIGIN}/#!/?url={files_url}/{urllib.parse.quote(trace_name)}"


def short_perfetto_link(files_url: str, trace_name: str) -> str:
    """The server's own link that redirects to perfetto_link: half as long on a page."""
    return f"{files_url}/{OPEN_IN_PERFETTO}{urllib.parse.quote(trace_name)}"


class ReportsHandler(BaseHTTPRequestHandler):
    """GET or HEAD of one session file by name; 404 for anything else."""

    folder: Path  # set on the subclass serve() makes

    def do_GET(self):  # noqa: N802 - http.server's name
        self._serve(body=True)

    def do_HEAD(self):  # noqa: N802
        self._serve(body=False)

    def do_OPTIONS(self):  # noqa: N802 - ui.perfetto.dev's preflight
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD")
        self.end_headers()

    def _serve(self, body: bool) -> None:
        name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.lstrip("/"))
        if name.startswith(OPEN_IN_PERFETTO):
            self._to_perfetto(name.removeprefix(OPEN_IN_PERFETTO))
            return
        found = served_file(self.folder, name)
        if found is None:
            self.send_error(404, "no such session file")
            return
        path, kind = found
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(size))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self._cors()
            self.end_headers()
            if body:
                shutil.copyfileobj(handle, self.wfile, 1 << 20)

    def _to_perfetto(self, trace_name: str) -> None:
        """A trace the server has, opened in ui.perfetto.dev (which fetches it from here)."""
        if served_file(self.folder, trace_name) is None:
            self.send_error(404, "no such session file")
            return
        host, port = self.server.server_address[:2]
        self.send_response(302)
        self.send_header("Location", perfetto_link(f"http://{host}:{port}", trace_name))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", PERFETTO_ORIGIN)

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        pass  # Dagster's log is the one people read


def served_file(folder: Path, name: str) -> tuple[Path, str] | None:
    """(the file, its content type) for a name the server may serve: one plain name of a
    session file, a regular file inside `folder` (a link out of it is not); else None."""
    kind = next((t for suffix, t in TYPES.items() if name.endswith(suffix)), None)
    if kind is None or not NAME.fullmatch(name):
        return None
    try:
        path = (folder / name).resolve(strict=True)
    except OSError:
        return None
    if path.parent != folder.resolve() or not path.is_file():
        return None
    return path, kind


def server(folder: Path, sock: socket.socket) -> ThreadingHTTPServer:
    """An HTTP server of `folder` on an already listening socket."""
    handler = type("Handler", (ReportsHandler,), {"folder": Path(folder)})
    httpd = ThreadingHTTPServer(sock.getsockname()[:2], handler, bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = sock
    return httpd


def listen(host: str, port: int) -> socket.socket:
    """A listening socket; OSError when the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def spawn(folder: Path, host: str, port: int, env: dict) -> tuple[subprocess.Popen, str]:
    """The server as a child process of the caller (which then execs Dagster): the socket is
    bound here, so a busy port is said before anything starts; the child stops when its
    parent does. Returns it and its URL."""
    sock = listen(host, port)
    url = f"http://{host if ':' not in host else f'[{host}]'}:{sock.getsockname()[1]}"
    command = [sys.executable, "-m", __name__, "--folder", str(folder), "--fd", str(sock.fileno())]
    child = subprocess.Popen(command, env=env, pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL)
    sock.close()
    return child, url


def reports_port() -> int:
    """AACO_REPORTS_PORT, else 9001 (0: any free port)."""
    raw = os.environ.get(REPORTS_PORT_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) < 65536 else DEFAULT_PORT


def serve_until_fetched(trace: Path, timeout_s: float, port: int, host: str = "127.0.0.1") -> bool:
    """Serve one trace on `port` until it was fetched once (ui.perfetto.dev opened it) or
    `timeout_s` passed, as Perfetto's open-trace script does: whether it was fetched. OSError
    when the port is taken."""
    fetched = threading.Event()

    class Once(ReportsHandler):
        folder = trace.parent

        def _serve(self, body: bool) -> None:
            super()._serve(body)
            if body and self.path.lstrip("/").startswith(urllib.parse.quote(trace.name)):
                fetched.set()

    httpd = ThreadingHTTPServer((host, port), Once)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    try:
        return fetched.wait(timeout_s)
    finally:
        httpd.shutdown()
        httpd.server_close()


def _serve_while_parent_lives(httpd: ThreadingHTTPServer, parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(PARENT_POLL_S)
        httpd.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    httpd.serve_forever(poll_interval=0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="serve AACO_HOME/reports for aaco ui")
    parser.add_argument("--folder", required=True)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    args = parser.parse_args(argv)
    # Ctrl-C in the terminal reaches the whole group: Dagster stops, and this with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(fileno=args.fd)
    _serve_while_parent_lives(server(folder, sock), os.getppid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
