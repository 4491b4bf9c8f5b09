"""The Dockerfiles in images/ build the images the generated topology names (issue 7)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from railab.topologies.generator import generate

ROOT = Path(__file__).resolve().parents[1]


def _build_tag(dockerfile: Path) -> str:
    """The tag in the Dockerfile's documented `docker build -t TAG images/...` line."""
    m = re.search(r"docker build -t (\S+) images/", dockerfile.read_text())
    assert m, f"{dockerfile} documents no `docker build -t TAG` line"
    return m.group(1)


def test_generated_images_are_the_ones_images_dir_builds(tmp_path):
    labdir = generate("mini", tmp_path / "lab", name="imgcheck")
    topo = yaml.safe_load(next(labdir.glob("*.clab.yml")).read_text())
    nodes = topo["topology"]["nodes"]
    switch_images = {n["image"] for n in nodes.values() if n.get("labels", {}).get("role") in ("leaf", "spine")}
    server_images = {n["image"] for n in nodes.values() if n.get("labels", {}).get("role") == "server"}
    assert switch_images == {_build_tag(ROOT / "images/frr/Dockerfile")}
    assert server_images == {_build_tag(ROOT / "images/gpu-server/Dockerfile")}
    # the FRR image's pinned version is the FRR release railab's netns runtime tests with
    assert "8.4.4" in _build_tag(ROOT / "images/frr/Dockerfile")
    # binds land where the FRR image reads them
    leaf = nodes["g1-leaf1"]
    assert any(b.endswith(":/etc/frr/frr.conf") for b in leaf["binds"])
    assert any(b.endswith(":/etc/frr/daemons") for b in leaf["binds"])
