"""A handle on a running lab for checks, the CLI and the pytest plugin.

``LiveLab.attach("mylab")`` (a running lab's name, or its lab directory) or
``LiveLab.bring_up("mini", name="t1")`` (an intent name / YAML, generated and brought up on the
netns runtime; ``close()`` tears it down). The handle gives ``.spec`` (``lab.json``),
``.executor``, ``.hops(src, dst, pxn)``, ``.check(only=...)`` and ``.exec(node, argv)``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from railab.checks.base import CheckResult
from railab.checks.deploy import bring_up
from railab.checks.runner import run_checks
from railab.testbed import state as st
from railab.testbed.executor import ExecResult, Executor
from railab.testbed.labref import resolve
from railab.testbed.runtime import get_runtime
from railab.testbed.runtime.netns.deploy import NetnsDeployer
from railab.topologies.generator import generate
from railab.topologies.labspec import LabSpec
from railab.topologies.naming import netns_name
from railab.traffic.engine import Engine
from railab.traffic.patterns import Flow, parse_endpoint, route


class LiveLab:
    """A running lab: its ``spec``, ``name``, ``dir`` (lab directory), ``runtime`` name and
    ``executor``. ``owned`` labs (brought up by :meth:`bring_up`) are torn down by :meth:`close`."""

    def __init__(self, spec: LabSpec, labdir: Path, runtime: str, executor: Executor,
                 owned: bool = False, tmpdir: tempfile.TemporaryDirectory | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.dir = Path(labdir)
        self.runtime = runtime
        self.executor = executor
        self.owned = owned
        self._tmp = tmpdir

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def attach(cls, ref: str | Path) -> LiveLab:
        """Attach to a running lab by name or lab directory.

        Raises RailabError when the lab is not up or its lab.json cannot be read.
        """
        lab = resolve(ref)
        runtime = lab.require_up().runtime
        return cls(lab.spec(), lab.labdir, runtime, get_runtime(runtime).executor(lab.name))

    @classmethod
    def bring_up(cls, intent: str | Path, name: str | None = None, *,
                 timeout: float | None = None) -> LiveLab:
        """Generate ``intent`` (shipped name or YAML path) into a temporary directory, bring it up
        on the netns runtime (converged), and return an owned handle. Raises RailabError (nothing
        left behind) on failure; ValueError for a bad intent."""
        tmp = tempfile.TemporaryDirectory(prefix="railab-lab-")
        try:
            labdir = generate(intent, Path(tmp.name) / "lab", name=name)
            rt = NetnsDeployer()
            bring_up(rt, labdir, timeout=timeout)
        except BaseException:
            tmp.cleanup()
            raise
        spec = LabSpec.load(labdir)
        return cls(spec, labdir, "netns", rt.executor(spec.name), owned=True, tmpdir=tmp)

    @property
    def record(self) -> st.LabState:
        """The runtime's state record of this lab (``/run/railab/<lab>/state.json``).

        Raises RailabError when the lab is not up."""
        return get_runtime(self.runtime).record(self.name)

    def close(self) -> None:
        """Tear the lab down if this handle brought it up (idempotent)."""
        if self.owned:
            get_runtime(self.runtime).down(self.name)
            self.owned = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LiveLab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- helpers -----------------------------------------------------------------------------
    def netns_of(self, node: str) -> str:
        """Network namespace of ``node`` (``clab-<lab>-<node>`` on both runtimes)."""
        return netns_name(self.name, node)

    def hops(self, src: str, dst: str, pxn: bool = False) -> int | None:
        """Observed switch hops of one real RoCEv2 flow ``src`` -> ``dst`` (``srv1:gpu3`` or
        ``srv1:nic4``), by received TTL; None when nothing arrived. Raises
        ``traffic.patterns.PatternError`` (a ValueError) for an unknown endpoint."""
        flow = route(self.spec, Flow(parse_endpoint(self.spec, src), parse_endpoint(self.spec, dst),
                                     size=1024, messages=2, mtu=1024, pxn=pxn))
        with Engine(self.spec, self.netns_of) as eng:
            (res,) = eng.run([flow], timeout=0.3)
        return res.hops_ttl if res.delivered else None

    def check(self, only: str | Iterable[str] | None = None) -> list[CheckResult]:
        """Run the checks (all, or ``only``) and return every result; see checks.runner."""
        return run_checks(self.spec, self.executor, only=only, netns_of=self.netns_of)

    def exec(self, node: str, argv: list[str], *, timeout: float = 30.0) -> ExecResult:
        """Run ``argv`` on ``node`` through the lab's executor."""
        return self.executor.run(node, list(argv), timeout=timeout)

    def __repr__(self) -> str:
        return f"LiveLab({self.name!r}, runtime={self.runtime!r}, owned={self.owned})"
