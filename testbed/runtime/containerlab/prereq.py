"""What the containerlab runtime needs on the host (the binary, a Docker engine, the images),
and the one door to railab.testbed.docker_exec, whose ``docker`` package is the optional
``containerlab`` extra (pip install 'railab[containerlab]')."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from railab.errors import RailabError
from railab.testbed.runtime.containerlab.commands import BINARY, USE_NETNS


def docker_exec() -> ModuleType:
    """railab.testbed.docker_exec, imported on first use: it imports the optional ``docker``
    package (~0.15 s), which only a containerlab lab needs (docs/architecture.md, "Imports")."""
    from railab.testbed import docker_exec as module  # optional dependency: docker

    return module


def missing_images(images: Iterable[str], client: Any) -> list[str]:
    """The images (sorted, unique) that ``client`` (docker.DockerClient) does not hold locally."""
    from docker.errors import ImageNotFound

    missing = []
    for image in sorted(set(images)):
        try:
            client.images.get(image)
        except ImageNotFound:
            missing.append(image)
    return missing


def _image_hint(images: list[str]) -> str:
    hints = []
    for img in images:
        if img.startswith("railab/gpu-server"):
            hints.append(f"docker build -t {img} images/gpu-server")
        elif img.startswith("railab/frr"):
            hints.append(f"docker build -t {img} images/frr")
        elif "sonic" in img:
            hints.append(f"docker load -i docker-sonic-vs.gz and tag it {img} (docs/containerlab.md)")
        else:
            hints.append(f"docker pull {img}")
    return "; ".join(hints)


def preflight(images: Iterable[str], *, binary: str = BINARY, docker_url: str | None = None) -> Any:
    """Check the pieces ``up`` needs: the containerlab binary, a reachable Docker engine and
    every image present locally. Returns the docker client.

    Raises ONE RailabError naming every missing piece and suggesting ``--runtime netns``.
    """
    problems = []
    if shutil.which(binary) is None:
        problems.append(f"the containerlab binary ({binary!r}) is not on PATH "
                        "(install: https://containerlab.dev/install/)")
    client = None
    try:
        client = docker_exec().docker_client(docker_url, timeout=5)
    except RailabError as exc:
        problems.append(str(exc).split("; start dockerd")[0])
    if client is not None:
        gone = missing_images(images, client)
        if gone:
            problems.append(f"image(s) not present locally: {', '.join(gone)} ({_image_hint(gone)})")
    if problems:
        raise RailabError("the containerlab runtime cannot run here: " + "; ".join(problems) + f"; {USE_NETNS}")
    return client
