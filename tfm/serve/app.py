"""The HTTP API of ``tfm serve``: a FastAPI app around a Translator and a Batcher.

Endpoints: ``POST /v1/translate``, ``GET /v1/info``, ``GET /health``, ``GET /metrics``
(Prometheus text), ``GET /`` (a page to type text into) and FastAPI's ``/docs``.

Safe by default: every error is JSON ``{"error": ..., "status": ...}`` (with ``limit`` naming the
limit a request went over); bodies over ``max_request_bytes`` are refused before they are read
(413); with an API key, ``/v1/*`` and ``/metrics`` answer 401 without it; a full queue answers
503 with Retry-After at once; a client that goes away before its sentences are batched costs
no decoding. Nothing in a request names a file or a model.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from tfm import __version__
from tfm.config import SearchOptions
from tfm.data.language_marks import LanguageError, ModelLanguages, ResolvedLanguage
from tfm.data.language_names import names_of
from tfm.data.sentences import Passage, split_sentences
from tfm.decoding.constraints import MAX_CONSTRAINTS, ConstraintError, ConstraintSpec
from tfm.decoding.glossary import Glossary
from tfm.decoding.requests import constraint_record, prepare_request, translation_record
from tfm.decoding.translator import Source, Translation, Translator
from tfm.documents.formats import FORMATS, Document, Format, Limits, format_for
from tfm.documents.translate import (
    DocumentWork,
    model_inline_tags,
    model_lexicon,
    model_target,
    needs_attention,
)
from tfm.errors import DataError, OptionError, UsageError
from tfm.serve.batcher import Batcher, Job, QueueFull, ShuttingDown
from tfm.serve.config import ServeConfig
from tfm.serve.metrics import ServeMetrics
from tfm.serve.progress import Progress
from tfm.serve.schema import (
    BINARY_FORMATS,
    REQUEST_OPTIONS,
    TranslateRequest,
    TranslateResponse,
    given_options,
)

Receive = Callable[[], Awaitable[dict[str, Any]]]  # ASGI's receive

_log = logging.getLogger("uvicorn.error")  # the app runs under uvicorn: log where it logs

# Paths counted under their own name in the metrics; any other path counts as "other".
_ENDPOINTS = frozenset({"/", "/health", "/metrics", "/v1/translate", "/v1/document",
                        "/v1/info", "/v1/preview", "/docs",
                        "/redoc", "/openapi.json", "/docs/oauth2-redirect"})
_PAGE_HEADERS = {
    # The page loads nothing from elsewhere and talks only to this server.
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# The request's fields that name a language, by side: how a LanguageError is worded here.
FIELDS = {"target": "target_lang", "source": "source_lang"}
CLIENT_CLOSED = 499  # nginx's status for a client that went away before its answer


class ApiError(HTTPException):
    """An error answered as JSON; ``limit`` names the server limit the request went over."""

    def __init__(self, status: int, message: str, limit: str | None = None,
                 value: int | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers)
        self.limit = limit
        self.value = value


class _Service:
    """What the endpoints share: the translator once loaded, its batcher, the metrics."""

    def __init__(self, config: ServeConfig, glossary: Glossary | None = None) -> None:
        self.config = config
        self.glossary = glossary
        self.metrics = ServeMetrics()
        self.translator: Translator | None = None
        self.batcher: Batcher | None = None
        self.state = "loading"  # loading -> ready -> stopping; or failed
        self.error = ""
        self.defaults: SearchOptions | None = None
        self.choices: list[str] = []  # what target_lang chooses among (Translator's)
        self.progress = Progress()  # documents being translated, by their progress id

    def attach(self, translator: Translator) -> None:
        """Start serving ``translator`` (in the running event loop)."""
        self.translator = translator
        # As many batches at once as the translator has decoding threads (tfm.decoding.workers).
        self.config = replace(self.config, workers=translator.workers.count)
        self.defaults = translator.default_options(beam=self.config.beam)
        self.choices = translator.languages.targets  # read once: a vocabulary can be large
        self.batcher = Batcher(translator.translate_prepared, _source_tokens,
                               max_batch_tokens=self.config.max_batch_tokens,
                               max_wait=self.config.max_wait_ms / 1000,
                               max_queue=self.config.max_queue, metrics=self.metrics,
                               workers=translator.workers)
        self.batcher.start()
        self.state = "ready"
        self.metrics.ready.set(1)

    async def load(self, loader: Callable[[], Translator]) -> None:
        try:
            translator = await asyncio.to_thread(loader)
        except Exception as e:
            self.state, self.error = "failed", str(e)
            _log.error("the model did not load: %s", e)
            return
        if self.state == "loading":
            self.attach(translator)

    async def stop(self) -> None:
        self.state = "stopping"
        self.metrics.ready.set(0)
        if self.batcher is not None:
            await self.batcher.stop(self.config.drain_timeout_s)

    def ready_batcher(self) -> Batcher:
        if self.state == "ready" and self.batcher is not None:
            return self.batcher
        if self.state == "failed":
            raise ApiError(503, f"the model did not load: {self.error}")
        retry = "5" if self.state == "loading" else "1"
        raise ApiError(503, "the model is still loading" if self.state == "loading" else
                       "the server is shutting down", headers={"Retry-After": retry})

    def options(self, request: TranslateRequest) -> SearchOptions:
        """The request's SearchOptions, or a 422 saying which option or limit is wrong."""
        assert self.translator is not None and self.defaults is not None
        config = self.config
        given = given_options(request)
        if given["beam"] is None:
            given["beam"] = self.defaults.beam
        beam = given["beam"]
        if beam > config.max_beam:
            raise ApiError(422, f"beam {beam} is over this server's limit of "
                           f"{config.max_beam}", "max_beam", config.max_beam)
        longest = self.translator.max_source_tokens
        if request.max_length is not None and request.max_length > longest:
            raise ApiError(422, f"max_length {request.max_length} is over the model's limit "
                           f"of {longest} tokens", "max_length", longest)
        try:
            options = self.translator.default_options(
                **given, max_len_a=0.0 if request.max_length is not None else None,
                max_len_b=request.max_length)
        except OptionError as e:  # checked where the command line's are: words it as a field
            raise ApiError(422, e.for_request()) from e
        except UsageError as e:
            raise ApiError(422, str(e)) from e
        options.batch_tokens = config.max_batch_tokens
        return options

    async def translate(self, body: TranslateRequest, receive: Receive) -> Response:
        """POST /v1/translate: the answer, or ApiError. ``receive`` tells when the client
        goes away (its body already read)."""
        if body.format != "text":
            return await self.translate_formatted(body, receive)
        batcher = self.ready_batcher()
        assert self.translator is not None
        options = self.options(body)
        config = self.config
        texts = [body.text] if isinstance(body.text, str) else body.text
        phrases, prefixes = _per_text(body, len(texts))
        language, source = self.resolve(body, texts)
        rules = language.source or self.translator.info.src_lang  # whose rules cut
        passages = [split_sentences(t, rules)
                    if body.split and not phrases[i] and not prefixes[i]
                    else Passage.whole(t) for i, t in enumerate(texts)]
        sentences = [s for p in passages for s in p.sentences]
        if len(sentences) > config.max_sentences:
            raise ApiError(413, f"{len(sentences)} sentences are more than this server takes "
                           f"in one request ({config.max_sentences}): send fewer at a time",
                           "max_sentences", config.max_sentences)
        owner = [i for i, p in enumerate(passages) for _ in p.sentences]  # text of each
        asks = [ConstraintSpec(phrases[t], prefixes[t]) for t in owner]
        try:
            sources = prepare_request(self.translator, sentences, options, asks,
                                      self.glossary if body.glossary else None, language)
        except ConstraintError as e:
            raise ApiError(422, "invalid request: " + _field(e, owner[e.sentence or 0],
                                                             isinstance(body.text, list))
                           ) from e
        except LanguageError as e:  # a language: missing, unknown, or a tag misplaced
            raise ApiError(422, f"invalid request: {e.worded(FIELDS[e.side])}") from e
        except UsageError as e:
            raise ApiError(422, f"invalid request: {e}") from e
        job = self.enqueue(batcher, sources, options)
        results = await _unless_disconnected(job, batcher, receive)
        if results is None:
            return Response(status_code=CLIENT_CLOSED)
        return JSONResponse({"translations": _results(passages, results, body, options),
                             **source})

    def resolve(self, body: TranslateRequest, texts: list[str]
                ) -> tuple[ResolvedLanguage, dict[str, str | None]]:
        """The request's ``target_lang`` and ``source_lang`` resolved against the model, once,
        or a 422 naming the field; and the source language as the answer reports it
        (``source_language``). A model of several source languages, asked with no
        ``source_lang``, has the language of ``texts`` identified among them."""
        assert self.translator is not None
        languages = self.translator.languages
        given = body.source_lang
        identified = None if given is not None else self.identify(texts)
        try:
            language = languages.resolve(body.target_lang, given or identified)
        except LanguageError as e:
            raise ApiError(422, f"invalid request: {e.worded(FIELDS[e.side])}") from e
        return language, source_language(languages, language, given, identified)

    def identify(self, texts: list[str]) -> str | None:
        """The language ``texts`` are written in, among the model's source languages where
        it has several (tfm.decoding.language_id); None where it cannot be told, or
        identification is not installed (the ``langid`` extra)."""
        assert self.translator is not None
        candidates = self.translator.languages.source_languages
        if len(candidates) < 2:
            return None
        from tfm.decoding.language_id import identify

        try:
            return identify("\n".join(texts), candidates)
        except UsageError:
            return None

    async def translate_formatted(self, body: TranslateRequest, receive: Receive) -> Response:
        """POST /v1/translate with a ``format``: each text read as a document of that format
        (HTML, Markdown, ...), its markup kept and its words translated."""
        if body.constraints or body.prefix:
            raise ApiError(422, "invalid request: constraints and prefix are for plain text, "
                           "not a document's")
        fmt = format_for(None, body.format)
        texts = [body.text] if isinstance(body.text, str) else body.text
        documents = [self.read_document(fmt, t.encode("utf-8")) for t in texts]
        done = await self.translate_documents(documents, body, receive)
        if done is None:
            return Response(status_code=CLIENT_CLOSED)
        written, _, source = done
        return JSONResponse({"translations": [
            {"text": data.decode("utf-8"), "truncated": truncated} for data, truncated in written],
            **source})

    async def document(self, data: bytes, fmt: Format, body: TranslateRequest,
                       filename: str | None, receive: Receive, progress: str | None = None
                       ) -> Response:
        """POST /v1/document: the file translated, in its format, as a download named
        after ``filename`` and the target language; ``progress``: the id under which
        GET /v1/document/{id}/progress counts its sentences while it is translated."""
        document = await asyncio.to_thread(self.read_document, fmt, data)
        done = await self.translate_documents([document], body, receive, progress)
        if done is None:
            return Response(status_code=CLIENT_CLOSED)
        ((data, truncated),), language, source = done
        assert self.translator is not None
        name = download_name(filename, fmt, language.target or self.translator.info.tgt_lang)
        return Response(data, media_type=MEDIA_TYPES.get(fmt.name, "application/octet-stream"),
                        headers={"Content-Disposition": f'attachment; filename="{name}"',
                                 "X-Content-Type-Options": "nosniff",
                                 "X-Truncated": "true" if truncated else "false",
                                 # A code; a source_lang of a model that does not check it
                                 # (of tags: its rules only) in what a header may carry.
                                 "X-Source-Lang": re.sub(r"[^A-Za-z0-9_-]", "_",
                                                         source["source_lang"] or "")[:64],
                                 "X-Source-Lang-By": source["source_lang_by"] or ""})

    def enqueue(self, batcher: Batcher, sources: list[Source], options: SearchOptions) -> Job:
        """The sources queued for decoding, or a 503 (the queue full, the server stopping)."""
        try:
            return batcher.enqueue(sources, options)
        except QueueFull as e:
            raise ApiError(503, str(e), "max_queue", self.config.max_queue,
                           headers={"Retry-After": str(e.retry_after)}) from e
        except ShuttingDown as e:
            raise ApiError(503, str(e), headers={"Retry-After": "1"}) from e

    def read_document(self, fmt: Format, data: bytes) -> Document:
        """``data`` read in its format, or a 422 in one line (what the format says is wrong,
        where) or 413 (over the server's limits)."""
        limits = Limits(max_bytes=self.config.max_request_bytes)
        try:
            return fmt.read(data, limits)
        except DataError as e:
            raise ApiError(422, f"invalid {fmt.name} document: {e}") from e
        except ModuleNotFoundError as e:  # a format this installation lacks
            raise ApiError(415, f"this server cannot read {fmt.name} documents") from e

    async def translate_documents(self, documents: list[Document], body: TranslateRequest,
                                  receive: Receive, progress: str | None = None
                                  ) -> tuple[list[tuple[bytes, bool]], ResolvedLanguage,
                                             dict[str, str | None]] | None:
        """Each document written back translated, with whether a sentence was truncated
        (and the languages, resolved and as the answer reports the source's); their
        sentences decoded through the batcher as a text's are (the same limits and errors),
        with attention for those of segments with tags. None: the client left."""
        batcher = self.ready_batcher()
        assert self.translator is not None
        options = self.options(body)
        language, source = self.resolve(body, [s.text for d in documents for s in d.segments])
        rules = language.source or self.translator.info.src_lang  # whose rules cut
        target = language.target or model_target(self.translator)  # what the files name
        tags = model_inline_tags(self.translator)  # a model that copies tag tokens
        lexicon = model_lexicon(self.translator)  # aligns the words that place the tags
        works = [DocumentWork.of(d, body.split, rules, target, tags, lexicon) for d in documents]
        sentences = [s for w in works for s in w.sentences]
        if len(sentences) > self.config.max_sentences:
            raise ApiError(413, f"{len(sentences)} sentences are more than this server takes "
                           f"in one request ({self.config.max_sentences}): send fewer at a "
                           "time", "max_sentences", self.config.max_sentences)
        self.progress.check(progress)  # again: no await from here to its count
        jobs = []
        for chosen, with_tags in _groups(works):
            wanted = DocumentWork.options(options, with_tags, needs_attention(self.translator))
            try:
                sources = prepare_request(self.translator, [sentences[i] for i in chosen],
                                          wanted, None, self.glossary if body.glossary else None,
                                          language)
            except LanguageError as e:  # a sentence's own tag: missing or misplaced
                raise ApiError(422, f"invalid request: {e.worded(FIELDS[e.side])}") from e
            except UsageError as e:
                raise ApiError(422, f"invalid request: {e}") from e
            jobs.append((chosen, self.enqueue(batcher, sources, wanted)))
        with self.progress.watching(progress, [job for _, job in jobs]):
            results = await _gathered(jobs, len(sentences), batcher, receive)
        if results is None:
            return None
        return _written(works, results), language, source

    def languages(self) -> dict[str, Any]:
        """The model's languages, for /v1/info and the page: ``src_lang`` and ``tgt_lang``
        (None where not known), its ``directions`` (several, or none), and the
        ``target_languages`` a request chooses among with ``target_lang`` (the codes of its
        >>xx<< tokens, or its own language codes; none for a model of one target language),
        and for a model of several source languages (of language codes, such as NLLB-200;
        of several directions' sources) the ``source_languages`` of ``source_lang``; and
        ``language_names``, the English name of each language named (tfm.data.language_names:
        what the page shows, and what a request may give instead of a code)."""
        model = self.translator.info if self.translator is not None else None
        body = {"src_lang": model.src_lang if model else None,
                "tgt_lang": model.tgt_lang if model else None,
                "directions": model.directions if model else [],
                "target_languages": list(self.choices)}
        sources = self.translator.languages.source_languages if self.translator else []
        if len(sources) > 1:
            body["source_languages"] = sources
        own = [lang for lang in (body["src_lang"], body["tgt_lang"]) if lang]
        named = [*self.choices, *sources, *own]
        body["language_names"] = names_of(named)
        return body

    def info(self) -> dict[str, Any]:
        translator = self.translator
        body: dict[str, Any] = {"tfm_version": __version__, "status": self.state}
        if translator is not None and self.defaults is not None:
            model = translator.info
            d = self.defaults
            body.update({
                **self.languages(),
                "engine": translator.describe(),
                "model": asdict(model.model),
                "generation": asdict(model.generation),
                "provenance": model.provenance,
                "language_tokens": list(translator.languages.tags),
                # The defaults of a request's options (of max_length: max_len_a and b).
                "decoding": {name: getattr(d, name)
                             for name in (*REQUEST_OPTIONS, "max_len_a", "max_len_b")},
            })
        c = self.config
        body["limits"] = {
            "max_batch_tokens": c.max_batch_tokens, "max_wait_ms": c.max_wait_ms,
            "workers": c.workers,
            "max_queue": c.max_queue, "max_sentences": c.max_sentences,
            "max_request_bytes": c.max_request_bytes, "max_beam": c.max_beam,
            "max_length": translator.max_source_tokens if translator else None,
            "max_constraints": MAX_CONSTRAINTS,
        }
        body["glossary_terms"] = len(self.glossary) if self.glossary is not None else 0
        return body


