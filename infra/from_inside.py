"""A command run from inside infra/ (``python plan.py``, ``python -m plan``) runs as
``python -m infra.<command>`` from the project folder, where it would otherwise stop at its first
``from infra import ...`` with a ModuleNotFoundError.

The project folder is the nearest one from the working directory upwards that holds Pulumi.yaml
and this program (``infra/``), as the Pulumi CLI finds its project; when there is none, the
project this file belongs to. The command then runs there, as from the project folder (relative
paths in the plan, such as the trainer's files, are the same as from there).

Imported by its file name (infra/ is the script's folder, first on ``sys.path``); nothing else
imports it.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import NoReturn


def project_folder(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "Pulumi.yaml").is_file() and (folder / "infra" / "__init__.py").is_file():
            return folder
    return Path(__file__).resolve().parent.parent


def run_from_project(module: str) -> NoReturn:
    """Run ``module`` (``infra.plan``) as ``python -m`` would from the project folder, and exit."""
    root = project_folder(Path.cwd().absolute())
    print(f"note: running `python -m {module}` in {root}, the project folder", file=sys.stderr)
    os.chdir(root)
    sys.path[0] = str(root)  # in place of infra/, as `python -m` run there puts it
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)
