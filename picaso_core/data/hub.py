"""WikiText-2 and MS MARCO in the PICASO protocol (paper sec. 6.1), loaded through `datasets`.

The preprocessing (`wikitext_corpus`, `msmarco_corpus`) is a pure function of rows (a list of
dicts or a `datasets.Dataset`) so it is tested on small hand-built tables; `load_wikitext` and
`load_msmarco` only add the download, and fail at once (no retries, no hang) when the hub cannot
be reached, naming the offline alternatives.

WikiText: every passage (a paragraph line, or a whole article with unit="article") is split
into two halves with an equal number of words; query = first half, continuation = second half.
The database is every half of every passage; a sample's own two halves are in its exclude_ids.
MS MARCO v2.1: keep rows with a well-formed answer and at least one is_selected passage; the
candidates are the row's passages, gold = the selected ones (attribution precision, appendix C).
"""

from __future__ import annotations

import re
from typing import Iterable

from picaso_core.data.schema import Corpus, CorpusError, RetrievalSample, qa_prompt
from picaso_core.engine.tokenizer import check_hub_reachable, hub_offline

WIKITEXT_REPO, WIKITEXT_CONFIG = "Salesforce/wikitext", "wikitext-2-raw-v1"
MSMARCO_REPO, MSMARCO_CONFIG = "microsoft/ms_marco", "v2.1"
NO_ANSWER = "No Answer Present."


class HubError(RuntimeError):
    """A hub corpus that cannot be downloaded; the message names the offline fix."""


OFFLINE_FIX = "offline, use load_corpus('demo', ...) (bundled) or a .jsonl file of your own"



# --------------------------------------------------------------------------------------------
# WikiText


