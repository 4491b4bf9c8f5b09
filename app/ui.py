"""``railab ui``: the live lab console in the browser, and the trainer's class board (docs/ui.md).

A Starlette app served by uvicorn; plain Jinja templates and JavaScript (no build step); live
state reaches the pages as server-sent events (``text/event-stream``) from ONE observation per
lab and interval shared by every open page (:mod:`railab.uilive`).

Roles and tokens (:class:`Principal`):

* **trainer**: everything (every lab, faults, checks, the class board, exercise records). Holds
  ``--token``; with no ``--token`` on a loopback bind, every local request is the trainer.
* **trainee**: one lab only, with a token the trainer minted (``--trainee LAB`` at start, or the
  class board): its page (symptom, hints, answer, repair check, the diagram and live state),
  ``check`` unless the exercise switched it off, inject/heal only when the trainer allowed it for
  that token and never while an exercise runs; no other lab, no exercise record (seed, faults),
  no fault list while an exercise runs.

A token is sent as ``Authorization: Bearer T``, or once as ``?token=T`` (the console then sets an
HttpOnly ``SameSite=Strict`` cookie and drops it from the address). Without a valid token a
console with ``--token`` answers 401 (none given) or 403 (a wrong one). State-changing requests
are POSTs carrying ``X-CSRF-Token`` (an HMAC of the caller's token under a per-process key, put
in each page) and, when the browser sends one, an ``Origin`` naming this console; on a loopback
bind the ``Host`` header must name the loopback (no DNS rebinding). Lab, node, port, link, fault
and check names are checked against ``state.json`` / ``lab.json`` and the registries before
anything runs (400 otherwise); every action is a Python call (railab.testbed.faults,
railab.checks.runner, railab.checks.exercise), nothing reaches a shell.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import hmac
import io
import ipaddress
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from railab.errors import RailabError, UsageError
from railab.testbed import state as st
from railab.testbed.labref import resolve
from railab.topologies.naming import is_lab_name
from railab.uilive import Hub, LabWatch, exercise_public, exercise_running, live_state_hidden

#: what a trainee token may be allowed (the trainer's choice per token); ``check`` by default
TRAINEE_ACTIONS = ("check", "fault", "traffic", "drill")
DEFAULT_TRAINEE_ALLOW = ("check",)
COOKIE = "railab_token"
_PORT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


class HTTPError(Exception):
    """A request refused: ``status`` (400, 401, 403, 404, 409) and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Principal:
    """Who a request is: ``role`` ``trainer`` or ``trainee``; a trainee's ``lab`` and the
    actions the trainer allowed (``allow``); ``key``: what the CSRF token is bound to."""

    role: str
    key: str
    lab: str | None = None
    allow: frozenset[str] = frozenset()

    @property
    def trainer(self) -> bool:
        return self.role == "trainer"


@dataclass
class UiConfig:
    """The console's settings. ``host``/``port``: the bind; ``token``: the trainer's token (None
    on an open loopback console); ``trainees``: token -> (lab, allowed actions); ``interval``:
    seconds between observations."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    trainees: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    interval: float = 1.0
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def mint_trainee(self, lab: str, allow: tuple[str, ...] | frozenset[str] = DEFAULT_TRAINEE_ALLOW) -> str:
        """A new trainee token for ``lab`` (the same one again if the lab already has one with
        the same allowances)."""
        allow = frozenset(allow)
        for tok, (lb, al) in self.trainees.items():
            if lb == lab and al == allow:
                return tok
        tok = secrets.token_urlsafe(18)
        self.trainees[tok] = (lab, allow)
        return tok


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> ``(host, port)``; UsageError otherwise."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", bind.strip())
    if not m:
        raise UsageError(f"--bind {bind!r}: give HOST:PORT, e.g. 127.0.0.1:8080 (or [::1]:8080)")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        raise UsageError(f"--bind {bind!r}: port {port} is not 1-65535")
    return host, port


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a token (UsageError, exit 2, one line)."""
    if not is_loopback(host) and not token:
        raise UsageError(f"--bind {host} is not a loopback address: anyone who reaches it could break your labs; "
                         "give --token T (every request must carry it) or bind 127.0.0.1")


# ---- validation ----------------------------------------------------------------------------
def valid_lab(lab: str) -> str:
    """``lab`` when it is a running lab of this host (by name only: never a path); 404 else."""
    if not is_lab_name(lab) or lab not in st.labs() or st.load(lab) is None:
        raise HTTPError(404, f"no lab {lab!r} is up on this host")
    return lab


def _node(w: LabWatch, node: Any) -> str:
    names = {n.name for n in w.spec.nodes}
    if not isinstance(node, str) or node not in names:
        raise HTTPError(400, f"lab {w.lab} has no node {str(node)[:40]!r}")
    return node


def _port(w: LabWatch, node: str, port: Any) -> str:
    if not isinstance(port, str) or not _PORT_RE.match(port) or (node, port) not in w.port_link:
        raise HTTPError(400, f"{node} has no planned port {str(port)[:40]!r}")
    return port


def _number(body: dict, key: str, lo: float, hi: float, default: Any = None, cast=float):
    v = body.get(key, default)
    if v is None or v == "":
        return default
    try:
        x = cast(v)
    except (TypeError, ValueError):
        raise HTTPError(400, f"{key} must be a number") from None
    if not lo <= x <= hi:
        raise HTTPError(400, f"{key} must be between {lo:g} and {hi:g}")
    return x


# ---- the SVG diagram ------------------------------------------------------------------------
_SVG_CACHE: dict[tuple[str, float], str] = {}
_SVG_LOCK = threading.Lock()


