"""The processes of one run, one per host, and how they decide together: joining the cluster,
exchanging values at one step, and the stop signals (SIGTERM, which the trainer remembers and
honours at the next step, and JAX's preemption sync point). A save or stop that one host starts
and another does not hangs both, so every such decision goes through ``Hosts``. JAX is imported
when the cluster is joined."""

from __future__ import annotations

import glob
import os
import signal
from typing import Any, Sequence

from outcomes import TryAgain, describe
from settings import Settings


class StopSignal:
    """SIGTERM, remembered instead of obeyed at once: a SIGTERM that arrives during the start or a
    save must not kill the process half-way through one; the loop reads ``received`` at every step,
    and every host stops at one step, after one save. (Once JAX's preemption service starts, it
    takes SIGTERM over; ``Hosts.preempted`` then asks it instead.)"""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def listen(self) -> StopSignal:
        signal.signal(signal.SIGTERM, self._remember)
        return self

    @property
    def received(self) -> bool:
        return bool(self.signals)

    def _remember(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)


def _on_tpu_slice() -> bool:
    # GKE sets TPU_WORKER_HOSTNAMES on every TPU Pod; a TPU VM has its chips as /dev/accel* or
    # VFIO devices. JAX's own cluster detection (jax/_src/clusters/cloud_tpu_cluster.py) then
    # finds the other hosts from the same variables or from the VM's metadata.
    if os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("TPU_PROCESS_ADDRESSES"):
        return True
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


GATHER_WIDTH = 64
"""Values each process offers in one exchange. Also the newest steps each offers when they agree
on what all of them can read: far more than are kept, so a step is left out of the offer only
when a process does not list it."""


class Hosts:
    """The processes of this run (one per host), and how they agree: every decision that more
    than one of them acts on is made from values all of them exchanged at the same point of the
    program, so each process computes the same answer."""

    def __init__(self, jax: Any, distributed: bool) -> None:
        self.jax = jax
        self.index: int = jax.process_index()
        self.count: int = jax.process_count()
        self.primary = self.index == 0
        # JAX's preemption service (on by default with jax.distributed) takes SIGTERM, and on
        # Cloud TPU the platform's preemption notice, and agrees on a step for all hosts.
        self.preemption_service = distributed and bool(jax.config.jax_enable_preemption_service)

    def gather(self, values: Sequence[int]) -> list[list[int]]:
        """Every process's ``values`` (at most ``GATHER_WIDTH``, the same number on every process),
        in process order, on every process."""
        if self.count == 1:
            return [list(values)]
        import numpy as np
        from jax.experimental import multihost_utils

        # Always GATHER_WIDTH values: one compiled exchange serves every call.
        padded = np.zeros(GATHER_WIDTH, dtype=np.int32)
        padded[: len(values)] = values
        rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(self.count, GATHER_WIDTH)
        return [[int(value) for value in row[: len(values)]] for row in rows]

    def any(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, true when it is true on any process."""
        rows = self.gather([int(flag) for flag in flags])
        return tuple(any(row[i] for row in rows) for i in range(len(flags)))

    def agree(self, *flags: bool, token: int) -> tuple[tuple[bool, ...], int]:
        """Each flag, true when it is true on any process; and the largest ``token`` offered."""
        rows = self.gather([*(int(flag) for flag in flags), token])
        width = len(flags)
        return tuple(any(row[i] for row in rows) for i in range(width)), max(row[width] for row in rows)

    def common(self, steps: Sequence[int]) -> list[int]:
        """The steps that every process has in ``steps``, newest first."""
        offer = sorted(steps, reverse=True)[:GATHER_WIDTH]
        rows = self.gather(offer + [-1] * (GATHER_WIDTH - len(offer)))
        return sorted(set(rows[0]).intersection(*rows[1:]) - {-1}, reverse=True)

    def preempted(self, step: int) -> bool:
        """JAX's preemption sync point: true on every host at the same step once any host got the
        notice. Must be asked at every step."""
        if not self.preemption_service:
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.reached_preemption_sync_point(step))


def join_cluster(settings: Settings) -> tuple[Any, bool]:
    """Import JAX and join the run's other processes (JAX's cluster detection on a TPU slice, the
    explicit ``TRAINER_*`` cluster elsewhere). Returns JAX and whether it runs distributed."""
    import jax

    distributed = settings.cluster is not None or settings.distributed == "on"
    distributed = distributed or (settings.distributed == "auto" and _on_tpu_slice())
    if distributed:
        # Every host of a slice runs this same program; none may touch a device before all have
        # joined. On one host it is a one-process "cluster", which costs nothing.
        explicit = settings.cluster
        try:
            jax.distributed.initialize(
                coordinator_address=explicit.coordinator_address if explicit else None,
                num_processes=explicit.num_processes if explicit else None,
                process_id=explicit.process_id if explicit else None,
                initialization_timeout=settings.join_timeout_seconds,
                heartbeat_timeout_seconds=settings.heartbeat_seconds,
                shutdown_timeout_seconds=settings.shutdown_timeout_seconds,
            )
        except Exception as error:  # noqa: BLE001 - JAX raises several kinds; all mean "not now"
            raise TryAgain(f"could not join the cluster: {describe(error)}") from None
    # Bit-for-bit resumption needs float32 everywhere, on every backend.
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax, distributed