def create_app(translator: Translator | Callable[[], Translator],
               config: ServeConfig | None = None,
               glossary: Glossary | None = None) -> FastAPI:
    """The server's ASGI app. ``translator``: a loaded Translator, or a function that loads one
    (called in a thread at startup; /health answers 503 until it returns); it decodes on its
    own threads (``Translator.workers``). ``glossary``: applied to every request that does not
    turn it off (tfm.decoding.glossary)."""
    config = config or ServeConfig()
    if isinstance(translator, Translator):
        beam = config.beam or translator.info.generation.beam
        if beam > config.max_beam:
            raise UsageError(f"the model's default beam ({beam}) is over --max-beam "
                             f"({config.max_beam}): give --beam, or a larger --max-beam")
    service = _Service(config, glossary)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = None
        if isinstance(translator, Translator):
            service.attach(translator)
        else:
            loading = asyncio.create_task(service.load(translator))
        yield
        if loading is not None:
            loading.cancel()
        await service.stop()

    app = FastAPI(title="tfm serve", version=__version__, lifespan=lifespan,
                  description="Translate with a tfm model. Concurrent requests are decoded "
                  "together; each sentence's translation is the one it would get alone.")
    app.state.service = service
    _add_error_handlers(app)
    _add_routes(app, service)
    app.add_middleware(_Guard, service=service)
    return app


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """Every error the server answers, as JSON: ``error``, ``status``, and ``extra`` (such as
    ``limit``) where not None."""
    return {"error": message, "status": status,
            **{k: v for k, v in extra.items() if v is not None}}


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return _api_error(e)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(e.status_code, str(e.detail)), e.status_code,
                            headers=e.headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, e: Exception) -> JSONResponse:
        # A bug or an exhausted machine: the request fails in JSON, the traceback goes to the
        # log, the server goes on.
        return _internal_error(e)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        details = [_problem(error) for error in e.errors()]
        first = details[0] if details else {"field": "", "problem": "invalid"}
        where = f"{first['field']}: " if first["field"] else ""
        return JSONResponse(error_body(422, f"invalid request: {where}{first['problem']}",
                                        details=details), 422)