def diagram_svg(w: LabWatch) -> str:
    """The report's fabric drawing (:func:`railab.graph.fabric_graph`, no marks) as SVG with each
    edge group tagged ``data-link="<link id>"`` and each node group ``data-node="<node>"`` for
    the page's live styles and clicks. The drawing adds one edge statement per lab.json link, in
    lab.json order (no traced paths here): each gets a Graphviz ``id`` (``link<i>``), which
    Graphviz writes as the SVG group's id. Cached per lab life. RailabError without ``dot``."""
    from railab.graph import _require_dot, fabric_graph
    from railab.topologies.naming import link_id

    key = (w.lab, w.record.created)
    with _SVG_LOCK:
        if key in _SVG_CACHE:
            return _SVG_CACHE[key]
        _require_dot()
        g = fabric_graph(w.spec)
        lids = [link_id(ln.a.node, ln.a.interface, ln.b.node, ln.b.interface) for ln in w.spec.links]
        i = 0
        for k, line in enumerate(g.body):
            if " -- " not in line:
                continue
            if i >= len(lids):
                raise RailabError(f"lab {w.lab}: the drawing has more edges than lab.json has links")
            tag = f'id="link{i}"'
            stripped = line.rstrip("\n")
            g.body[k] = (stripped[:-1] + f" {tag}]" if stripped.endswith("]") else f"{stripped} [{tag}]") + "\n"
            i += 1
        if i != len(lids):
            raise RailabError(f"lab {w.lab}: the drawing has {i} edges for {len(lids)} links")
        svg = g.pipe(format="svg").decode("utf-8")
        svg = svg[svg.find("<svg"):]
        svg = re.sub(r'<g id="link(\d+)" class="edge">',
                     lambda m: f'<g id="link{m.group(1)}" class="edge" data-link="{lids[int(m.group(1))]}">', svg)
        names = {n.name for n in w.spec.nodes}

        def node(m: re.Match) -> str:
            title = m.group(2).replace("&#45;", "-")
            tag = f' data-node="{title}"' if title in names else ""
            return f'<g id="node{m.group(1)}" class="node"{tag}>\n<title>{m.group(2)}</title>'

        svg = re.sub(r'<g id="node(\d+)" class="node">\s*<title>([^<]*)</title>', node, svg)
        _SVG_CACHE[key] = svg
        return svg


