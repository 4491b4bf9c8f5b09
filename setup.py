"""Build hook only: everything else (metadata, packages, package-dir) is in pyproject.toml.

``build_py`` empties its ``build_lib`` (``build/lib``) before copying the packages, so a stale
``build/`` left by an older layout (``build/lib/testbed/...``) can never end up in a wheel:
a wheel of railab holds ``railab/...`` and its dist-info, nothing else
(tests/test_dependencies.py builds one over a planted stale ``build/lib/testbed``).
"""

import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class CleanBuildPy(build_py):
    """``build_py`` that starts from an empty ``build_lib``."""

    def run(self):
        if not getattr(self, "editable_mode", False):  # `pip install -e .` builds elsewhere
            shutil.rmtree(self.build_lib, ignore_errors=True)
        super().run()


setup(cmdclass={"build_py": CleanBuildPy})
