"""Users' own corpora as JSON Lines, and the bundled demo files (same format).

Sample file: one JSON object per line (blank lines are skipped):
    {"sample_id": "q1",                       # optional; default "<file stem>-<line number>"
     "query": "Velmora was founded by",       # required
     "continuation": " Osric Dallen.",        # required, used verbatim (keep its leading space);
                                              #   or "answer": "Osric Dallen." (a space is added)
     "contexts": [["c1", "text ..."], ...],   # optional: [id, text] pairs, {"id", "text"}
                                              #   objects, or bare strings (ids "<sample_id>-<j>")
     "gold_ids": ["c1"],                      # optional, a subset of the context ids
     "kind": "retrieval",                     # optional: "retrieval" (default) or "qa"
     "exclude_ids": [], "meta": {}}           # optional
Database file (optional): one {"id": ..., "text": ...} per line. A corpus's database is that
file's chunks plus every sample's contexts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from picaso_core.data.schema import Corpus, RetrievalSample


def _lines(path: Path) -> Iterable[tuple[int, dict]]:
    """(line number, object) for each non-blank line; bad JSON names the file and line."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _sample_from_obj(obj: dict, default_id: str) -> RetrievalSample:
    obj = dict(obj)
    obj.setdefault("sample_id", default_id)
    if "continuation" not in obj and "answer" in obj:
        answer = str(obj.pop("answer"))
        obj["continuation"] = answer if answer[:1].isspace() else " " + answer
    for key in ("query", "continuation"):
        if key not in obj:
            raise ValueError(f"missing required field {key!r}")
    contexts = obj.get("contexts") or []
    obj["contexts"] = [[f"{obj['sample_id']}-{j}", c] if isinstance(c, str) else c for j, c in enumerate(contexts)]
    return RetrievalSample.from_dict(obj)


def read_samples(path: str | os.PathLike) -> list[RetrievalSample]:
    """Samples of a .jsonl file; any bad line raises ValueError naming `path:line`."""
    path = Path(path)
    samples, seen = [], set()
    for lineno, obj in _lines(path):
        try:
            sample = _sample_from_obj(obj, f"{path.stem}-{lineno}")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{lineno}: {e}") from None
        if sample.sample_id in seen:
            raise ValueError(f"{path}:{lineno}: duplicate sample_id {sample.sample_id!r}")
        seen.add(sample.sample_id)
        samples.append(sample)
    return samples


def read_chunks(path: str | os.PathLike) -> dict[str, str]:
    """A database file: {"id", "text"} per line -> id -> text."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such database file: {path}")
    chunks: dict[str, str] = {}
    for lineno, obj in _lines(path):
        if not isinstance(obj.get("id"), str) or not isinstance(obj.get("text"), str):
            raise ValueError(f"{path}:{lineno}: a database line needs string fields 'id' and 'text'")
        if obj["id"] in chunks:
            raise ValueError(f"{path}:{lineno}: duplicate chunk id {obj['id']!r}")
        chunks[obj["id"]] = obj["text"]
    return chunks


def load_jsonl(path: str | os.PathLike, database: str | os.PathLike | None = None, name: str | None = None, split: str = "custom") -> Corpus:
    """A Corpus from a sample file and an optional database file (formats above)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such .jsonl file: {path}")
    samples = read_samples(path)
    chunks = read_chunks(database) if database is not None else {}
    for s in samples:
        for cid, text in s.contexts:
            if chunks.setdefault(cid, text) != text:
                raise ValueError(f"{path}: context id {cid!r} ({s.sample_id}) has two different texts")
    return Corpus(name=name or path.stem, split=split, samples=samples, database=chunks)


def write_samples(samples: Iterable[RetrievalSample], path: str | os.PathLike) -> None:
    """Inverse of read_samples (sorted keys, UTF-8, so equal samples give equal files)."""
    with Path(path).open("w", encoding="utf-8", newline="\n") as f:
        for s in samples:
            f.write(json.dumps(s.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")


def write_chunks(chunks: dict[str, str], path: str | os.PathLike) -> None:
    with Path(path).open("w", encoding="utf-8", newline="\n") as f:
        for cid, text in chunks.items():
            f.write(json.dumps({"id": cid, "text": text}, ensure_ascii=False, sort_keys=True) + "\n")