def _api_error(e: ApiError) -> JSONResponse:
    return JSONResponse(error_body(e.status_code, e.detail, limit=e.limit, value=e.value),
                        e.status_code, headers=e.headers)


def _internal_error(e: Exception) -> JSONResponse:
    return JSONResponse(error_body(500, f"internal error: {type(e).__name__}: {e}"), 500)


def _problem(error: dict[str, Any]) -> dict[str, str]:
    """A pydantic error as {"field", "problem"} in the request's own terms."""
    if error.get("type") == "json_invalid":
        reason = error.get("ctx", {}).get("error", "")
        return {"field": "", "problem": f"the body is not valid JSON ({reason})"}
    location = [str(p) for p in error.get("loc", ()) if p != "body"]
    # A union's member names (text.str, text.list[str]) mean nothing to a client.
    location = [p for p in location if p not in ("str", "list[str]")]
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if not location and error.get("type") == "model_attributes_type":
        message = 'the body must be a JSON object such as {"text": "..."}'
    return {"field": ".".join(location), "problem": message}


def _add_routes(app: FastAPI, service: _Service) -> None:
    config = service.config
    _add_document_route(app, service)

    @app.post("/v1/translate", response_model=None,
              responses={200: {"model": TranslateResponse}, 401: {}, 413: {}, 422: {},
                         503: {}})
    async def translate(body: TranslateRequest, request: Request) -> Response:
        """Translate a text or a list of texts; the answers come in the same order."""
        return await service.translate(body, request.receive)

    @app.get("/v1/info")
    async def info() -> dict[str, Any]:
        """The model (languages, architecture, provenance), the engine, the decoding
        defaults, the server's limits and the tfm version."""
        return service.info()

    @app.get("/health", responses={503: {}})
    async def health() -> JSONResponse:
        """200 once the model is loaded and requests are taken, 503 before and after."""
        body = {"status": service.state}
        if service.error:
            body["error"] = service.error
        return JSONResponse(body, 200 if service.state == "ready" else 503)

    @app.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus metrics (text format)."""
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    page = resources.files("tfm.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        facts = {**service.languages(), "api_key_required": config.api_key is not None,
                 "formats": PAGE_FORMATS}
        # JSON inside <script>: "<" escaped so no text can close the element.
        blob = json.dumps(facts).replace("<", "\\u003c")
        return HTMLResponse(page.replace("__SERVER__", blob), headers=_PAGE_HEADERS)


def _add_document_route(app: FastAPI, service: _Service) -> None:
    """POST /v1/document: a file in its format as the body, its translation as the answer."""
    @app.post("/v1/document", response_class=Response,
              responses={200: {"content": {"application/octet-stream": {}}}, 401: {},
                         413: {}, 415: {}, 422: {}, 503: {}})
    async def document(request: Request, filename: Optional[str] = None,
                       format: Optional[str] = None, target_lang: Optional[str] = None,
                       source_lang: Optional[str] = None, beam: Optional[int] = None,
                       split: bool = True, glossary: bool = True,
                       progress: Optional[str] = None) -> Response:
        """Translate a file sent as the body (its format by ``format``, else by the
        extension of ``filename``); the answer is the translated file, in the same format.
        ``progress``: an id of the client's choosing (8 to 64 letters, digits, ``-``) under
        which GET /v1/document/{id}/progress counts the sentences done."""
        service.progress.check(progress)
        try:
            fmt = format_for(Path(filename) if filename else None, format)
        except UsageError as e:
            raise ApiError(415, str(e).replace("--format", "format")) from e
        try:
            body = TranslateRequest(text="", beam=beam, target_lang=target_lang,
                                    source_lang=source_lang, split=split, glossary=glossary)
        except ValidationError as e:
            raise ApiError(422, f"invalid request: {e.errors()[0]['msg']}") from e
        data = await request.body()
        return await service.document(data, fmt, body, filename, request.receive, progress)

    @app.post("/v1/preview", response_class=HTMLResponse, responses={415: {}, 422: {}})
    async def preview(request: Request, format: str = "markdown") -> Response:
        """A translated document as HTML, for the page to show in its sandboxed frame: a
        Markdown text (the body, UTF-8) rendered by markdown-it-py, raw HTML in it escaped;
        a Word file (the body, a .docx) as its paragraphs, runs, links and tables, HTML made
        by tfm with nothing of the file's passed through (the page shows an HTML document as
        it is)."""
        if format not in ("markdown", "docx"):
            raise ApiError(415, f"format {format}: only markdown and docx are rendered here")
        data = await request.body()
        if format == "docx":
            limits = Limits(max_bytes=service.config.max_request_bytes)
            return HTMLResponse(await asyncio.to_thread(render_word, data, limits),
                                headers={"X-Content-Type-Options": "nosniff"})
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError(422, f"invalid request: not UTF-8 (byte {e.start})") from e
        return HTMLResponse(await asyncio.to_thread(render_markdown, text),
                            headers={"X-Content-Type-Options": "nosniff"})

    @app.get("/v1/document/{ident}/progress", responses={404: {}})
    async def progress_of(ident: str) -> dict[str, int]:
        """How many of a document's sentences are translated (``done`` of ``total``), while
        the POST /v1/document that gave ``progress=ident`` is being translated; 404 before
        its sentences are queued and after it is answered."""
        return service.progress.count(ident)


async def _unless_disconnected(job: Job, batcher: Batcher, receive: Receive
                               ) -> list[Translation] | None:
    """The job's translations, or None if the client went away first (the job is then
    cancelled: sentences not yet in a batch are never decoded)."""
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({job.future, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not job.done:
            batcher.cancel(job)
    if job.future.cancelled():
        return None
    return job.future.result()


async def _disconnected(receive: Receive) -> None:
    """Returns when the client disconnects (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


# What a translated document is sent as (POST /v1/document).
MEDIA_TYPES = {
    "text": "text/plain; charset=utf-8", "html": "text/html; charset=utf-8",
    "xml": "application/xml", "markdown": "text/markdown; charset=utf-8",
    "srt": "application/x-subrip", "vtt": "text/vtt; charset=utf-8",
    "po": "text/x-gettext-translation", "xliff": "application/xliff+xml",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}


# The formats the page offers, and their extensions; a binary one (DOCX) is sent as a file's
# bytes, never as text.
PAGE_FORMATS = [{"name": f.name, "extensions": list(f.extensions),
                 **({"binary": True} if f.name in BINARY_FORMATS else {})} for f in FORMATS]


def render_markdown(text: str) -> str:
    """``text`` as HTML: CommonMark with tables and strikethrough (as GitHub shows a
    README), raw HTML escaped rather than passed through (the documents module's parser)."""
    try:
        from markdown_it import MarkdownIt
    except ModuleNotFoundError as e:
        raise ApiError(415, "this server cannot render markdown (pip install "
                       "\"tfm[documents]\")") from e
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"]
                                                             ).render(text)


