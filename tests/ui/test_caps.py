"""Every text input of every named endpoint has a cap, checked before any work: a
20,000-character value is refused in under 2 s with a short, one-line message, through the API as a
visitor of a public Space would send it."""

from __future__ import annotations

import time



LONG = "Velmora " * 2500  # 20,000 characters


def _kind(p: dict) -> str:
    t = (p.get("python_type") or {}).get("type") or ""
    return "text" if t == "str" else "choice" if t.startswith("Literal") else "ids" if t.startswith("list[") else ""


def _text_inputs(client) -> list[tuple[str, str, dict, object]]:
    """(endpoint, parameter, the others' values, the 20,000-character value) for every text box,
    dropdown and multiselect parameter of every named endpoint: typed text, and the choices a raw
    API call can fill with anything."""
    info = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    cases = []
    for name, ep in info.items():
        params = ep["parameters"]
        for p in params:
            if _kind(p):
                others = {q["parameter_name"]: q["parameter_default"] for q in params
                          if q is not p and q.get("parameter_has_default")}
                # a required text parameter besides this one gets a short valid-looking value
                others.update({q["parameter_name"]: "Velmora" for q in params
                               if q is not p and not q.get("parameter_has_default")})
                cases.append((name, p["parameter_name"], others, [LONG] if _kind(p) == "ids" else LONG))
    return cases


def test_every_text_input_refuses_20000_characters_fast(app_url, served_log):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    cases = _text_inputs(client)
    names = {n for n, *_ in cases}
    # the text inputs a visitor types into (and the ids / choices a raw API call can fill with anything)
    assert {"/compose", "/attribute", "/generate_answer", "/benchmarks"} <= names, names
    slow, accepted, long_messages, off_topic = [], [], [], []
    assert len(cases) >= 30, len(cases)
    for name, param, others, value in cases:
        t0 = time.perf_counter()
        try:
            client.predict(**{**others, param: value}, api_name=name)
        except Exception as e:  # gradio_client raises AppError with the handler's message
            msg = str(e)
            if len(msg) > 300 or "\n" in msg.strip():
                long_messages.append((name, param, msg[:120]))
            if not _names_the_value(msg, param):
                off_topic.append((name, param, msg[:120]))
        else:
            accepted.append((name, param))
        if time.perf_counter() - t0 > 2.0:
            slow.append((name, param, round(time.perf_counter() - t0, 1)))
    assert not accepted, f"20,000 characters accepted by {accepted}"
    # each refusal is about the 20,000 characters sent, not about another parameter's value
    assert not off_topic, off_topic
    # the server log: one line per rejected input, never a traceback, each named
    # by its endpoint as the API calls it ("rejected input to /soup_map: ...")
    log = served_log()
    assert "Traceback" not in log, log[log.index("Traceback"):][:1500]
    for name in sorted(names):
        assert f"rejected input to {name}:" in log, name
    assert not slow, f"refusals slower than 2 s: {slow}"
    assert not long_messages, long_messages


def _names_the_value(msg: str, param: str) -> bool:
    """A refusal of the long value says its length against the cap ("is 20,000 characters long;
    ... at most 4,000") or quotes the value it refuses ("got 'Velmora Velmora…'"): not only "must
    be" or "at most", which another parameter's refusal says too."""
    return ("20,000 characters" in msg and "at most" in msg) or "'velmora velmora" in msg.lower()
