"""BFD timers of the fabric sessions: the one home of the numbers ``frr.conf`` and the drills use.

Every leaf-spine BGP session runs BFD (bfdd) with FRR profile ``fabric``. Default 300 ms x 5:
a dead link is detected in 1.5 s (``rx_ms x multiplier``) while a busy 2-core host running a whole
lab does not flap sessions. ``lab.json`` records the profile (``bfd``) so fault drills know how
long detection takes; an intent may override it (``lab.bfd``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BfdProfile(BaseModel):
    """BFD timers: ``tx_ms``/``rx_ms`` intervals in milliseconds (FRR accepts 10..60000),
    ``multiplier`` missed packets before the session is down (2..255), ``enabled`` on/off
    (off: no ``neighbor FABRIC bfd`` and no ``bfd`` block in ``frr.conf``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    profile: str = Field("fabric", pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
    tx_ms: int = Field(300, ge=10, le=60000, description="transmit interval, ms")
    rx_ms: int = Field(300, ge=10, le=60000, description="receive interval, ms")
    multiplier: int = Field(5, ge=2, le=255, description="detect multiplier")

    @property
    def detect_ms(self) -> int:
        """Worst-case detection time of a dead link, ms (``rx_ms x multiplier``)."""
        return self.rx_ms * self.multiplier


#: railab's default (frr.conf as generated before the profile existed: 300 ms x 5).
DEFAULT_BFD = BfdProfile()
