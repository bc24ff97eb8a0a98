"""FLOP counts and transformer shapes."""

from __future__ import annotations

import pytest

from gpulease.errors import UserInputError
from gpulease.estimate import training_flops, transformer_shape
from gpulease.spec.models import ModelSpec


def test_finetuning_7b_on_1b_tokens_is_6nd(train):
    assert training_flops(train(7e9, tokens=1e9)) == pytest.approx(4.2e19)


def test_pretraining_1_3b_on_26b_tokens_is_about_2e20(train):
    assert training_flops(train(1.3e9, tokens=26e9)) == pytest.approx(2.03e20, rel=0.01)


def test_epochs_multiply_the_tokens(train):
    one = training_flops(train(1e9, tokens=1e10))
    assert training_flops(train(1e9, tokens=1e10, epochs=3)) == pytest.approx(3 * one)


def test_sequence_length_adds_attention_flops(train):
    workload = train(1e9, tokens=1e10, seq_len=32768, model={"layers": 16, "hidden": 2048})
    attention = 12 * 16 * 2048 * 32768 * 1e10
    assert training_flops(workload) == pytest.approx(6 * 1e9 * 1e10 + attention)
    # at 32k context attention costs more than the dense layers of a 1B model
    assert attention > 6 * 1e9 * 1e10


def test_samples_times_flops_per_sample_for_cnns(train):
    workload = train(25.6e6, tokens=None, samples=1.28e6, flops_per_sample=12.3e9, epochs=90,
                     model={"arch": "cnn"})  # fmt: skip
    assert training_flops(workload) == pytest.approx(1.28e6 * 12.3e9 * 90)


def test_transformer_samples_with_seq_len_count_as_tokens(train):
    workload = train(1e9, tokens=None, samples=1e6, seq_len=2048,
                     model={"layers": 16, "hidden": 2048})  # fmt: skip
    per_token = 6e9 + 12 * 16 * 2048 * 2048
    assert training_flops(workload) == pytest.approx(per_token * 1e6 * 2048)


def test_missing_amount_of_work_is_a_user_error(serve):
    with pytest.raises(UserInputError, match="tokens"):
        training_flops(serve(7e9))


def test_given_shape_is_kept():
    shape = transformer_shape(ModelSpec(params=70e9, layers=80, hidden=8192, heads=64, kv_heads=8))
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads) == (80, 8192, 64, 8)
    assert shape.head_dim == 128 and shape.kv_width == 1024 and not shape.derived


@pytest.mark.parametrize(
    ("params", "layers", "hidden"),
    [(7e9, 32, 4096), (13e9, 40, 5120), (70e9, 80, 8192), (175e9, 96, 12288)],
)
def test_derived_shape_is_near_the_published_one(params, layers, hidden):
    shape = transformer_shape(ModelSpec(params=params))
    assert shape.derived
    assert hidden * 0.8 <= shape.hidden <= hidden * 1.2
    assert layers * 0.75 <= shape.layers <= layers * 1.25
    assert 12 * shape.layers * shape.hidden**2 == pytest.approx(params, rel=0.1)


def test_derived_kv_heads_are_grouped_from_20b_parameters():
    small = transformer_shape(ModelSpec(params=7e9))
    large = transformer_shape(ModelSpec(params=70e9))
    assert small.kv_heads == small.heads
    assert large.kv_heads == 8 < large.heads


def test_hidden_alone_derives_layers():
    assert transformer_shape(ModelSpec(params=7e9, hidden=4096)).layers == 35
