"""Teardown: ``down`` and ``down_all`` of netns labs."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

from railab.errors import RailabError
from railab.testbed import state as st
from railab.testbed.namespaces import ip_batch, netns_path
from railab.testbed.runtime.netns.procs import _alive, _ns_inode, _pids_in_namespaces, _pids_naming, _visiting
from railab.testbed.signals import signals_deferred


class TeardownMixin:
    """NetnsRuntime's teardown methods (mixed into railab.testbed.runtime.netns.NetnsRuntime)."""

    # -- down ----------------------------------------------------------------------------------
    def down(self, lab: str, also: Iterable[str] = ()) -> None:
        """Remove everything recorded for ``lab``: FRR processes (recorded PIDs and any process
        inside the lab's namespaces), namespaces (their veths go with them), the ledger entries
        and ``/run/railab/<lab>``. Idempotent; works from a partial record after a crash.

        A Ctrl-C (SIGINT, SIGTERM, SIGHUP) during the teardown takes effect once it is done
        (railab.testbed.signals.signals_deferred; the sweep is bounded, 3.5 s at 4096 GPUs): an
        interrupted ``down`` used to leave the state record of a lab whose namespaces and
        daemons were gone, which ``list`` still showed as running. ``also``: namespaces to
        remove besides the record's and the ledger's (a failed ``up``'s own list: another
        command's down may have taken the record and the ledger entries meanwhile)."""
        with signals_deferred():
            self._down(lab, also)

    def _down(self, lab: str, also: Iterable[str] = ()) -> None:
        st.mark_removing(lab)  # an up still running on it reports this, not its next step's error
        record = st.load(lab)
        if record is not None and record.runtime != self.name:
            raise RailabError(
                f"lab {lab!r} runs on the {record.runtime} runtime: "
                f"`railab down {lab}` hands it to that runtime"
            )
        namespaces = set(record.namespaces.values()) if record is not None else set()
        namespaces |= {ns for ns, owner in st.ledger().items() if owner == lab}
        namespaces |= set(also)
        inodes = {i for i in (_ns_inode(ns) for ns in namespaces) if i}
        run_dir = str(st.lab_dir(lab)) + "/"
        # Sweep until a pass finds nothing: processes in the lab's namespaces, and any process
        # naming the lab's run directory (a daemon that double-forked late, or whose namespace
        # was already deleted). Recorded PIDs are covered by both. Not a command visiting a
        # namespace of the lab (procs._visiting): an ``up`` still running, whose main thread was
        # inside one for a moment, was SIGKILLed here (CI: exit -9 instead of "taken down by
        # another command"); it finds the lab gone and removes what it made after this down.
        end = time.monotonic() + 10
        while time.monotonic() < end:
            naming = set(_pids_naming(run_dir))
            victims = naming | {p for p in _pids_in_namespaces(inodes)
                                if p not in naming and not _visiting(p, inodes)}
            if not victims:
                break
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            while victims and time.monotonic() < end:
                victims = {p for p in victims if _alive(p)}
                if victims:
                    time.sleep(0.01)
        # one `ip -batch` deletes them all (pyroute2's netns.remove per namespace needs its
        # 0.7 s package import and a call each); the ledger entries go once they are gone
        present = [ns for ns in sorted(namespaces) if netns_path(ns).exists()]
        try:  # -force: past a namespace another down (of the same lab, at the same time) deleted
            ip_batch({None: [f"netns delete {ns}" for ns in present]}, what=f"lab {lab}: deleting namespaces",
                     force=True)
        except RailabError:
            left = [ns for ns in present if netns_path(ns).exists()]
            if left:
                raise RailabError(f"could not delete namespace {left[0]} (and {len(left) - 1} more): "
                                  f"`ip netns delete {left[0]}` says why") from None
        for ns in sorted(namespaces):
            st.ledger_remove(ns)
        st.remove_lab_dir(lab)

    def down_all(self) -> list[str]:
        """Down every lab under /run/railab and every ledger namespace (orphans); return lab names."""
        labs = set(st.labs()) | set(st.ledger().values())
        # labs recorded by another runtime (containerlab) are not ours to tear down
        labs = {lab for lab in labs if (st.load(lab) or st.LabState(lab=lab)).runtime == self.name}
        for lab in sorted(labs):
            self.down(lab)
        return sorted(labs)

    # -- status / inspect ----------------------------------------------------------------------