def render_word(data: bytes, limits: Limits) -> str:
    """The Word file ``data`` as HTML (tfm.documents.word_html), or a 422 in one line for a
    file the DOCX reader refuses."""
    from tfm.documents.word_html import word_html

    try:
        return word_html(data, limits)
    except DataError as e:
        raise ApiError(422, f"invalid docx document: {e}") from e
    except ModuleNotFoundError as e:  # python-docx, imported when a file is opened
        raise ApiError(415, "this server cannot read docx documents (pip install "
                       "\"tfm[documents]\")") from e


def source_language(languages: ModelLanguages, language: ResolvedLanguage, given: str | None,
                    identified: str | None) -> dict[str, str | None]:
    """What an answer says of its source language: ``source_lang`` (a code; None: unknown)
    and ``source_lang_by``: ``request`` (given), ``identified`` (among the model's source
    languages), ``model`` (the model's one source language, or the one a model of language
    codes records and takes where none is given nor identified) or ``unknown``."""
    if given is not None or identified is not None:
        return {"source_lang": language.source or given or identified,
                "source_lang_by": "request" if given is not None else "identified"}
    sources = languages.source_languages
    own = language.source or (sources[0] if len(sources) == 1 else None)
    return {"source_lang": own, "source_lang_by": "model" if own else "unknown"}


