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

import codecs
import json
import os
from pathlib import Path
from typing import Iterable

from picaso_core.data.schema import KINDS, Corpus, CorpusError, RetrievalSample

# One line is one sample; a longer line is refused before it is parsed (a runaway file, a
# missing newline), so a bad file costs a bounded read.
MAX_LINE_BYTES = 16 * 2**20
SAMPLE_HINT = ('one JSON object per line, e.g. {"query": "...", "continuation": " ...", '
               '"contexts": [["c1", "text"]]} (format: picaso_core/data/jsonl.py)')
CHUNK_HINT = 'one {"id": "...", "text": "..."} object per line (format: picaso_core/data/jsonl.py)'


def check_file(path: str | os.PathLike, what: str = ".jsonl") -> Path:
    """`path` as a Path if it is a readable file; else CorpusError naming the fix."""
    path = Path(path)
    if path.is_dir():
        raise CorpusError(path, f"is a folder, not a {what} file", f"pass the {what} file inside it")
    if not path.exists():
        raise CorpusError(path, f"no such {what} file", "check the path (built-in corpora: demo, wikitext, msmarco)")
    if not path.is_file():
        raise CorpusError(path, f"is not a regular {what} file", f"pass a {what} file")
    if not os.access(path, os.R_OK):
        raise CorpusError(path, "cannot be read (permission denied)", "make it readable by the account that runs this")
    return path


def _type(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


def _lines(path: Path, hint: str) -> Iterable[tuple[int, dict]]:
    """(line number, object) for each non-blank line. UTF-8 (a BOM on the first line is skipped),
    LF or CRLF line ends; bad bytes, bad JSON, a non-object or an over-long line name the file and line."""
    with path.open("rb") as f:
        lineno = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES:
                raise CorpusError(path, f"is longer than {MAX_LINE_BYTES // 2**20} MiB", "a line holds one "
                                  "sample: split the file, or move long texts into a database file (--database)",
                                  line=lineno)
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(path, f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})",
                                  "save the file as UTF-8 text (JSON Lines are UTF-8)", line=lineno) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line.rstrip("\r\n"))  # so a cut-off object's column is on this line
            except json.JSONDecodeError as e:
                raise CorpusError(path, f"not valid JSON: {e.msg} at column {e.colno}",
                                  f"fix the line; the format is {hint}", line=lineno) from None
            if not isinstance(obj, dict):
                raise CorpusError(path, f"expected a JSON object, got {_type(obj)}", f"the format is {hint}", line=lineno)
            yield lineno, obj


def _ids(obj: dict, key: str) -> list[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field {key!r} must be a list of id strings, got {_type(value)} {_clip(value)}")
    return value


def _clip(value, n: int = 40) -> str:
    r = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return r if len(r) <= n else r[: n - 1] + "…"


def _sample_from_obj(obj: dict, default_id: str) -> RetrievalSample:
    """One sample line, every field checked for its shape: a field of another shape is refused,
    never reinterpreted (a {id: text} object for "contexts" would otherwise read as its ids)."""
    sid = obj.get("sample_id", default_id)
    if not isinstance(sid, str) or not sid:
        raise ValueError(f"field 'sample_id' must be a non-empty string, got {_type(sid)} {_clip(sid)}")
    if "continuation" not in obj and "answer" in obj:
        answer = obj["answer"]
        if not isinstance(answer, str):
            raise ValueError(f"field 'answer' must be a string, got {_type(answer)} {_clip(answer)}")
        continuation = answer if answer[:1].isspace() else " " + answer
    else:
        continuation = obj.get("continuation")
    for key, value in (("query", obj.get("query")), ("continuation", continuation)):
        if key not in obj and not (key == "continuation" and "answer" in obj):
            raise ValueError(f"missing required field {key!r}" + (" (or 'answer')" if key == "continuation" else ""))
        if not isinstance(value, str):
            raise ValueError(f"field {key!r} must be a string, got {_type(value)} {_clip(value)}")
    contexts = obj.get("contexts")
    if contexts is None:
        contexts = []
    if not isinstance(contexts, list):
        raise ValueError(f"field 'contexts' must be a list of [id, text] pairs, got {_type(contexts)} "
                         f"{_clip(contexts)}: write \"contexts\": [[\"c1\", \"text\"], ...]")
    pairs = []
    for j, c in enumerate(contexts):
        if isinstance(c, str):
            pairs.append((f"{sid}-{j}", c))
        elif isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c):
            pairs.append((c[0], c[1]))
        elif isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("text"), str):
            pairs.append((c["id"], c["text"]))
        else:
            raise ValueError(f"context {j} must be [id, text] (two strings), {{\"id\", \"text\"}} or a text, "
                             f"got {_clip(c)}")
    kind = obj.get("kind", "retrieval")
    if kind not in KINDS:
        raise ValueError(f"field 'kind' must be one of {', '.join(KINDS)}, got {_clip(kind)}")
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"field 'meta' must be an object, got {_type(meta)} {_clip(meta)}")
    return RetrievalSample(sample_id=sid, query=obj["query"], continuation=continuation, contexts=pairs,
                           gold_ids=_ids(obj, "gold_ids"), kind=kind, exclude_ids=_ids(obj, "exclude_ids"), meta=meta)


