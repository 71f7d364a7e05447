"""PICASO Explorer: the Gradio app.

    python app.py                                   # bundled demo model + demo corpus, offline
    python app.py --model state-spaces/mamba2-370m --corpus wikitext --max-contexts 300
    python app.py --model ./my_checkpoint --corpus my_data.jsonl --port 8080

Every flag also reads an environment variable (for a Hugging Face Space, where there is no command
line): PICASO_MODEL, PICASO_CORPUS, PICASO_DATABASE, PICASO_SPLIT, PICASO_CACHE, PICASO_MAX_TOKENS,
PICASO_MAX_CONTEXTS, PICASO_DEVICE, PICASO_DTYPE, PICASO_ENCODE_ALL, PICASO_STORE, PICASO_TOUR_PREBUILD, GRADIO_SERVER_NAME, and GRADIO_SERVER_PORT or PORT. A flag wins
over its variable. Serving many visitors (--workers, --queue-size, --max-sessions, --compose-cache-mb, --threads,
--time-limit, --max-upload-mb; PICASO_WORKERS, PICASO_QUEUE_SIZE, PICASO_MAX_SESSIONS, PICASO_COMPOSE_CACHE_MB,
PICASO_THREADS, PICASO_TIME_LIMITS, PICASO_MAX_UPLOAD_MB; exports: PICASO_EXPORT_TTL_S, PICASO_EXPORT_MAX_MB):
docs/serving.md. The app starts only with the Gradio it is tested on (PICASO_GRADIO_UNCHECKED=1: with any;
docs/serving.md, 'The Gradio seam').

The model, corpus, state store and retriever load once (picaso_core.session) and are shared
read-only by every user; per-user data lives in gr.State inside the tabs. Each tab is a module of
picaso_core.ui.tabs, rendered here in the order a talk walks through them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import types

# What parse_args reads is light (no torch, no gradio), so `--help` and a mistyped flag answer at once.
from picaso_core.light.defaults import DEFAULT_CACHE, DEFAULT_MAX_TOKENS, DEFAULT_SPLIT, DTYPES
from picaso_core.ui.server import settings, time_limits

# The serving half (gradio, torch through the session, the tabs): imported after the arguments are
# read, once, into one holder (`_serving()`). At the top of the module it made `--help` and an argument
# error take ~30 s. `app.TABS`, `app.load_resources` (tests patch it) and the others read the holder
# through this module (PEP 562 __getattr__ below), and a name set on the module is set on the holder
# (`_AppModule`), so a test's patch reaches main(): `import app` is light too.
_SERVING = frozenset({"gr", "check_device", "Resources", "fault_message", "load_resources", "code", "CSS", "JS",
                      "THEME", "header", "page_loads", "defer_loads", "serving", "on_zerogpu", "errors", "attribution",
                      "benchmarks", "coffee", "compose", "compose_runs", "finetune", "landscape", "primer", "soup",
                      "tour", "tour_controls", "tab_key", "TABS"})
_held: list[types.SimpleNamespace] = []  # the holder, once made


def _serving() -> types.SimpleNamespace:
    """The serving half's names, imported on the first call (later calls: the same holder, with
    whatever a test set on it)."""
    if _held:
        return _held[0]
    import gradio as gr

    from picaso_core.engine.loading import check_device
    from picaso_core.session import Resources, fault_message, load_resources
    from picaso_core.ui import code, errors
    from picaso_core.ui.layout import CSS, JS, THEME, defer_loads, header, page_loads
    from picaso_core.ui.server import serving
    from picaso_core.ui.server.gpu import on_zerogpu
    from picaso_core.ui.tabs import (attribution, benchmarks, coffee, compose, compose_runs, finetune, landscape,
                                     primer, soup)
    from picaso_core.ui.tour import cache as tour
    from picaso_core.ui.tour import controls as tour_controls
    from picaso_core.ui.tour.links import tab_key

    TABS = (compose, soup, landscape, attribution, benchmarks, finetune, primer, coffee)  # the order a talk walks
    names = locals()
    _held.append(types.SimpleNamespace(**{name: names[name] for name in _SERVING}))
    return _held[0]


def __getattr__(name: str):
    if name in _SERVING:
        return getattr(_serving(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _AppModule(types.ModuleType):
    """This module's type: a serving-half name set on it (a test's monkeypatch) goes to the holder."""

    def __setattr__(self, name: str, value) -> None:
        if name in _SERVING:
            setattr(_serving(), name, value)
        else:
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _AppModule


def build_app(res: Resources) -> gr.Blocks:
    s = _serving()
    gr, tour_controls = s.gr, s.tour_controls
    s.errors.answer_in_one_line()  # a store fault as the visitor's error, a wrong input count in one line
    with gr.Blocks(title="PICASO Explorer") as demo:
        with gr.Row(elem_id="px-head"):  # one line in talk mode (layout.CSS): the title, the model, the controls
            s.header(res)
            talk = tour_controls.render_controls(res)  # Start the tour, Copy link, Large text; the tour bar
        blocks = {}
        with gr.Tabs() as tabs:
            for tab in s.TABS:
                key = s.tab_key(tab.TITLE)
                with gr.Tab(tab.TITLE, id=key) as blocks[key]:
                    s.page_loads(demo, tab.render(res))  # a tab's opening values come with the page's load
                    tour_controls.render_exports(res, key, blocks[key])
        gate = tour_controls.wire(demo, res, talk, tabs, blocks)
    s.serving.lazy_figures(demo)  # prebuilt figures come with the page's load, not inside /config
    s.defer_loads(demo, gate)  # a link's figure first, the plots and model work of the page's load after it
    return demo


def parse_args(argv: list[str] | None = None, env: dict[str, str] | None = None) -> argparse.Namespace:
    env = dict(os.environ if env is None else env)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=env.get("PICASO_MODEL", "demo"),
                   help="'demo', a local checkpoint folder, or a hub id such as state-spaces/mamba2-370m [PICASO_MODEL]")
    p.add_argument("--corpus", default=env.get("PICASO_CORPUS") or None,
                   help="demo | wikitext | msmarco | path/to/file.jsonl (default: demo, or none with --database) [PICASO_CORPUS]")
    p.add_argument("--database", default=env.get("PICASO_DATABASE") or None, metavar="FILE",
                   help="a database file, one {\"id\", \"text\"} per line (picaso_core/data/jsonl.py): its chunks join "
                   "the .jsonl corpus's contexts; alone (no --corpus), the app composes typed queries over it [PICASO_DATABASE]")
    p.add_argument("--split", default=env.get("PICASO_SPLIT", DEFAULT_SPLIT), help="corpus split [PICASO_SPLIT]")
    p.add_argument("--cache-dir", default=env.get("PICASO_CACHE", str(DEFAULT_CACHE)),
                   help="where state stores are kept, one folder per corpus and model [PICASO_CACHE]")
    p.add_argument("--max-tokens", type=int, default=_env_int(p, env, "PICASO_MAX_TOKENS", DEFAULT_MAX_TOKENS),
                   help="most context tokens one request may compose [PICASO_MAX_TOKENS]")
    p.add_argument("--max-contexts", type=int, default=_env_int(p, env, "PICASO_MAX_CONTEXTS", 0) or None,
                   help="use at most this many contexts: a real checkpoint's state is 5-160 MiB [PICASO_MAX_CONTEXTS]")
    p.add_argument("--encode-all", action="store_true",
                   default=env.get("PICASO_ENCODE_ALL", "").lower() in ("1", "true", "yes"),
                   help="encode every context into the state store before serving (default: each context "
                   "the first time a request uses it; either way a state is encoded once and kept) [PICASO_ENCODE_ALL]")
    p.add_argument("--store", default=env.get("PICASO_STORE") or None,
                   help="a prebuilt state store (python -m picaso_core.store build): a folder or an fsspec URL "
                   "(s3://, gs://, hf://), read lazily; default: one under --cache-dir, filled on use [PICASO_STORE]")
    p.add_argument("--device", default=env.get("PICASO_DEVICE") or None, help="cpu, cuda, ... [PICASO_DEVICE]")
    p.add_argument("--dtype", default=env.get("PICASO_DTYPE") or "float32", choices=DTYPES,
                   help="weights and activations; states stay float32 (bfloat16 halves a GPU's weight reads) "
                        "[PICASO_DTYPE]")
    p.add_argument("--no-tour-prebuild", action="store_true", default=env.get("PICASO_TOUR_PREBUILD", "1") == "0",
                   help="do not precompute the tour's steps in the background at start (a step is then computed "
                   "when its Run it live is pressed; a soak measures the clicks alone) [PICASO_TOUR_PREBUILD=0]")
    p.add_argument("--host", default=env.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="0.0.0.0 to serve other machines, as in the Docker image [GRADIO_SERVER_NAME]")
    p.add_argument("--port", type=int,
                   default=_env_int(p, env, "GRADIO_SERVER_PORT" if env.get("GRADIO_SERVER_PORT") else "PORT", 7860),
                   help="[GRADIO_SERVER_PORT or PORT]")
    try:
        serve = settings.settings(env)  # serving on a bigger machine: docs/serving.md
    except ValueError as e:
        p.error(str(e))
    p.add_argument("--workers", type=int, default=serve["workers"],
                   help="model-bound jobs run at once, all tabs together (2 cores: 2) [PICASO_WORKERS]")
    p.add_argument("--queue-size", type=int, default=serve["queue_size"],
                   help="jobs waiting at most; the next is refused at once with 'busy' (0: no bound) [PICASO_QUEUE_SIZE]")
    p.add_argument("--max-sessions", type=int, default=serve["max_sessions"],
                   help="visitor sessions whose state is kept (the oldest goes first) [PICASO_MAX_SESSIONS]")
    p.add_argument("--compose-cache-mb", type=float, default=serve["cache_mb"],
                   help="memory for composed states kept between clicks (0: none) [PICASO_COMPOSE_CACHE_MB]")
    p.add_argument("--threads", type=int, default=serve["threads"],
                   help="torch threads per job (0: the cores shared out among the workers) [PICASO_THREADS]")
    time_limits.add_argument(p)  # --time-limit NAME=SECONDS: docs/serving.md, 'Bounded work'
    try:
        upload_mb = float(env.get("PICASO_MAX_UPLOAD_MB") or 10)
    except ValueError:
        p.error(f"PICASO_MAX_UPLOAD_MB={env['PICASO_MAX_UPLOAD_MB']!r}: expected a number")
    p.add_argument("--max-upload-mb", type=float, default=upload_mb,
                   help="largest file upload accepted, in MB (the app's own inputs take none; docs/serving.md, "
                   "'Nothing left behind') [PICASO_MAX_UPLOAD_MB]")
    args = p.parse_args(argv)
    try:
        args.time_limits = time_limits.time_limits(args.time_limit, env)  # PICASO_TIME_LIMITS under the flags
        settings.check(args.workers, args.queue_size, args.max_sessions, args.compose_cache_mb, args.threads)
        if not args.max_upload_mb > 0:
            raise ValueError(f"--max-upload-mb must be more than 0, got {args.max_upload_mb:g}")
    except ValueError as e:
        p.error(str(e))
    if args.corpus is None and args.database is None:
        args.corpus = "demo"
    return args


def _env_int(p: argparse.ArgumentParser, env: dict[str, str], name: str, default: int) -> int:
    """A whole number from the environment variable `name` (unset or empty: `default`); another value
    is argparse's one `error:` line naming the variable, not a traceback."""
    raw = env.get(name) or default
    try:
        return int(raw)
    except ValueError:
        p.error(f"{name}={raw!r}: expected a whole number")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_gradio()  # before anything of Gradio's is used: the app replaces some of its internals
    s = _serving()  # after the arguments: --help and a mistyped flag answer without it
    serving, tour_controls = s.serving, s.tour_controls
    try:  # before anything loads: a device this torch cannot give (PICASO_DEVICE=cuda on the CPU image)
        s.check_device(args.device)
    except RuntimeError as e:  # one line naming the fix, not a traceback
        raise SystemExit(f"error: {e}") from None
    try:
        res = s.load_resources(args.model, args.corpus, args.split, args.cache_dir, args.max_tokens, args.max_contexts,
                             args.device, encode_all=args.encode_all, database=args.database, store=args.store,
                             dtype=args.dtype)
    except Exception as e:  # a known fault (a damaged store, a bad corpus file): one line naming the fix
        message = s.fault_message(e, args.cache_dir)
        if message is None:  # anything else is a bug: its traceback
            raise
        raise SystemExit(f"error: {message}") from None
    s.code.serve_address(args.host, args.port)  # the API snippets name the address served on
    demo = build_app(res)
    if not args.no_tour_prebuild:
        s.tour.ensure_built(res)  # the tour's results for a new model or corpus: built in the background
    # one line per rejected input (picaso_core.ui.errors), not a traceback
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if not s.on_zerogpu():  # there the model runs only inside a handler lent a GPU (picaso_core.ui.server.gpu)
        serving.in_background(s.compose.warm, res)  # the example every visitor clicks first, scored ahead
    # one pool of --workers for every model-bound event, a queue of --queue-size (picaso_core.ui.server)
    limits = serving.serve(demo, workers=args.workers, queue_size=args.queue_size, max_sessions=args.max_sessions,
                           threads=args.threads, time_limits=args.time_limits, max_upload_mb=args.max_upload_mb,
                           routes=tour_controls.download_routes())  # the exports' downloads
    s.compose_runs.set_budget(args.compose_cache_mb)  # the Compose tab's composed-state cache
    serving.register_memory(demo, res, args.max_sessions)  # /cache_stats's "memory": what each cache holds
    demo.launch(server_name=args.host, server_port=args.port, theme=s.THEME, css=s.CSS, js=s.JS, show_error=True, **limits)


def check_gradio() -> None:
    """Refuse to start, in one line on stderr with a non-zero exit, when the installed Gradio is
    outside the versions the app is tested on (picaso_core.ui.server.gradio_compat.TESTED; the line
    says what to install; PICASO_GRADIO_UNCHECKED=1 starts anyway)."""
    from picaso_core.ui.server.gradio_compat import UnsupportedGradio, check_gradio_version  # imports gradio

    try:
        check_gradio_version()
    except UnsupportedGradio as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
