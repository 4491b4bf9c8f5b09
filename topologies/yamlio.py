"""railab's one YAML reader: PyYAML's libyaml-backed safe loader when PyYAML is built with it,
else the pure-Python safe loader. Both build plain data only and read railab's files alike;
libyaml accepts a few documents the pure-Python loader refuses (tab-indented JSON), and its
error messages are worded differently and carry no caret line.

Measured: the pure-Python loader took 5.5 s on the full 1024-GPU fabric's clab file (libyaml
about 20x faster), and 39 ms for the switch catalog that one ``railab up`` reads 8 times.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

#: the loader class every railab YAML read uses (``yaml.CSafeLoader`` or ``yaml.SafeLoader``)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """The one YAML document in ``text`` (``yaml.safe_load`` semantics: plain data only).
    Raises ``yaml.YAMLError`` for text that is not YAML."""
    return yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader class


def load_yaml_all(text: str) -> Iterator[Any]:
    """Every YAML document in ``text`` (``yaml.safe_load_all`` semantics).
    Raises ``yaml.YAMLError`` for text that is not YAML."""
    return yaml.load_all(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader class
