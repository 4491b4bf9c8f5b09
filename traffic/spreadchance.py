"""How likely an idle ECMP uplink is by hashing chance alone.

``railab traffic`` warns when a source leaf sent its flows on fewer uplinks than ``lab.json``
plans (:func:`railab.traffic.engine.spread_warnings`). With every uplink up, a few flows can
miss an uplink by pure hashing luck: 8 flows on 2 uplinks all land on one of them 2/2^8 = 0.78 %
of the time, and a run that sends from 16 leaves sees that on some leaf about 12 % of the time.
These functions give the exact chance, so the warning is raised only when luck is an unlikely
explanation for the whole run, and says how unlikely.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb


def idle_uplink_chance(k: int, n: int, used: int | None = None) -> float:
    """The chance that ``n`` flows hashed uniformly and independently onto ``k`` ECMP uplinks
    use at most ``used`` of them (default ``k - 1``: some uplink carries no flow). Exact, by
    inclusion-exclusion: ``P(exactly m used) = C(k, m) * sum_j (-1)^j C(m, j) ((m - j) / k)^n``.

    ``idle_uplink_chance(2, 8) == 2 / 2**8`` (0.78 %); ``idle_uplink_chance(8, 32)`` is about
    11 %. 1.0 when ``used >= k`` or ``used >= n`` (nothing unusual about it); 0.0 when flows
    were sent but ``used < 1``."""
    used = k - 1 if used is None else used
    if k <= 0 or used >= k or used >= n:
        return 1.0
    if used < 1:
        return 0.0 if n > 0 else 1.0
    total = Fraction(0)
    for m in range(1, used + 1):
        exactly = sum((-1) ** j * comb(m, j) * Fraction(m - j, k) ** n for j in range(m + 1))
        total += comb(k, m) * exactly
    return float(total)


def any_leaf_chance(chances: list[float]) -> float:
    """The chance that at least one of several independent healthy leaves shows its unlikely
    spread: ``1 - prod(1 - p)``. A run that sends from many leaves gets many draws."""
    none = 1.0
    for p in chances:
        none *= 1.0 - min(1.0, max(0.0, p))
    return 1.0 - none


def percent(p: float) -> str:
    """A chance as a percentage with two significant digits: ``0.78 %``, ``0.0031 %``,
    ``12 %``; ``< 0.0001 %`` below that."""
    x = p * 100
    if x >= 10:
        return f"{x:.0f} %"
    if x < 1e-4:
        return "< 0.0001 %"
    return f"{float(f'{x:.2g}'):g} %"
