"""Seed 003's scaling rules."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tpu_training_components import accelerator_type, plan_training


def test_seed_003_batch_grows_with_cores():
    # 1024 on v2-8 is 128 per core; on v2-32 the same per-core batch is 4096.
    small = plan_training(per_core_batch_size=128, cores=accelerator_type("v2-8").cores, epochs=3)
    large = plan_training(per_core_batch_size=128, cores=accelerator_type("v2-32").cores, epochs=3)
    assert (small.global_batch_size, large.global_batch_size) == (1024, 4096)
    # With epochs, steps are the trainer's business and are not scaled.
    assert small.train_steps is None and large.train_steps is None
    assert large.environment()["EPOCHS"] == "3"


def test_seed_003_steps_shrink_as_the_batch_grows():
    # Batch 1000 x 100 steps = 100,000 examples; batch 4000 needs 25 steps.
    assert plan_training(per_core_batch_size=125, cores=8, total_examples=100_000).train_steps == 100
    assert plan_training(per_core_batch_size=125, cores=32, total_examples=100_000).train_steps == 25


def test_steps_round_up_so_no_example_is_dropped():
    assert plan_training(per_core_batch_size=128, cores=8, total_examples=100_000).train_steps == 98


def test_steps_are_exact_past_2_to_the_53():
    # math.ceil((2**53 + 1) / 1024) gives 8796093022208, one step short of the examples.
    plan = plan_training(per_core_batch_size=128, cores=8, total_examples=2**53 + 1)
    assert plan.train_steps == 8796093022209


@given(
    st.integers(1, 4096),
    st.sampled_from([1, 4, 8, 16, 32, 64, 128, 256, 512]),
    # Past 2**53 a float division loses the last digits: the steps must still be exact.
    # (Up to int64, which the trainer reads them as: plan_training refuses more.)
    st.one_of(st.integers(1, 10**9), st.integers(2**53, 2**63 - 1)),
)
def test_steps_cover_every_example_with_less_than_one_batch_over(per_core, cores, examples):
    plan = plan_training(per_core_batch_size=per_core, cores=cores, total_examples=examples)
    assert plan.global_batch_size == per_core * cores
    assert plan.train_steps is not None
    covered = plan.train_steps * plan.global_batch_size
    assert examples <= covered < examples + plan.global_batch_size


@pytest.mark.parametrize(
    ("scaling", "cores", "expected"),
    [("none", 32, 0.1), ("linear", 32, 0.4), ("sqrt", 32, 0.2), ("linear", 8, 0.1)],
)
def test_learning_rate_scaling(scaling, cores, expected):
    plan = plan_training(
        per_core_batch_size=128,
        cores=cores,
        epochs=1,
        base_learning_rate=0.1,
        learning_rate_scaling=scaling,
        reference_cores=8,
    )
    assert plan.learning_rate == pytest.approx(expected)
    assert float(plan.environment()["LEARNING_RATE"]) == pytest.approx(expected)


def test_no_learning_rate_no_variable():
    assert "LEARNING_RATE" not in plan_training(per_core_batch_size=1, cores=8, epochs=1).environment()


@given(st.floats(1e-6, 10), st.integers(1, 1024), st.integers(1, 1024))
def test_linear_scaling_is_proportional_to_the_global_batch(base, cores, reference):
    plan = plan_training(
        per_core_batch_size=4,
        cores=cores,
        epochs=1,
        base_learning_rate=base,
        learning_rate_scaling="linear",
        reference_cores=reference,
    )
    assert plan.learning_rate == pytest.approx(base * cores / reference)
    sqrt_plan = plan_training(
        per_core_batch_size=4,
        cores=cores,
        epochs=1,
        base_learning_rate=base,
        learning_rate_scaling="sqrt",
        reference_cores=reference,
    )
    assert sqrt_plan.learning_rate == pytest.approx(base * math.sqrt(cores / reference))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"per_core_batch_size": 0, "cores": 8, "epochs": 1},
        {"per_core_batch_size": 8, "cores": 8},
        {"per_core_batch_size": 8, "cores": 8, "epochs": 1, "total_examples": 10},
        {"per_core_batch_size": 8, "cores": 8, "total_examples": -1},
        {"per_core_batch_size": 8, "cores": 8, "epochs": 1, "learning_rate_scaling": "cubic"},
        {"per_core_batch_size": 8, "cores": 8, "epochs": 1, "base_learning_rate": math.inf},
        {"per_core_batch_size": 8, "cores": 8, "epochs": 1, "base_learning_rate": math.nan},
        {
            "per_core_batch_size": 8,
            "cores": 2048,
            "epochs": 1,
            "base_learning_rate": 1e308,
            "learning_rate_scaling": "linear",
        },
    ],
)
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        plan_training(**kwargs)
