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
============================  ===========================  ======================================

Reconciled labels (before this registry the planner and the generator disagreed on Rail-only):
the planner said ``inter-rail`` 1 on a one-leaf fabric and listed ``cross-group`` as None, the
generator said ``inter-rail`` None plus ``inter-rail-same-leaf`` 1 whenever a leaf carried 2+
rails. Now both compute ``inter-rail`` the same way (1 when one leaf carries every rail) and
``inter-rail-same-leaf`` appears only where it differs from ``inter-rail`` (2+ rails per leaf but
not all). The planner lists the production classes (``in_plan``: every class except
``inter-rail-same-leaf``, which its ``inter-rail`` note and ``"1 or none"`` cover); ``lab.json``
lists the classes that occur in the lab (``occurs``), keys unchanged.

Add a class (e.g. a ``cross-pod`` class for a 3-tier fabric) with :func:`register_path_class`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from railab.errors import UsageError


class PathClassError(UsageError):
    """An unknown or clashing path class (exit 2); the message lists the registered classes."""


@dataclass(frozen=True)
class Fabric:
    """What hop counts depend on: ``architecture`` (``rail-only``/``rail-optimized``), ``rails``
    (= GPUs per server), ``rails_per_leaf`` and ``groups`` (production for the planner, the lab's
    own for ``lab.json``)."""

    architecture: str
    rails: int
    rails_per_leaf: int = 1
    groups: int = 1

    @property
    def rail_optimized(self) -> bool:
        return self.architecture == "rail-optimized"


@dataclass(frozen=True)
class PathClass:
    """One path class.

    * ``hops(fabric)``: routed switch hops NIC to NIC, None = unreachable by design;
    * ``occurs(fabric)``: the class exists in a lab of that shape (``lab.json`` lists it);
    * ``in_plan``: the planner's table lists it (the production view, with n/a rows);
    * ``note(fabric)``: the planner's one-line explanation; ``description``: the report's label.
    """

    name: str
    description: str
    hops: Callable[[Fabric], int | None]
    occurs: Callable[[Fabric], bool] = lambda f: True
    in_plan: bool = True
    note: Callable[[Fabric], str] = lambda f: ""


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
    note=lambda f: "NVLink/NVSwitch inside the server"))
register_path_class(PathClass(
    "intra-rail", "intra-rail (same rail, one leaf)", lambda f: 1, note=lambda f: "same leaf"))
register_path_class(PathClass(
    "inter-rail-same-leaf", "inter-rail, no PXN, both rails on one leaf (Rail-only)",
    lambda f: 1,
    occurs=lambda f: not f.rail_optimized and 1 < f.rails_per_leaf < f.rails,
    in_plan=False))
register_path_class(PathClass(
    "inter-rail", "inter-rail, no PXN",
    lambda f: 3 if f.rail_optimized else (1 if _shared_leaf(f) else None),
    note=_inter_rail_note))
register_path_class(PathClass(
    "inter-rail-pxn", "inter-rail with PXN (NVLink to the peer GPU, then its NIC)", lambda f: 1,
    note=lambda f: "NVLink to the peer GPU on the other rail, then its NIC"))
register_path_class(PathClass(
    "cross-group", "cross-group", lambda f: 3 if f.rail_optimized else None,
    occurs=lambda f: f.rail_optimized and f.groups > 1,
    note=lambda f: "leaf, spine, leaf" if f.rail_optimized else "n/a: a single group"))
