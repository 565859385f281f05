"""ember.data: text data as ember-gpt train prepares and samples it (the C++ core's
CharTokenizer, prepare_char_dataset and TokenDataset). A batch depends only on (seed, step),
so a Python loop that draws TokenDataset.get_batch(batch_size, block_size, seed, step) trains
on the same batches as `ember-gpt train --seed seed`:

    prep = ember.data.prepare_char_dataset("input.txt", "out/data")   # train.bin, val.bin
    train = ember.data.TokenDataset.load("out/data/train.bin", prep.tokenizer.vocab_size)
    x, y = train.get_batch(12, 64, seed=1337, step=it)"""
from ._ember import CharTokenizer, PreparedText, TokenDataset, prepare_char_dataset

__all__ = ["CharTokenizer", "PreparedText", "TokenDataset", "prepare_char_dataset"]
