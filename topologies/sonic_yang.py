"""config_db.json -> SONiC YANG JSON, and validation of it with SONiC's own models (libyang).

SONiC's YANG models (sonic-buildimage ``src/sonic-yang-models/yang-models/sonic-*.yang``) are
the judge of a ``config_db.json``: SONiC's ``config`` CLI (``config load`` / GCU) runs every
change through them. SONiC translates config_db tables to YANG data in
``src/sonic-yang-mgmt/sonic_yang_ext.py`` (``_xlateConfigDB``); this module implements the same
rules, driven by the models themselves:

* a table ``T`` lives in the module whose top container (``sonic-<x>``) holds a container ``T``:
  ``{"sonic-port:sonic-port": {"PORT": {"PORT_LIST": [...]}}}``;
* a key ``a|b`` is split on ``|`` and its parts fill the keys of the list of ``T`` that has that
  many keys (``INTERFACE|Ethernet0`` -> ``INTERFACE_LIST``, ``INTERFACE|Ethernet0|10.0.0.0/31``
  -> ``INTERFACE_IPPREFIX_LIST``);
* a field that names a leaf becomes that leaf; a leaf-list takes a JSON list or a comma-separated
  string; the remaining fields of an entry whose list holds an inner one-key list (the maps:
  ``DSCP_TO_TC_MAP|AZURE`` -> ``{"26": "3"}``) become entries of that inner list
  (``{"dscp": "26", "tc": 3}``);
* values take the JSON encoding of RFC 7951 for their YANG type: 8/16/32-bit integers are JSON
  numbers, 64-bit integers and decimal64 strings, booleans true/false, everything else a string;
  a leafref takes its target's type.

Which models: ``$RAILAB_SONIC_YANG``, ``railab generate --sonic-yang DIR``, or the shared copy
(``<repo>/../shared/sonic-yang-models/{202305,master}``, see its SOURCE.md). Validation needs the
Python binding of libyang (PyPI ``libyang`` 2.7.x builds against Debian 12's ``libyang2-dev``
2.1; ``scripts/bootstrap.sh --test`` installs it); translation needs it too (the types come from
the models), so everything here imports it lazily and raises :class:`SonicYangError` without it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from railab.errors import UsageError

#: The model sets railab checks its configs against (sub-directories of the shared copy).
MODEL_SETS = ("202305", "master")
#: ``<repo>/../shared/sonic-yang-models`` (CI clones the repo next to ``shared/``).
SHARED_MODELS = Path(__file__).resolve().parents[2] / "shared" / "sonic-yang-models"
#: The machine-wide copy (a git worktree's ``..`` is not the main clone's).
HOST_MODELS = Path("/work/shared/sonic-yang-models")
KEY_SEPARATOR = "|"


class SonicYangError(UsageError):
    """A config_db that SONiC's models reject, a table no model knows, or models/libyang missing."""


def find_models(model_set: str | None = None) -> Path | None:
    """The directory of SONiC YANG models to use: ``$RAILAB_SONIC_YANG`` if set, else
    ``<repo>/../shared/sonic-yang-models/<model_set>``, else
    ``/work/shared/sonic-yang-models/<model_set>`` (``model_set`` one of :data:`MODEL_SETS`,
    default ``202305``). None when none exists."""
    env = os.environ.get("RAILAB_SONIC_YANG")
    sub = model_set or MODEL_SETS[0]
    cands = [Path(env)] if env else [SHARED_MODELS / sub, HOST_MODELS / sub]
    return next((c for c in cands if c.is_dir()), None)


def _libyang():
    try:
        import libyang
    except ImportError:
        raise SonicYangError(
            "checking config_db.json with SONiC's YANG models needs the libyang Python binding: "
            "apt-get install -y libyang2-dev python3-dev gcc && pip install 'libyang>=2.7,<2.8'"
        ) from None
    return libyang


@dataclass
class _List:
    name: str
    keys: list[str]
    leaves: dict[str, Any]  # leaf name -> libyang Type
    leaf_lists: dict[str, Any]
    inner: _List | None = None  # the map list (one key + one value leaf)


