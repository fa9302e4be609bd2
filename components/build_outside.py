"""setuptools' own build backend, told to build outside the source tree.

setuptools builds a wheel in ``build/`` and writes ``*.egg-info`` beside the package, in the folder
pip builds from: a clone installed with ``pip install ..`` (or ``-e ..``, as infra/requirements.txt
does) would collect them. Each hook here is setuptools' own, run with a per-build configuration
file (distutils reads the one ``DIST_EXTRA_CONFIG`` names after the project's) that puts both in a
temporary folder, removed when the hook returns. pyproject.toml names this backend
(``backend-path``); it is not part of the package. tests/project/test_layout.py builds the wheel and
checks the tree is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook as setuptools has it


@contextlib.contextmanager
def _outside() -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="tpu-training-build-") as folder:
        config = os.path.join(folder, "outside.cfg")
        with open(config, "w", encoding="utf-8") as file:
            file.write(f"[build]\nbuild_base = {folder}/build\n[egg_info]\negg_base = {folder}\n")
        previous = os.environ.get("DIST_EXTRA_CONFIG")
        os.environ["DIST_EXTRA_CONFIG"] = config
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = previous


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    with _outside():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    with _outside():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    with _outside():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Any = None) -> str:
    with _outside():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    with _outside():
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    with _outside():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    with _outside():
        return _setuptools.get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    with _outside():
        return _setuptools.get_requires_for_build_sdist(config_settings)
