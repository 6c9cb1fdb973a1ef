"""The README's Python example runs as written, against an OpenAI-compatible engine on loopback."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from testing.fake_engine import running_fake_engine

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs_against_a_real_http_engine() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    example = next(b for b in blocks if 'solve("gsr(n=4)"' in b)
    with running_fake_engine() as engine:
        code = example.replace("http://127.0.0.1:8001/v1", engine.base_url).replace(
            '"my-model"', repr(engine.config.model)
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
        assert engine.state.calls == 2
        assert engine.state.requests[0].body["n"] == 4
    answer, _, usage = out.getvalue().partition(" ")
    assert answer.strip() and "calls=2" in usage


def test_readme_sdk_example_runs_against_ponder_on_loopback() -> None:
    from server.settings import Settings
    from testing.ponder import running_ponder

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    example = next(b for b in blocks if "from openai import OpenAI" in b)
    with running_fake_engine() as engine:
        settings = Settings(
            model="my-model",
            engines=(engine.base_url,),
            engine_model=engine.config.model,
            api_keys=("sk-local",),
            aliases={"gsr4": "gsr(n=4)"},
        )
        with running_ponder(settings) as url:
            code = example.replace("http://127.0.0.1:8000/v1", f"{url}/v1")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
        assert engine.state.calls == 2 and engine.state.requests[0].body["n"] == 4
        assert all("sk-local" not in str(r.headers) for r in engine.state.requests)
    assert "\\boxed{" in out.getvalue() and "engine_calls=2" in out.getvalue()