# ---- the app ----------------------------------------------------------------------------------
class Console:
    """The console: config, the shared :class:`railab.uilive.Hub`, the per-lab action locks and
    the Starlette app (:attr:`app`)."""

    def __init__(self, config: UiConfig, hub: Hub | None = None) -> None:
        self.config = config
        self.hub = hub or Hub(interval=config.interval)
        self._busy: dict[str, threading.Lock] = {}
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("railab", "templates"),
                                      autoescape=jinja2.select_autoescape(["html", "j2"]))
        self.app = Starlette(routes=self._routes(), lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        yield
        self.hub.stop()

    # ---- auth ---------------------------------------------------------------------------------
    def csrf(self, who: Principal) -> str:
        """The anti-forgery token of ``who`` (HMAC-SHA-256 of its token under the process key)."""
        return hmac.new(self.config.secret, f"csrf:{who.key}".encode(), hashlib.sha256).hexdigest()

    def _host_ok(self, request: Request) -> bool:
        if not self.config.loopback:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        return is_loopback(name.strip("[]")) or name == self.config.host

    def who(self, request: Request) -> Principal:
        """The caller, or HTTPError 401 (no token where one is needed) / 403 (a wrong one)."""
        if not self._host_ok(request):
            raise HTTPError(403, "this console answers loopback host names only (Host header)")
        auth = request.headers.get("authorization", "")
        tok = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        tok = tok or request.query_params.get("token") or request.cookies.get(COOKIE)
        if tok:
            if self.config.token and hmac.compare_digest(tok, self.config.token):
                return Principal("trainer", key=tok)
            for t, (lab, allow) in self.config.trainees.items():
                if hmac.compare_digest(tok, t):
                    return Principal("trainee", key=tok, lab=lab, allow=allow)
            if self.config.token is None and not request.query_params.get("token"):
                # an open loopback console: a stale cookie (tokens die with the process) is nobody
                return Principal("trainer", key="local")
            raise HTTPError(403, "this token is not valid here")
        if self.config.token is None:
            return Principal("trainer", key="local")
        raise HTTPError(401, "this console needs a token: Authorization: Bearer T, or ?token=T once")

    def check_post(self, request: Request, who: Principal) -> None:
        """Anti-forgery for state-changing requests: the ``X-CSRF-Token`` header, and an
        ``Origin`` (when sent) naming this console's host. 403 otherwise."""
        sent = request.headers.get("x-csrf-token", "")
        if not sent or not hmac.compare_digest(sent, self.csrf(who)):
            raise HTTPError(403, "missing or wrong anti-forgery token (X-CSRF-Token): reload the page")
        origin = request.headers.get("origin")
        if origin and origin != "null":
            host = request.headers.get("host", "")
            if re.sub(r"^https?://", "", origin) != host:
                raise HTTPError(403, f"cross-site request from {origin} refused")

    def lab_for(self, who: Principal, lab: str) -> str:
        """``lab`` validated and visible to ``who`` (a trainee: their own lab only; 403)."""
        if not who.trainer and lab != who.lab:
            raise HTTPError(403, "a trainee token opens its own lab only")
        return valid_lab(lab)

    def may(self, who: Principal, lab: str, action: str) -> None:
        """403 unless ``who`` may run ``action`` (``check``, ``fault``, ``traffic``, ``drill``)
        on ``lab``: a trainee needs the trainer's allowance on the token, and the running
        exercise must not switch the command off; ``fault`` never while an exercise runs."""
        if who.trainer:
            return
        if action not in who.allow:
            raise HTTPError(403, f"{action} is not allowed for this trainee (the trainer's choice)")
        from railab.testbed import exercise as store

        pub = store.load_public(lab) or {}
        running = bool(pub) and not pub.get("revealed")
        if running and action in pub.get("disabled", []):
            raise HTTPError(403, f"{action} is switched off for this exercise (the trainer's choice)")
        if running and action in ("fault", "restart"):
            raise HTTPError(403, "faults cannot be injected or healed from a trainee page while an exercise runs")

    # ---- plumbing -----------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        r = [
            ("/", self.index, ["GET"]),
            ("/favicon.ico", self.favicon, ["GET"]),
            ("/board", self.board_page, ["GET"]),
            ("/lab/{lab}", self.lab_page, ["GET"]),
            ("/t/{lab}", self.trainee_page, ["GET"]),
            ("/lab/{lab}/diagram.svg", self.diagram, ["GET"]),
            ("/lab/{lab}/stream", self.stream, ["GET"]),
            ("/api/labs", self.api_labs, ["GET"]),
            ("/api/lab/{lab}/state", self.api_state, ["GET"]),
            ("/api/lab/{lab}/events", self.api_events, ["GET"]),
            ("/api/lab/{lab}/node/{node}", self.api_node, ["GET"]),
            ("/api/lab/{lab}/link/{link}", self.api_link, ["GET"]),
            ("/api/lab/{lab}/faults", self.api_faults, ["GET"]),
            ("/api/lab/{lab}/fault", self.api_fault, ["POST"]),
            ("/api/lab/{lab}/heal", self.api_heal, ["POST"]),
            ("/api/lab/{lab}/restart", self.api_restart, ["POST"]),
            ("/api/lab/{lab}/check", self.api_check, ["POST"]),
            ("/api/lab/{lab}/traffic", self.api_traffic, ["POST"]),
            ("/api/lab/{lab}/load", self.api_load, ["POST"]),
            ("/api/lab/{lab}/drill", self.api_drill, ["POST"]),
            ("/api/lab/{lab}/exercise", self.api_exercise_status, ["GET"]),
            ("/api/lab/{lab}/exercise/record", self.api_exercise_record, ["GET"]),
            ("/api/lab/{lab}/exercise/{verb}", self.api_exercise_verb, ["POST"]),
            ("/api/board", self.api_board, ["GET"]),
            ("/api/board/start", self.api_board_start, ["POST"]),
            ("/api/board/reveal", self.api_board_reveal, ["POST"]),
            ("/api/board/token", self.api_board_token, ["POST"]),
            ("/api/board/scores.{fmt}", self.api_board_scores, ["GET"]),
        ]
        return [Route(path, self._wrap(fn), methods=m) for path, fn, m in r]

    def _wrap(self, fn):
        async def endpoint(request: Request) -> Response:
            try:
                who = self.who(request)
                if request.method == "POST":
                    self.check_post(request, who)
                resp = await fn(request, who)
            except HTTPError as exc:
                if request.url.path.startswith("/api/") or request.method == "POST":
                    return JSONResponse({"error": exc.message}, status_code=exc.status)
                return HTMLResponse(self._render("ui_error.html.j2", who=None, status=exc.status,
                                                 message=exc.message), status_code=exc.status)
            tok = request.query_params.get("token")
            if tok and request.method == "GET" and not request.url.path.startswith("/api/") \
                    and resp.status_code == 200 and not isinstance(resp, StreamingResponse):
                # the token came in the address once: keep it in a cookie and drop it from the URL
                red = RedirectResponse(request.url.remove_query_params("token"), status_code=303)
                red.set_cookie(COOKIE, tok, httponly=True, samesite="strict", path="/")
                return red
            return resp

        return endpoint

    def _render(self, template: str, **ctx: Any) -> str:
        return self.env.get_template(template).render(**ctx)

    def _page(self, template: str, who: Principal, **ctx: Any) -> HTMLResponse:
        html = self._render(template, who=who, csrf=self.csrf(who), **ctx)
        return HTMLResponse(html, headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                           "Referrer-Policy": "no-referrer"})

    async def _body(self, request: Request) -> dict:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, "the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "the body must be a JSON object")
        return body

    async def _run(self, lab: str, fn, *args, **kw):
        """Run a blocking action for ``lab`` in a worker thread, one at a time per lab (409 when
        another action runs); railab's bad-input errors become 400."""
        lock = self._busy.setdefault(lab, threading.Lock())
        if not lock.acquire(blocking=False):
            raise HTTPError(409, f"another action is running on lab {lab}: wait for it")
        try:
            return await run_in_threadpool(fn, *args, **kw)
        except UsageError as exc:
            raise HTTPError(400, str(exc)) from None
        except RailabError as exc:
            raise HTTPError(500, str(exc)) from None
        finally:
            lock.release()

    @staticmethod
    def _exercise_lock(lab: str, command: str) -> None:
        """409 with the exercise's one refusal (railab.testbed.exercise.guard) when ``command``
        would change ``lab``'s faults while an exercise runs there (the trainer's page too)."""
        from railab.testbed import exercise as store

        try:
            store.guard(lab, command)
        except UsageError as exc:
            raise HTTPError(409, str(exc)) from None

    # ---- pages --------------------------------------------------------------------------------
    def lab_rows(self) -> list[dict]:
        """One row per lab up here: name, runtime, phase, nodes, user, faults, exercise."""
        rows = []
        for name in st.labs():
            rec = st.load(name)
            if rec is None:
                continue
            rows.append({"name": rec.lab, "runtime": rec.runtime, "phase": rec.phase,
                         "nodes": len(rec.namespaces or rec.containers), "user": rec.user,
                         "faults": len(rec.faults), "exercise": exercise_running(rec.lab),
                         "created": rec.created})
        return rows

    async def favicon(self, request: Request, who: Principal) -> Response:
        return Response(status_code=204)

    async def index(self, request: Request, who: Principal) -> Response:
        if not who.trainer:
            return RedirectResponse(f"/t/{who.lab}", status_code=303)
        return self._page("ui_index.html.j2", who, labs=self.lab_rows())

    async def lab_page(self, request: Request, who: Principal) -> Response:
        lab = request.path_params["lab"]
        if not who.trainer:
            self.lab_for(who, lab)
            return RedirectResponse(f"/t/{lab}", status_code=303)
        lab = valid_lab(lab)
        return self._lab_page(lab, who, trainee=False)

    async def trainee_page(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        return self._lab_page(lab, who, trainee=True)

    def _lab_page(self, lab: str, who: Principal, trainee: bool) -> Response:
        from railab.checks.base import CHECKS
        from railab.testbed import exercise as store
        from railab.testbed.faults import FAULT_KINDS, KILLABLE
        from railab.traffic.patterns import PATTERNS

        w = self.hub.get(lab)
        pub = store.load_public(lab) or {}
        allow = set(TRAINEE_ACTIONS) if who.trainer else set(who.allow)
        if pub and not pub.get("revealed"):
            allow -= set(pub.get("disabled", []))
            if not who.trainer:
                allow.discard("fault")
        return self._page("ui_lab.html.j2", who, lab=lab, trainee=trainee, allow=sorted(allow),
                          nodes=len(w.spec.nodes), links=len(w.spec.links), arch=w.spec.architecture,
                          fault_kinds=FAULT_KINDS, killable=KILLABLE, checks=list(CHECKS),
                          patterns=[p for p in PATTERNS if p != "incast"], capacity=_capacity(w),
                          exercise=pub if pub else None)

    async def board_page(self, request: Request, who: Principal) -> Response:
        self._trainer(who)
        from railab.checks.exercise import LEVELS
        from railab.testbed.exercise import GATEABLE

        return self._page("ui_board.html.j2", who, labs=self.lab_rows(), levels=LEVELS, gateable=GATEABLE,
                          trainee_actions=TRAINEE_ACTIONS)

    def _trainer(self, who: Principal) -> None:
        if not who.trainer:
            raise HTTPError(403, "the trainer's token is needed for this")

    # ---- live -----------------------------------------------------------------------------------
    async def diagram(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        w = self.hub.get(lab)
        svg = await run_in_threadpool(diagram_svg, w)
        return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})

    async def stream(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        w = self.hub.get(lab)
        trainee = not who.trainer

        async def events():
            w.follow()
            version = 0  # version 0 is the empty placeholder before the first observation
            try:
                yield b"retry: 2000\n\n"
                while True:
                    snap = await w.wait(version, timeout=15.0)
                    if snap.version == version:
                        yield b": keepalive\n\n"
                        continue
                    version = snap.version
                    yield b"data: " + (snap.trainee_json if trainee else snap.trainer_json) + b"\n\n"
                    if not snap.data.get("up", True):
                        return
            finally:
                w.unfollow()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def api_labs(self, request: Request, who: Principal) -> Response:
        self._trainer(who)
        return JSONResponse(self.lab_rows())

    async def api_state(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        w = self.hub.get(lab)
        w.follow()
        try:
            snap = await w.wait(0, timeout=10.0) if w.snapshot.version == 0 else w.snapshot
        finally:
            w.unfollow()
        return Response(snap.trainer_json if who.trainer else snap.trainee_json, media_type="application/json")

    async def api_events(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        since = int(_number(dict(request.query_params), "since", 0, 1e12, 0, int))
        live = who.trainer or not live_state_hidden(exercise_public(lab))
        return JSONResponse(self.hub.get(lab).event_list(trainee=not who.trainer, since=since, limit=500, live=live))

    def _live_ok(self, who: Principal, lab: str) -> None:
        if not who.trainer and live_state_hidden(exercise_public(lab)):
            raise HTTPError(403, "the trainer switched off the live state (status/graph/inspect) for this exercise")

    async def api_node(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        self._live_ok(who, lab)
        w = self.hub.get(lab)
        node = _node(w, request.path_params["node"])
        return JSONResponse(await run_in_threadpool(w.node_detail, node))

    async def api_link(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        self._live_ok(who, lab)
        w = self.hub.get(lab)
        lid = request.path_params["link"]
        if lid not in w.link_ends:
            raise HTTPError(400, f"lab {lab} has no link {lid[:60]!r}")
        return JSONResponse(await run_in_threadpool(w.link_detail, lid))

    # ---- faults ---------------------------------------------------------------------------------
    async def api_faults(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        if not who.trainer:
            self.may(who, lab, "fault")
        from railab.testbed.faults import list_faults

        return JSONResponse([f.model_dump(mode="json") for f in list_faults(lab)])

    async def api_fault(self, request: Request, who: Principal) -> Response:
        from railab.testbed import faults as F

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "fault")
        self._exercise_lock(lab, "fault")
        body = await self._body(request)
        w = self.hub.get(lab)
        kind = body.get("kind")
        if kind not in F.FAULT_KINDS:
            raise HTTPError(400, f"unknown fault kind {str(kind)[:30]!r}: one of {', '.join(F.FAULT_KINDS)}")
        node = _node(w, body.get("node"))
        port = _port(w, node, body["port"]) if body.get("port") else None
        peer = body.get("peer")
        if peer:
            pn, _, pp = str(peer).partition(":")
            _node(w, pn)
            if pp:
                _port(w, pn, pp)
        if kind in ("daemon-kill", "node-off") and (port or peer):
            raise HTTPError(400, f"{kind} takes a node, not a port")
        if kind not in ("daemon-kill", "node-off") and not (port or peer):
            raise HTTPError(400, f"{kind} needs a link: a port of {node} (or a peer node)")
        end = body.get("end")
        if end is not None and end not in (node, str(peer or "").partition(":")[0], "a", "b"):
            raise HTTPError(400, "end must name one end of the link")
        daemon = body.get("daemon", "bgpd")
        if daemon not in F.KILLABLE:
            raise HTTPError(400, f"daemon must be one of {', '.join(F.KILLABLE)}")
        params = F.cli_params(
            kind, end=end,
            count=_number(body, "count", 1, 20, 3, int), down_s=_number(body, "down_s", 0.1, 30, 1.0),
            up_s=_number(body, "up_s", 0.1, 30, 1.0), percent=_number(body, "percent", 0, 100, 10.0),
            roce_only=bool(body.get("roce_only", False)), mtu=_number(body, "mtu", 68, 65535, 1500, int),
            asn=_number(body, "asn", 1, 4294967295, None, int), daemon=daemon,
            gbps=_number(body, "gbps", 1, 1600, None))
        rec = await self._run(lab, F.inject, lab, kind, node, peer or None, port=port, **params)
        w.add_event("action", f"{'trainer' if who.trainer else 'trainee'} injected {rec.id} {rec.kind}: {rec.note}",
                    "bad", secret=exercise_running(lab))
        w.poke()
        return JSONResponse(rec.model_dump(mode="json"))

    async def api_heal(self, request: Request, who: Principal) -> Response:
        from railab.testbed import faults as F

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "fault")
        self._exercise_lock(lab, "fault")
        body = await self._body(request)
        w = self.hub.get(lab)
        fid = body.get("id")
        if body.get("all"):
            fid = None
        else:
            ids = {f.id for f in F.list_faults(lab)}
            if fid not in ids:
                known = ", ".join(sorted(ids)) or "none"
                raise HTTPError(400, f"lab {lab} has no fault {str(fid)[:20]!r} (faults: {known})")
        healed = await self._run(lab, F.heal, lab, fid)
        for r in healed:
            w.add_event("action", f"{'trainer' if who.trainer else 'trainee'} healed {r.id} {r.kind}: {r.note}",
                        "good", secret=exercise_running(lab))
        w.poke()
        return JSONResponse([r.model_dump(mode="json") for r in healed])

    async def api_restart(self, request: Request, who: Principal) -> Response:
        from railab.testbed import faults as F

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "fault")
        self._exercise_lock(lab, "restart")
        body = await self._body(request)
        w = self.hub.get(lab)
        node = _node(w, body.get("node"))
        await self._run(lab, F.restart_node, lab, node)
        w.add_event("action", f"restarted {node}", "good")
        w.poke()
        return JSONResponse({"restarted": node})

    # ---- check ----------------------------------------------------------------------------------
    async def api_check(self, request: Request, who: Principal) -> Response:
        from railab.checks.base import CHECKS

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "check")
        body = await self._body(request)
        only = body.get("only") or None
        if only is not None:
            if not isinstance(only, list) or not all(isinstance(x, str) and x in CHECKS for x in only):
                raise HTTPError(400, f"only: a list of check families ({', '.join(CHECKS)})")
        w = self.hub.get(lab)
        res = await self._run(lab, run_check, w, only)
        s = res["n_fail"]
        verdict = f"{s} failing, {len(res['roots'])} root cause(s)" if s else f"{res['n_pass']} passed, all green"
        w.add_event("check", f"check{' --only ' + ','.join(only) if only else ''}: {verdict}",
                    "bad" if s else "good")
        w.poke()
        return JSONResponse(res)

    # ---- traffic and drills -------------------------------------------------------------------------
    async def api_traffic(self, request: Request, who: Principal) -> Response:
        from railab.traffic.patterns import PATTERNS

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "traffic")
        body = await self._body(request)
        pattern = body.get("pattern")
        if pattern not in PATTERNS or pattern == "incast":
            raise HTTPError(400, f"pattern: one of {', '.join(p for p in PATTERNS if p != 'incast')} "
                                 "(load runs such as incast: railab traffic --pattern incast)")
        flows = _number(body, "flows", 1, 512, None, int)
        w = self.hub.get(lab)
        res = await self._run(lab, run_traffic, w, pattern, flows, bool(body.get("pxn", False)))
        w.add_event("traffic", f"traffic {pattern}: {res['ok']}/{len(res['flows'])} flows as expected"
                    + (f"; {len(res['root_causes'])} root cause(s)" if res["root_causes"] else ""),
                    "good" if res["ok"] == len(res["flows"]) else "bad")
        w.poke()
        return JSONResponse(res)

    async def api_load(self, request: Request, who: Principal) -> Response:
        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "traffic")
        body = await self._body(request)
        w = self.hub.get(lab)
        from railab.testbed import capacity as C

        if not C.enabled(w.spec):
            raise HTTPError(400, f"lab {lab} has no lab.capacity: nothing to congest (e.g. mini-lossless has it)")
        senders = _number(body, "senders", 1, 64, 8, int)
        seconds = _number(body, "seconds", 1, 30, 4.0)
        cc = body.get("cc", "dcqcn")
        if cc not in ("dcqcn", "none"):
            raise HTTPError(400, "cc: dcqcn or none")
        pfc = body.get("pfc")
        if pfc not in (None, "on", "off"):
            raise HTTPError(400, "pfc: on or off")
        w.add_event("action", f"load run: incast, {senders} senders, cc {cc}, PFC {pfc or 'as the lab'}, "
                    f"{seconds:g} lab s")
        res = await self._run(lab, run_incast, w, senders, seconds, cc, None if pfc is None else pfc == "on")
        w.add_event("traffic", f"incast: CE {res['totals']['ce_marked']}, CNP {res['totals']['cnp_received']}, "
                    f"dropped {res['totals']['dropped']}, PAUSE {res['totals']['pause_events']}",
                    "bad" if res["failures"] else "good")
        w.poke()
        return JSONResponse(res)

    async def api_drill(self, request: Request, who: Principal) -> Response:
        from railab.testbed import faults as F

        lab = self.lab_for(who, request.path_params["lab"])
        self.may(who, lab, "drill")
        self._exercise_lock(lab, "drill")
        body = await self._body(request)
        w = self.hub.get(lab)
        kind = body.get("kind")
        if kind not in F.FAULT_KINDS:
            raise HTTPError(400, f"unknown fault kind {str(kind)[:30]!r}: one of {', '.join(F.FAULT_KINDS)}")
        node = _node(w, body.get("node"))
        port = _port(w, node, body["port"]) if body.get("port") else None
        if kind not in ("daemon-kill", "node-off") and not port:
            raise HTTPError(400, f"a {kind} drill needs a port of {node}")
        params = F.cli_params(kind, percent=_number(body, "percent", 0, 100, 10.0),
                              roce_only=bool(body.get("roce_only", False)),
                              mtu=_number(body, "mtu", 68, 65535, 1500, int),
                              count=_number(body, "count", 1, 20, 3, int))
        rate = _number(body, "rate", 10, 5000, 1000.0)
        duration = _number(body, "duration", 1, 120, None)

        def drill():
            from railab.checks.drill import run_drill
            from railab.checks.lab import LiveLab

            def say(text: str) -> None:
                w.add_event("drill", text)
                w.poke()

            return run_drill(LiveLab.attach(lab), kind, node, None, port=port, params=params, rate=rate,
                             duration=duration, on_event=say)

        w.add_event("action", f"drill {kind} at {node}{':' + port if port else ''} started")
        res = await self._run(lab, drill)
        w.add_event("drill", f"drill {kind}: lost {res['lost_packets']} packets, rerouted after "
                    f"{res['time_to_reroute_s']} s, green {res['time_to_green_s']} s after the heal",
                    "good" if res["green"]["confirmed"] and not res["control_lost_packets"] else "bad")
        w.poke()
        return JSONResponse(res)

    # ---- exercises --------------------------------------------------------------------------------
    async def api_exercise_status(self, request: Request, who: Principal) -> Response:
        """What ``railab exercise status`` shows: symptoms, time, found, hints (no answers)."""
        from railab.checks import exercise as X
        from railab.testbed import exercise as store

        lab = self.lab_for(who, request.path_params["lab"])
        rec = store.load(lab)
        if rec is None:
            return JSONResponse({"lab": lab, "exercise": None})
        view = {**X.public_view(rec), "score": X.score_sheet(lab, rec)}
        view["score"].pop("seed", None)
        view["score"].pop("faults", None)
        view["elapsed_s"] = round(time.time() - rec["started_at"], 1)
        return JSONResponse({"lab": lab, "exercise": view})

    async def api_exercise_record(self, request: Request, who: Principal) -> Response:
        """The trainer's view: the score sheet with the seed (and faults once revealed)."""
        from railab.checks import exercise as X

        self._trainer(who)
        lab = valid_lab(request.path_params["lab"])
        sheet = X.score_sheet(lab)
        if sheet is None:
            raise HTTPError(404, f"lab {lab} runs no exercise")
        return JSONResponse(sheet)

    async def api_exercise_verb(self, request: Request, who: Principal) -> Response:
        from railab.checks import exercise as X
        from railab.testbed import faults as F

        lab = self.lab_for(who, request.path_params["lab"])
        verb = request.path_params["verb"]
        body = await self._body(request)
        w = self.hub.get(lab)
        if verb == "hint":
            res = await self._run(lab, X.hint, lab)
            w.add_event("action", f"hint {res['grade']} taken" if res["hint"] else "no hint left")
        elif verb == "answer":
            element, kind, text = body.get("element") or None, body.get("kind") or None, body.get("text") or None
            for v in (element, kind, text):
                if v is not None and (not isinstance(v, str) or len(v) > 300):
                    raise HTTPError(400, "element, kind and text are short strings")
            res = await self._run(lab, X.answer, lab, element=element, kind=kind, text=text)
            w.add_event("action", f"answer graded {'right' if res['right'] else 'wrong'}",
                        "good" if res["right"] else "bad")
        elif verb == "fix":
            wait = _number(body, "wait", 0, 120, 20.0)
            res = await self._run(lab, X.fix, lab, wait=wait)
            verdict = ("green" if res["credited"] else
                       "green, but no repair of the trainee's in the record" if res["green"] else "not green")
            w.add_event("action", f"repair check: {verdict}", "good" if res["credited"] else "bad")
        elif verb == "swap-cables":
            self._exercise_lock(lab, "swap-cables")
            a, b = body.get("a"), body.get("b")
            for ref in (a, b):
                if not isinstance(ref, str):
                    raise HTTPError(400, "a and b are server NICs, e.g. srv2:eth1")
                n, _, p = ref.partition(":")
                _port(w, _node(w, n), p)
            (la, pa), (lb, pb) = await self._run(lab, F.swap_cables, lab, a, b)
            res = {"a": a, "b": b, "a_on": f"{la}:{pa}", "b_on": f"{lb}:{pb}"}
            w.add_event("action", f"swapped cables of {a} and {b}")
        else:
            raise HTTPError(404, f"no exercise action {verb[:20]!r}")
        w.poke()
        return JSONResponse(res)

    async def api_board(self, request: Request, who: Principal) -> Response:
        self._trainer(who)
        return JSONResponse(board_rows(self.lab_rows(), self.config))

    async def api_board_start(self, request: Request, who: Principal) -> Response:
        from railab.checks import exercise as X
        from railab.testbed.exercise import GATEABLE

        self._trainer(who)
        body = await self._body(request)
        labs = body.get("labs")
        if not isinstance(labs, list) or not labs:
            raise HTTPError(400, "labs: a list of lab names")
        labs = [valid_lab(str(x)) for x in labs]
        level = _number(body, "level", 1, max(X.LEVELS), 1, int)
        seed = _number(body, "seed", 0, 2**31, None, int)
        disable = body.get("disable") or []
        if not isinstance(disable, list) or any(d not in GATEABLE for d in disable):
            raise HTTPError(400, f"disable: commands out of {', '.join(GATEABLE)}")
        kind = body.get("kind") or None
        if kind is not None and kind not in X.LEVELS.get(level, ()):
            raise HTTPError(400, f"kind: one of level {level}'s {', '.join(X.LEVELS.get(level, ()))}")
        allow = tuple(a for a in (body.get("allow") or DEFAULT_TRAINEE_ALLOW) if a in TRAINEE_ACTIONS)
        precheck = bool(body.get("precheck", True))
        out = []
        for lab in labs:
            try:
                view = await self._run(lab, X.start, lab, level, seed, kind=kind, disable=disable, precheck=precheck)
                tok = self.config.mint_trainee(lab, allow)
                self.hub.get(lab).add_event("action", f"exercise started (level {level})")
                out.append({"lab": lab, "ok": True, "symptoms": view["symptoms"], "url": f"/t/{lab}?token={tok}"})
            except HTTPError as exc:
                out.append({"lab": lab, "ok": False, "error": exc.message})
        return JSONResponse(out)

    async def api_board_reveal(self, request: Request, who: Principal) -> Response:
        from railab.checks import exercise as X

        self._trainer(who)
        body = await self._body(request)
        labs = body.get("labs")
        if not isinstance(labs, list) or not labs:
            raise HTTPError(400, "labs: a list of lab names")
        out = []
        for lab in [valid_lab(str(x)) for x in labs]:
            try:
                out.append(await self._run(lab, X.reveal, lab))
                self.hub.get(lab).add_event("action", "exercise revealed")
            except HTTPError as exc:
                out.append({"lab": lab, "error": exc.message})
        return JSONResponse(out)

    async def api_board_token(self, request: Request, who: Principal) -> Response:
        self._trainer(who)
        body = await self._body(request)
        lab = valid_lab(str(body.get("lab", "")))
        allow = body.get("allow") or list(DEFAULT_TRAINEE_ALLOW)
        if not isinstance(allow, list) or any(a not in TRAINEE_ACTIONS for a in allow):
            raise HTTPError(400, f"allow: actions out of {', '.join(TRAINEE_ACTIONS)}")
        tok = self.config.mint_trainee(lab, tuple(allow))
        return JSONResponse({"lab": lab, "token": tok, "url": f"/t/{lab}?token={tok}", "allow": sorted(allow)})

    async def api_board_scores(self, request: Request, who: Principal) -> Response:
        from railab.checks import exercise as X

        self._trainer(who)
        fmt = request.path_params["fmt"]
        sheets = [s for s in (X.score_sheet(r["name"]) for r in self.lab_rows()) if s]
        if fmt == "json":
            return JSONResponse(sheets, headers={"Content-Disposition": 'attachment; filename="scores.json"'})
        if fmt != "csv":
            raise HTTPError(404, "scores.json or scores.csv")
        buf = io.StringIO()
        cols = ["lab", "level", "seed", "started_at", "revealed", "faults_found", "faults_total",
                "time_to_diagnosis_s", "hints_used", "answers", "wrong_answers", "repair_verified", "points",
                "max_points", "faults"]
        wr = csv.writer(buf)
        wr.writerow(cols)
        for s in sheets:
            wr.writerow([s["lab"], s["level"], s["seed"] if s["revealed"] else "", s["started_at"], s["revealed"],
                         s["faults_found"], s["faults_total"], s["time_to_diagnosis_s"], s["hints_used"],
                         s["answers"], s["wrong_answers"], s["repair"]["verified"], s["points"], s["max_points"],
                         "; ".join(f"{f['kind']} at {f['element']}" for f in s.get("faults", []))])
        return Response(buf.getvalue(), media_type="text/csv",
                        headers={"Content-Disposition": 'attachment; filename="scores.csv"'})


