"""``python -m tpu_training``: the ``tpu-training`` command (``cli``), for a Python without the
console script on its PATH."""

from tpu_training.cli import run

run()