def _read_samples(path: Path) -> list[tuple[int, RetrievalSample]]:
    out, seen = [], set()
    for lineno, obj in _lines(path, SAMPLE_HINT):
        try:
            sample = _sample_from_obj(obj, f"{path.stem}-{lineno}")
        except (ValueError, KeyError, TypeError) as e:
            raise CorpusError(path, str(e), f"the format is {SAMPLE_HINT}", line=lineno) from None
        if sample.sample_id in seen:
            raise CorpusError(path, f"duplicate sample_id {sample.sample_id!r}", "give each sample its own id",
                              line=lineno)
        seen.add(sample.sample_id)
        out.append((lineno, sample))
    if not out:
        raise CorpusError(path, "is empty (no samples)", f"write {SAMPLE_HINT}")
    return out


def read_samples(path: str | os.PathLike) -> list[RetrievalSample]:
    """Samples of a .jsonl file; any bad line raises CorpusError (a ValueError) naming `path:line`."""
    return [s for _, s in _read_samples(check_file(path))]


def read_chunks(path: str | os.PathLike) -> dict[str, str]:
    """A database file: {"id", "text"} per line -> id -> text."""
    path = check_file(path, "database")
    chunks: dict[str, str] = {}
    for lineno, obj in _lines(path, CHUNK_HINT):
        if not isinstance(obj.get("id"), str) or not isinstance(obj.get("text"), str):
            raise CorpusError(path, "a database line needs string fields 'id' and 'text'", f"write {CHUNK_HINT}",
                              line=lineno)
        if obj["id"] in chunks:
            raise CorpusError(path, f"duplicate chunk id {obj['id']!r}", "give each chunk its own id", line=lineno)
        chunks[obj["id"]] = obj["text"]
    if not chunks:
        raise CorpusError(path, "is empty (no chunks)", f"write {CHUNK_HINT}")
    return chunks


def load_jsonl(path: str | os.PathLike, database: str | os.PathLike | None = None, name: str | None = None, split: str = "custom") -> Corpus:
    """A Corpus from a sample file and an optional database file (formats above)."""
    path = check_file(path)
    numbered = _read_samples(path)
    chunks = read_chunks(database) if database is not None else {}
    for lineno, s in numbered:
        for cid, text in s.contexts:
            if chunks.setdefault(cid, text) != text:
                raise CorpusError(path, f"context id {cid!r} ({s.sample_id}) has two different texts",
                                  "give each text its own id", line=lineno)
    return Corpus(name=name or path.stem, split=split, samples=[s for _, s in numbered], database=chunks)


def write_samples(samples: Iterable[RetrievalSample], path: str | os.PathLike) -> None:
    """Inverse of read_samples (sorted keys, UTF-8, so equal samples give equal files)."""
    with Path(path).open("w", encoding="utf-8", newline="\n") as f:
        for s in samples:
            f.write(json.dumps(s.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")


def write_chunks(chunks: dict[str, str], path: str | os.PathLike) -> None:
    with Path(path).open("w", encoding="utf-8", newline="\n") as f:
        for cid, text in chunks.items():
            f.write(json.dumps({"id": cid, "text": text}, ensure_ascii=False, sort_keys=True) + "\n")
