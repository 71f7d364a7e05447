"""Show code: every tab ends with the Python (picaso_core) and gradio_client snippets that
reproduce what is on screen, so a figure from a talk can be rerun in a notebook.

Handlers return the snippets as strings (built from the inputs they were called with) and the tab
shows them in `show_code`'s two gr.Code blocks, refreshed on every run.
"""

from __future__ import annotations

import gradio as gr

# The address the gradio_client snippets name: app.py sets it to the host and port it serves on.
_address = "http://127.0.0.1:7860"


def serve_address(host: str, port: int) -> str:
    """Record the host and port the app serves on, for the snippets; returns the URL they show
    (a server bound to every interface, 0.0.0.0 or ::, is reached here as 127.0.0.1)."""
    global _address
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    _address = f"http://{f'[{host}]' if ':' in host else host}:{int(port)}"
    return _address


def show_code(python: str = "", client: str = "") -> tuple[gr.Code, gr.Code]:
    """Lay out a closed accordion with the two snippets; returns the two gr.Code components, which
    a handler updates with the snippets of the run it just made."""
    with gr.Accordion("Show code: reproduce this in Python or through the API", open=False):
        py = gr.Code(python, language="python", label="python (picaso_core)", interactive=False)
        cl = gr.Code(client, language="python", label="gradio_client", interactive=False)
    return py, cl


def client_snippet(api_name: str, **kwargs) -> str:
    """The gradio_client call of an endpoint with the given keyword arguments."""
    args = "".join(f"    {k}={v!r},\n" for k, v in kwargs.items())
    return (
        "from gradio_client import Client\n\n"
        f'client = Client("{_address}")  # or the Space id\n'
        f"result = client.predict(\n{args}    api_name={api_name!r},\n)\n"
    )
