"""``tfm serve``: translate over HTTP, concurrent requests decoded together."""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated

import typer

from tfm.cli.app import app, err
from tfm.cli.fields import Fields, derive
from tfm.cli.options import GlossaryOpt
from tfm.cli.run_config import with_config
from tfm.config import EngineOptions
from tfm.errors import UsageError
from tfm.serve.config import ServeConfig

# --help's panels of ServeConfig's options (tfm/serve/config.py, the server's own, names none).
PANELS = {
    **dict.fromkeys(("host", "port", "api_key", "request_timeout_s", "max_connections"),
                    "Server"),
    **dict.fromkeys(("beam", "max_beam", "max_sentences", "max_request_bytes"), "Requests"),
    **dict.fromkeys(("max_batch_tokens", "max_wait_ms", "max_queue"), "Batching"),
}


@app.command()
@with_config()
@derive(engine=Fields(EngineOptions, exclude=("ensemble", "reverse_model", "reverse_weight")),
        settings=Fields(ServeConfig, panels=PANELS))
def serve(
    glossary: GlossaryOpt = None,
    access_log: Annotated[bool, typer.Option(
        "--access-log", help="Log every request (one line each) on stderr.",
        rich_help_panel="Server")] = False,
    *,
    engine: EngineOptions,  # the model and where it decodes
    settings: ServeConfig,  # how the server listens, batches and bounds its work
) -> None:
    """Serve a model over HTTP: an API, a web page and metrics.

    POST /v1/translate, a page at /, /docs, /health, /metrics (docs/CLI.md#tfm-serve-serving)."""
    from tfm.extras import require

    require("fastapi", "serve")
    uvicorn = require("uvicorn", "serve")
    require("prometheus_client", "serve")
    require("httptools", "serve")
    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.protocol import http_protocol

    host, port = settings.host, settings.port
    terms = None
    if glossary is not None:  # loaded once, before anything else: a bad file fails fast
        from tfm.decoding.glossary import load_glossary

        if settings.beam == 1:
            raise UsageError("--glossary makes constraints, which need beam search: give "
                             "--beam 2 or more")
        terms = load_glossary(glossary)
    sock = _listen(host, port)  # before loading: a taken port fails fast
    try:
        # Decoding runs on the translator's threads (tfm.decoding.workers), as many batches
        # at once as it has.
        translator = load_translator(engine.model, engine.device, engine.precision,
                                     workers=engine.workers, shortlist=engine.shortlist,
                                     exact_search=engine.exact_search,
                                     cuda_graphs=engine.cuda_graphs)
        application = create_app(translator, settings, glossary=terms)
        info = translator.info
        url = _url(host, sock.getsockname()[1])
        err.print(f"Serving {info.src_lang or '?'}→{info.tgt_lang or '?'} ({translator.engine}"
                  f") on {url}  (page: {url}/, API: {url}/docs; Ctrl+C stops)",
                  highlight=False, soft_wrap=True)
        if settings.api_key is None and not _is_loopback(host):
            err.print(f"[yellow]warning[/]: listening on {host} without an API key: anyone "
                      "who can reach this machine can use the model (set TFM_API_KEY)")
        server = uvicorn.Server(uvicorn.Config(
            application, log_level="info", access_log=access_log,
            http=http_protocol(settings.request_timeout_s,
                               _connection_limit(settings.max_connections)),
            timeout_graceful_shutdown=int(settings.drain_timeout_s), lifespan="on"))
        server.run(sockets=[sock])
    finally:
        sock.close()


# File descriptors kept for what is not a client's connection (the model's files, the listening
# socket, threads' pipes, logs) when max_connections is derived from the open-file limit.
FILES_KEPT = 64


def _connection_limit(max_connections: int | None) -> int:
    """The most connections to keep open: ``max_connections``, or (None) what the process's
    open-file limit leaves, after raising its soft limit as far as the hard one allows."""
    if max_connections is not None:
        return max_connections
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit to read
        return 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(1, soft - FILES_KEPT)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (IPv4 or IPv6), or a one-line error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"--host {host}: not an address of this machine ({e.strerror})"
                         ) from e
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: without it, a keep-alive client's every request after
    # the first waits for the client's delayed ACK (Nagle's algorithm holds the response body
    # behind its headers until then; docs/BENCHMARKS.md).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}; give another "
                         "--port (0 picks a free one)") from e
    sock.set_inheritable(True)
    return sock


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