def board_rows(labs: list[dict], config: UiConfig) -> list[dict]:
    """The class board: per lab, its exercise's live status (elapsed, hints used, answers,
    found, repair, points; no seed, no faults while it runs) and its trainee links."""
    from railab.checks import exercise as X

    out = []
    for row in labs:
        sheet = None
        try:
            sheet = X.score_sheet(row["name"])
        except RailabError as exc:
            sheet = {"error": str(exc)}
        if sheet and not sheet.get("revealed"):
            sheet = {k: v for k, v in sheet.items() if k not in ("seed", "faults")}
        elapsed = None
        if sheet and sheet.get("started_at"):
            from datetime import datetime

            elapsed = round(time.time() - datetime.fromisoformat(sheet["started_at"]).timestamp())
        toks = [{"url": f"/t/{row['name']}?token={t}", "allow": sorted(al)}
                for t, (lb, al) in config.trainees.items() if lb == row["name"]]
        out.append({**row, "sheet": sheet, "elapsed_s": elapsed, "trainee_links": toks})
    return out


def run_check(w: LabWatch, only: list[str] | None) -> dict[str, Any]:
    """Run the check families on the watched lab (:func:`railab.checks.runner.run_checks`) and
    shape the result as ``railab check`` prints it: ``summary`` (family -> pass/fail/skip),
    ``roots`` (each root-cause failure with how many failures follow from it, by family),
    ``n_follow`` (the failures that follow from a root, each once: a row two roots explain
    together is in both roots' ``follow``),
    ``skips``, ``rows`` (every row), ``n_fail``, ``n_pass``, ``elapsed_s``."""
    from railab.checks.exercise import disclose
    from railab.checks.runner import group_failures, run_checks, summary

    t0 = time.monotonic()
    # while a training exercise runs: named at its detail, never a repair command (as railab check)
    results = disclose(w.lab, run_checks(w.spec, w.executor, only=only, netns_of=w.netns_of))

    def row(r) -> dict[str, Any]:
        return {"check": r.check, "name": r.name, "status": r.status, "node": r.node or "",
                "expected": r.expected or "", "observed": r.observed or "", "reason": r.reason or "",
                "link": getattr(r, "link", None)}

    roots = []
    groups = group_failures(results)
    for root, cons in groups:
        fams: dict[str, int] = {}
        for c in cons:
            fams[c.check] = fams.get(c.check, 0) + 1
        roots.append({**row(root), "follow": len(cons), "follow_by_family": fams})
    # a row two faults cause together is under both roots: count it once
    n_follow = len({id(c) for _, cons in groups for c in cons})
    return {"lab": w.lab, "summary": summary(results), "roots": roots, "n_follow": n_follow,
            "skips": [row(r) for r in results if r.status == "skip"],
            "rows": [row(r) for r in results],
            "n_fail": sum(r.status == "fail" for r in results),
            "n_pass": sum(r.status == "pass" for r in results),
            "elapsed_s": round(time.monotonic() - t0, 2)}


