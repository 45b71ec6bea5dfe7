"""``tfm serve``: an HTTP translation server that decodes concurrent requests together.

config (ServeConfig), sentences (split a pasted text and put it back), batcher (the dynamic
batcher: one decoding thread, a bounded queue), metrics (Prometheus), app (the FastAPI app:
``create_app(translator, config)``), page.html (the page served at ``/``).
"""
