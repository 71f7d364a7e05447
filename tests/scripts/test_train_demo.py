"""scripts/train_demo.py's packing: whole documents per row, loss-free padding, nothing lost."""

import itertools

import pytest
from conftest import script_module


@pytest.fixture(scope="module")
def train_demo():
    return script_module("train_demo")


class WordTokenizer:
    """One token per word: 'w<number>' -> number; eos = 0."""

    eos_id = 0

    def encode(self, text):
        return [int(w[1:]) for w in text.split()]


def test_rows_hold_whole_documents_and_padding_has_no_loss(train_demo, monkeypatch):
    # document i is i+1 tokens long (after the query), its tokens are 1000*i + 1, 1000*i + 2, ...
    lengths = [5, 30, 12, 64, 3, 40, 70, 8, 25, 50, 9, 33] * 4

    def docs(seed, mix=None):
        for i, n in enumerate(itertools.cycle(lengths)):
            words = " ".join(f"w{1000 * (i + 1) + j}" for j in range(n))
            yield {"kind": "passage", "contexts": [], "query": words, "continuation": ""}

    monkeypatch.setattr(train_demo, "training_examples", docs)
    seq_len = 64
    seen: list[int] = []
    for inputs, targets in itertools.islice(train_demo.packed_batches(WordTokenizer(), 0, 4, seq_len), 6):
        assert inputs.shape == targets.shape == (4, seq_len)
        for x, y in zip(inputs.tolist(), targets.tolist()):
            n = next((i for i, t in enumerate(y) if t == -100), seq_len)
            assert all(t == -100 for t in y[n:]) and x[1:n] == y[: n - 1]  # targets = inputs shifted
            row = x[:1] + y[:n]
            pieces = [list(g) for k, g in itertools.groupby(row, key=lambda t: t == 0) if not k]
            assert row[-1] == 0 or n == 0  # the row ends with a document's <eos>
            for p in pieces:  # each piece is one whole document
                doc = p[0] // 1000
                assert p == [1000 * doc + j for j in range(lengths[(doc - 1) % len(lengths)])]
                seen.append(doc)
    assert len(set(seen)) == len(seen)  # no document twice
    too_long = {i + 1 for i, n in enumerate(lengths) if n + 1 > seq_len + 1}
    assert not too_long & set(seen)  # longer than a row: skipped, never cut
    placed = sorted(seen)
    assert placed[: len(placed) // 2] == [d for d in range(1, placed[len(placed) // 2] + 1) if d not in too_long][: len(placed) // 2]
