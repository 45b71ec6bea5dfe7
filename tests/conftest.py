"""Shared fixtures: a tiny natural English-German corpus and a tokenizer trained on it."""

from __future__ import annotations

import os
from pathlib import Path

# One intra-op thread in the tests and in every command they run (subprocesses inherit it),
# set before torch is first imported. The models here are tiny: more threads buy nothing, and
# on a machine whose cores are busy (2 cores, often shared with a training run) each small op
# waits for a descheduled thread; the in-process model tests (test_search, test_fuzz,
# test_checkpoint, ...) ran 5x slower with torch's default. A value set by the caller is kept;
# tests that give --threads or num_threads still get what they ask for.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import subprocess

import forked
import pytest
from tokenizers import Tokenizer

from tfm.data.tokenizer import save_tokenizer, train_tokenizer

PAIRS: list[tuple[str, str]] = [
    ("A man is walking his dog in the park .", "Ein Mann geht mit seinem Hund im Park spazieren ."),
    ("Two children are playing football on the grass .",
     "Zwei Kinder spielen Fußball auf dem Rasen ."),
    ("The woman is reading a book .", "Die Frau liest ein Buch ."),
    ("A dog runs through the snow .", "Ein Hund rennt durch den Schnee ."),
    ("The old man is sitting on a bench .", "Der alte Mann sitzt auf einer Bank ."),
    ("Two women are talking in the kitchen .", "Zwei Frauen unterhalten sich in der Küche ."),
    ("A boy jumps into the water .", "Ein Junge springt ins Wasser ."),
    ("The girl is eating an apple .", "Das Mädchen isst einen Apfel ."),
    ("A cat sleeps on the sofa .", "Eine Katze schläft auf dem Sofa ."),
    ("People are waiting for the bus .", "Menschen warten auf den Bus ."),
    ("A musician plays the guitar on the street .",
     "Ein Musiker spielt Gitarre auf der Straße ."),
    ("The children are laughing .", "Die Kinder lachen ."),
    ("A man rides a bicycle down the hill .",
     "Ein Mann fährt mit dem Fahrrad den Hügel hinunter ."),
    ("Three friends are drinking coffee .", "Drei Freunde trinken Kaffee ."),
    ("A woman is painting a picture .", "Eine Frau malt ein Bild ."),
    ("The dog catches the ball .", "Der Hund fängt den Ball ."),
    ("A worker is repairing the roof .", "Ein Arbeiter repariert das Dach ."),
    ("Two dogs are playing in the garden .", "Zwei Hunde spielen im Garten ."),
    ("A little girl is holding a balloon .", "Ein kleines Mädchen hält einen Luftballon ."),
    ("The man is cooking dinner .", "Der Mann kocht das Abendessen ."),
    ("A group of people are dancing .", "Eine Gruppe von Menschen tanzt ."),
    ("The boy is wearing a red hat .", "Der Junge trägt einen roten Hut ."),
    ("A woman walks along the beach .", "Eine Frau geht am Strand entlang ."),
    ("The students are sitting in the classroom .",
     "Die Schüler sitzen im Klassenzimmer ."),
    ("A man is climbing a rock .", "Ein Mann klettert auf einen Felsen ."),
    ("The baby is sleeping .", "Das Baby schläft ."),
    ("A chef prepares food in the restaurant .",
     "Ein Koch bereitet Essen im Restaurant zu ."),
    ("Two men are fishing from a boat .", "Zwei Männer angeln von einem Boot aus ."),
    ("The girl rides a horse .", "Das Mädchen reitet auf einem Pferd ."),
    ("A crowd watches the game .", "Eine Menschenmenge sieht dem Spiel zu ."),
    ("The woman is buying vegetables at the market .",
     "Die Frau kauft Gemüse auf dem Markt ."),
    ("A dog is swimming in the lake .", "Ein Hund schwimmt im See ."),
    ("The man is reading the newspaper .", "Der Mann liest die Zeitung ."),
    ("Children are building a sandcastle .", "Kinder bauen eine Sandburg ."),
    ("A young man is playing the piano .", "Ein junger Mann spielt Klavier ."),
    ("The family is eating together .", "Die Familie isst zusammen ."),
    ("A woman is carrying a large bag .", "Eine Frau trägt eine große Tasche ."),
    ("Two boys are running down the street .", "Zwei Jungen rennen die Straße hinunter ."),
    ("The sun is shining over the mountains .", "Die Sonne scheint über den Bergen ."),
    ("An old woman feeds the birds .", "Eine alte Frau füttert die Vögel ."),
]


