"""``python -m testing.fake_engine --port 9000 --latency-per-token 0.01``: serve one."""

from __future__ import annotations

import argparse

import uvicorn

from testing.fake_engine.app import create_app
from testing.fake_engine.config import FakeEngineConfig, FakeEngineState


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI-compatible engine.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--latency-per-token", type=float, default=0.0)
    parser.add_argument("--tail-alpha", type=float, default=None, help="Pareto latency tail")
    parser.add_argument("--tail-per-token", action="store_true", help="draw the tail per token")
    parser.add_argument("--reasoning", default=None, help="reasoning text for chat answers")
    args = parser.parse_args(argv)
    config = FakeEngineConfig(
        model=args.model,
        latency_per_token=args.latency_per_token,
        tail_alpha=args.tail_alpha,
        tail_per_token=args.tail_per_token,
        reasoning=args.reasoning,
    )
    uvicorn.run(create_app(config, FakeEngineState()), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
