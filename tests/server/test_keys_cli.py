def test_sighup_with_workers_brings_each_worker_the_new_keys(
    slow_engine: FakeEngineHandle, tmp_path: Path
) -> None:
    """With ``--workers 2`` uvicorn's supervisor takes SIGHUP: it starts a new worker
    (which reads the file) before it retires each old one, which drains."""
    file = tmp_path / "keys.yaml"
    keys("add", "bob", "--file", str(file))
    env = {**os.environ, "PONDER_HOME": str(tmp_path)}
    proc, url = start_ponder_serve(
        slow_engine.base_url, "sk-bare", "--keys-file", str(file), "--workers", "2", env=env
    )

    def post(key: str) -> int:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.post(
            f"{url}/v1/chat/completions", json=body, headers=headers, timeout=300
        ).status_code

    try:
        carol = keys("add", "carol", "--file", str(file))[1].strip()
        assert post(carol) == 401
        os.kill(proc.pid, signal.SIGHUP)
        # Once both old workers are retired, every request (on either worker) knows carol.
        assert wait_until(lambda: all(post(carol) == 200 for _ in range(6)), within=300)
        assert post("sk-bare") == 200 and proc.poll() is None
    finally:
        stop_group(proc)
        proc.communicate(timeout=60)