def _capacity(w: LabWatch) -> bool:
    from railab.testbed import capacity as C

    return C.enabled(w.spec)


def run_traffic(w: LabWatch, pattern: str, flows: int | None, pxn: bool = False) -> dict[str, Any]:
    """``railab traffic LAB --pattern P [-n N] [--pxn]`` on the watched lab (the traffic engine,
    one flow at a time with switch counters): ``flows`` (one row per flow as the CLI's table),
    ``ok`` (flows as expected), ``coverage``, ``spread`` (per spine, per uplink), ``warnings``,
    ``root_causes``. UsageError for a pattern the lab cannot run."""
    from railab.cli.traffic import _link_state, _link_up, check_groups, flow_root_causes
    from railab.traffic.engine import Engine, spread, spread_warnings
    from railab.traffic.patterns import PatternError, coverage_text, flows_for, pattern_pairs, sample_text

    try:
        full = len(pattern_pairs(w.spec, pattern, pxn))
        fl = flows_for(w.spec, pattern, pxn=pxn, n=flows)
    except PatternError as exc:
        raise UsageError(str(exc)) from None
    with Engine(w.spec, w.netns_of) as eng:
        results = eng.run(fl, measure=True)
        warnings = spread_warnings(w.spec, results, _link_up(eng), link_state=_link_state(eng))
        causes = flow_root_causes(w.spec, results, _link_state(eng), check_groups(w.lab)) if any(
            not r.ok for r in results) else []
    sp = spread(w.spec, results)
    rows = []
    for r in results:
        f = r.flow
        path = ">".join(p.split(":")[0] for p in r.path) or ("NVLink/local" if f.path_class == "intra-server" else "-")
        if r.unreachable_at:
            path += f" (unreachable at {r.unreachable_at})"
        rows.append({"flow": f.name, "nics": f"nic{f.src_nic}->nic{f.dst_nic}" + (" +NVLink" if f.nvlink else ""),
                     "delivered": f"{r.delivered}/{r.sent}", "lost": r.lost, "hops_expected": f.expected_hops,
                     "hops_ttl": r.hops_ttl, "hops_counters": r.hops_counters, "path": path,
                     "verdict": r.verdict, "ok": r.ok})
    return {"lab": w.lab, "pattern": pattern, "pxn": pxn, "flows": rows, "ok": sum(r.ok for r in results),
            "coverage": coverage_text(w.spec, fl, full), "sampled": sample_text(w.spec, fl),
            "spread": {"per_spine": sp.per_spine, "per_link": sp.per_link,
                       "spines": sp.spread_text(sp.per_spine, "spines") if sp.per_spine else "",
                       "uplinks": sp.spread_text(sp.per_link, "uplinks", "imbalance") if sp.per_link else ""},
            "warnings": warnings, "root_causes": causes}


