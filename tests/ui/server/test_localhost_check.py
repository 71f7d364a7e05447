"""launch() refuses to start when its own page does not answer a HEAD within 3 s (five tries): on a busy
machine, with the start's background work holding the interpreter, the app died at start ("When
localhost is not accessible, a shareable link must be created"). gradio_compat.patient_localhost_check
makes that check wait for a slow page."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gradio import networking

from picaso_core.ui.server import gradio_compat


class SlowPage(BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 (http.server's name)
        time.sleep(4.0)  # longer than launch()'s 3 s per try
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_page_slower_than_gradios_3_s_timeout_still_lets_the_app_start():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    original = networking.url_ok
    try:
        gradio_compat.patient_localhost_check(limit_s=20)
        t0 = time.monotonic()
        assert networking.url_ok(f"http://127.0.0.1:{server.server_port}/")
        assert time.monotonic() - t0 < 15
    finally:
        networking.url_ok = original
        server.shutdown()


def test_a_page_that_never_answers_is_still_refused(tmp_path):
    original = networking.url_ok
    try:
        gradio_compat.patient_localhost_check(limit_s=1)
        assert not networking.url_ok("http://127.0.0.1:9/")  # the discard port: nothing listens
    finally:
        networking.url_ok = original
