"""``tfm serve``: an HTTP translation server that decodes concurrent requests together.

config (ServeConfig), batcher (the dynamic batcher: a bounded queue, batches decoded on the
translator's workers), metrics (Prometheus), schema (the bodies of POST /v1/translate: its
search options derived from SearchOptions), app (the FastAPI app: ``create_app(translator,
config)``), protocol (HTTP/1.1 with deadlines and limits), page.html (the page served at
``/``). Texts are cut into sentences by tfm.data.sentences, as the command line cuts them.
"""
