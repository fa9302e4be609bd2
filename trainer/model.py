"""The model, its data and its optimizer: a small multi-layer perceptron that learns a fixed
random "teacher" function on synthetic data, every piece a pure function of the seed, the example
index and the step, so a run resumed any number of times ends bit for bit where an uninterrupted
one does. Also the run's fingerprint (what makes a checkpoint this run's) and the state's
checksum. JAX and optax are imported when the model is built."""

from __future__ import annotations

import hashlib
import io
import math
from typing import Any, Callable

from outcomes import ConfigError
from settings import Settings

# The model: small on purpose, so the tests that kill it dozens of times run in seconds.
INPUT_DIM = 16
OUTPUT_DIM = 4
DATA_ORDER = "teacher-v1: example i is normal(fold_in(data key, i mod examples per epoch))"
"""Names how examples are made and ordered; part of the run's identity, changed with the code."""


def fingerprint(settings: Settings) -> dict[str, Any]:
    """What makes a checkpoint this run's: restoring one with another fingerprint would continue a
    different run. The batch size and learning rate are not in it: the stack rescales both when a
    slice is resized."""
    return {
        "model": f"mlp {INPUT_DIM}-{settings.hidden_dim}-{OUTPUT_DIM} float32",
        "seed": settings.seed,
        "data": f"{DATA_ORDER}; {settings.examples_per_epoch} examples per epoch",
        "optimizer": "adam, constant learning rate",
    }


class Model:
    """The model, its data and its optimizer: every piece a pure function of the seed, the example
    index and the step."""

    def __init__(self, jax: Any, settings: Settings) -> None:
        import jax.numpy as jnp
        import optax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.jax, self.jnp, self.settings = jax, jnp, settings
        devices = jax.devices()
        if settings.global_batch_size % len(devices):
            raise ConfigError(
                f"GLOBAL_BATCH_SIZE={settings.global_batch_size} must be a multiple of the "
                f"{len(devices)} devices it is split over"
            )
        # Data parallel: the batch is split over every device of every host, the state is
        # replicated. The stack keeps the per-core batch constant (Google's Training on TPU Pods page).
        mesh = Mesh(devices, ("data",))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.optimizer = optax.adam(settings.learning_rate)
        batch_size, per_epoch = settings.global_batch_size, settings.examples_per_epoch

        def teacher_and_data_key() -> tuple[Any, Any]:
            teacher_key, data_key = jax.random.split(jax.random.key(settings.seed))
            return jax.random.normal(teacher_key, (INPUT_DIM, OUTPUT_DIM), jnp.float32), data_key

        # One compiled program for what every start derives from the seed, where op by op each
        # operation was a program to compile or load at every start (and JAX writes its compilation
        # cache from process 0 only, so every other host of a slice compiled them all each time).
        teacher, self.data_key = jax.jit(teacher_and_data_key)()

        def example(index: Any) -> Any:
            key = jax.random.fold_in(self.data_key, index % per_epoch)
            return jax.random.normal(key, (INPUT_DIM,), jnp.float32)

        def batch(first_example: Any) -> tuple[Any, Any]:
            # By example, not by step: a slice resized to another batch size goes on with the
            # next example, and every example of the run is seen once.
            inputs = jax.vmap(example)(first_example + jnp.arange(batch_size, dtype=jnp.int32))
            return inputs, jnp.tanh(inputs @ teacher)

        def loss(params: Any, inputs: Any, targets: Any) -> Any:
            hidden = jnp.tanh(inputs @ params["w1"] + params["b1"])
            return jnp.mean((hidden @ params["w2"] + params["b2"] - targets) ** 2)

        def train_step(state: Any, first_example: Any) -> tuple[Any, Any, Any]:
            inputs, targets = batch(first_example)
            value, grads = jax.value_and_grad(loss)(state["params"], inputs, targets)
            updates, opt_state = self.optimizer.update(grads, state["opt_state"], state["params"])
            new_state = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}
            # Checked on the device, with the step: a state that is no longer finite is never saved.
            finite = jnp.isfinite(value) & jnp.all(
                jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(new_state["params"])])
            )
            return new_state, value, finite

        # One compiled step, the same program at every step and after every restart: the run
        # takes the same arithmetic path whether it stopped or not. Compiled before training
        # starts (compile()), so a start's cost is all in its startup time, none in its steps.
        self._jitted = jax.jit(
            train_step,
            out_shardings=(self.replicated, self.replicated, self.replicated),
            donate_argnums=(0,),
        )
        self.train_step: Callable[[Any, int], tuple[Any, Any, Any]] = self._jitted

    def compile(self, state: Any) -> None:
        import numpy as np

        compiled = self._jitted.lower(state, np.int32(0)).compile()
        per_epoch = self.settings.examples_per_epoch
        self.train_step = lambda state, first: compiled(state, np.int32(first % per_epoch))

    def initial_state(self) -> Any:
        """The state before the first step, on every device. Made on the host with NumPy: a
        compiled initialisation (random normals) took longer to compile than the step itself."""
        return self.jax.device_put(self._initial_host_state(), self.replicated)

    def abstract_state(self) -> Any:
        """Shapes, dtypes and shardings to restore into."""
        jax = self.jax
        return jax.tree.map(
            lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=self.replicated),
            self._initial_host_state(),
        )

    def _initial_host_state(self) -> Any:
        import numpy as np

        generator = np.random.default_rng(self.settings.seed)
        hidden = self.settings.hidden_dim

        def scaled_normal(shape: tuple[int, int]) -> Any:
            return generator.standard_normal(shape, np.float32) / np.float32(math.sqrt(shape[0]))

        params = {
            "w1": scaled_normal((INPUT_DIM, hidden)),
            "b1": np.zeros((hidden,), np.float32),
            "w2": scaled_normal((hidden, OUTPUT_DIM)),
            "b2": np.zeros((OUTPUT_DIM,), np.float32),
        }
        # Adam's state before its first update is zeros (its moments and its count).
        optimizer_state = self.jax.tree.map(
            lambda leaf: np.zeros(leaf.shape, leaf.dtype), self.jax.eval_shape(self.optimizer.init, params)
        )
        return {"params": params, "opt_state": optimizer_state}


def flat_state(jax: Any, state: Any) -> dict[str, Any]:
    """The state as ``{key path: numpy array}``, from this host's copy of the replicated arrays."""
    import numpy as np

    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {
        jax.tree_util.keystr(path): np.asarray(leaf.addressable_data(0))
        if hasattr(leaf, "addressable_data")
        else np.asarray(leaf)
        for path, leaf in leaves
    }


def checksum(jax: Any, state: Any) -> str:
    """SHA-256 over every array's path, dtype, shape and bytes: two states with equal checksums
    are equal bit for bit."""
    digest = hashlib.sha256()
    for key, array in sorted(flat_state(jax, state).items()):
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def final_state_npz(jax: Any, state: Any) -> bytes:
    """The state as the ``final_state.npz`` a complete run writes: one array per key path."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **flat_state(jax, state))
    return buffer.getvalue()
