"""`rlvr serve`: a trained model behind OpenAI- and Anthropic-style HTTP APIs (FastAPI + uvicorn).

config.py         the `serve` section (imported by rlvr.config; keep it light)
app.py            Server (arms, queue, generation path), build_app (routes, /healthz, /metrics, /ab)
openai_api.py     /v1/chat/completions, /v1/completions
anthropic_api.py  /v1/messages
backends.py       transformers generate (lite, CPU) or vLLM's async engine
text.py           tokens -> text deltas, stop sequences
ab.py             online A/B: sticky arms, verified accuracy, the paired test
metrics.py        Prometheus counters and the timing middleware
errors.py         errors in each API's shape
schema.py         request pieces both APIs share (no unknown field passes)
"""
