"""Serving the app: a threaded WSGI server that can run in the foreground or in a thread.

The command (``tracekit dashboard``), the browser tests and the benchmark all start the server
through ``Server`` so they run the same code. It binds ``127.0.0.1`` unless told otherwise.
"""

from __future__ import annotations

import logging
import threading

from werkzeug.serving import make_server

from tracekit.errors import InputError


def answer_not_found(app) -> None:
    """A request for a file the app does not serve (``/_dash-component-suites/../../etc/passwd``,
    an unknown asset) is a plain 404, not a 500 with a traceback in the log: Dash raises its
    ``DependencyException`` for those; a malformed callback request is a plain 400."""
    from dash.exceptions import DependencyException

    app.server.register_error_handler(DependencyException, lambda exc: ("Not found", 404, {"Content-Type": "text/plain"}))
    app.server.before_request(lambda: _refuse_malformed_update(app))


_BAD_REQUEST = ("Bad request", 400, {"Content-Type": "text/plain"})


def _is_prop(x) -> bool:
    """One input or state of a callback request: ``{"id": ..., "property": ...}`` (a pattern-matching
    one is a list of those)."""
    if isinstance(x, list):
        return all(_is_prop(y) for y in x)
    return isinstance(x, dict) and "id" in x and isinstance(x.get("property"), str)


def _refuse_malformed_update(app):
    """A callback request the page never sends (not a JSON object, no known output, inputs that are
    not ``{"id", "property"}`` pairs, or not as many as the callback takes) is a plain 400, not a 500 with a traceback in the log: Dash's
    dispatch assumes the shape its own front end writes. A well-formed request goes on to Dash."""
    from flask import request

    if request.method != "POST" or not request.path.endswith("/_dash-update-component"):
        return None
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        return _BAD_REQUEST
    output = body.get("output")
    if not isinstance(output, str) or output not in app.callback_map:
        return _BAD_REQUEST
    callback = app.callback_map[output]
    for key in ("inputs", "state"):
        given = body.get(key, [])
        if not isinstance(given, list) or not all(_is_prop(x) for x in given):
            return _BAD_REQUEST
        if len(given) != len(callback.get(key, [])):  # one per input (state) of that callback
            return _BAD_REQUEST
    outputs = body.get("outputs")
    if not (isinstance(outputs, dict) or (isinstance(outputs, list) and all(isinstance(o, (dict, list)) for o in outputs))):
        return _BAD_REQUEST
    return None


def gated(gate, wsgi):
    """``wsgi`` with every request of the app's own (``/_dash-layout``, ``/_dash-dependencies``,
    ``/_dash-update-component``: what Dash answers in JSON, with plotly's encoder) run through
    ``gate`` (``dashboards.imports.ImportGate``): never while numpy and pandas are being imported.
    The page and its scripts are served at once."""

    def app(environ, start_response):
        if "/_dash-" not in environ.get("PATH_INFO", ""):
            return wsgi(environ, start_response)
        with gate.request():
            return wsgi(environ, start_response)

    return app


class Server:
    """A running (or ready to run) HTTP server for one Dash app."""

    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 8050, gate=None) -> None:
        """``gate``: the ``dashboards.imports.ImportGate`` the app's own requests go through (None:
        the process's, ``dashboards.imports.GATE``)."""
        from dashboards import imports

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        wsgi = gated(imports.GATE if gate is None else gate, app.server)
        try:
            self._server = make_server(host, port, wsgi, threaded=True)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = self._server.server_port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted or ``shutdown``."""
        self._server.serve_forever()

    def start(self) -> "Server":
        """Serve in a daemon thread and return at once."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="tracekit-dashboard", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
