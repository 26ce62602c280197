"""A tiny character-level transformer trained on the source of Python's own standard library.

Plain PyTorch, no tuitrain imports: this is the kind of module a user writes.
``datasets`` is the ``[data] target`` and ``CharTransformer`` the ``[model] target`` of charlm.toml.
The model defines ``train_step``/``valid_step``, so it computes its own loss over every position.
``sample`` is the ``[log] samples`` target: a few hundred characters written by the model as it trains.
"""

import glob
import math
import os
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

# A fixed vocabulary: newline, printable ASCII (space..~), and one "unknown" id for anything else
# (tabs, non-ASCII). Its size is a constant, so the config can name it: vocab_size = 97.
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
UNK = len(CHARS)
VOCAB_SIZE = len(CHARS) + 1
_INDEX = {c: i for i, c in enumerate(CHARS)}


def encode(text):
    """A string to a 1-D int64 tensor of ids."""
    return torch.tensor([_INDEX.get(c, UNK) for c in text], dtype=torch.long)


def decode(ids):
    """Ids (a tensor or a list) back to a string; the unknown id reads as '?'."""
    return "".join(CHARS[i] if i < UNK else "?" for i in [int(i) for i in ids])


def stdlib_text(max_chars=1_000_000, seed=0):
    """Up to ``max_chars`` characters of the standard library's top-level ``*.py`` files.

    The file list is sorted, then shuffled with ``seed``, so the text is the same on every run
    (for a given Python version) but not just the alphabetically first modules.
    """
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))
    if not files:
        raise FileNotFoundError("no Python standard library sources found next to os.py")
    random.Random(seed).shuffle(files)
    parts, total = [], 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        parts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return "".join(parts)[:max_chars]


class CharWindows(Dataset):
    """Windows of ``context + 1`` ids starting every ``stride`` ids: item i is (inputs, targets),
    two int64 tensors of length ``context``, the targets being the inputs shifted by one."""

    def __init__(self, ids, context, stride=None):
        self.ids = ids
        self.context = context
        self.stride = stride or context
        self.count = max(0, (len(ids) - context - 1) // self.stride + 1)

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if not 0 <= i < self.count:
            raise IndexError(i)
        start = i * self.stride
        chunk = self.ids[start : start + self.context + 1]
        return chunk[:-1], chunk[1:]


def datasets(context=64, max_chars=1_000_000, valid_fraction=0.1, stride=None, seed=0):
    """``(train, valid)``: the first part of the text for training, the last ``valid_fraction``
    (whole other modules, mostly) for validation; windows every ``stride`` chars (default: context)."""
    ids = encode(stdlib_text(max_chars=max_chars, seed=seed))
    split = int(len(ids) * (1 - valid_fraction))
    return CharWindows(ids[:split], context, stride), CharWindows(ids[split:], context, context)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention then an MLP, each with a residual."""

    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, c)))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """A GPT-style character model: ``forward(ids)`` of shape (B, T) returns logits (B, T, V)."""

    def __init__(self, vocab_size=VOCAB_SIZE, d_model=128, n_heads=4, n_layers=2, context=64, dropout=0.1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.vocab_size = vocab_size
        self.context = context
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids):
        t = ids.shape[1]
        if t > self.context:
            raise ValueError(f"sequence length {t} is longer than the context ({self.context})")
        x = self.drop(self.tok(ids) + self.pos(torch.arange(t, device=ids.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    def _step(self, batch):
        device = self.head.weight.device
        inputs, targets = (z.to(device) for z in batch)
        logits = self(inputs).reshape(-1, self.vocab_size)
        targets = targets.reshape(-1)
        loss = F.cross_entropy(logits, targets)
        # target is every position of the batch, so throughput counts characters (tokens) per second;
        # perplexity is logged as a metric of that name
        return {"loss": loss, "output": logits.detach(), "target": targets, "perplexity": loss.detach().exp()}

    def configure_optimizers(self, weight_decay, learning_rate, betas=(0.9, 0.95)):
        """nanoGPT's recipe: weight decay on matrices and embeddings, none on biases and norms."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    def train_step(self, batch):
        """Mean next-character cross-entropy over every position of the batch."""
        return self._step(batch)

    def valid_step(self, batch):
        return self._step(batch)

    @torch.no_grad()
    def generate(self, prefix="def ", n=200, temperature=0.8, seed=None):
        """Continue ``prefix`` by ``n`` sampled characters; returns the whole string."""
        was_training = self.training
        self.eval()
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        ids = encode(prefix).tolist() or [_INDEX["\n"]]
        device = self.head.weight.device
        for _ in range(n):
            x = torch.tensor([ids[-self.context :]], device=device)
            logits = self(x)[0, -1].float().cpu() / max(temperature, 1e-6)
            ids.append(int(torch.multinomial(F.softmax(logits, dim=-1), 1, generator=g)))
        self.train(was_training)
        return decode(ids)


def configure(model, lr=3e-3, weight_decay=0.1):
    """[optimizer] target = "charlm:configure": a factory whose first parameter is `model` gets the
    model, so that it can build its own parameter groups."""
    return model.configure_optimizers(weight_decay, lr)


SAMPLE_PROMPT = "def "


def sample(model, step, n=300, temperature=0.8):
    """[log] samples target = "charlm:sample": the model's continuation of a fixed prompt, drawn with a
    fixed seed, so the samples of one run differ only by what the model has learnt between them.
    tuitrain calls it in eval mode under no_grad (with the EMA weights) and logs the string as text."""
    return model.generate(SAMPLE_PROMPT, n, temperature=temperature, seed=0)
