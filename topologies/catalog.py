"""Switch catalog: the switch models the planner can size a fabric with.

The shipped catalog is data (``topologies/catalog.yml``); a user YAML file with the same layout
extends it or overrides models by name::

    switches:
      MY-SWITCH:
        native_ports: 64          # physical ports
        native_speed_gbps: 400    # Gb/s per physical port
        breakout_speeds_gbps: [200, 100]   # optional: lower speeds a port splits into
        capacity_tbps: 25.6       # optional, default ports x speed
        latency_ns: 700           # optional

Port counts at a speed follow breakout arithmetic: a physical port of ``native_speed_gbps``
split to ``speed`` gives ``native_speed_gbps / speed`` ports (seed guide: "CX864E-N provides
64 x 800G ports, which can be split into 128 x 400G ports").

Errors are :class:`CatalogError` (a ``railab.errors.UsageError``, so a ``ValueError``) and say
what to change.
"""

from __future__ import annotations

import difflib
import functools
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from railab.errors import UsageError
from railab.topologies.yamlio import YamlFileError, read_yaml_file

__all__ = [
    "CatalogError",
    "UnknownSwitchModel",
    "SwitchModel",
    "load_catalog",
    "get_model",
    "parse_speed",
]


class CatalogError(UsageError):
    """A switch catalog problem (bad file, bad model, unsupported port speed)."""


class UnknownSwitchModel(CatalogError):
    """A switch model name the catalog does not know; the message lists the known models."""