@dataclass
class _Table:
    module: str
    top: str
    lists: list[_List] = field(default_factory=list)
    containers: dict[str, _List] = field(default_factory=dict)  # DEVICE_METADATA|localhost


@dataclass
class SonicModels:
    """The SONiC models of one directory, loaded into a libyang context (``ctx``), with the
    table -> (module, lists) index the translation uses. Build with :func:`load_models`."""

    path: Path
    ctx: Any
    tables: dict[str, _Table]

    def translate(self, config_db: dict) -> dict:
        """SONiC YANG JSON (RFC 7951) of a config_db document (see the module docstring).

        Raises SonicYangError for a table no model defines, a key whose number of parts no list
        of its table has, or a field that is neither a leaf nor a map entry.
        """
        out: dict[str, dict] = {}
        for table, entries in sorted(config_db.items()):
            spec = self.tables.get(table)
            if spec is None:
                raise SonicYangError(f"config_db table {table} has no SONiC YANG model in {self.path}")
            top = out.setdefault(f"{spec.module}:{spec.top}", {})
            cont = top.setdefault(table, {})
            for key, fields in entries.items():
                if key in spec.containers:
                    cont[key] = self._entry(table, key, spec.containers[key], [], fields)
                    continue
                parts = key.split(KEY_SEPARATOR)
                lst = next((x for x in spec.lists if len(x.keys) == len(parts)), None)
                if lst is None:
                    raise SonicYangError(f"{table}|{key}: no list of {table} has {len(parts)} key(s) "
                                         f"({', '.join(f'{x.name}: {x.keys}' for x in spec.lists)})")
                cont.setdefault(lst.name, []).append(self._entry(table, key, lst, parts, fields))
        return out

    def _entry(self, table: str, key: str, lst: _List, parts: list[str], fields: dict) -> dict:
        item: dict[str, Any] = {}
        for k, v in zip(lst.keys, parts, strict=True):
            item[k] = _json_value(lst.leaves[k], v) if k in lst.leaves else v
        inner: list[dict] = []
        for name, value in fields.items():
            if name in lst.leaves:
                item[name] = _json_value(lst.leaves[name], value)
            elif name in lst.leaf_lists:
                vals = value if isinstance(value, list) else [v for v in str(value).split(",") if v]
                item[name] = [_json_value(lst.leaf_lists[name], v) for v in vals]
            elif lst.inner is not None:
                ik = lst.inner.keys[0]
                (vname, vtype), = [(n, t) for n, t in lst.inner.leaves.items() if n != ik]
                inner.append({ik: _json_value(lst.inner.leaves[ik], name), vname: _json_value(vtype, value)})
            else:
                raise SonicYangError(f"{table}|{key}: field {name!r} is not in {lst.name} "
                                     f"(leaves: {', '.join(sorted(lst.leaves))})")
        if inner:
            item[lst.inner.name] = inner
        return item

    def errors(self, config_db: dict) -> list[str]:
        """libyang's complaints about ``config_db`` (translated, parsed strictly and validated:
        types, patterns, ranges, leafrefs, must/when, mandatory nodes of the modules present);
        empty when SONiC's models accept it."""
        libyang = _libyang()
        try:
            data = json.dumps(self.translate(config_db))
        except SonicYangError as exc:
            return [str(exc)]
        try:
            node = self.ctx.parse_data_mem(data, "json", strict=True, validate_present=True)
        except libyang.LibyangError as exc:
            return [str(exc)]
        if node is not None:
            node.free_all() if hasattr(node, "free_all") else node.free()
        return []

    def validate(self, config_db: dict, where: str = "config_db.json") -> None:
        """Raise SonicYangError naming ``where``, the models and libyang's first errors when
        :meth:`errors` is not empty."""
        errs = self.errors(config_db)
        if errs:
            raise SonicYangError(f"{where} fails SONiC's YANG models ({self.path}): " + "; ".join(errs[:5]))


