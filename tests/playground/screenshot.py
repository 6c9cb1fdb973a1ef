"""Take the README's screenshot of the playground, of a real model or of a fake engine.

``python -m tests.playground.screenshot docs/playground.png --url http://127.0.0.1:8000``
drives a running Ponder (``make serve`` serves SmolLM2-135M-Instruct): it picks
``--model``, types ``--problem`` and ``--spec`` and waits for the answer. Without
``--url`` it starts Ponder in front of a fake engine that answers like a small model
on 17 * 23: two right candidates, one slip, and a refine that repairs it. Both need
Chromium and the playwright package, as the e2e tests do.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from testing.fake_engine import FakeEngineConfig
from tests.playground.conftest import KEY, KEY_STORAGE, launched_chromium, running_playground

CANDIDATES = (
    "Split 23 into 20 + 3: 17 × 20 = 340 and 17 × 3 = 51, so 340 + 51 = 391. \\boxed{391}",
    "Work from 17: 23 × 10 = 230 and 23 × 7 = 161; 230 + 161 = 391. \\boxed{391}",
    "17 × 23 is 17 × 22 + 17. 17 × 22 = 374, and 374 + 17 = 381. \\boxed{381}",
)
REFINE = (
    "Candidates 1 and 2 agree on 391 by two different splits. Candidate 3 has the right "
    "plan, but 374 + 17 is 391, not 381: a slip in the last addition. Check: "
    "391 / 17 = 23. So 17 × 23 = 391. \\boxed{391}"
)


def arithmetic_responder(body: dict[str, Any]) -> list[str]:
    """Candidates for 17 * 23 (one per sample), or the refine once candidates are shown."""
    prompt = str(body.get("messages", [{}])[-1].get("content") or body.get("prompt", ""))
    n = int(body.get("n") or 1)
    if "Candidate solutions" in prompt:
        return [REFINE] * n
    return [CANDIDATES[i % len(CANDIDATES)] for i in range(n)]


def take(
    path: Path,
    url: str,
    *,
    key: str | None = None,
    model: str | None = None,
    problem: str = "What is 17 * 23?",
    spec: str = "gsr(n=3)",
    width: int = 1400,
    height: int = 800,
    timeout_s: float = 600,
) -> None:
    """Run ``spec`` on ``problem`` in the playground at ``url`` and screenshot the result."""
    with launched_chromium() as browser:
        context = browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1
        )
        if key:
            context.add_init_script(f"sessionStorage.setItem({KEY_STORAGE!r}, {key!r})")
        page = context.new_page()
        page.goto(f"{url}/")
        page.wait_for_selector("#model option", state="attached")
        if model:
            page.select_option("#model", model)
        page.fill("#problem", problem)
        page.fill("#spec", spec)
        page.wait_for_selector('#spec-status[data-state="ok"]')
        page.click("#run-button")
        page.wait_for_selector('#final[data-state="done"]', timeout=timeout_s * 1000)
        last = page.locator(".node details").last
        if last.count():
            last.evaluate("d => d.open = true")
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path))
        context.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, nargs="?", default=Path("docs/playground.png"))
    parser.add_argument("--url", help="a running Ponder; default: one on a fake engine")
    parser.add_argument("--key", help="its API key, if it needs one")
    parser.add_argument("--model", help="the served model to pick")
    parser.add_argument("--problem", default="What is 17 * 23?")
    parser.add_argument("--spec", default="gsr(n=3)")
    args = parser.parse_args(argv)
    options = {"model": args.model, "problem": args.problem, "spec": args.spec}
    if args.url:
        take(args.path, args.url, key=args.key, **options)
        return
    engine = FakeEngineConfig(respond=arithmetic_responder, latency_per_token=0.01)
    with running_playground(engine) as (url, _):
        take(args.path, url, key=KEY, **options)


if __name__ == "__main__":
    main()
