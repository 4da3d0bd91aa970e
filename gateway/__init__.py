"""The REST gateway (FastAPI): the Open Inference Protocol, the OpenAI-compatible API, management and admin APIs,
auth, uploads, predictions, webhooks, usage reports and metrics. `app.py` wires; `routers/` has one per resource."""