def tiny_config(vocab: int):
    """A 1+1-layer, d_model 32 model configuration over a joint vocabulary of ``vocab``."""
    from tfm.config import ModelConfig

    return ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=2,
                       encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0)


def random_model_dir(path: Path, tokenizer: Tokenizer, seed: int = 0, tgt: str = "de",
                     src: str = "en") -> Path:
    """An untrained model of ``tiny_config`` (weights drawn from ``seed``) with ``tokenizer``,
    saved as the model directory ``path`` (``src`` -> ``tgt``): for decoding tests that need a
    real model directory but no training."""
    import torch

    from tfm.checkpoint import save_model_dir
    from tfm.model import Transformer
    from tfm.model_info import ModelInfo

    torch.manual_seed(seed)
    config = tiny_config(tokenizer.get_vocab_size())
    save_model_dir(path, Transformer(config), tokenizer,
                   ModelInfo(config, src_lang=src, tgt_lang=tgt))
    return path


def padded(rows: list[list[int]]):
    """Token id rows (B, longest), padded at the end."""
    import torch

    from tfm.special_tokens import PAD_ID

    out = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def fit_to_pairs(directory: Path, tok: Tokenizer, steps: int = 120) -> Path:
    """A small model (d_model 32, 2+2 layers) fitted to PAIRS for ``steps`` full-batch steps
    from seed 0, saved to ``directory`` with beam 4 by default: it translates the pairs, so
    decoding tests check meaningful outputs."""
    import torch

    from tfm.checkpoint import save_model_dir
    from tfm.config import GenerationDefaults, ModelConfig
    from tfm.data.tokenizer import encode_batch
    from tfm.model import Transformer
    from tfm.model_info import ModelInfo
    from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID

    torch.manual_seed(0)
    vocab = tok.get_vocab_size()
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                         encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0,
                         max_positions=64)
    model = Transformer(config)
    src = padded([x + [EOS_ID] for x in encode_batch(tok, [s for s, _ in PAIRS])])
    tgt = encode_batch(tok, [t for _, t in PAIRS])
    t_in, t_out = padded([[BOS_ID, *y] for y in tgt]), padded([[*y, EOS_ID] for y in tgt])
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, fused=True)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(src, t_in).view(-1, vocab),
                                                 t_out.view(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    save_model_dir(directory, model.eval(), tok, ModelInfo(
        config, src_lang="en", tgt_lang="de",
        generation=GenerationDefaults(beam=4, max_len_a=1.5, max_len_b=5)))
    return directory


def write_lines(path: Path, lines: list[str]) -> Path:
    """Write newline-terminated UTF-8 lines to ``path``."""
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def write_corpus(folder: Path, pairs: list[tuple[str, str]], name: str = "train") -> tuple[
        Path, Path]:
    """Write ``pairs`` as ``folder/name.en`` and ``folder/name.de``."""
    folder.mkdir(parents=True, exist_ok=True)
    return (write_lines(folder / f"{name}.en", [s for s, _ in pairs]),
            write_lines(folder / f"{name}.de", [t for _, t in pairs]))


@pytest.fixture(autouse=True)
def torch_threads_as_set():
    """Each test starts and ends with torch's CPU threads at OMP_NUM_THREADS (above): loading
    a translator of several decoding workers leaves its thread one (tfm.decoding.workers), a
    training test may ask for more, and results can differ in their last bits with the number
    of threads, so a test must not inherit what an earlier one left."""
    import torch

    threads = int(os.environ["OMP_NUM_THREADS"])
    torch.set_num_threads(threads)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def sentence_pairs() -> list[tuple[str, str]]:
    """The 40 natural English-German pairs of the tiny corpus."""
    return list(PAIRS)


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    """The 40 pairs of PAIRS as two aligned files ``corpus/train.en`` and ``corpus/train.de``."""
    return write_corpus(tmp_path / "corpus", PAIRS)


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """A byte-level BPE tokenizer with a 300-entry vocabulary trained on PAIRS (both sides)."""
    return train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300)


