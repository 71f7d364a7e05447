"""/config without what no client reads: `slim_config` and the ASGI middleware `SlimConfig`.

Gradio's /config describes every component and event with all of its settings. Its readers are the
browser (Gradio's frontend: it builds the page from `page[...]["layout"]`, the components' props and
the events) and gradio_client (which reads an event's id, api_name, api_visibility, backend_fn,
inputs, outputs and cancels, and a component's type, skip_api and, for inputs and outputs, whether
its `api_info` describes a file). What goes is what neither reads, or a value equal to what the
reader assumes when it is absent; /gradio_api/info and the server's own config keep everything.
What each entry rests on, as the frontend of the installed Gradio reads it:

- `layout` at the top: the frontend takes `page[<page>]["layout"]` instead.
- api_info (the schema, sent three times a component) and example inputs: the browser asks
  /gradio_api/info for the API page; gradio_client reads `api_info` only to tell whether an input
  or output of a callable event is a file, so it stays (without its descriptions) there alone.
- `component_class_id` of Gradio's own components: the frontend loads a component by its class id
  or, failing that, by its type, and Gradio's components are known by their type.
- `skip_api` where it is what gradio_client assumes for the type; `key` where None.
- props: `preserved_by_key` (read by the server when it re-renders), `name` (the component's
  class name, read only by Tabs, to tell a Walkthrough), `visible` true (the frontend's default),
  `_selectable` false (passed on as `selectable`, false by default in every component), and a
  Markdown's rtl, sanitize_html, line_breaks and header_links at its renderer's defaults.
- events: the settings in `DEFAULT_EVENT` at the value the frontend reads an absent one as (it
  tests them for truth, with `?? null` / `|| []`, or a connection against "stream"); the four it
  never reads on an event (batching and streaming are the server's); `queue` true in an app whose
  events are queued by default.

Two more things make a page cheap to serve many times: `PageCache` (the finished page and /config,
kept per way they are asked) and gradio_compat.shared_session_config (a new session's component
configs, built once per app instead of once per visitor).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict

from gradio.blocks import Block
from gradio_client.utils import SKIP_COMPONENTS, value_is_file

# per component: its API schema as input and as output, and example inputs (see the module's doc)
UNREAD_KEYS = ("api_info_as_input", "api_info_as_output", "example_inputs")
UNREAD_PROPS = ("preserved_by_key",)
DEFAULT_PROPS = {"visible": True, "_selectable": False}
# Markdown passes these on to its renderer as they come; an absent one is the renderer's default
TYPE_DEFAULT_PROPS = {"markdown": {"rtl": False, "sanitize_html": True, "line_breaks": False, "header_links": False}}
UNREAD = object()  # an event setting no client reads: dropped whatever its value
DEFAULT_EVENT = {
    "collects_event_data": UNREAD, "max_batch_size": UNREAD, "batch": UNREAD, "stream_every": UNREAD,
    "trigger_only_on_success": (False,), "trigger_only_on_failure": (False,), "scroll_to_output": (False,),
    "trigger_after": (None,), "js_implementation": (None,), "show_progress_on": (None,),
    "api_description": (None,), "rendered_in": (None,), "render_id": (None,), "time_limit": (None,),
    "component_prop_inputs": ([],), "event_specific_args": (None, []), "js": (None,), "connection": ("sse",),
}
SCHEMA_WORDS = ("description", "title", "additional_description")  # a schema's prose, not its shape


def slim_config(config: dict) -> dict:
    """`config` (a /config response) without what no client reads; changed in place, returned."""
    config.pop("layout", None)
    called = {i for dep in config.get("dependencies", ()) if dep.get("api_visibility") != "private"
              for i in (*dep.get("inputs", ()), *dep.get("outputs", ()))}
    own = _gradio_class_ids()
    for component in config.get("components", ()):
        for key in UNREAD_KEYS:
            component.pop(key, None)
        info = component.pop("api_info", None)
        if isinstance(info, dict) and component.get("id") in called and value_is_file(info):
            component["api_info"] = _shape(info)
        if component.get("component_class_id") in own:
            del component["component_class_id"]
        if component.get("skip_api") == (component.get("type") in SKIP_COMPONENTS):
            del component["skip_api"]
        if "key" in component and component["key"] is None:
            del component["key"]
        props = component.get("props")
        if isinstance(props, dict):
            for key in UNREAD_PROPS:
                props.pop(key, None)
            if component.get("type") != "tabs":
                props.pop("name", None)
            for key, default in {**DEFAULT_PROPS, **TYPE_DEFAULT_PROPS.get(component.get("type"), {})}.items():
                if key in props and props[key] is default:
                    del props[key]
    queued = config.get("enable_queue") is True  # an event without `queue` is queued as the app is
    for dep in config.get("dependencies", ()):
        for key, defaults in DEFAULT_EVENT.items():
            if key in dep and (defaults is UNREAD or any(dep[key] == d for d in defaults)):
                del dep[key]
        if queued and dep.get("queue") is True:
            del dep["queue"]
    return config


def _shape(schema):
    """A JSON schema without its prose: what gradio_client's value_is_file reads, nothing else."""
    if isinstance(schema, list):
        return [_shape(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in SCHEMA_WORDS and not isinstance(value, dict):
            continue
        # under "properties" and "$defs" the keys are names (a property may be called "title")
        out[key] = ({k: _shape(v) for k, v in value.items()} if key in ("properties", "$defs") and isinstance(value, dict)
                    else _shape(value))
    return out


_OWN: set[str] = set()


def _gradio_class_ids() -> set[str]:
    """The class ids of the components and layouts defined by Gradio itself."""
    if not _OWN:
        todo = [Block]
        while todo:
            cls = todo.pop()
            todo.extend(cls.__subclasses__())
            if cls.__module__.split(".")[0] == "gradio":
                _OWN.add(cls.get_component_class_id())
    return _OWN


class SlimConfig:
    """ASGI middleware: GET .../config responses pass through `slim_config`; all else untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or not scope["path"].rstrip("/").endswith("/config"):
            return await self.app(scope, receive, send)
        start, chunks = None, []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() != b"content-length"]
            kind = next((v for k, v in headers if k.lower() == b"content-type"), b"")
            if start["status"] == 200 and kind.startswith(b"application/json"):
                try:
                    config = json.loads(body)
                except ValueError:  # not JSON after all: send it as it came
                    config = None
                if isinstance(config, dict):
                    body = json.dumps(slim_config(config), separators=(",", ":"), ensure_ascii=False).encode()
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)


PAGE_PATHS = ("/", "/config", "/config/")  # the page and its config: the same for every visitor asking the same way
PAGE_CACHE_SIZE = 32
# what the built response depends on besides path and query: Gradio's root URL and the gzip
PAGE_HEADERS = (b"host", b"x-forwarded-host", b"x-forwarded-proto", b"accept-encoding")


class PageCache:
    """ASGI middleware, the outermost: the finished response (slimmed by SlimConfig, gzipped by
    GZipMiddleware) of GET `/`, `/config` and `/config/`, kept per way it is asked (path, query,
    scheme, root path, Host, X-Forwarded-Host/-Proto, Accept-Encoding), at most PAGE_CACHE_SIZE of
    them, the oldest dropped first. Only a whole 200 response without a Set-Cookie is kept. Visitors
    asking while the first one's is built wait for it instead of building it again.

    Assumes the page and config do not change after launch: no gr.render, no auth (a login would
    make them per visitor)."""

    def __init__(self, app):
        self.app = app
        self.pages: OrderedDict[tuple, tuple[dict, bytes]] = OrderedDict()
        self.building: dict[tuple, asyncio.Future] = {}

    @staticmethod
    def key(scope) -> tuple:
        headers = dict(scope.get("headers") or ())
        return (scope["path"], scope.get("query_string", b""), scope.get("scheme"), scope.get("root_path", ""),
                *(headers.get(name) for name in PAGE_HEADERS))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or scope["path"] not in PAGE_PATHS:
            return await self.app(scope, receive, send)
        key = self.key(scope)
        pending = self.building.get(key)
        if pending is not None and key not in self.pages:
            await asyncio.shield(pending)  # the first visitor's build: wait for it
            if key not in self.pages:  # it could not be kept (not 200, a cookie): build this one alone
                return await self.app(scope, receive, send)
        if key in self.pages:
            start, body = self.pages[key]
            await send(start)
            return await send({"type": "http.response.body", "body": body})
        done = self.building[key] = asyncio.get_running_loop().create_future()
        start, chunks, whole = None, [], False

        async def keep(message):
            nonlocal start, whole
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                whole = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, keep)
            if (whole and start is not None and start.get("status") == 200
                    and not any(k.lower() == b"set-cookie" for k, _ in start.get("headers", ()))):
                self.pages[key] = (start, b"".join(chunks))
                while len(self.pages) > PAGE_CACHE_SIZE:
                    self.pages.popitem(last=False)
        finally:
            del self.building[key]
            done.set_result(None)


class HideUploadPaths:
    """ASGI middleware: Gradio's upload route (`/gradio_api/upload`) answers with each stored file's
    absolute path on the server (its temp folder). Where no event takes a file (this app: serve()
    installs it only then, `serving.takes_files`), no client sends those paths back; the reply names
    each file by its last two parts (the folder Gradio made for it and its name), and a visitor learns
    nothing of the server's folders."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope["path"].endswith("/upload"):
            return await self.app(scope, receive, send)
        start, body = None, []

        async def hold(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return None
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            data = b"".join(body)
            try:
                paths = json.loads(data)
                if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
                    data = json.dumps(["/".join(p.replace("\\", "/").split("/")[-2:]) for p in paths]).encode()
            except ValueError:
                pass  # not the list of paths (an error's text): sent as it is
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(data)).encode())]})
            await send({"type": "http.response.body", "body": data})

        await self.app(scope, receive, hold)