def split_halves(text: str) -> tuple[str, str] | None:
    """Cut `text` after its first floor(n/2) words: (query, continuation) with query +
    continuation == text.strip() and the continuation starting with its whitespace.
    None if there are fewer than 2 words."""
    text = text.strip()
    words = list(re.finditer(r"\S+", text))
    if len(words) < 2:
        return None
    cut = words[len(words) // 2 - 1].end()
    return text[:cut], text[cut:]


def _heading(line: str) -> tuple[int, str]:
    """(level, title) of a WikiText heading line (" = Title = " is 1, " = = Section = = " is 2);
    (0, "") for any other line."""
    words = line.split()
    level = 0
    while level < len(words) // 2 and words[level] == "=" and words[-1 - level] == "=":
        level += 1
    return (level, " ".join(words[level : len(words) - level])) if level else (0, "")


def wikitext_passages(rows: Iterable[dict], unit: str = "paragraph") -> list[tuple[str, str]]:
    """(article title, passage text) pairs from WikiText rows (one `text` line per row).

    Lines like " = Title = " start an article; " = = Section = = " (two or more '=') are
    section headings and are dropped; empty lines separate paragraphs.
    """
    if unit not in ("paragraph", "article"):
        raise ValueError(f"unit must be 'paragraph' or 'article', got {unit!r}")
    title = ""
    article: list[str] = []
    out: list[tuple[str, str]] = []

    def flush() -> None:
        if unit == "article" and article:
            out.append((title, "\n".join(article)))
        article.clear()

    for row in rows:
        line = row["text"].strip()
        level, heading = _heading(line)
        if level:
            if level == 1:  # a new article
                flush()
                title = heading
            continue
        if not line:
            continue
        if unit == "paragraph":
            out.append((title, line))
        else:
            article.append(line)
    flush()
    return out


def wikitext_corpus(rows: Iterable[dict], split: str = "test", unit: str = "paragraph", min_words: int = 16) -> Corpus:
    """PICASO's WikiText-V2 protocol on rows with a `text` column.

    Args:
        unit: "paragraph" (each paragraph line is a passage) or "article".
        min_words: skip passages shorter than this (their halves carry too little to retrieve).
    """
    samples, database = [], {}
    for i, (title, text) in enumerate(wikitext_passages(rows, unit)):
        if len(text.split()) < min_words:
            continue
        query, continuation = split_halves(text)
        sid = f"wikitext-{split}-{i}"
        qid, cid = f"{sid}-q", f"{sid}-c"
        database[qid], database[cid] = query, continuation.lstrip()
        samples.append(
            RetrievalSample(
                sample_id=sid,
                query=query,
                continuation=continuation,
                kind="retrieval",
                exclude_ids=[qid, cid],
                meta={"title": title},
            )
        )
    return Corpus(name="wikitext", split=split, samples=samples, database=database)


# --------------------------------------------------------------------------------------------
# MS MARCO


def well_formed_answer(row: dict) -> str | None:
    """The row's first usable well-formed answer, or None."""
    for a in row.get("wellFormedAnswers") or []:
        if a and a.strip() and a.strip() != NO_ANSWER:
            return a.strip()
    return None


def msmarco_corpus(rows: Iterable[dict], split: str = "validation") -> Corpus:
    """PICASO's MS MARCO protocol on rows with the v2.1 columns (query, query_id,
    wellFormedAnswers, passages = {is_selected, passage_text, url})."""
    samples, database = [], {}
    for row in rows:
        answer = well_formed_answer(row)
        passages = row["passages"]
        selected = [int(x) for x in passages["is_selected"]]
        texts = passages["passage_text"]
        if len(selected) != len(texts):
            raise ValueError(f"ms_marco row {row.get('query_id')}: {len(selected)} is_selected labels for {len(texts)} passages")
        if answer is None or not any(selected):
            continue
        sid = f"msmarco-{split}-{row['query_id']}"
        contexts = [(f"{sid}-p{j}", t) for j, t in enumerate(texts)]
        database.update(contexts)
        samples.append(
            RetrievalSample(
                sample_id=sid,
                query=qa_prompt(row["query"]),
                continuation=" " + answer,
                contexts=contexts,
                gold_ids=[cid for (cid, _), s in zip(contexts, selected) if s],
                kind="qa",
                meta={"question": row["query"], "query_id": row["query_id"], "is_selected": selected, "urls": list(passages.get("url") or [])},
            )
        )
    return Corpus(name="msmarco", split=split, samples=samples, database=database)


# --------------------------------------------------------------------------------------------
# Download


def _load_rows(repo: str, config: str, split: str):
    """`datasets.load_dataset(repo, config, split=split)`, failing fast when it cannot work.

    Offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) reads only the local cache; online, a
    short metadata request first checks the hub is reachable, so a machine without network gets
    an error in seconds instead of a download that retries.
    """
    import datasets  # heavy, on first use: only the hub corpora need it

    if hub_offline():
        # The env var may have been set after `datasets` read it at import: force cache-only.
        was = datasets.config.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = True
        try:
            return datasets.load_dataset(repo, config, split=split)
        except Exception as e:
            raise HubError(f"{repo} ({config}, {split}) is not in the local cache and the hub is offline; {OFFLINE_FIX}") from e
        finally:
            datasets.config.HF_HUB_OFFLINE = was
    try:
        check_hub_reachable(repo, "dataset")
    except Exception as e:
        raise HubError(
            f"cannot reach the Hugging Face hub for {repo} ({type(e).__name__}: {e}); {OFFLINE_FIX} "
            f"(a cached copy loads with HF_HUB_OFFLINE=1)"
        ) from e
    return datasets.load_dataset(repo, config, split=split)


WIKITEXT_SPLITS = ("train", "validation", "test")
MSMARCO_SPLITS = ("train", "validation", "test")


def load_wikitext(split: str = "test", unit: str = "paragraph", min_words: int = 16) -> Corpus:
    if split not in WIKITEXT_SPLITS:
        raise CorpusError("wikitext", f"split must be one of {', '.join(WIKITEXT_SPLITS)}, got {split!r}", "pass one of them")
    return wikitext_corpus(_load_rows(WIKITEXT_REPO, WIKITEXT_CONFIG, split), split, unit, min_words)


def load_msmarco(split: str = "validation") -> Corpus:
    """MS MARCO v2.1. "test" means the validation split: v2.1's own test split has no answers,
    and the paper evaluates on validation (sec. 6.1)."""
    if split not in MSMARCO_SPLITS:
        raise CorpusError("msmarco", f"split must be one of {', '.join(MSMARCO_SPLITS)}, got {split!r}", "pass one of them")
    hub_split = "validation" if split == "test" else split
    return msmarco_corpus(_load_rows(MSMARCO_REPO, MSMARCO_CONFIG, hub_split), hub_split)
