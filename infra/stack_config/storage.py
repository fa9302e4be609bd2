"""``tpu-training:bucket`` and ``tpu-training:trainerCode``: the checkpoint buckets, and the code the
stack uploads to them."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
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


PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The project folder (Pulumi.yaml's): ``trainerCode.folder`` is read from here."""
TRAINER_CODE_VARIABLE = "TRAINER_CODE"
"""Where the stack uploaded the trainer: ``gs://<the run's bucket>/code``."""


class TrainerCodeConfig(Model):
    """``tpu-training:trainerCode``: files the stack uploads to ``code/`` in every checkpoint
    bucket, so a stack trains the same code in any project; each VM and Job finds them at
    ``$TRAINER_CODE``."""

    folder: StrictStr
    files: tuple[StrictStr, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _files_exist(self) -> TrainerCodeConfig:
        folder = Path(self.folder)
        if folder.is_absolute() or ".." in folder.parts:
            raise ValueError(f"folder {self.folder!r} must be a path inside the project, like 'trainer'")
        for name in self.files:
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                raise ValueError(f"files: {name!r} must be a file name in the folder, like 'train.py'")
            if not (PROJECT_ROOT / folder / name).is_file():
                raise ValueError(
                    f"files: {self.folder}/{name} is not a file in the project ({PROJECT_ROOT}); "
                    f"the stack uploads it as it is"
                )
        if len(set(self.files)) != len(self.files):
            raise ValueError("files: each file once")
        return self

    def paths(self) -> dict[str, Path]:
        """Object name in the bucket -> the file to upload."""
        return {f"code/{name}": PROJECT_ROOT / self.folder / name for name in self.files}
