"""railab's one YAML reader: PyYAML's libyaml-backed safe loader when PyYAML is built with it,
else the pure-Python safe loader. Both build plain data only and read railab's files alike;
libyaml accepts a few documents the pure-Python loader refuses (tab-indented JSON).

On top of the safe loader, every read:

* refuses a mapping that repeats a key (YAML 1.2 section 3.2.1.1 requires unique keys; PyYAML
  keeps the last one silently, so a second ``lab:`` block used to drop the first);
* refuses nesting deeper than :data:`MAX_DEPTH` before parsing (libyaml's parser recurses on the
  C stack: ~50,000 nested ``[`` crashed the process with SIGSEGV; the pure-Python one raises
  RecursionError);
* reports errors as one line, :func:`yaml_error_text`.

Measured: the pure-Python loader took 5.5 s on the full 1024-GPU fabric's clab file (libyaml
about 20x faster), and 39 ms for the switch catalog that one ``railab up`` read 8 times.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from railab.errors import UsageError

#: the loader class railab's YAML reads build on (``yaml.CSafeLoader`` or ``yaml.SafeLoader``)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: deepest nesting accepted (flow brackets, or block indentation and ``- `` chains, in levels);
#: railab's own files nest fewer than 10 levels
MAX_DEPTH = 1000

_BRACKET = re.compile(r"[\[\]{}]")
_DEEP_PREFIX = re.compile(rf"^[ \t?:-]{{{2 * MAX_DEPTH},}}", re.MULTILINE)


class _Loader(YAML_LOADER):  # type: ignore[misc, valid-type]
    """The safe loader, refusing repeated mapping keys."""

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201 - PyYAML's signature
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor below says so
                    continue
                if first is not None:
                    raise ConstructorError(None, None, f"duplicate key {key!r} (first on line {first + 1}): "
                                           "keep one", key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


class NestingError(yaml.YAMLError):
    """A document nested deeper than :data:`MAX_DEPTH` levels."""


def _check_depth(text: str) -> None:
    depth = 0
    for m in _BRACKET.finditer(text):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise NestingError(f"nested more than {MAX_DEPTH} levels deep (flow brackets)")
    if _DEEP_PREFIX.search(text):
        raise NestingError(f"nested more than {MAX_DEPTH} levels deep (indentation or '- ' chains)")


def load_yaml(text: str) -> Any:
    """The one YAML document in ``text`` (``yaml.safe_load`` semantics: plain data only; a
    repeated key is an error). Raises ``yaml.YAMLError`` for text that is not such YAML."""
    _check_depth(text)
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader class
    except RecursionError:
        raise NestingError("nested too deeply to read") from None


def load_yaml_all(text: str) -> Iterator[Any]:
    """Every YAML document in ``text`` (``yaml.safe_load_all`` semantics, repeated keys refused).
    Raises ``yaml.YAMLError`` for text that is not such YAML (lazily, as the documents are read)."""
    _check_depth(text)
    return yaml.load_all(text, Loader=_Loader)  # noqa: S506 - a safe loader class


def yaml_error_text(exc: yaml.YAMLError, text: str | None = None) -> str:
    """``exc`` as one line: ``line L, column C: what is wrong (context)``; with ``text`` (the
    document read), a hint when the character there is a tab (YAML indents with spaces only,
    YAML 1.2 section 6.1)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = exc.problem or exc.context or "not valid YAML"
        if exc.context and exc.problem:
            what += f" ({exc.context})"
        if mark is not None and text is not None:
            lines = text.splitlines()
            line = lines[mark.line] if mark.line < len(lines) else ""
            if "\t" in line[:mark.column + 1]:
                what += "; indent with spaces, not tabs"
        return " ".join(f"{where}{what}".split())
    return " ".join(str(exc).split())


class YamlFileError(UsageError):
    """A YAML file that cannot be read, is not UTF-8 or is not valid YAML (one line; callers
    re-raise it as their own error class)."""


def read_yaml_file(path: str | Path, what: str, label: str | None = None) -> Any:
    """The one document of the YAML file ``path`` (:func:`load_yaml`). ``what`` names the file's
    role in the messages (``"intent"``, ``"switch catalog"``), ``label`` how to show the path
    (default: the path). Raises :class:`YamlFileError`: ``cannot read <what> <label>: ...``,
    ``<what> <label> is not UTF-8 text (byte N): save it as UTF-8`` or
    ``<what> <label> is not valid YAML: line L, column C: ...``."""
    label = str(path) if label is None else label
    text = ""
    try:
        text = Path(path).read_text()
        return load_yaml(text)
    except OSError as exc:
        raise YamlFileError(f"cannot read {what} {label}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{what} {label} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{what} {label} is not valid YAML: {yaml_error_text(exc, text)}") from None