def run_incast(w: LabWatch, senders: int, seconds: float, cc: str = "dcqcn",
               pfc: bool | None = None) -> dict[str, Any]:
    """``railab traffic LAB --pattern incast --senders N --seconds S --cc CC [--pfc on|off]`` on a
    capacity lab (:func:`railab.traffic.load.run_load`, with the capacity sampler and the switch
    agent the CLI uses): the per-flow table (tx/rx Mb/s over the last half, rx/fair, CE, CNP,
    lost, hops), the totals, the fair share, the verdict lines, and ``chart_svg``: the report's
    rates-and-queues plot (:func:`railab.report.congestion_chart`, lab time). UsageError for a
    lab without ``lab.capacity`` or a bad sender count."""
    from railab.cli.traffic import _capacity_sampler, _pfc, load_verdict
    from railab.report import LoadRun, congestion_chart
    from railab.traffic.load import LoadFlow, fair_share, fairness, run_load
    from railab.traffic.patterns import Flow, PatternError, incast_pairs, route

    spec = w.spec
    capacity = spec.qos.capacity.enabled
    pfc_on = bool((spec.qos.capacity.pfc if pfc is None else pfc) and capacity)
    try:
        fl = [route(spec, Flow(a, b, pxn=False)) for a, b in incast_pairs(spec, senders, None, False)]
    except PatternError as exc:
        raise UsageError(str(exc)) from None
    base, close = _capacity_sampler(resolve(w.lab), spec)

    def show(cur: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        w.show_run_sample(cur)  # the diagram shows the queues the run measures, as it measures them
        return cur

    sampler = None if base is None else (lambda: show(base()))
    try:
        with _pfc(spec, w.netns_of, pfc_on, capacity):
            res = run_load(spec, w.netns_of, [LoadFlow(f) for f in fl], cc=cc, seconds=seconds,
                           sport_mode="per-qp", port_sampler=sampler)
    finally:
        if close is not None:
            close()
    if res.dropped is None:
        res.dropped = res.lost
    if res.pause_events is None:
        res.pause_events = 0
    fair = fairness(res)
    cong = res.to_dict()
    label = f"incast cc={cc} pfc={'on' if pfc_on else 'off'}"
    try:
        chart = str(congestion_chart(LoadRun(label=label, data=cong), spec.qos))
    except Exception as exc:  # a plot that cannot be drawn must not hide the measurement
        chart = f"<p>plot unavailable: {type(exc).__name__}: {exc}</p>"
    rows = [{"flow": f["name"], "nics": f"nic{f['src_nic']}->nic{f['dst_nic']}",
             "tx_mbps": round(f["rate_mbps_last_half"], 2), "rx_mbps": round(f["rx_mbps_last_half"], 2),
             "rx_fair": round(share, 2), "ce": f["ce_marked"], "cnp": f["cnp_received"], "lost": f["lost"],
             "hops": f["hops"]} for f, share in zip(res.flows, fair, strict=True)]
    return {"lab": w.lab, "label": label, "senders": len(fl), "cc": cc, "pfc": "on" if pfc_on else "off",
            "seconds": res.seconds, "time_scale": res.time_scale,
            "fabric_us": round(res.seconds / res.time_scale * 1e6), "port_rate_mbps": res.port_rate_mbps,
            "flows": rows, "fair_share": fair_share(res),
            "totals": {"ce_marked": res.ce_marked, "cnp_sent": res.cnp_sent, "cnp_received": res.cnp_received,
                       "dropped": res.dropped, "lost": res.lost, "pause_events": res.pause_events,
                       "offered_mbps": res.offered_mbps, "engine_shortfall": res.engine_shortfall},
            "failures": load_verdict(res, pfc_on=pfc_on, capacity=capacity), "chart_svg": chart}


def make_console(config: UiConfig) -> Console:
    """The console for ``config`` (its Starlette app is ``.app``)."""
    return Console(config)


def serve(config: UiConfig, *, log_level: str = "warning") -> None:
    """Serve the console with uvicorn until Ctrl-C/SIGTERM (graceful: open event streams are
    cut after 2 s)."""
    import uvicorn

    console = make_console(config)
    uvicorn.run(console.app, host=config.host.strip("[]"), port=config.port, log_level=log_level,
                timeout_graceful_shutdown=2, access_log=False)


__all__ = ["UiConfig", "Console", "Principal", "HTTPError", "parse_bind", "check_bind", "is_loopback",
           "make_console", "serve", "diagram_svg", "run_check", "board_rows", "valid_lab", "TRAINEE_ACTIONS"]