@pytest.fixture
def tokenizer_path(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    """The session tokenizer saved as ``tmp_path/tokenizer.json``."""
    path = tmp_path / "tokenizer.json"
    save_tokenizer(tokenizer, path)
    return path


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled demo corpus (data/demo, 520 + 50 pairs) prepared with a 400-entry BPE:
    a real dataset directory for training tests. Read-only: tests train into their own
    directories."""
    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare
    from tfm.data.tokenizer import save_tokenizer, train_tokenizer

    demo = Path(__file__).resolve().parent.parent / "data" / "demo"
    root = tmp_path_factory.mktemp("demo")
    texts = (demo / "train.en").read_text().splitlines() + \
        (demo / "train.de").read_text().splitlines()
    save_tokenizer(train_tokenizer(texts, vocab_size=400), root / "tok.json")
    prepare(CorpusSpec((str(demo / "train"),), "en", "de"), root / "tok.json", root / "data",
            valid=CorpusSpec((str(demo / "valid"),), "en", "de"))
    return root / "data"


# --- the tfm command, as a user runs it -------------------------------------------------------

# A bound that only catches a hang: how long a command takes is the machine's.
HANG = 600


def tfm(*args: str, stdin: str | None = None, cwd: Path | None = None, timeout: float = HANG,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``tfm ARGS`` run to its end, with ``stdin`` as its input and ``env`` added to the
    environment; its exit status, stdout and stderr (text). The process is forked from this
    worker's preloader, which has torch imported already (tests/forked.py)."""
    return forked.run(list(args), input=stdin, capture_output=True, text=True, cwd=cwd,
                      timeout=timeout, env=None if env is None else {**os.environ, **env})


def pytest_sessionfinish(session: pytest.Session) -> None:
    if forked.preloader.cache_info().currsize:
        forked.preloader().close()


# --- processes a test starts end with it ------------------------------------------------------

def session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Linux /proc; none elsewhere), whatever process
    group each has moved to: a recipe starts its `tfm train` runs in groups of their own
    (`set -m`), and they stay in the recipe's session. (Zombies, dead already, are left out.)"""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def kill_session(process) -> None:
    """SIGKILL to every process of ``process``'s session (it was started with
    ``start_new_session=True``): itself, its children and theirs, whichever process group they
    are in and whether or not their parent is still there; then reap ``process``."""
    import signal

    for pid in session_pids(process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


@pytest.fixture
def spawn():
    """``spawn(args, **popen_options)``: ``subprocess.Popen`` in a session of its own, and
    every process of that session killed when the test ends, passed or failed, so that no run
    a test started (a recipe's training runs included) outlives it. ``spawn.tfm(args,
    **popen_options)``: the same for ``tfm ARGS``, forked from the preloader
    (tests/forked.py)."""
    started: list[subprocess.Popen] = []

    def start(args, **options) -> subprocess.Popen:
        started.append(subprocess.Popen(args, start_new_session=True, **options))
        return started[-1]

    def start_tfm(args, **options) -> subprocess.Popen:
        started.append(forked.popen(args, **options))  # a session of its own
        return started[-1]

    start.tfm = start_tfm
    yield start
    for process in started:
        kill_session(process)


# --- the two workers --------------------------------------------------------------------------

# pyproject's addopts run the suite in two worker processes (pytest-xdist), one intra-op thread
# each (OMP_NUM_THREADS above). Each module's tests go to one worker together, so that a
# module's fixtures (a trained model, a running server) are made once; the tests of SPREAD,
# independent and each long, go to whichever worker is free. FIRST are handed out first, the
# longest first, so that no long one is left for the end while the other worker idles; the
# rest go out largest module first. (xdist's own `--dist loadgroup` cannot group with pytest
# 9: it renames test ids through an attribute pytest 9 dropped.)
SPREAD = {"test_recipes", "test_train"}
FIRST = ["test_recipes", "test_learning", "test_multilingual", "test_kill"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    def module(nodeid: str) -> str:
        return Path(nodeid.split("::", 1)[0]).stem

    def rank(scope: str) -> int:
        return FIRST.index(module(scope)) if module(scope) in FIRST else len(FIRST)

    class ByModule(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return nodeid if module(nodeid) in SPREAD else nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete: the first work goes out now
                units = sorted(self.workqueue.items(), key=lambda unit: rank(unit[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return ByModule(config, log)
