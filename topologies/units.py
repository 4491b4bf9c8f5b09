"""Units and ratios: the one parser of ``DOWN:UP`` ratios (leaf downlink:uplink bandwidth).

The planner (``--oversubscription``), the intent (``design.oversubscription``,
``lab.oversubscription``) and the oversubscription check all read ratios with
:func:`ratio_parts` / :func:`parse_ratio`. Port speeds are read by
:func:`railab.topologies.catalog.parse_speed` (it belongs to the switch catalog).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from railab.errors import UsageError

_RATIO = re.compile(r"\s*(\d+(?:\.\d+)?)\s*:\s*(\d+(?:\.\d+)?)\s*")


class RatioError(UsageError):
    """A ratio that is not ``DOWN:UP`` with both sides positive (exit 2)."""


def ratio_parts(text: str, key: str = "oversubscription") -> tuple[int, int]:
    """Parse ``DOWN:UP`` (e.g. ``1:1``, ``3:1``, ``1.5:1``) into positive integers ``(d, u)``.

    Whole numbers are returned as written (``2:2`` -> ``(2, 2)``); decimals are scaled to the
    smallest whole pair (``1.5:1`` -> ``(3, 2)``). Raises :class:`RatioError` naming ``key``:
    malformed, ``d:0`` (no uplinks to the spines) or ``0:u`` (no ports for servers).
    """
    m = _RATIO.fullmatch(str(text))
    if not m:
        raise RatioError(
            f"{key} {text!r} is malformed: write DOWN:UP (downlink:uplink), e.g. 1:1 "
            "(non-blocking), 2:1 or 3:1"
        )
    fd, fu = Fraction(m.group(1)), Fraction(m.group(2))
    if fu == 0:
        raise RatioError(
            f"{key} {text} leaves no uplinks to the spines: use a ratio with a non-zero uplink "
            "side, e.g. 1:1, 2:1 or 3:1"
        )
    if fd == 0:
        raise RatioError(f"{key} {text} leaves no ports for servers: use e.g. 1:1, 2:1 or 3:1")
    if fd.denominator == 1 and fu.denominator == 1:
        return int(fd), int(fu)
    scale = math.lcm(fd.denominator, fu.denominator)
    d, u = int(fd * scale), int(fu * scale)
    g = math.gcd(d, u)
    return d // g, u // g


def parse_ratio(text: str, key: str = "oversubscription") -> Fraction:
    """``DOWN:UP`` as a Fraction: ``"1:1"`` -> 1, ``"3:1"`` -> 3, ``"1.5:1"`` -> 3/2.

    Raises :class:`RatioError` (a ValueError) as :func:`ratio_parts` does.
    """
    d, u = ratio_parts(text, key)
    return Fraction(d, u)


def ratio_text(d: int, u: int) -> str:
    """``(d, u)`` in lowest terms as ``"d:u"`` (``(64, 64)`` -> ``"1:1"``)."""
    g = math.gcd(d, u) or 1
    return f"{d // g}:{u // g}"
