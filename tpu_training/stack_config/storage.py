"""``tpu-training:bucket`` and ``tpu-training:trainerCode``: the checkpoint buckets, and the code the
stack uploads to them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Optional

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from tpu_training_components.domain import naming

from .fields import (
    Model,
    no_problem,
)


class BucketConfig(Model):
    """``tpu-training:bucket``: overrides for the checkpoint buckets (one per region in use)."""

    name: Optional[StrictStr] = None
    location: Optional[StrictStr] = None
    # At most int32: the Cloud Storage JSON API's lifecycle conditions (daysSinceNoncurrentTime,
    # numNewerVersions) are int32 fields.
    noncurrent_version_retention_days: StrictInt = Field(default=7, ge=1, le=2**31 - 1)
    noncurrent_versions_kept: StrictInt = Field(default=3, ge=1, le=2**31 - 1)
    protect: StrictBool = True
    retain_on_delete: StrictBool = True

    _valid_name = field_validator("name")(no_problem(naming.bucket_name_problem))


PROJECT_ROOT_CONTEXT = "project_root"
"""The validation context's key for the project folder (Pulumi.yaml's), which ``load`` gives:
``trainerCode.folder`` is read from there. The folder is the program's, never this package's:
one installed package serves every project that imports it."""
TRAINER_CODE_VARIABLE = "TRAINER_CODE"
"""Where the stack uploaded the trainer: ``gs://<the run's bucket>/code``."""


class TrainerCodeConfig(Model):
    """``tpu-training:trainerCode``: files the stack uploads to ``code/`` in every checkpoint
    bucket, so a stack trains the same code in any project; each VM and Job finds them at
    ``$TRAINER_CODE``."""

    folder: StrictStr
    files: tuple[StrictStr, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _files_exist(self, info: ValidationInfo) -> TrainerCodeConfig:
        project_root = _project_root(info)
        folder = Path(self.folder)
        if folder.is_absolute() or ".." in folder.parts:
            raise ValueError(f"folder {self.folder!r} must be a path inside the project, like 'trainer'")
        for name in self.files:
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                raise ValueError(f"files: {name!r} must be a file name in the folder, like 'train.py'")
            if not (project_root / folder / name).is_file():
                raise ValueError(
                    f"files: {self.folder}/{name} is not a file in the project ({project_root}); "
                    f"the stack uploads it as it is"
                )
        if len(set(self.files)) != len(self.files):
            raise ValueError("files: each file once")
        missing = unlisted_sibling_imports(project_root / folder, self.files)
        if missing:
            importers: dict[str, list[str]] = {}
            for importer, names in missing.items():
                for name in names:
                    importers.setdefault(name, []).append(importer)
            # One importer each, a listed one first: where the chain starts.
            named = [
                f"{name} (imported by {sorted(by, key=lambda file: file not in self.files)[0]})"
                for name, by in sorted(importers.items())
            ]
            to_add = ", ".join(repr(name) for name in sorted(importers))
            raise ValueError(
                f"files leaves out modules of {self.folder}/ that the listed code imports: "
                f"{', '.join(named)}; only the files listed are uploaded, so the code would stop with "
                f"ModuleNotFoundError on every VM and Pod; add {to_add}"
            )
        return self

    def paths(self, project_root: Path) -> dict[str, Path]:
        """Object name in the bucket -> the file to upload, from the project in ``project_root``."""
        return {f"code/{name}": project_root / self.folder / name for name in self.files}


def _project_root(info: ValidationInfo) -> Path:
    context = info.context if isinstance(info.context, dict) else {}
    root = context.get(PROJECT_ROOT_CONTEXT)
    if not isinstance(root, Path):
        raise TypeError(
            "the stack config is validated by stack_config.load(project_root=...), which names the project"
        )
    return root


@functools.lru_cache(maxsize=256)
def _imported_top_level_names(name: str, source: bytes) -> frozenset[str]:
    """The top-level names of the modules ``source`` imports (absolute imports, anywhere in it).
    Kept per source text: a watch's rounds and a process's repeated plans read the same files,
    and parsing them was about a tenth of an in-process plan."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.partition(".")[0])
    return frozenset(modules)


def unlisted_sibling_imports(folder: Path, files: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules of ``folder`` that the listed Python files import (``import settings`` with
    ``settings.py`` beside them), directly or through another such module, and that ``files``
    leaves out: importer -> those modules' file names. A VM or Pod copies ``code/`` into one
    folder and runs the entry from it, so the entry's folder is first on ``sys.path`` and its
    siblings are imported from there: one not uploaded is missing there. Every import statement
    counts, also one inside a function (the reference trainer imports its heavy libraries late);
    a name computed at run time (``importlib.import_module(x)``) cannot be seen. A file that does
    not parse with this Python (newer syntax, say) is not read."""
    listed = set(files)
    found: dict[str, list[str]] = {}
    to_read = [name for name in files if name.endswith(".py")]
    read: set[str] = set()
    while to_read:
        name = to_read.pop(0)
        if name in read:
            continue
        read.add(name)
        try:
            modules = _imported_top_level_names(name, (folder / name).read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue  # unreadable: the upload says so; unparsable: not ours to judge
        siblings = sorted(
            f"{module}.py"
            for module in modules
            if f"{module}.py" not in listed and (folder / f"{module}.py").is_file()
        )
        if siblings:
            found[name] = siblings
            to_read.extend(siblings)
    return found
