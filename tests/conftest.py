from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from micro import MICRO  # noqa: E402  (tests/micro.py: pytest puts tests/ on sys.path, as for this file)


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory) -> Path:
    """The tiny model the micro project pre-trains, built once per session: each micro search would
    otherwise pre-train its own (about 8 s each, a few minutes over the suite)."""
    from sro.config import load_project
    from sro.executor import SearchContext

    d = tmp_path_factory.mktemp("micro-model")
    (d / "micro.yaml").write_text(MICRO.format(name="micro"))
    SearchContext.prepare(load_project(d / "micro.yaml"), d / "cache", log=lambda s: None)
    (model,) = (d / "cache").glob("tiny-*")
    return model


@pytest.fixture
def micro_project(tmp_path: Path, micro_model: Path):
    """Write a micro project YAML (one domain, 24 held-out items, 30 pre-training steps). Its tiny model
    is already in the model caches the tests use (`tmp_path/runs/.cache`, `tmp_path/cache`): the same
    folder the project's own pre-training would write (a project whose sources a test changes gets
    another key, and pre-trains its own)."""
    import shutil

    for cache in (tmp_path / "runs" / ".cache", tmp_path / "cache"):
        if not (cache / micro_model.name).exists():
            shutil.copytree(micro_model, cache / micro_model.name)

    def make(name: str = "micro", extra: str = "") -> Path:
        p = tmp_path / f"{name}.yaml"
        p.write_text(MICRO.format(name=name) + extra)
        return p

    return make


@pytest.fixture(scope="module")
def tiny_add():
    """A one-layer tiny model's spec and the tokenizer of its "add a b / Answer: a+b" vocabulary, for trainer tests
    that build their own model from it (`build_model(len(tok), spec, tok)`)."""
    from trainers.tiny import TinySpec, build_tokenizer

    spec = TinySpec(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, vocab_size=270)
    tok = build_tokenizer([f"add {a} {b}\nAnswer: {a + b}" for a in range(5) for b in range(5)] * 4 + ["x y z"],
                          spec.vocab_size)
    return spec, tok


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A throwaway PostgreSQL server on loopback for the tests of a storage shared by several workers
    (DESIGN.md's scale path). Skipped where PostgreSQL's binaries are absent, unless
    SRO_REQUIRE_POSTGRES is set (CI sets it, so the tests cannot silently stop running there)."""
    import glob
    import pwd
    import shutil
    import socket
    import subprocess
    import tempfile

    initdb = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    if initdb is None:
        if os.environ.get("SRO_REQUIRE_POSTGRES"):
            pytest.fail("SRO_REQUIRE_POSTGRES is set but PostgreSQL's initdb is not on PATH or under "
                        "/usr/lib/postgresql/*/bin; install the postgresql package")
        pytest.skip("PostgreSQL not installed (initdb not found); the SQLite variants of these tests still run")
    pg_ctl = str(Path(initdb).parent / "pg_ctl")
    home = Path(tempfile.mkdtemp(prefix="sro-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root (CI runs as root): use its own account
        pw = pwd.getpwnam("postgres")
        os.chown(home, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    run(initdb, "-D", str(home / "db"), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    run(pg_ctl, "-D", str(home / "db"), "-l", str(home / "log"), "-w", "-t", "30",
        "-o", f"-p {port} -h 127.0.0.1 -k {home} -c fsync=off", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        run(pg_ctl, "-D", str(home / "db"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def shared_storage(request, tmp_path):
    """The URL of an empty storage that several workers share: a SQLite file, or a fresh database on
    the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    import uuid

    import sqlalchemy

    server = request.getfixturevalue("postgres_server")
    name = f"t{uuid.uuid4().hex[:16]}"
    engine = sqlalchemy.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        c.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name}"))
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return f"{server}/{name}"