class SwitchModel(BaseModel):
    """One switch model.

    Fields (units in brackets):

    * ``name`` -- catalog key, e.g. ``CX864E-N``.
    * ``native_ports`` [ports] / ``native_speed_gbps`` [Gb/s] -- physical front panel.
    * ``breakout_speeds_gbps`` [Gb/s] -- lower speeds one physical port splits into; each must
      divide ``native_speed_gbps``.
    * ``ports_400g`` [ports] -- 400G-equivalent ports (derived: CX864E-N 128, CX732Q-N 32; 0 if
      the model cannot run 400G ports). If given explicitly it must agree with the derivation;
      a model given only ``ports_400g`` is taken as that many native 400G ports.
    * ``capacity_tbps`` [Tb/s] -- switching capacity (default: ports x speed).
    * ``latency_ns`` [ns] -- port-to-port latency (seed: CX864E-N 560 ns, CX732Q-N 500 ns).
    * ``form_factor`` -- the front-panel cage (``OSFP``, ``QSFP-DD``, ...): what the optics
      count calls the transceivers (vendor datasheets; the seed says nothing of optics).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    vendor: str = ""
    description: str = ""
    native_ports: int = Field(gt=0)
    native_speed_gbps: int = Field(default=400, gt=0)
    breakout_speeds_gbps: tuple[int, ...] = ()
    ports_400g: int = Field(default=0, ge=0)
    capacity_tbps: float = Field(default=0.0, ge=0)
    latency_ns: int | None = Field(default=None, ge=0)
    form_factor: str = ""

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("native_ports") is None and data.get("ports_400g"):
            data["native_ports"] = data["ports_400g"]
            data.setdefault("native_speed_gbps", 400)
        ports = data.get("native_ports")
        speed = data.get("native_speed_gbps", 400)
        breakouts = tuple(data.get("breakout_speeds_gbps") or ())
        if not isinstance(ports, int) or not isinstance(speed, int) or ports <= 0 or speed <= 0:
            return data  # field validation reports it
        for b in breakouts:
            if not isinstance(b, int) or b <= 0 or b >= speed or speed % b:
                raise ValueError(
                    f"breakout speed {b!r} must be a whole fraction of the native "
                    f"{speed}G port speed (e.g. {speed // 2})"
                )
        if speed == 400:
            derived = ports
        elif 400 in breakouts:
            derived = ports * (speed // 400)
        else:
            derived = 0
        given = data.get("ports_400g")
        if given not in (None, 0) and given != derived:
            raise ValueError(
                f"ports_400g={given} disagrees with {ports} x {speed}G ports "
                f"(breakouts {list(breakouts)}), which give {derived} x 400G; drop ports_400g "
                "or fix the port fields"
            )
        data["ports_400g"] = derived
        if not data.get("capacity_tbps"):
            data["capacity_tbps"] = ports * speed / 1000
        return data

    @property
    def speeds_gbps(self) -> list[int]:
        """Port speeds this model supports [Gb/s], fastest first."""
        return sorted({self.native_speed_gbps, *self.breakout_speeds_gbps}, reverse=True)

    def breakout_at(self, speed_gbps: int) -> int:
        """Ports one physical cage carries at ``speed_gbps`` (1 at the native speed; CX864E-N at
        400G: 2). Raises CatalogError like :meth:`ports_at`."""
        return self.ports_at(speed_gbps) // self.native_ports

    def ports_at(self, speed_gbps: int) -> int:
        """Number of ports at ``speed_gbps`` [Gb/s] after breakout (64 x 800G -> 128 x 400G).

        Raises CatalogError if the model cannot run ports at that speed.
        """
        if speed_gbps == self.native_speed_gbps:
            return self.native_ports
        if speed_gbps in self.breakout_speeds_gbps:
            return self.native_ports * (self.native_speed_gbps // speed_gbps)
        supported = ", ".join(f"{s}G" for s in self.speeds_gbps)
        raise CatalogError(
            f"{self.name} has no {speed_gbps}G ports (supported: {supported}); "
            f"choose one of those port speeds or another switch model"
        )


def parse_speed(text: str | int) -> int:
    """Parse a port speed such as ``400G``, ``400g``, ``400`` or ``1.6T`` into Gb/s."""
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip().upper().removesuffix("BPS").removesuffix("B/S")
        try:
            if s.endswith("T"):
                value = round(float(s[:-1]) * 1000)
            else:
                value = int(float(s.removesuffix("G")))
        except ValueError:
            raise CatalogError(
                f"port speed {text!r} is not a speed; write e.g. 400G or 800G"
            ) from None
    if value <= 0:
        raise CatalogError(f"port speed {text!r} must be positive; write e.g. 400G")
    return value


def _load_file(path: Path, label: str) -> dict[str, SwitchModel]:
    try:
        doc = read_yaml_file(path, "switch catalog", label)
    except YamlFileError as exc:
        raise CatalogError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("switches"), dict):
        raise CatalogError(
            f"switch catalog {label} must be a mapping with a 'switches:' key mapping model names "
            "to their fields (native_ports, native_speed_gbps, ...); see topologies/catalog.yml"
        )
    models: dict[str, SwitchModel] = {}
    for name, fields in doc["switches"].items():
        if not isinstance(fields, dict):
            raise CatalogError(
                f"switch catalog {label}: model {name!r} must be a mapping of fields"
            )
        try:
            models[str(name)] = SwitchModel(name=str(name), **fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "model"
            msg = err.get("msg", str(exc)).removeprefix("Value error, ")
            raise CatalogError(f"switch catalog {label}: model {name!r}: {where}: {msg}") from None
        except TypeError as exc:
            raise CatalogError(f"switch catalog {label}: model {name!r}: {exc}") from None
    return models


@functools.cache
def _shipped_catalog() -> dict[str, SwitchModel]:
    """The shipped catalog, read once per process (its models are frozen; callers get a copy of
    the mapping): one ``railab up`` of an intent looks models up 8 times."""
    shipped = resources.files("railab.topologies").joinpath("catalog.yml")
    with resources.as_file(shipped) as p:
        return _load_file(Path(p), "topologies/catalog.yml")


def load_catalog(extra: str | Path | None = None) -> dict[str, SwitchModel]:
    """Return ``{model name: SwitchModel}``: the shipped catalog plus the optional user file.

    ``extra`` is a YAML file with a ``switches:`` mapping; its models are added, and override
    shipped models of the same name. Raises CatalogError for a missing or malformed file.
    """
    models = dict(_shipped_catalog())
    if extra is not None:
        models.update(_load_file(Path(extra), str(extra)))
    return models


def get_model(catalog: dict[str, SwitchModel], name: str) -> SwitchModel:
    """Look ``name`` up in ``catalog`` (case-insensitive).

    Raises UnknownSwitchModel naming the known models (and a close match, if any).
    """
    if name in catalog:
        return catalog[name]
    folded = {k.casefold(): v for k, v in catalog.items()}
    if name.casefold() in folded:
        return folded[name.casefold()]
    known = ", ".join(sorted(catalog))
    close = difflib.get_close_matches(name.upper(), [k.upper() for k in catalog], n=1)
    hint = ""
    if close:
        hint = f" (did you mean {next(k for k in catalog if k.upper() == close[0])}?)"
    raise UnknownSwitchModel(
        f"unknown switch model {name!r}{hint}; known models: {known}. "
        "Add your own with --catalog my-switches.yml"
    )
