"""What each entry point prints for each known fault: the table in docs/store.md.

    python scripts/fault_table.py                    # store and corpus faults, markdown on stdout
    python scripts/fault_table.py --only store       # or: corpus

Damages copies of a small store (the demo model over a few demo samples) and a set of bad corpus
files, then runs the real commands as an operator would, each in its own process: `python app.py`,
`python -m picaso_core.store build` (and `check`), `python -m picaso_core.experiments`.
For each it records the exit code, the lines on stderr that are not progress bars, whether a
Traceback appeared, and the first message line. A read-only store is bind-mounted read-only for
the command (`unshare -m`, needs root; else those rows are skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picaso_core.light.defaults import count  # noqa: E402

BAR = re.compile(r"\d+%\|")  # a tqdm progress bar's line
SERVING = ("Running on local URL", "Running on public URL")


def read_only_prefix(folder: Path) -> list[str]:
    """A command prefix that runs its command with `folder` bind-mounted read-only (a private mount
    namespace: needs root), the way a shared disk or a mounted bucket is served."""
    return ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]


def can_mount_read_only() -> bool:
    try:
        with tempfile.TemporaryDirectory() as d:
            probe = subprocess.run([*read_only_prefix(Path(d)), "sh", "-c", f"! touch {d}/x 2>/dev/null"],
                                   capture_output=True, timeout=20)
        return probe.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run(cmd: list[str], env: dict, read_only: Path | None = None, serve_s: float = 120) -> dict:
    """Run `cmd` (with `read_only` mounted read-only); an app that starts serving is stopped once it
    says so (exit "serves")."""
    if read_only is not None:
        cmd = [*read_only_prefix(read_only), *cmd]
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe, text=True, start_new_session=True)
        t0 = time.time()
        while p.poll() is None and time.time() - t0 < serve_s:
            fo.seek(0)
            if any(s in fo.read() for s in SERVING):
                os.killpg(p.pid, signal.SIGTERM)
                break
            time.sleep(0.5)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    serves = any(s in out for s in SERVING)
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not BAR.search(ln)
             and "Loading weights" not in ln]
    said = [ln for ln in lines + out.splitlines() if re.search(r"repaired|damaged|warning|error", ln)]
    first = next(iter(said + lines + [ln for ln in out.splitlines() if ln.strip()]), "")
    return {"rc": "serves" if serves else p.returncode, "lines": len(lines), "traceback": "Traceback" in err,
            "first": first[:200]}


def corpus_file(folder: Path, n: int = 3) -> Path:
    from picaso_core.data import load_corpus, write_samples

    path = folder / "small.jsonl"
    write_samples(load_corpus("demo", "test").samples[:n], path)
    return path


def commands(corpus: Path, store: Path, cache: Path, out: Path, port: int) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "app start": [py, "app.py", "--model", "demo", "--corpus", str(corpus), "--store", str(store),
                      "--cache-dir", str(cache), "--port", str(port)],
        "store build": [py, "-m", "picaso_core.store", "build", "--model", "demo", "--corpus", str(corpus),
                        "--out", str(store)],
        "store check": [py, "-m", "picaso_core.store", "check", str(store)],
        "experiments": [py, "-m", "picaso_core.experiments", "--model", "demo", "--corpus", str(corpus),
                        "--store", str(store), "--out", str(out), "--samples", "1", "--ks", "2", "--methods",
                        "concat", "--qa", "none", "--long-ks", "none", "--retrievers", "none",
                        "--timing-tokens", "none"],
    }


def store_faults(base: Path) -> dict:
    """fault name -> function(store folder) damaging it (None for the read-only case)."""
    def shard(folder: Path) -> Path:
        meta = json.loads((folder / "store.json").read_text())
        return folder / meta["shards"][0]["file"]

    def truncate(folder):
        p = shard(folder)
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])

    def flip(folder):
        p = shard(folder)
        data = bytearray(p.read_bytes())
        data[-10] ^= 0xFF
        p.write_bytes(bytes(data))

    def killed(folder):  # what a SIGKILL'd build leaves: whole shards and sidecars, no index yet
        (folder / "store.json").unlink()

    def sigkill(folder):  # a real build, killed by SIGKILL once its first shard is whole
        shutil.rmtree(folder)
        cmd = commands(Path(os.environ["FAULT_CORPUS"]), folder, folder, folder, 0)["store build"]
        p = subprocess.Popen([*cmd, "--shard-size", "2"], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        while p.poll() is None and not list(folder.glob("*.safetensors.json")):
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def not_json(folder):
        (folder / "store.json").write_text('{"format": "picaso-state-store/1", oops')

    def read_only(folder):  # mounted read-only when the command runs
        pass

    return {"truncated shard": truncate, "one byte flipped": flip, "store.json deleted": killed, "build killed (SIGKILL)": sigkill,
            "store.json not JSON": not_json, "read-only store (ro bind mount)": read_only}


def corpus_faults() -> dict[str, bytes | None]:
    ok = json.dumps({"query": "Velmora was founded by", "continuation": " Osric Dallen.",
                     "contexts": [["c1", "Velmora was founded by Osric Dallen."]]}).encode()
    return {
        "broken JSON line": ok + b"\n" + b'{"query": "q", "continuation": " c"' + b"\n",
        "a line that is a list": ok + b'\n["a list"]\n',
        "query is a number": ok + b'\n{"query": 5, "continuation": " c"}\n',
        "missing query": ok + b'\n{"continuation": " c"}\n',
        "contexts an object {id: text}": ok + b'\n{"query": "q", "continuation": " c", "contexts": {"a": "t"}}\n',
        "a context of 3 items": ok + b'\n{"query": "q", "continuation": " c", "contexts": [["a", "t", "x"]]}\n',
        "gold id not a context": ok + b'\n{"query": "q", "continuation": " c", "gold_ids": ["zz"]}\n',
        "duplicate sample_id": b'{"sample_id": "s", "query": "q", "continuation": " c", "contexts": ["t"]}\n' * 2,
        "binary bytes": ok + b"\n" + bytes(range(128, 256)) + b"\n",
        "huge line (17 MiB)": ok + b"\n" + b'{"query": "' + b"x" * (17 * 2**20) + b'", "continuation": " c"}\n',
        "empty file": b"",
        "UTF-8 BOM (accepted)": b"\xef\xbb\xbf" + ok + b"\n",
        "CRLF line ends (accepted)": ok + b"\r\n" + ok.replace(b'"c1"', b'"c2"') + b"\r\n",
        "missing path": None,
        "a folder": b"<dir>",
    }


def table(rows: list[tuple[str, str, dict]]) -> str:
    out = ["| fault | entry point | exit | stderr lines | traceback | what it prints (first line) |",
           "|---|---|---|---|---|---|"]
    for fault, entry, r in rows:
        first = r["first"].replace("|", "\\|")
        out.append(f"| {fault} | {entry} | {r['rc']} | {r['lines']} | {'yes' if r['traceback'] else 'no'} | {first} |")
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=("store", "corpus"), default=None)
    p.add_argument("--port", type=count(1), default=7891)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="faults-"))
    tmp.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp), "XDG_CACHE_HOME": str(tmp / "xdg"),
           "HF_HOME": os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))}
    corpus = corpus_file(tmp)
    os.environ["FAULT_CORPUS"] = str(corpus)
    rows = []
    if args.only in (None, "store"):
        clean = tmp / "clean"
        r = run(commands(corpus, clean, tmp / "cache", tmp / "out", args.port)["store build"], env)
        assert r["rc"] == 0, r
        mountable = can_mount_read_only()
        for name, damage in store_faults(tmp).items():
            ro = name.startswith("read-only")
            if ro and not mountable:
                print("skipped the read-only rows: no read-only bind mount here (needs root and unshare)",
                      file=sys.stderr)
                continue
            for entry in ("app start", "store build", "store check", "experiments"):
                store = tmp / f"s-{len(rows)}"
                shutil.copytree(clean, store)
                store.chmod(0o755)
                damage(store)
                cache, out = tmp / f"cache-{len(rows)}", tmp / f"out-{len(rows)}"
                r = run(commands(corpus, store, cache, out, args.port)[entry], env, read_only=store if ro else None)
                rows.append((name, entry, r))
                print(name, entry, r, file=sys.stderr)
    if args.only in (None, "corpus"):
        for name, data in corpus_faults().items():
            path = tmp / f"bad-{len(rows)}.jsonl"
            if data == b"<dir>":
                path.mkdir()
            elif data is not None:
                path.write_bytes(data)
            for entry in ("app start", "store build", "experiments"):
                cmd = commands(path, tmp / f"cs-{len(rows)}", tmp / f"cc-{len(rows)}", tmp / f"co-{len(rows)}",
                               args.port)[entry]
                if entry != "store build":  # the app and the experiments use their default store
                    cmd = [c for c in cmd if c not in ("--store", str(tmp / f"cs-{len(rows)}"))]
                r = run(cmd, env)
                rows.append((name, entry, r))
                print(name, entry, r, file=sys.stderr)
    print(table(rows))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
