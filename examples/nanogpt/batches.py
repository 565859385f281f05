"""The data of train.py as ember-gpt train prepares and samples it: the text encoded per
character and split 90/10 into out_dir/data/train.bin and val.bin (ember.data's
prepare_char_dataset), and batches from ember.data.TokenDataset, whose rows depend only on
(seed, step). Training iteration `it` draws step `it` of `seed`; evaluation's k-th batch of the
train and val splits is step k of seed + 1 and seed + 2, the same at every evaluation. So for
the same seed these are exactly the batches `ember-gpt train` trains and evaluates on."""
import os

import ember


class CharBatches:
    def __init__(self, text_path, out_dir, batch_size, block_size, seed, device="cpu"):
        data_dir = os.path.join(out_dir, "data")
        prep = ember.data.prepare_char_dataset(text_path, data_dir)
        self.tokenizer = prep.tokenizer
        self.splits = {s: ember.data.TokenDataset.load(os.path.join(data_dir, f"{s}.bin"),
                                                       prep.tokenizer.vocab_size)
                       for s in ("train", "val")}
        self.batch_size, self.block_size, self.seed, self.device = \
            batch_size, block_size, seed, device

    def train_batch(self, it):
        """(x, y) of training iteration it."""
        return self.splits["train"].get_batch(self.batch_size, self.block_size, self.seed, it,
                                              self.device)

    def eval_batch(self, split, k):
        """(x, y) of the k-th evaluation batch of split ("train" or "val")."""
        seed = self.seed + 1 + ("train", "val").index(split)
        return self.splits[split].get_batch(self.batch_size, self.block_size, seed, k,
                                            self.device)