def _json_value(t: Any, value: Any) -> Any:
    """RFC 7951 JSON encoding of a config_db string ``value`` for libyang type ``t``."""
    from libyang.schema import Type

    base = t.base()
    if base == Type.LEAFREF:
        target = t.leafref_type()
        return _json_value(target, value) if target is not None else str(value)
    if base in (Type.INT8, Type.INT16, Type.INT32, Type.UINT8, Type.UINT16, Type.UINT32):
        try:
            return int(value)
        except (TypeError, ValueError):
            return value  # leave it to libyang to reject, with its own message
    if base == Type.BOOL:
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if base == Type.UNION:
        members = list(t.union_types())
        nums = (Type.INT8, Type.INT16, Type.INT32, Type.UINT8, Type.UINT16, Type.UINT32)
        if members and all(m.base() in nums for m in members):
            return _json_value(members[0], value)
    return str(value)


def _index(ctx: Any, modules: list[Any]) -> dict[str, _Table]:
    from libyang.schema import SContainer, SLeaf, SLeafList, SList

    def as_list(node: Any) -> _List:
        keys = [k.name() for k in node.keys()] if isinstance(node, SList) else []
        leaves, leaf_lists, inner = {}, {}, None
        for c in node.children():
            if isinstance(c, SLeaf):
                leaves[c.name()] = c.type()
            elif isinstance(c, SLeafList):
                leaf_lists[c.name()] = c.type()
            elif isinstance(c, SList):
                inner = as_list(c)
        return _List(node.name(), keys, leaves, leaf_lists, inner)

    tables: dict[str, _Table] = {}
    for mod in modules:
        for top in mod.children():
            if not isinstance(top, SContainer):
                continue
            for tbl in top.children():
                if not isinstance(tbl, SContainer):
                    continue
                lists = [as_list(x) for x in tbl.children() if isinstance(x, SList)]
                conts = {x.name(): as_list(x) for x in tbl.children() if isinstance(x, SContainer)}
                if (lists or conts) and tbl.name() not in tables:
                    tables[tbl.name()] = _Table(mod.name(), top.name(), lists, conts)
    return tables


@lru_cache(maxsize=4)
def load_models(path: str | Path) -> SonicModels:
    """Load every ``sonic-*.yang`` of ``path`` (imports resolved from the same directory;
    ``ietf-inet-types``/``ietf-yang-types`` are libyang's own) into one libyang context.

    Raises SonicYangError when libyang is missing, the directory holds no ``sonic-*.yang``, or a
    model does not load (the message names it).
    """
    libyang = _libyang()
    p = Path(path).resolve()
    files = sorted(p.glob("sonic-*.yang"))
    if not files:
        raise SonicYangError(f"{p} holds no sonic-*.yang models: point --sonic-yang at the "
                             "yang-models directory of a sonic-buildimage checkout "
                             "(src/sonic-yang-models/yang-models, rendered)")
    ctx = libyang.Context(str(p))
    modules = []
    for f in files:
        name = f.stem
        try:
            modules.append(ctx.get_module(name) if _loaded(ctx, name) else ctx.load_module(name))
        except libyang.LibyangError as exc:
            raise SonicYangError(f"SONiC model {f} does not load with libyang: {exc}") from None
    return SonicModels(p, ctx, _index(ctx, modules))


def _loaded(ctx: Any, name: str) -> bool:
    try:
        mod = ctx.get_module(name)
    except Exception:  # noqa: BLE001 - libyang raises its own error type for "not loaded"
        return False
    return mod is not None and mod.implemented()


def validate_config_db(config_db: dict, models: str | Path, where: str = "config_db.json") -> None:
    """Validate one config_db document against the models in directory ``models``
    (:meth:`SonicModels.validate`)."""
    load_models(str(models)).validate(config_db, where)


def validate_lab(labdir: str | Path, models: str | Path) -> int:
    """Validate every ``configs/*/config_db.json`` of a lab directory; returns how many were
    checked. Raises SonicYangError at the first file the models reject (naming it)."""
    m = load_models(str(models))
    files = sorted(Path(labdir).glob("configs/*/config_db.json"))
    for f in files:
        m.validate(json.loads(f.read_text()), where=str(f))
    return len(files)
