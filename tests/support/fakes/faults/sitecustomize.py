"""Faults the tests inject into the reference trainer at its storage library's boundary: this
folder goes on the ``PYTHONPATH`` of the trainer processes a test starts, and Python runs this
module before the trainer. ``TPU_TRAINER_TEST_FAULT`` names the fault:

- ``restore-eio``: reading a checkpoint's arrays raises ``OSError(EIO)``, as a disk or a network
  file system does when it cannot read for now. On the processes listed in
  ``TPU_TRAINER_TEST_FAULT_PROCESSES`` (``"1"``, ``"0,1"``), on every process when unset.

Nothing happens when the variable is unset.
"""

import os

if os.environ.get("TPU_TRAINER_TEST_FAULT") == "restore-eio":
    import errno

    import orbax.checkpoint as ocp

    _restore = ocp.CheckpointManager.restore

    def _failing_restore(self, step, *args, **kwargs):  # type: ignore[no-untyped-def]
        import jax

        processes = os.environ.get("TPU_TRAINER_TEST_FAULT_PROCESSES")
        here = processes is None or str(jax.process_index()) in processes.split(",")
        composite = kwargs.get("args")
        if here and composite is not None and "state" in composite:
            raise OSError(errno.EIO, f"Input/output error (injected) reading step {step}")
        return _restore(self, step, *args, **kwargs)

    ocp.CheckpointManager.restore = _failing_restore
