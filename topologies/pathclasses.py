"""Path classes and their expected hop counts: the one registry.

A path class names how a GPU pair talks (seed guide, "Intra-rail / Inter-rail (with PXN)
Communication") and how many routed (TTL-decrementing) switch hops the packet takes NIC to NIC.
The planner's hop table (``railab plan``), ``lab.json`` ``expected_hops`` (generator), the traffic
engine's expected hops (``railab.traffic.patterns``), the hop check and the report all read this
registry, so they cannot disagree. Shipped classes:

============================  ===========================  ======================================
class                         Rail-optimized               Rail-only
============================  ===========================  ======================================
``intra-server``              0 (NVLink)                   0
``intra-rail``                1 (the rail's leaf)          1
``inter-rail-same-leaf``      (never: one rail per leaf)   1 when a leaf carries 2+ rails but not
                                                           all of them (lab only)
``inter-rail`` (no PXN)       3 (leaf, spine, leaf)        1 if one leaf carries every rail, else
                                                           unreachable (no spine tier: use PXN)
``inter-rail-pxn``            1                            1
``cross-group``               3 (lab: only with 2+ groups) n/a (a single group)
``cross-pod``                 5 (three tiers: leaf, spine, n/a (a single tier)
                              super-spine, spine, leaf;
                              lab: only with 2+ pods)
============================  ===========================  ======================================

Reconciled labels (before this registry the planner and the generator disagreed on Rail-only):
the planner said ``inter-rail`` 1 on a one-leaf fabric and listed ``cross-group`` as None, the
generator said ``inter-rail`` None plus ``inter-rail-same-leaf`` 1 whenever a leaf carried 2+
rails. Now both compute ``inter-rail`` the same way (1 when one leaf carries every rail) and
``inter-rail-same-leaf`` appears only where it differs from ``inter-rail`` (2+ rails per leaf but
not all). The planner lists the production classes (``in_plan``: every class except
``inter-rail-same-leaf``, which its ``inter-rail`` note and ``"1 or none"`` cover); ``lab.json``
lists the classes that occur in the lab (``occurs``), keys unchanged.

How a flow is classified is part of the registry too: a class declares ``matches(path)``, a
predicate over a :class:`FlowPath` (the fabric, both ends' server, GPU, group and the leaf of the
NIC that carries the flow, PXN or not); :func:`classify` tries the classes by ``precedence``
(lower first, then registration order) and returns the first that matches. A class with
``refines`` set is a reporting refinement of another class (``inter-rail-same-leaf`` refines
``inter-rail``): :func:`refine` reports a flow of the refined class under it when the lab lists
it and it matches. ``nvlink_only`` marks the class whose flows never leave the server;
``pattern`` / ``pxn`` name the registered traffic pattern (``railab.traffic.patterns``) whose
flows exercise the class (the demo runs one set per class the lab lists).

``cross-pod`` is the three-tier class (pods of groups under a super-spine tier, planned past the
two-tier limit; RFC 7938 section 3.2's 5-stage Clos): a flow between groups of different pods
climbs leaf, pod spine, super-spine, pod spine, leaf = 5 routed hops. Add a class with
:func:`register_path_class`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from railab.errors import UsageError


class PathClassError(UsageError):
    """An unknown or clashing path class (exit 2); the message lists the registered classes."""


@dataclass(frozen=True)
class Fabric:
    """What hop counts depend on: ``architecture`` (``rail-only``/``rail-optimized``), ``rails``
    (= GPUs per server), ``rails_per_leaf``, ``groups`` (production for the planner, the lab's
    own for ``lab.json``) and ``groups_per_pod`` (0: two tiers; else three tiers, groups
    numbered fabric-wide, pod ``p`` holding groups ``(p-1) x groups_per_pod + 1 ..``)."""

    architecture: str
    rails: int
    rails_per_leaf: int = 1
    groups: int = 1
    groups_per_pod: int = 0

    @property
    def three_tier(self) -> bool:
        return self.groups_per_pod > 0

    @property
    def pods(self) -> int:
        """Pods of the fabric (1 on two tiers)."""
        return -(-self.groups // self.groups_per_pod) if self.three_tier else 1

    def pod_of(self, group: int) -> int:
        """Pod (1-based) of ``group`` (1 on two tiers)."""
        return (group - 1) // self.groups_per_pod + 1 if self.three_tier else 1

    @property
    def rail_optimized(self) -> bool:
        return self.architecture == "rail-optimized"


#: Two NICs on one leaf are that leaf's one routed hop apart, whatever the class.
SAME_LEAF_HOPS = 1


@dataclass(frozen=True)
class PathEnd:
    """One end of a flow: ``server``, 0-based ``gpu``, the server's ``group`` and the ``leaf`` of
    the NIC that carries the flow at this end (with PXN, the source's NIC on the destination
    GPU's rail)."""

    server: str
    gpu: int
    group: int
    leaf: str


@dataclass(frozen=True)
class FlowPath:
    """What a class predicate sees of a flow: the lab's ``fabric``, ``src``/``dst`` ends and
    whether NCCL's ``pxn`` is on."""

    fabric: Fabric
    src: PathEnd
    dst: PathEnd
    pxn: bool = False

    @property
    def same_server(self) -> bool:
        return self.src.server == self.dst.server

    @property
    def same_group(self) -> bool:
        return self.src.group == self.dst.group

    @property
    def same_gpu(self) -> bool:
        """Same GPU number at both ends, i.e. the same rail."""
        return self.src.gpu == self.dst.gpu

    @property
    def same_leaf(self) -> bool:
        return self.src.leaf == self.dst.leaf

    @property
    def same_pod(self) -> bool:
        """Both ends' groups sit in one pod (always on a two-tier fabric)."""
        return self.fabric.pod_of(self.src.group) == self.fabric.pod_of(self.dst.group)


@dataclass(frozen=True)
class PathClass:
    """One path class.

    * ``hops(fabric)``: routed switch hops NIC to NIC, None = unreachable by design;
    * ``occurs(fabric)``: the class exists in a lab of that shape (``lab.json`` lists it);
    * ``in_plan``: the planner's table lists it (the production view, with n/a rows);
    * ``note(fabric)``: the planner's one-line explanation; ``description``: the report's label;
    * ``matches(path)``: a flow (:class:`FlowPath`) belongs to the class (None: never a flow's
      class by itself); ``precedence``: the order :func:`classify` tries the classes in;
    * ``refines``: the class this one refines for reporting (see :func:`refine`);
    * ``nvlink_only``: flows of the class never leave the server (NVLink);
    * ``pattern``, ``pxn``: the traffic pattern (and PXN setting) whose flows exercise the class.
    """

    name: str
    description: str
    hops: Callable[[Fabric], int | None]
    occurs: Callable[[Fabric], bool] = lambda f: True
    in_plan: bool = True
    note: Callable[[Fabric], str] = lambda f: ""
    matches: Callable[[FlowPath], bool] | None = None
    precedence: int = 100
    refines: str | None = None
    nvlink_only: bool = False
    pattern: str | None = None
    pxn: bool = False


_CLASSES: dict[str, PathClass] = {}


def register_path_class(pc: PathClass, *, replace: bool = False) -> PathClass:
    """Add ``pc`` to the registry (after the shipped classes) and return it.

    Raises PathClassError if a class of that name exists and ``replace`` is False.
    """
    if pc.name in _CLASSES and not replace:
        raise PathClassError(f"path class {pc.name!r} is already registered")
    _CLASSES[pc.name] = pc
    return pc


def unregister_path_class(name: str) -> None:
    """Remove a class (tests registering a dummy class clean up with this); no-op if absent."""
    _CLASSES.pop(name, None)


def path_classes() -> dict[str, PathClass]:
    """Registered classes by name, in report order."""
    return dict(_CLASSES)


def get_path_class(name: str) -> PathClass:
    """The class called ``name``; raises PathClassError listing the registered classes."""
    try:
        return _CLASSES[name]
    except KeyError:
        raise PathClassError(
            f"unknown path class {name!r}; one of {', '.join(_CLASSES)}") from None


def classify(path: FlowPath) -> str:
    """The class of ``path``: the first registered class (by ``precedence``, then registration
    order) that has no ``refines`` and whose ``matches`` accepts it. Raises PathClassError when
    none does."""
    for pc in sorted(_CLASSES.values(), key=lambda c: c.precedence):
        if pc.refines is None and pc.matches is not None and pc.matches(path):
            return pc.name
    raise PathClassError(
        f"no registered path class matches {path.src.server}:gpu{path.src.gpu} -> "
        f"{path.dst.server}:gpu{path.dst.gpu} (pxn={path.pxn}); classes: {', '.join(_CLASSES)}")


def refine(name: str, path: FlowPath, listed: Collection[str]) -> str:
    """The class a flow of class ``name`` is reported under: the first class (by precedence) that
    ``refines`` ``name``, is ``listed`` (the lab's ``expected_hops``) and ``matches`` ``path``;
    else ``name`` itself."""
    for pc in sorted(_CLASSES.values(), key=lambda c: c.precedence):
        if pc.refines == name and pc.name in listed and pc.matches is not None \
                and pc.matches(path):
            return pc.name
    return name


def plan_classes() -> tuple[str, ...]:
    """Names of the classes the planner reports (``in_plan``)."""
    return tuple(n for n, c in _CLASSES.items() if c.in_plan)


def plan_hops(fabric: Fabric) -> tuple[dict[str, int | None], dict[str, str]]:
    """The planner's view: ``({class: hops}, {class: note})`` over :func:`plan_classes`
    (notes only where a class has one)."""
    hops = {n: c.hops(fabric) for n, c in _CLASSES.items() if c.in_plan}
    notes = {n: c.note(fabric) for n, c in _CLASSES.items() if c.in_plan and c.note(fabric)}
    return hops, notes


def lab_hops(fabric: Fabric) -> dict[str, int | None]:
    """``lab.json`` ``expected_hops``: ``{class: hops}`` for the classes that occur in the lab."""
    return {n: c.hops(fabric) for n, c in _CLASSES.items() if c.occurs(fabric)}


# ---- the shipped classes -----------------------------------------------------------------------


def _shared_leaf(f: Fabric) -> bool:
    return not f.rail_optimized and f.rails_per_leaf >= f.rails


def _inter_rail_note(f: Fabric) -> str:
    if f.rail_optimized:
        return "leaf, spine, leaf"
    if _shared_leaf(f):
        return "one leaf carries every rail"
    if f.rails_per_leaf > 1:
        return (f"1 hop only between rails on one leaf ({f.rails_per_leaf} per leaf); "
                "no spine tier otherwise: use PXN")
    return "no spine tier: use PXN"


register_path_class(PathClass(
    "intra-server", "intra-server (NVLink, never leaves the server)", lambda f: 0,
    note=lambda f: "NVLink/NVSwitch inside the server",
    matches=lambda p: p.same_server, precedence=10, nvlink_only=True, pattern="intra-server"))
register_path_class(PathClass(
    "intra-rail", "intra-rail (same rail, one leaf)", lambda f: 1, note=lambda f: "same leaf",
    matches=lambda p: p.same_group and p.same_gpu, precedence=50, pattern="intra-rail"))
register_path_class(PathClass(
    "inter-rail-same-leaf", "inter-rail, no PXN, both rails on one leaf (Rail-only)",
    lambda f: 1,
    occurs=lambda f: not f.rail_optimized and 1 < f.rails_per_leaf < f.rails,
    in_plan=False, matches=lambda p: p.same_leaf, precedence=60, refines="inter-rail"))
register_path_class(PathClass(
    "inter-rail", "inter-rail, no PXN",
    lambda f: 3 if f.rail_optimized else (1 if _shared_leaf(f) else None),
    note=_inter_rail_note,
    matches=lambda p: p.same_group and not p.pxn, precedence=70, pattern="inter-rail"))
register_path_class(PathClass(
    "inter-rail-pxn", "inter-rail with PXN (NVLink to the peer GPU, then its NIC)", lambda f: 1,
    note=lambda f: "NVLink to the peer GPU on the other rail, then its NIC",
    matches=lambda p: p.same_group and p.pxn, precedence=80, pattern="inter-rail", pxn=True))
register_path_class(PathClass(
    "cross-group", "cross-group", lambda f: 3 if f.rail_optimized else None,
    # three tiers with one group per pod: every pair of groups is cross-pod
    occurs=lambda f: f.rail_optimized and f.groups > 1 and f.groups_per_pod != 1,
    note=lambda f: "leaf, spine, leaf" if f.rail_optimized else "n/a: a single group",
    matches=lambda p: not p.same_group, precedence=40, pattern="cross-group"))
register_path_class(PathClass(
    "cross-pod", "cross-pod (three tiers: leaf, spine, super-spine, spine, leaf)",
    lambda f: 5 if f.rail_optimized and f.three_tier else None,
    occurs=lambda f: f.rail_optimized and f.three_tier and f.pods > 1,
    note=lambda f: ("leaf, spine, super-spine, spine, leaf" if f.rail_optimized and f.three_tier
                    else "n/a: two tiers, no pods"),
    matches=lambda p: not p.same_pod, precedence=35, pattern="cross-pod"))
