"""A GPT in the shape of nanoGPT's (GPT-2's layers and parameter names), written on ember.nn.
Token and position embeddings, pre-norm transformer blocks (causal self-attention, then a GELU
MLP), a final LayerNorm and a language-model head sharing the token embedding's weight."""
import math
from dataclasses import dataclass

import ember
import ember.nn as nn
import ember.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 65
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError("n_embd must be divisible by n_head")
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, 2)
        # [B, T, C] -> [B, heads, T, head size]
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        rng = ember.get_rng_state()  # the layers' own draws are undone by _init_weights
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # The head and the token embedding are one parameter (weight tying).
        self.transformer.wte.weight = self.lm_head.weight
        ember.set_rng_state(rng)
        self._init_weights()

    def _init_weights(self):
        """GPT-2's initialization: normal(0, 0.02) for matmul weights and embeddings, zero
        biases, and the residual projections scaled down by sqrt(2 * n_layer). Drawn in the
        order of ember-gpt's C++ nn::GPT (each layer as it is built, the head's own weight
        before tying replaces it, then the residual projections again), so a seed gives the
        same starting weights as `ember-gpt train --seed`."""
        t, std = self.transformer, 0.02
        nn.init.normal_(t.wte.weight, 0.0, std)  # the token embedding, which the head shares
        nn.init.normal_(t.wpe.weight, 0.0, std)
        for block in t.h:
            for lin in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                nn.init.normal_(lin.weight, 0.0, std)
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
        ember.randn(*self.lm_head.weight.shape)  # the head's draw, dropped by the tying
        proj_std = std / math.sqrt(2 * self.config.n_layer)
        for block in t.h:
            nn.init.normal_(block.attn.c_proj.weight, 0.0, proj_std)
            nn.init.normal_(block.mlp.c_proj.weight, 0.0, proj_std)

    def num_params(self, non_embedding=True):
        """Parameters counted once; without the position embedding by default (as nanoGPT)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):
        """idx [B, T] int64 -> (logits [B, T, vocab], the mean cross entropy against targets or
        None)."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {self.config.block_size}")
        pos = ember.arange(T, dtype=ember.int64, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, compiled=False):
        """AdamW with weight decay on the 2-D+ parameters only (matmul weights, embeddings)."""
        return ember.optim.AdamW(ember.optim.decay_groups(self, weight_decay), lr=learning_rate,
                                 betas=betas, compiled=compiled)

    @ember.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, logits_of=None):
        """Appends max_new_tokens tokens sampled one at a time to idx [B, T] (the context cut
        to block_size). logits_of(ctx), when given, computes the logits in place of forward
        (a compiled forward)."""
        for _ in range(max_new_tokens):
            ctx = idx if idx.size(1) <= self.config.block_size \
                else idx[:, -self.config.block_size:]
            logits = logits_of(ctx) if logits_of else self(ctx)[0]
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = logits.topk(min(top_k, logits.size(-1)), -1)
                logits = logits.masked_fill(logits < v[:, -1:], float("-inf"))
            nxt = ember.multinomial(logits.softmax(-1), 1)
            idx = ember.cat([idx, nxt], 1)
        return idx