async def _gathered(jobs: list[tuple[list[int], Job]], total: int, batcher: Batcher,
                    receive: Receive) -> list[Translation | None] | None:
    """The translations of ``total`` sentences, each job's in its positions (None: a sentence
    not sent, kept as it is); None (every job cancelled) when the client goes away first."""
    results: list[Translation | None] = [None] * total
    for chosen, job in jobs:
        found = await _unless_disconnected(job, batcher, receive)
        if found is None:
            for _, other in jobs:
                batcher.cancel(other)
            return None
        for i, result in zip(chosen, found):
            results[i] = result
    return results


def _groups(works: list[DocumentWork]) -> list[tuple[list[int], bool]]:
    """The sentences of all the documents (their positions, in order) to decode without and
    with attention."""
    chosen: dict[bool, list[int]] = {False: [], True: []}
    offset = 0
    for work in works:
        for positions, with_tags in work.groups():
            chosen[with_tags] += [offset + i for i in positions]
        offset += len(work.sentences)
    return [(positions, want) for want, positions in chosen.items() if positions]


def _written(works: list[DocumentWork], results: list[Translation | None]
             ) -> list[tuple[bytes, bool]]:
    """Each document written back with its sentences' translations, and whether one was
    truncated; a document its format cannot write is a 500 (a format's fault, not the
    request's)."""
    written, offset = [], 0
    for work in works:
        mine = results[offset: offset + len(work.sentences)]
        offset += len(work.sentences)
        written.append((work.write(mine), any(r is not None and r.truncated for r in mine)))
    return written


