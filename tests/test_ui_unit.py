"""``railab ui`` without a live lab: the bind rule, tokens per role, the anti-forgery token, name
validation before anything runs, what a trainee never sees, the diagram's tags, the score sheet
export. Labs are recorded in a temporary run directory (RAILAB_RUN_DIR) over a generated
``mini`` lab directory; no namespace exists, so nothing here can touch a kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from starlette.testclient import TestClient

from railab import ui as U
from railab.checks import exercise as X
from railab.errors import UsageError
from railab.testbed import exercise as store
from railab.testbed import faults as F
from railab.testbed import state as st
from railab.topologies.generator import generate
from railab.uilive import LabWatch

LAB_A, LAB_B = "uia", "uib"


@pytest.fixture(scope="module")
def labdirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    return {n: generate("mini", root / n, name=n) for n in (LAB_A, LAB_B)}


@pytest.fixture
def labs(labdirs, tmp_path, monkeypatch):
    """Two recorded 'running' labs (no namespaces) and an empty exercise root."""
    monkeypatch.setenv("RAILAB_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("RAILAB_EXERCISE_DIR", str(tmp_path / "ex"))
    for name, d in labdirs.items():
        st.save(st.LabState(lab=name, phase="running", labdir=str(d)))
    return labdirs


def _client(config: U.UiConfig) -> tuple[TestClient, U.Console]:
    console = U.Console(config)
    return TestClient(console.app, base_url=f"http://{config.host}:{config.port}"), console


def _csrf(console: U.Console, key: str) -> dict[str, str]:
    return {"X-CSRF-Token": console.csrf(U.Principal("x", key=key))}


def _exercise(lab: str, labdir, *, disabled=(), revealed=False) -> None:
    """A recorded exercise on ``lab`` (a hidden link-down; nothing injected: no namespaces)."""
    rec = {"lab": lab, "labdir": str(labdir), "level": 1, "seed": 7, "kind": None, "started_at": time.time() - 30,
           "faults": [{"kind": "link-down", "element": "g1-leaf1:eth3", "accept": ["g1-leaf1:eth3", "spine1:eth1"],
                       "symptom": "training jobs on rail 1 are slow", "hints": ["a", "b", "c"],
                       "record": {"id": "f1", "kind": "link-down", "node": "g1-leaf1", "port": "eth3",
                                  "note": "admin down g1-leaf1:eth3"}}],
           "disabled": list(disabled), "found": [], "answers": [], "hints": [],
           "fix": {"attempts": 0, "verified_at": None}}
    if revealed:
        rec["revealed_at"] = time.time()
    store.save(lab, rec, X.public_view(rec))


# ---- the bind rule ------------------------------------------------------------------------------
def test_bind_parsing_and_the_loopback_rule():
    assert U.parse_bind("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert U.parse_bind("[::1]:9000") == ("::1", 9000)
    for bad in ("8080", "host:", "h:99999", "a:b:c"):
        with pytest.raises(UsageError):
            U.parse_bind(bad)
    assert U.is_loopback("localhost") and U.is_loopback("127.0.0.2") and U.is_loopback("::1")
    assert not U.is_loopback("0.0.0.0") and not U.is_loopback("10.1.2.3")
    U.check_bind("127.0.0.1", None)
    U.check_bind("0.0.0.0", "T")
    with pytest.raises(UsageError, match="not a loopback address.*--token"):
        U.check_bind("0.0.0.0", None)


def test_cli_refuses_a_non_loopback_bind_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "RAILAB_UI_TOKEN"}
    res = subprocess.run([sys.executable, "-m", "railab", "ui", "--bind", "0.0.0.0:18999"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token" in lines[0] and lines[0].startswith("error:"), res.stderr


# ---- tokens ------------------------------------------------------------------------------------
def test_a_console_with_a_token_refuses_requests_without_it(labs):
    client, _ = _client(U.UiConfig(host="0.0.0.0", port=8080, token="sesame"))
    assert client.get("/").status_code == 401
    assert client.get("/api/labs").status_code == 401
    assert client.get(f"/lab/{LAB_A}/diagram.svg").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 403
    ok = client.get("/", headers={"Authorization": "Bearer sesame"})
    assert ok.status_code == 200 and LAB_A in ok.text and LAB_B in ok.text
    # ?token= once: a cookie, and the token dropped from the address
    red = client.get("/?token=sesame", follow_redirects=False)
    assert red.status_code == 303 and "token" not in red.headers["location"]
    assert "httponly" in red.headers["set-cookie"].lower() and "samesite=strict" in red.headers["set-cookie"].lower()
    assert client.get("/").status_code == 200  # the cookie now


def test_the_index_names_every_lab_and_the_open_loopback_console_is_the_trainer(labs):
    client, _ = _client(U.UiConfig())
    page = client.get("/")
    assert page.status_code == 200
    for lab in (LAB_A, LAB_B):
        assert f'data-lab="{lab}"' in page.text
    assert [r["name"] for r in client.get("/api/labs").json()] == [LAB_A, LAB_B]


def test_a_loopback_console_answers_loopback_host_names_only(labs):
    client, _ = _client(U.UiConfig())
    assert client.get("/", headers={"Host": "evil.example:8080"}).status_code == 403
    assert client.get("/", headers={"Host": "localhost:8080"}).status_code == 200


def test_a_trainee_token_opens_its_own_lab_only(labs):
    config = U.UiConfig(host="0.0.0.0", token="boss")
    tok = config.mint_trainee(LAB_A)
    client, console = _client(config)
    h = {"Authorization": f"Bearer {tok}"}
    assert client.get("/", headers=h, follow_redirects=False).headers["location"] == f"/t/{LAB_A}"
    assert client.get(f"/t/{LAB_A}", headers=h).status_code == 200
    for path in (f"/t/{LAB_B}", f"/lab/{LAB_B}", f"/api/lab/{LAB_B}/state", f"/lab/{LAB_B}/diagram.svg",
                 f"/lab/{LAB_B}/stream", f"/api/lab/{LAB_B}/node/spine1", "/board", "/api/board", "/api/labs",
                 "/api/board/scores.csv", f"/api/lab/{LAB_A}/exercise/record"):
        assert client.get(path, headers=h).status_code == 403, path
    post = {**h, **_csrf(console, tok)}
    assert client.post(f"/api/lab/{LAB_B}/check", headers=post, json={}).status_code == 403
    assert client.post("/api/board/start", headers=post, json={"labs": [LAB_A]}).status_code == 403
    assert client.post("/api/board/token", headers=post, json={"lab": LAB_B}).status_code == 403


def test_a_trainee_cannot_inject_or_heal_unless_allowed_and_never_during_an_exercise(labs, monkeypatch):
    called = []
    monkeypatch.setattr(F, "inject", lambda *a, **k: called.append(a))
    monkeypatch.setattr(F, "heal", lambda *a, **k: called.append(a))
    config = U.UiConfig(host="0.0.0.0", token="boss")
    plain = config.mint_trainee(LAB_A)  # check only (the default)
    client, console = _client(config)
    h = {"Authorization": f"Bearer {plain}", **_csrf(console, plain)}
    body = {"kind": "link-down", "node": "g1-leaf1", "port": "eth3"}
    assert client.post(f"/api/lab/{LAB_A}/fault", headers=h, json=body).status_code == 403
    assert client.post(f"/api/lab/{LAB_A}/heal", headers=h, json={"all": True}).status_code == 403
    assert client.post(f"/api/lab/{LAB_A}/restart", headers=h, json={"node": "spine1"}).status_code == 403
    assert client.get(f"/api/lab/{LAB_A}/faults", headers=h).status_code == 403
    # allowed by the trainer, but an exercise runs: still refused, and no fault list
    hands = config.mint_trainee(LAB_A, ("check", "fault"))
    h2 = {"Authorization": f"Bearer {hands}", **_csrf(console, hands)}
    _exercise(LAB_A, labs[LAB_A])
    assert client.post(f"/api/lab/{LAB_A}/fault", headers=h2, json=body).status_code == 403
    assert client.post(f"/api/lab/{LAB_A}/heal", headers=h2, json={"all": True}).status_code == 403
    assert client.get(f"/api/lab/{LAB_A}/faults", headers=h2).status_code == 403
    # the exercise switched check off: refused too
    _exercise(LAB_A, labs[LAB_A], disabled=["check"])
    assert client.post(f"/api/lab/{LAB_A}/check", headers=h2, json={}).status_code == 403
    assert called == []
    # after reveal the allowed trainee may list faults (an empty list here)
    _exercise(LAB_A, labs[LAB_A], revealed=True)
    assert client.get(f"/api/lab/{LAB_A}/faults", headers=h2).json() == []


def test_the_trainee_exercise_view_never_names_the_fault(labs):
    config = U.UiConfig(host="0.0.0.0", token="boss")
    tok = config.mint_trainee(LAB_A)
    client, _ = _client(config)
    _exercise(LAB_A, labs[LAB_A])
    view = client.get(f"/api/lab/{LAB_A}/exercise", headers={"Authorization": f"Bearer {tok}"})
    assert view.status_code == 200
    text = view.text
    assert "training jobs on rail 1 are slow" in text
    for secret in ("g1-leaf1", "eth3", "link-down", "spine1", '"seed"'):
        assert secret not in text, secret
    page = client.get(f"/t/{LAB_A}", headers={"Authorization": f"Bearer {tok}"}).text
    assert "g1-leaf1:eth3" not in page and "admin down" not in page
    # the trainer's record has the seed
    rec = client.get(f"/api/lab/{LAB_A}/exercise/record", headers={"Authorization": "Bearer boss"}).json()
    assert rec["seed"] == 7 and "faults" not in rec  # faults only once revealed


def test_the_trainee_snapshot_hides_fault_records_and_secret_events(labs):
    _exercise(LAB_A, labs[LAB_A])
    w = LabWatch(LAB_A)
    w.faults = [{"id": "f1", "kind": "link-down", "node": "g1-leaf1", "port": "eth3",
                 "note": "admin down g1-leaf1:eth3", "injected_at": 1.0}]
    w.add_event("fault", "fault f1 link-down injected: admin down g1-leaf1:eth3", "bad", secret=True)
    w.add_event("link", "g1-leaf1:eth3 admin-down (g1-leaf1:eth3--spine1:eth1)", "bad")
    w._publish(w._data(exercise=True))
    assert b"admin down g1-leaf1:eth3" in w.snapshot.trainer_json
    trainee = w.snapshot.trainee_json
    assert b"admin down" not in trainee and b'"f1"' not in trainee
    assert b"g1-leaf1:eth3 admin-down" in trainee  # what the lab shows is not hidden (the CLI shows it too)


# ---- anti-forgery and validation ----------------------------------------------------------------
def test_a_post_without_the_anti_forgery_token_is_refused(labs, monkeypatch):
    called = []
    monkeypatch.setattr(F, "inject", lambda *a, **k: called.append(a))
    client, console = _client(U.UiConfig())
    body = {"kind": "link-down", "node": "g1-leaf1", "port": "eth3"}
    assert client.post(f"/api/lab/{LAB_A}/fault", json=body).status_code == 403
    assert client.post(f"/api/lab/{LAB_A}/fault", json=body, headers={"X-CSRF-Token": "00"}).status_code == 403
    h = _csrf(console, "local")
    # a cross-site page cannot borrow the token either
    assert client.post(f"/api/lab/{LAB_A}/fault", json=body,
                       headers={**h, "Origin": "http://evil.example"}).status_code == 403
    # state changes are POSTs only
    assert client.get(f"/api/lab/{LAB_A}/fault").status_code == 405
    assert called == []


@pytest.mark.parametrize("body", [
    {"kind": "link-down", "node": "g1-leaf1; touch /tmp/railab-ui-pwned", "port": "eth3"},
    {"kind": "link-down", "node": "$(reboot)", "port": "eth3"},
    {"kind": "link-down", "node": "g1-leaf1", "port": "eth3`id`"},
    {"kind": "link-down", "node": "g1-leaf1", "port": "eth99"},
    {"kind": "link-down", "node": "g1-leaf1", "peer": "spine1|cat"},
    {"kind": "rm -rf /", "node": "g1-leaf1", "port": "eth3"},
    {"kind": "grey-loss", "node": "g1-leaf1", "port": "eth3", "percent": "5; ls"},
    {"kind": "daemon-kill", "node": "spine1", "daemon": "bgpd && ls"},
    {"kind": "link-down", "node": ["g1-leaf1"], "port": "eth3"},
])
def test_bad_names_are_400_and_run_nothing(labs, monkeypatch, body):
    called = []
    monkeypatch.setattr(F, "inject", lambda *a, **k: called.append(a))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: called.append(a))
    client, console = _client(U.UiConfig())
    res = client.post(f"/api/lab/{LAB_A}/fault", json=body, headers=_csrf(console, "local"))
    assert res.status_code == 400, res.text
    assert "error" in res.json()
    assert called == []
    assert not os.path.exists("/tmp/railab-ui-pwned")


def test_other_names_are_validated_too(labs, monkeypatch):
    client, console = _client(U.UiConfig())
    h = _csrf(console, "local")
    assert client.get("/api/lab/nosuchlab/state").status_code == 404
    assert client.get("/api/lab/..%2f..%2fetc/state").status_code == 404
    assert client.get(f"/api/lab/{LAB_A}/node/srv1;ls").status_code == 400
    assert client.get(f"/api/lab/{LAB_A}/link/a--b").status_code == 400
    assert client.post(f"/api/lab/{LAB_A}/check", json={"only": ["bgp; ls"]}, headers=h).status_code == 400
    assert client.post(f"/api/lab/{LAB_A}/heal", json={"id": "f9"}, headers=h).status_code == 400
    assert client.post(f"/api/lab/{LAB_A}/fault", content=b"not json", headers=h).status_code == 400
    assert client.post("/api/board/start", json={"labs": ["../x"]}, headers=h).status_code == 404
    assert client.post("/api/board/start", json={"labs": [LAB_A], "level": 9}, headers=h).status_code == 400
    assert client.post(f"/api/lab/{LAB_A}/exercise/meltdown", json={}, headers=h).status_code == 404


# ---- the diagram and the board ------------------------------------------------------------------
def test_the_diagram_tags_every_node_and_link_in_lab_json_order(labs):
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    w = LabWatch(LAB_A)
    svg = U.diagram_svg(w)
    import re

    nodes = re.findall(r'data-node="([^"]+)"', svg)
    assert sorted(nodes) == sorted(n.name for n in w.spec.nodes) and len(nodes) == 14
    links = re.findall(r'data-link="([^"]*)"', svg)
    assert sorted(links) == sorted(w.link_ends) and len(links) == len(set(links)) == 32
    # each tagged edge's graphviz title names the link's two nodes (and the server's port)
    for m in re.finditer(r'data-link="([^"]+)">\s*<title>([^<]*)</title>', svg):
        title = m.group(2).replace("&#45;", "-")
        a, b = (e.split(":")[0] for e in m.group(1).split("--"))
        assert {a, b} == {t.split(":")[0] for t in title.split("--")}, (m.group(1), title)


def test_the_score_sheets_export_names_faults_only_once_revealed(labs):
    client, _ = _client(U.UiConfig())
    _exercise(LAB_A, labs[LAB_A])
    running = client.get("/api/board/scores.csv").text
    assert running.splitlines()[0].startswith("lab,level,seed")
    assert "g1-leaf1" not in running and ",7," not in running
    board = client.get("/api/board").json()
    row = next(r for r in board if r["name"] == LAB_A)
    assert row["sheet"]["faults_total"] == 1 and "seed" not in row["sheet"] and row["elapsed_s"] >= 29
    _exercise(LAB_A, labs[LAB_A], revealed=True)
    done = client.get("/api/board/scores.csv").text
    assert "link-down at g1-leaf1:eth3" in done
    sheets = client.get("/api/board/scores.json").json()
    assert sheets[0]["seed"] == 7


def test_switching_off_status_hides_the_live_state_from_the_trainee(labs):
    _exercise(LAB_A, labs[LAB_A], disabled=["status"])
    w = LabWatch(LAB_A)
    w.ifstatus = {"g1-leaf1": {"eth3": "admin-down"}}
    w.add_event("link", "g1-leaf1:eth3 admin-down (g1-leaf1:eth3--spine1:eth1)", "bad")
    w._observe(full=False, tick=False)
    trainer, trainee = json.loads(w.snapshot.trainer_json), json.loads(w.snapshot.trainee_json)
    assert trainer["links_down"] and trainer["exercise"]["live_hidden"]
    assert trainee["links_down"] == {} and not any(e["kind"] == "link" for e in trainee["events"])
    config = U.UiConfig(host="0.0.0.0", token="boss")
    tok = config.mint_trainee(LAB_A)
    client, _ = _client(config)
    h = {"Authorization": f"Bearer {tok}"}
    assert client.get(f"/api/lab/{LAB_A}/node/spine1", headers=h).status_code == 403
    assert client.get(f"/api/lab/{LAB_A}/link/g1-leaf1:eth3--spine1:eth1", headers=h).status_code == 403


def test_every_page_shares_one_observation(labs):
    """Two followers, one thread, the same encoded snapshot; the thread stops when asked."""
    import asyncio
    import threading

    w = LabWatch(LAB_A, interval=0.2)
    w.switches = []  # no vtysh against the namespaces this test does not have
    w.follow()
    w.follow()
    try:
        async def two_pages():
            a, b = await asyncio.gather(w.wait(0, 10), w.wait(0, 10))
            return a, b

        a, b = asyncio.run(two_pages())
        assert a.version >= 1 and a is b and a.trainer_json == b.trainer_json
        assert sum(t.name == f"railab-ui-{LAB_A}" for t in threading.enumerate()) == 1
        snap = json.loads(a.trainer_json)
        assert snap["lab"] == LAB_A and snap["links_total"] == 32 and snap["ready"]
    finally:
        w.unfollow()
        w.unfollow()
        w.stop()
    assert not any(t.name == f"railab-ui-{LAB_A}" for t in threading.enumerate())


def test_a_lab_that_goes_down_ends_its_stream_and_leaves_the_index(labs):
    w = LabWatch(LAB_B)
    st.remove_lab_dir(LAB_B)
    assert w._observe(full=True, tick=True) is False
    assert json.loads(w.snapshot.trainer_json)["up"] is False
    assert any("is down" in e["text"] for e in w.event_list(trainee=False))
    client, _ = _client(U.UiConfig())
    assert f'data-lab="{LAB_B}"' not in client.get("/").text
    assert client.get(f"/lab/{LAB_B}").status_code == 404


def test_no_console_action_changes_faults_while_an_exercise_runs(labs, monkeypatch):
    """Issue 48: the trainer's page too: inject, heal, restart (not a level-1 repair tool), drill
    and swap-cables are refused (409) with the exercise's one message while it runs; nothing
    reaches railab.testbed.faults. After reveal the trainer may inject again."""
    called = []
    for fn in ("inject", "heal", "restart_node", "swap_cables"):
        monkeypatch.setattr(F, fn, lambda *a, _fn=fn, **k: called.append(_fn) or [])
    client, console = _client(U.UiConfig())  # loopback: the trainer
    h = _csrf(console, "local")
    _exercise(LAB_A, labs[LAB_A])
    message = store.refusal(LAB_A, store.running(LAB_A))
    posts = {"fault": {"kind": "link-down", "node": "g1-leaf1", "port": "eth3"}, "heal": {"all": True},
             "restart": {"node": "g1-leaf1"}, "drill": {"kind": "link-down", "node": "g1-leaf1", "port": "eth3"},
             "exercise/swap-cables": {"a": "srv1:eth1", "b": "srv1:eth2"}}
    for path, body in posts.items():
        r = client.post(f"/api/lab/{LAB_A}/{path}", headers=h, json=body)
        assert r.status_code == 409 and r.json()["error"] == message, (path, r.status_code, r.text)
    assert called == []
    _exercise(LAB_A, labs[LAB_A], revealed=True)
    assert client.post(f"/api/lab/{LAB_A}/heal", headers=h, json={"all": True}).status_code == 200
    assert called == ["heal"]


def test_the_console_check_names_failures_at_the_exercise_detail(labs, monkeypatch):
    """The console's check (as railab check) names no element and no repair command at level 2."""
    from types import SimpleNamespace

    from railab.checks import runner
    from railab.checks.base import Cause, CheckResult

    row = CheckResult(check="daemons", name="g1-leaf2 daemons", status="fail", node="g1-leaf2",
                      reason="bgpd not running on g1-leaf2: bring it back (railab restart uia g1-leaf2)",
                      cause=Cause(kind="daemon-dead", node="g1-leaf2", daemon="bgpd"))
    monkeypatch.setattr(runner, "run_checks", lambda *a, **k: [row])
    w = SimpleNamespace(lab=LAB_A, spec=None, executor=None, netns_of=None)
    assert "railab restart" in json.dumps(U.run_check(w, None))  # no exercise: the check's words
    _exercise(LAB_A, labs[LAB_A])
    rec = store.load(LAB_A)
    rec["level"] = 2
    store.save(LAB_A, rec, X.public_view(rec))
    text = json.dumps(U.run_check(w, None))
    assert "railab restart" not in text and "bgpd" not in text and "daemons at g1-leaf2" in text


