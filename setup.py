"""Build hook: the wheel carries the refund bot's tools and policy for ``agentq demo``.

Everything else is configured in ``pyproject.toml``. The repository's top-level
``tools/`` and ``policies/`` are the one source of the refund-bot project (the
example users copy); this copies them into the built package as
``agentq/demo/project/`` so ``agentq demo`` works after a plain ``pip install``
from any folder. An editable install needs no copy: ``agentq.demo.project``
reads the checkout's folders.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DEMO_FOLDERS = {"tools": "*.py", "policies": "*.toml"}


class BuildWithDemoProject(build_py):
    """``build_py`` that also copies the demo project into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "agentq" / "demo" / "project"
        for folder, pattern in DEMO_FOLDERS.items():
            files = sorted((ROOT / folder).glob(pattern))
            if not files:
                raise SystemExit(f"setup.py: no {pattern} in {ROOT / folder}: cannot ship the demo")
            (target / folder).mkdir(parents=True, exist_ok=True)
            for file in files:
                shutil.copyfile(file, target / folder / file.name)


setup(cmdclass={"build_py": BuildWithDemoProject})