def download_name(filename: str | None, fmt: Format, language: str | None) -> str:
    """The translated file's name: the uploaded one's stem, the target language and its
    extension (``page.html`` -> ``page.de.html``), in characters safe in a header."""
    stem, suffix = "document", fmt.extensions[0]
    if filename:
        path = Path(filename.replace("\\", "/")).name
        stem, suffix = Path(path).stem or stem, Path(path).suffix or suffix
    tag = language.strip("<>") if language else "translated"
    name = f"{stem}.{tag}{suffix}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:200]


def _source_tokens(sources: list[Source]) -> list[int]:
    """What each sentence costs a batch: its source tokens (1 for an empty one)."""
    return [max(1, source.tokens) for source in sources]


def _results(passages: list[Passage], results: list[Translation], request: TranslateRequest,
             options: SearchOptions) -> list[dict[str, Any]]:
    """One answer per text: its sentences' translations put back in place."""
    details = request.scores or options.n_best > 1
    answers = []
    position = 0
    for passage in passages:
        mine = results[position: position + len(passage.sentences)]
        position += len(passage.sentences)
        answer: dict[str, Any] = {"text": passage.join([r.text for r in mine]),
                                  "truncated": any(r.truncated for r in mine)}
        reported = [c for r in mine for c in r.constraints or []]
        if reported:
            answer["constraints"] = [constraint_record(c) for c in reported]
            answer["constraints_met"] = all(met for _, met, _ in reported)
        if details:
            answer["sentences"] = [translation_record(r) for r in mine]
        answers.append(answer)
    return answers


