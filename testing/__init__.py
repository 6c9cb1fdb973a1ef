"""Test doubles and harnesses for Ponder: a fake OpenAI/vLLM/SGLang engine, servers in
a thread, a Ponder app on loopback, vLLM serving a tiny offline model.

Tests and benchmarks use these; the product packages (scaffolds, server, clients,
training) never import them, and the server image does not ship them.
"""
