"""ember.data: the tokenizer, the train/val files and TokenDataset's batches, checked against
what the C++ sampler is specified to draw (include/ember/io.h: row b of step s is the window at
a splitmix64 hash of (seed, s, b), mapped onto the valid starts by multiply-shift)."""
import os

import numpy as np
import pytest

import ember

MASK = (1 << 64) - 1


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def spec_window_start(n_tokens, block_size, seed, step, row):
    """The start the sampler is specified to draw, computed here in Python integers."""
    h = mix64(mix64(mix64(seed) ^ step) ^ row)
    return (h * (n_tokens - block_size)) >> 64


def test_batches_are_the_specified_windows():
    tokens = np.random.default_rng(0).integers(0, 65, size=5000).astype(np.int64)
    ds = ember.data.TokenDataset(tokens.tolist(), "random")
    assert len(ds) == 5000
    np.testing.assert_array_equal(ds.tokens.numpy(), tokens)
    for seed, step in ((1337, 0), (1337, 1), (1338, 0), (7, 123456)):
        x, y = ds.get_batch(6, 32, seed, step)
        assert x.shape == (6, 32) and y.shape == (6, 32) and x.dtype == ember.int64
        for b in range(6):
            start = spec_window_start(len(tokens), 32, seed, step, b)
            assert ds.window_start(32, seed, step, b) == start
            np.testing.assert_array_equal(x[b].numpy(), tokens[start:start + 32])
            np.testing.assert_array_equal(y[b].numpy(), tokens[start + 1:start + 33])


def test_a_batch_depends_only_on_seed_and_step():
    ds = ember.data.TokenDataset(list(range(1000)))
    first = [ds.get_batch(4, 16, 1337, s)[0].numpy() for s in range(5)]
    again = ember.data.TokenDataset(list(range(1000)))
    for s in (3, 1, 4):  # any order, a fresh dataset
        np.testing.assert_array_equal(again.get_batch(4, 16, 1337, s)[0].numpy(), first[s])
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(ds.get_batch(4, 16, 1338, 0)[0].numpy(), first[0])


def test_prepare_char_dataset_splits_90_10(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20
    src = tmp_path / "input.txt"
    src.write_text(text, encoding="utf-8")
    prep = ember.data.prepare_char_dataset(str(src), str(tmp_path / "data"))
    tok = prep.tokenizer
    assert tok.chars == sorted(set(text)) and tok.vocab_size == len(set(text))
    ids = [tok.chars.index(c) for c in text]
    assert tok.encode(text) == ids and tok.decode(ids) == text
    n_train = int(len(text) * 0.9)
    assert (prep.train_tokens, prep.val_tokens) == (n_train, len(text) - n_train)
    train = ember.data.TokenDataset.load(str(tmp_path / "data" / "train.bin"), tok.vocab_size)
    val = ember.data.TokenDataset.load(str(tmp_path / "data" / "val.bin"), tok.vocab_size)
    assert train.tokens.tolist() == ids[:n_train] and val.tokens.tolist() == ids[n_train:]
    assert tok.decode(train.get_batch(1, 8, 0, 0)[0]) in text
    assert ember.data.CharTokenizer.from_json(tok.to_json()).chars == tok.chars


def test_errors_name_the_problem(tmp_path):
    ds = ember.data.TokenDataset([1, 2, 3], "tiny")
    with pytest.raises(Exception, match="tiny.*too few for block_size 3"):
        ds.get_batch(1, 3, 0, 0)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x05\x00\x40\x00")  # ids 5 and 64
    with pytest.raises(Exception, match="token id 64 is outside the vocabulary of 10"):
        ember.data.TokenDataset.load(str(bad), 10)
    with pytest.raises(Exception, match="not in the vocabulary"):
        ember.data.CharTokenizer.from_text("abc").encode("abd")


def test_rng_state_round_trip():
    ember.manual_seed(5)
    ember.randn(3)
    state = ember.get_rng_state()
    a = ember.randn(4).tolist()
    ember.randn(7)
    ember.set_rng_state(state)
    assert ember.randn(4).tolist() == a
    assert state[0] == 5 and state[1] > 0