def _per_text(body: TranslateRequest, texts: int
              ) -> tuple[list[list[str]], list[str | None]]:
    """The request's constraints and prefix of each text, or a 422 naming the field whose
    shape does not match ``text``'s."""
    one = isinstance(body.text, str)
    phrases: list[list[str]] = [[] for _ in range(texts)]
    if body.constraints:  # None or []: none
        nested = bool(body.constraints) and isinstance(body.constraints[0], list)
        if one and nested:
            raise ApiError(422, "invalid request: constraints: for one text, give a list of "
                           "phrases (strings)")
        if not one and body.constraints and not nested:
            raise ApiError(422, "invalid request: constraints: for a list of texts, give one "
                           "list of phrases per text")
        if one:
            phrases = [list(body.constraints)]
        elif len(body.constraints) != texts:
            raise ApiError(422, f"invalid request: constraints: {len(body.constraints)} lists "
                           f"for {texts} texts; give one per text")
        else:
            phrases = [list(p) for p in body.constraints]
    prefixes: list[str | None] = [None] * texts
    if body.prefix is not None:
        if one != isinstance(body.prefix, str):
            raise ApiError(422, "invalid request: prefix: give a string for one text, a list "
                           "(a string or null per text) for a list of texts")
        if one:
            prefixes = [body.prefix]  # type: ignore[list-item]
        elif len(body.prefix) != texts:
            raise ApiError(422, f"invalid request: prefix: {len(body.prefix)} prefixes for "
                           f"{texts} texts; give one (or null) per text")
        else:
            prefixes = list(body.prefix)
    return phrases, prefixes


def _field(e: ConstraintError, text: int, listed: bool) -> str:
    """A constraint error in the request's own terms: ``constraints[2][0]: ...`` (the text's
    position first, for a list of texts), or the glossary term and the text it was found in."""
    if e.field.startswith("glossary term"):
        return f"text{f'[{text}]' if listed else ''}: {e.field}: {e.problem}"
    name, _, rest = e.field.partition("[")
    where = f"{name}[{text}]" if listed else name
    return f"{where}{'[' + rest if rest else ''}: {e.problem}"


