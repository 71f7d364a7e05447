"""The one sample shape every corpus produces, and the corpus that holds samples + database.

Conventions (shared by the demo world, WikiText, MS MARCO and user .jsonl files):
  - `query + continuation` is the exact text the model reads then is scored on; the continuation
    carries its own leading space/newline, so the two strings concatenate without a separator.
  - `contexts` are the sample's candidate chunks as (id, text) pairs. They may be empty when the
    corpus has no per-sample candidates (WikiText: the retriever picks from `Corpus.database`).
  - `gold_ids` are the context ids known to hold what the continuation needs (MS MARCO's
    `is_selected`; the demo world's gold chunks); empty where unknown. Always a subset of the
    ids in `contexts`.
  - `exclude_ids` are database chunks cut from this sample itself (WikiText: its own two halves,
    paper sec. 6.1); a retriever must never return them for this sample.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterator, Literal

SampleKind = Literal["retrieval", "qa"]
QA_PROMPT = "Question: {question}\nAnswer:"  # every QA corpus (demo, MS MARCO) uses this query


def qa_prompt(question: str) -> str:
    """The query text of a QA sample; the answer follows as the continuation, with a leading space."""
    return QA_PROMPT.format(question=question.strip())

KINDS: tuple[str, ...] = ("retrieval", "qa")


class CorpusError(ValueError):
    """A corpus that cannot be loaded: one line naming the file, the line (where there is one),
    what is wrong and the fix. Entry points (app.py, the CLIs) print it as `error: ...`."""

    def __init__(self, path, what: str, fix: str = "", line: int | None = None):
        self.path, self.line, self.what, self.fix = str(path), line, what, fix
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {what}" + (f"; {fix}" if fix else ""))


@dataclass(frozen=True)
class RetrievalSample:
    sample_id: str
    query: str  # text the model reads before the continuation (for QA: the question prompt)
    continuation: str  # text that is scored (for QA: the answer, with its leading space)
    contexts: list[tuple[str, str]] = field(default_factory=list)  # candidate (id, text) chunks
    gold_ids: list[str] = field(default_factory=list)  # subset of context ids; [] if unknown
    kind: SampleKind = "retrieval"
    exclude_ids: list[str] = field(default_factory=list)  # database ids a retriever must skip
    meta: dict = field(default_factory=dict)  # provenance, e.g. entity name and key values

    def __post_init__(self) -> None:
        # Validate once here so every loader (demo, hub, jsonl) fails the same way.
        if self.kind not in KINDS:
            raise ValueError(f"sample {self.sample_id!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.query, str) or not isinstance(self.continuation, str):
            raise ValueError(f"sample {self.sample_id!r}: query and continuation must be strings")
        ids = [cid for cid, _ in self.contexts]
        if len(set(ids)) != len(ids):
            raise ValueError(f"sample {self.sample_id!r}: duplicate context ids {ids}")
        missing = set(self.gold_ids) - set(ids)
        if missing:
            raise ValueError(f"sample {self.sample_id!r}: gold ids {sorted(missing)} are not among its contexts")

    @property
    def context_ids(self) -> list[str]:
        return [cid for cid, _ in self.contexts]

    @property
    def context_texts(self) -> list[str]:
        return [text for _, text in self.contexts]

    def to_dict(self) -> dict:
        """JSON-ready dict (contexts as [id, text] lists); inverse of `from_dict`."""
        d = asdict(self)
        d["contexts"] = [[cid, text] for cid, text in self.contexts]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RetrievalSample":
        contexts = d.get("contexts") or []
        pairs = []
        for c in contexts:
            if isinstance(c, dict):  # also accept {"id": ..., "text": ...}
                pairs.append((str(c["id"]), str(c["text"])))
            elif isinstance(c, (list, tuple)) and len(c) == 2:
                pairs.append((str(c[0]), str(c[1])))
            else:
                raise ValueError(f"context must be [id, text] or {{'id','text'}}, got {c!r}")
        return cls(
            sample_id=str(d["sample_id"]),
            query=d["query"],
            continuation=d["continuation"],
            contexts=pairs,
            gold_ids=[str(g) for g in d.get("gold_ids") or []],
            kind=d.get("kind", "retrieval"),
            exclude_ids=[str(x) for x in d.get("exclude_ids") or []],
            meta=dict(d.get("meta") or {}),
        )


@dataclass
class Corpus:
    """Samples plus the database of every chunk retrievable for this corpus/split.

    `database` maps chunk id -> text; for per-sample candidates (demo, MS MARCO) it also holds
    every sample's contexts, so `sample.contexts` can be looked up by id.
    """

    name: str
    split: str
    samples: list[RetrievalSample]
    database: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[RetrievalSample]:
        return iter(self.samples)

    def __getitem__(self, i: int) -> RetrievalSample:
        return self.samples[i]

    def retrievable(self, sample: RetrievalSample) -> dict[str, str]:
        """The database a retriever may search for `sample` (its own chunks removed)."""
        if not sample.exclude_ids:
            return self.database
        skip = set(sample.exclude_ids)
        return {cid: text for cid, text in self.database.items() if cid not in skip}


def limit_corpus(corpus, max_contexts: int):
    """The corpus cut to at most `max_contexts` database chunks, for models whose states are large.

    Samples are kept in order while all their candidate contexts fit; the rest of the budget goes
    to database chunks in corpus order (for WikiText, whose samples carry no candidates, that is
    the first `max_contexts` chunks).
    """
    if max_contexts < 1:
        raise CorpusError("--max-contexts", f"must be >= 1, got {max_contexts}", "pass a positive number")
    keep: dict[str, str] = {}
    samples = []
    for s in corpus.samples:
        new = [cid for cid in s.context_ids if cid not in keep]
        if len(keep) + len(new) > max_contexts:
            break
        keep.update((cid, corpus.database[cid]) for cid in new)
        samples.append(s)
    for cid, text in corpus.database.items():
        if len(keep) >= max_contexts:
            break
        keep.setdefault(cid, text)
    if corpus.samples and not samples:
        raise CorpusError("--max-contexts", f"{max_contexts} is too small for even the first example's "
                          f"{len(corpus.samples[0].contexts)} contexts", "raise it")
    return Corpus(corpus.name, corpus.split, samples, keep)