def test_a_load_runs_own_samples_put_its_queues_on_the_diagram(labs):
    """The page's load run hands each of its port samples to the live view: the link takes the
    deeper end's backlog at once (a poke publishes it), other links keep their rows. Before,
    the diagram showed a queue only if the live view's own tick fell inside the run (CI: a
    3 s incast on a loaded host, 'load run done' and no queue ever drawn)."""
    w = LabWatch(LAB_A)
    (a_node, a_port), lid = next(iter(w.port_link.items()))
    (b_node, b_port) = next(e for e in w.link_ends[lid] if e != (a_node, a_port))
    other = next(x for x in w.link_ends if x != lid)
    w.capacity = {other: {"port": "x:y", "gbps": 1.5, "backlog_bytes": 7, "drops": 0,
                          "pause_events": 0, "paused": False, "ce": None}}
    w.show_run_sample({f"{a_node}:{a_port}": {"backlog_bytes": 3000, "dropped": 0},
                       f"{b_node}:{b_port}": {"backlog_bytes": 120000, "dropped": 0},
                       "nowhere:eth9": {"backlog_bytes": 5}})
    assert w.capacity[lid]["backlog_bytes"] == 120000 and w.capacity[lid]["port"] == f"{b_node}:{b_port}"
    assert w.capacity[other]["backlog_bytes"] == 7 and w.capacity[other]["gbps"] == 1.5
    assert w._wake.is_set()
    assert lid in w._data(False)["capacity"]  # published: a row with a backlog is on the page


def test_the_fault_form_passes_a_link_speed_faults_gbps(labs, monkeypatch):
    """The console's fault API hands ``gbps`` to the link-speed fault (before, only the CLI
    could: the form's fault was refused with "give --gbps"); a speed out of range is 400."""
    called = []

    class Rec:  # what inject returns, as much of it as the handler reads
        id, kind, note = "f1", "link-speed", "trained"

        def model_dump(self, mode=None):
            return {"id": self.id}

    monkeypatch.setattr(F, "inject", lambda *a, **k: called.append((a, k)) or Rec())
    client, console = _client(U.UiConfig())
    h = _csrf(console, "local")
    body = {"kind": "link-speed", "node": "g1-leaf1", "port": "eth3", "gbps": "200"}
    res = client.post(f"/api/lab/{LAB_A}/fault", json=body, headers=h)
    assert res.status_code == 200, res.text
    assert called[0][0][1] == "link-speed" and called[0][1]["gbps"] == 200.0
    res = client.post(f"/api/lab/{LAB_A}/fault", json={**body, "gbps": "0"}, headers=h)
    assert res.status_code == 400 and len(called) == 1
