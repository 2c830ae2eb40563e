"""The what-if endpoint against bad and hostile requests (TestClient; the real-process cases with
memory are in test_serve_limits.py): every bad name is a 400 with a clear message, never a 500; a
cluster file outside --traces is refused without being opened; uploads need the token and stop at
the limit; messages name files relative to --traces and quote cells only as short excerpts; the
Host check; the bounded cache and line."""

from __future__ import annotations

import asyncio
import builtins
import io
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import FakeAgentHome
from fastapi.testclient import TestClient

from gpuplan.cluster import cluster_to_toml, load_cluster
from gpuplan.synth import synth_article
from gpuplan.traces import write_trace
from gpuplan.web.access import HostRule, allowed_hosts, host_of
from gpuplan.web.app import ServeConfig, create_app
from gpuplan.web.uploads import BusyError, WhatIfGate
from gpuplan.web.whatif import WhatIfStore
from gpuplan.web.whatif_serve import WhatIfLimits

SECRET = "secret-cluster-name-7f3a"
TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LOCAL = "http://127.0.0.1"


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """A trace folder with a trace and a cluster file in it, and a valid cluster file outside it."""
    root = tmp_path / "traces"
    (root / "sub").mkdir(parents=True)
    write_trace(synth_article(0)[:20], root / "article.csv")
    (root / "sub" / "four.toml").write_text(cluster_to_toml(load_cluster("4x8xA100-80GB")))
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = load_cluster("8xA100-80GB")
    (outside / "secret.toml").write_text(cluster_to_toml(secret).replace(secret.name, SECRET))
    return root