class _Guard:
    """Outermost ASGI layer: counts and times every request; refuses bodies over
    max_request_bytes (413, before reading them when Content-Length says so, then closing the
    connection: tfm.serve.protocol reads the rest and throws it away) and, with an API key
    set, requests to /v1/* and /metrics without it (401)."""

    def __init__(self, app: Any, service: _Service) -> None:
        self.app = app
        self.service = service
        key = service.config.api_key
        self.key = key.encode() if key is not None else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = path if path in _ENDPOINTS else "other"
        metrics = self.service.metrics
        status = 500  # if the app fails before answering, uvicorn answers 500
        start = time.perf_counter()

        async def observed_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metrics.in_flight.inc()
        try:
            refusal = self._refusal(scope, path)
            if refusal is not None:
                await refusal(scope, receive, observed_send)
            elif path == "/v1/translate" and scope["method"] == "POST":
                await self._translate(scope, self._limited(receive), observed_send)
            else:
                await self.app(scope, self._limited(receive), observed_send)
        finally:
            metrics.in_flight.dec()
            metrics.requests.labels(endpoint, str(status)).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - start)

    async def _translate(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        """POST /v1/translate, past the framework's layers (routing, dependencies, exception
        middlewares), which cost much of the server's own time per request
        (docs/BENCHMARKS.md); the endpoint is the same function. A body that is not a valid
        request goes through FastAPI, which words the 422 as for any other endpoint."""
        try:
            body = await _read_body(receive)
            try:
                request = TranslateRequest.model_validate(json.loads(body))
            except (json.JSONDecodeError, ValidationError):  # not JSON, or not a request
                await self.app(scope, _replay(body, receive), send)
                return
            except (ValueError, RecursionError) as e:
                # Not UTF-8, nested too deeply, a number too long: FastAPI would answer 400
                # or fail with 500.
                response = _unreadable(e)
                await response(scope, receive, send)
                return
            response = await self.service.translate(request, receive)
        except ApiError as e:
            response = _api_error(e)
        except Exception as e:
            _log.exception("POST /v1/translate failed")
            response = _internal_error(e)
        await response(scope, receive, send)

    def _refusal(self, scope: dict[str, Any], path: str) -> Response | None:
        headers = dict(scope["headers"])
        if self.key is not None and (path.startswith("/v1/") or path == "/metrics"):
            given = headers.get(b"x-api-key")
            auth = headers.get(b"authorization", b"")
            if auth[:7].lower() == b"bearer ":
                given = auth[7:].strip()
            if given is None or not hmac.compare_digest(given, self.key):
                return JSONResponse(error_body(401, "missing or wrong API key: send it as "
                                                "'Authorization: Bearer KEY' or 'X-API-Key: "
                                                "KEY'"), 401,
                                    headers={"WWW-Authenticate": "Bearer"})
        if scope["method"] == "POST" and path == "/v1/translate":
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if kind != b"application/json" and not kind.endswith(b"+json"):
                return JSONResponse(error_body(415, "send the body as JSON, with the header "
                                                "'Content-Type: application/json'"), 415)
        length = headers.get(b"content-length")
        limit = self.service.config.max_request_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            # The body is never read: the connection cannot carry another request (the
            # protocol closes it lingering, so that a client still sending reads this).
            return JSONResponse(_too_large(limit), 413, headers={"Connection": "close"})
        return None

    def _limited(self, receive: Any) -> Any:
        """``receive`` that fails with 413 once the body passes max_request_bytes (for bodies
        sent without a Content-Length)."""
        limit = self.service.config.max_request_bytes
        seen = 0

        async def limited() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(413, _too_large(limit)["error"], "max_request_bytes", limit,
                                   headers={"Connection": "close"})  # the rest goes unread
            return message

        return limited


async def _read_body(receive: Receive) -> bytes:
    """An HTTP request's whole body."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            raise ApiError(CLIENT_CLOSED, "the client closed the connection")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives ``body`` once, then what ``receive`` gives."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _unreadable(e: ValueError | RecursionError) -> JSONResponse:
    """422 for a body that JSON's syntax allows but no parser should read: not UTF-8, nested
    too deeply, a number of thousands of digits."""
    if isinstance(e, UnicodeDecodeError):
        byte = e.object[e.start:e.start + 1].hex().upper()
        reason = f"not UTF-8: byte 0x{byte} at offset {e.start}"
    elif isinstance(e, RecursionError):
        reason = "nested too deeply"
    else:
        reason = "a number too long to read" if "digits" in str(e) else str(e)
    problem = f"the body is not valid JSON ({reason})"
    return JSONResponse(error_body(422, f"invalid request: {problem}",
                                    details=[{"field": "", "problem": problem}]), 422)


def _too_large(limit: int) -> dict[str, Any]:
    return error_body(413, f"the request body is over this server's limit of {limit} bytes: "
                       "send less at a time", limit="max_request_bytes", value=limit)