@pytest.fixture
def client(tmp_path: Path, traces: Path) -> Iterator[TestClient]:
    home = FakeAgentHome(tmp_path / "home")
    limits = WhatIfLimits(max_upload_bytes=4096)
    app = create_app(ServeConfig(home.source(), token=TOKEN, trace_root=traces, whatif=limits))
    try:
        with TestClient(app, base_url=LOCAL) as c:
            yield c
    finally:
        home.close()


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file the process opens from now on (builtins.open, io.open, os.open): a spy."""
    seen: list[str] = []

    def spy(real: Callable[..., Any]) -> Callable[..., Any]:
        def opener(file: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(os.fsdecode(file) if isinstance(file, str | bytes | os.PathLike) else repr(file))
            return real(file, *args, **kwargs)

        return opener

    monkeypatch.setattr(builtins, "open", spy(builtins.open))
    monkeypatch.setattr(io, "open", spy(io.open))
    monkeypatch.setattr(os, "open", spy(os.open))
    return seen


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"name": "a\x00b.csv"}, "name 'a\\\\x00b.csv': has a control character"),
        ({"name": ".."}, "name '..': is not a file name"),
        ({"name": "../../etc/cron.d/x.csv"}, "is a path, not a file name"),
        ({"name": "x" * 300 + ".csv"}, "longer than 255 characters"),
        ({"path": "article\x00.csv"}, "path 'article\\\\x00.csv': has a control character"),
        ({"path": ".."}, "'..' is not allowed"),
        ({"path": "sub/../../outside/x.csv"}, "'..' is not allowed"),
        ({"path": "/etc/passwd"}, "is absolute"),
        (
            {"path": "article.csv", "cluster": "x\x00.toml"},
            "cluster 'x\\\\x00.toml': has a control character",
        ),
        ({"path": "article.csv", "cluster": "../outside/secret.toml"}, "'..' is not allowed"),
        ({"path": "article.csv", "cluster": "nope"}, "valid names: auto, trace, "),
        ({"path": "article.csv", "cluster": "missing.toml"}, "missing.toml: no such cluster file"),
        ({"path": "article.csv", "name": "article.csv"}, "not both"),
    ],
)
def test_bad_names_are_400_with_a_clear_message(
    client: TestClient, traces: Path, params: dict[str, str], message: str
) -> None:
    resp = client.post("/api/whatif", params=params)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert message in err, err
    assert "\x00" not in err and str(traces) not in err  # the request's own words, never the server's paths


def test_a_cluster_file_outside_traces_is_refused_unread(
    client: TestClient, traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = traces.parent / "outside" / "secret.toml"
    (traces / "link.toml").symlink_to(secret)  # a link inside the folder that leads out of it
    (traces / "dir").symlink_to(secret.parent, target_is_directory=True)
    opened = _opens(monkeypatch)
    answers = [
        client.post("/api/whatif", params={"path": "article.csv", "cluster": cluster})
        for cluster in (str(secret), "../outside/secret.toml", "link.toml", "dir/secret.toml")
    ]
    monkeypatch.undo()
    for resp in answers:
        assert resp.status_code == 400, resp.text
        assert SECRET not in resp.text
    assert all(str(traces.parent) not in r.text for r in answers[1:])  # the first gave that path itself
    assert "leads outside the server's trace folder" in answers[2].json()["error"]
    assert not [p for p in opened if "secret" in p or "outside" in p], opened
    assert opened == [] or all(str(traces) not in p for p in opened)  # refused before any trace was read


def test_a_trace_whose_cluster_file_leads_outside_is_refused_unread(
    client: TestClient, traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (traces / "article.cluster.toml").symlink_to(traces.parent / "outside" / "secret.toml")
    opened = _opens(monkeypatch)
    resp = client.post("/api/whatif", params={"path": "article.csv"})
    monkeypatch.undo()
    assert resp.status_code == 400 and "its cluster file 'article.cluster.toml' leads outside" in resp.text
    assert SECRET not in resp.text and not [p for p in opened if "article" in p or "secret" in p], opened


def test_a_cluster_file_under_traces_is_used(client: TestClient) -> None:
    resp = client.post("/api/whatif", params={"path": "article.csv", "cluster": "sub/four.toml"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["cluster"]["gpus"] == 32


def test_messages_name_files_relative_to_traces(client: TestClient, traces: Path) -> None:
    (traces / "sub" / "bad.csv").write_text("id,submit_s,gpus,duration_s\na,0,1,60\nb,0,two,60\n")
    err = client.post("/api/whatif", params={"path": "sub/bad.csv"}).json()["error"]
    assert err.startswith("sub/bad.csv:3:") and "'two'" in err, err
    assert str(traces) not in err
    (traces / "sub" / "bad.cluster.toml").write_text("name = 'x'\n")  # read with the trace: no [[nodes]]
    err = client.post("/api/whatif", params={"path": "sub/bad.csv"}).json()["error"]
    assert str(traces) not in err, err


def test_uploads_need_the_token_and_stop_at_the_limit(client: TestClient, tmp_path: Path) -> None:
    body = b"id,submit_s,gpus,duration_s\na,0,1,60\nb,5,2,30\n"
    params = {"name": "small.csv"}
    no_token = client.post("/api/whatif", params=params, content=body)
    assert (
        no_token.status_code == 403 and "what-if uploads need the server's token" in no_token.json()["error"]
    )
    wrong = client.post("/api/whatif", params=params, content=body, headers={"Authorization": "Bearer x"})
    assert wrong.status_code == 403
    ok = client.post("/api/whatif", params=params, content=body, headers=AUTH)
    assert ok.status_code == 200 and ok.json()["trace"]["source"] == "small.csv"
    big = body + b"c,9,1,60\n" * 600  # over the 4,096-byte limit of this server
    declared = client.post("/api/whatif", params=params, content=big, headers=AUTH)
    assert declared.status_code == 413 and "it declares" in declared.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bytes read decide
        yield body
        for _ in range(20):  # 18 kB in all (TestClient may gather the chunks: keep them finite)
            yield b"c,9,1,60\n" * 100

    streamed = client.post("/api/whatif", params=params, content=chunks(), headers=AUTH)
    assert streamed.status_code == 413 and "refused after" in streamed.json()["error"]
    home = FakeAgentHome(tmp_path / "ro")
    try:  # a server with no token refuses every upload, saying what to do instead
        with TestClient(create_app(ServeConfig(home.source(), trace_root=tmp_path)), base_url=LOCAL) as ro:
            refused = ro.post("/api/whatif", params=params, content=body, headers=AUTH)
    finally:
        home.close()
    assert refused.status_code == 403 and "read-only server" in refused.json()["error"]
    assert "give its path" in refused.json()["error"]


def test_a_huge_cell_is_quoted_as_a_short_escaped_excerpt(client: TestClient) -> None:
    cell = "\x1b[31m" + "9" * 3000
    body = f"id,submit_s,gpus,duration_s\na,0,{cell},60\n".encode()
    resp = client.post("/api/whatif", params={"name": "cells.csv"}, content=body, headers=AUTH)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err.startswith("cells.csv:2:") and "(3,005 characters)" in err, err
    assert "\x1b" not in err and len(err) < 300 and "9" * 100 not in err


def test_the_host_check(client: TestClient) -> None:
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", ""):
        resp = client.get("/api/queue", headers={"Host": host})
        assert resp.status_code == 400, host
        assert ("not a name of this server" if host else "no Host header") in resp.json()["detail"]
    for host in ("127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000"):
        assert client.get("/api/queue", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_by_bound_address() -> None:
    loop = allowed_hosts("127.0.0.1")
    assert loop.allows("localhost") and loop.allows("::1") and not loop.allows("10.1.2.3")
    assert not loop.allows("evil.example")
    extra = allowed_hosts("127.0.0.1", ["Proxy.Example", ""])
    assert extra.allows("proxy.example") and not extra.allows("evil.example")
    every = allowed_hosts("0.0.0.0")
    assert every.allows("10.1.2.3") and every.allows("fe80::1") and not every.allows("evil.example")
    one = allowed_hosts("10.0.0.5")
    assert one.allows("10.0.0.5") and not one.allows("10.0.0.6") and one.allows("localhost")
    assert allowed_hosts("127.0.0.1", ["*"]).anything and HostRule().allows("127.0.0.1")
    assert [host_of(h) for h in ("A.example:80", "[::1]:8000", "::1", "x")] == [
        "a.example",
        "::1",
        "::1",
        "x",
    ]


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    from gpuplan.sim.matrix import run_matrix

    jobs = synth_article(0)
    runs = run_matrix(
        jobs, load_cluster("8xA100-80GB"), ["fifo"], ["none"], "first-fit", False, show_progress=False
    )
    store = WhatIfStore(max_entries=3, max_records=10 * len(jobs))
    keys = [store.put(runs) for _ in range(3)]
    assert store.get(keys[0]) is not None  # used: now the most recent
    keys.append(store.put(runs))
    assert store.get(keys[1]) is None and store.get(keys[0]) is not None
    assert store.stats()["entries"] == 3 and store.stats()["records"] == 3 * len(jobs)
    tight = WhatIfStore(max_entries=8, max_records=len(jobs) + 1)
    first, second = tight.put(runs), tight.put(runs)
    assert tight.get(first) is None and tight.get(second) is not None  # the record budget too
    kept = tight.get(second)
    assert kept is not None and kept[0][1] == len(jobs) and kept[0][0].util_timeline == []


def test_the_line_is_bounded() -> None:
    async def scenario() -> list[str]:
        gate = WhatIfGate(max_waiting=1)
        events: list[str] = []
        async with gate.admit(), gate.admit():
            try:
                async with gate.admit():
                    events.append("admitted a third")
            except BusyError as e:
                events.append(str(e))
        async with gate.admit(), gate.turn():
            events.append("ran")
        return events

    with ThreadPoolExecutor(1) as pool:  # a thread of its own: the browser tests keep a loop running here
        events = pool.submit(asyncio.run, scenario()).result()
    assert events[0].startswith("busy: one what-if is simulating and 1 are waiting") and events[1] == "ran"
