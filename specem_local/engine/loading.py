"""From models.toml to members ready to answer: find (or assemble) each model's file, warn
when the files outgrow the free RAM, load each with llama.cpp, and choose its prompt format.

The engine itself takes ready members (``Ensemble(members, settings)``); this module is what
``Ensemble.from_config`` and ``Ensemble()`` use. llama.cpp is imported only when a model is
loaded, so the engine's tests with a fake model never need it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specem_local.backend.protocol import LanguageModel
from specem_local.backend.ram import available_memory_bytes, memory_warning
from specem_local.engine.member import Member, can_draft_and_verify
from specem_local.engine.prompting import PromptFormat
from specem_local.errors import SpecemError
from specem_local.models.config import PLAIN_TEMPLATE, Config, ModelSpec
from specem_local.models.rpc import probe_all
from specem_local.models.sources import source_for

ProgressCallback = Callable[[str, float], None]  # (model name, fraction loaded)


@dataclass(frozen=True)
class LoadFailure:
    model: str
    error: str


@dataclass
class Loaded:
    members: list[Member]
    failures: list[LoadFailure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    threads_per_model: int | None = None
    parallel: int = 1  # answers that may run at once (places.py)


# Ollama keeps its own template as a Go template, which neither llama.cpp nor specem can run.
NO_TEMPLATE_IN_OLLAMA_GGUF = (
    "this Ollama model's GGUF has no chat template of its own (Ollama's is a Go template, which specem "
    "cannot use), so it gets the plain prompt format; set chat_template in models.toml to change that"
)


def prompt_format_for(spec: ModelSpec, model: LanguageModel) -> PromptFormat:
    """The model's own template, the models.toml override, or the plain format."""
    override = spec.chat_template
    if override == PLAIN_TEMPLATE:
        template = None
    else:
        template = override or model.chat_template()
    return PromptFormat(template, model.special_text(model.bos_token), model.special_text(model.eos_token))


def load_members(
    config: Config,
    *,
    progress: ProgressCallback | None = None,
    skip_failed: bool = False,
    n_seq_max: int | None = None,
) -> Loaded:
    """Load every configured model. ``skip_failed`` goes on without the ones that fail (listed
    in ``failures``); ``n_seq_max`` reserves more sequences than one per model plus the
    committed one (the benchmark scores four candidates)."""
    loaded = Loaded([], threads_per_model=config.load.threads_per_model, parallel=config.load.parallel)
    for spec in config.models:
        try:
            loaded.files[spec.name] = source_for(spec, config).prepare()
        except SpecemError as error:
            if not skip_failed:
                raise
            loaded.failures.append(LoadFailure(spec.name, str(error)))
    for warning in [*same_file_warnings(loaded.files), *memory_warnings(config, _sizes(loaded.files))]:
        _warn(loaded, warning)
    candidates = max(len(loaded.files), config.ensemble.draft_budget)  # a budget may draft more than one each
    sequences = max(n_seq_max or 0, candidates + 1) * loaded.parallel  # sequence 0 + one per candidate, per place
    try:
        for spec in config.models:
            if spec.name not in loaded.files:
                continue
            try:
                member = _load(spec, loaded.files[spec.name], sequences, config, progress)
                loaded.members.append(member)
                if spec.ollama is not None and member.prompt_format.is_plain and spec.chat_template is None:
                    _warn(loaded, f"{spec.name}: {NO_TEMPLATE_IN_OLLAMA_GGUF}")
            except SpecemError as error:
                if not skip_failed:
                    raise
                loaded.failures.append(LoadFailure(spec.name, str(error)))
        if not loaded.members:
            reasons = "; ".join(f"{f.model}: {f.error}" for f in loaded.failures)
            raise SpecemError(f"no model could be loaded ({reasons})")
        if not can_draft_and_verify(loaded.members):
            raise SpecemError("the models that loaded cannot both draft and verify; check the roles")
    except BaseException:
        for member in loaded.members:
            member.model.close()
        raise
    return loaded


def same_file_warnings(files: dict[str, Path]) -> list[str]:
    """Models that name the same GGUF: each is loaded (twice the memory) and votes (twice the say)."""
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        by_file.setdefault(path.resolve(), []).append(name)
    return [
        f"{' and '.join(names)} are the same file ({path}): it is loaded {len(names)} times and votes "
        f"{len(names)} times; remove all but one from models.toml"
        for path, names in by_file.items()
        if len(names) > 1
    ]


def _sizes(files: dict[str, Path]) -> dict[str, int]:
    return {name: path.stat().st_size for name, path in files.items()}


def gpu_layers_for(spec: ModelSpec, config: Config) -> int:
    """The layers this model asks to put on the GPU (``n_gpu_layers``, else ``gpu_layers``), or
    on its RPC servers (``n_gpu_layers``, else all of them)."""
    if spec.n_gpu_layers is not None:
        return spec.n_gpu_layers
    return -1 if spec.rpc else config.load.gpu_layers


def memory_warnings(config: Config, sizes: dict[str, int]) -> list[str]:
    """Models offloaded to a GPU count against its free memory, the others against the host's."""
    from specem_local.backend import devices, gpu_offload

    gpus = [d for d in devices() if d.kind in ("GPU", "integrated GPU")] if gpu_offload() else []
    offloaded = {spec.name for spec in config.models if gpus and gpu_layers_for(spec, config) != 0}
    remote = {spec.name for spec in config.models if spec.rpc}  # their layers live on other machines
    on_gpu = {name: size for name, size in sizes.items() if name in offloaded - remote}
    on_host = {name: size for name, size in sizes.items() if name not in offloaded | remote}
    warnings_ = [memory_warning(on_host, available_memory_bytes())]
    if on_gpu:
        warnings_.append(memory_warning(on_gpu, sum(d.free_bytes for d in gpus), "GPU "))
    return [w for w in warnings_ if w]


def _warn(loaded: Loaded, message: str) -> None:
    loaded.warnings.append(message)
    warnings.warn(message, stacklevel=4)


def check_rpc_servers(spec: ModelSpec) -> None:
    """Before a member's layers are sent to its RPC servers: this build has the RPC backend and
    every server answers the protocol's greeting in time, in this version (what ggml-rpc would
    turn into an abort or a hang is a one-line error naming the server)."""
    if not spec.rpc:
        return
    from specem_local.backend import supports_rpc

    if not supports_rpc():
        raise SpecemError(
            f"model {spec.name!r} has rpc servers, and this llama.cpp was built without the RPC backend; "
            "run ./scripts/setup.sh again (it adds -DGGML_RPC=ON)"
        )
    probe_all(spec.rpc, f"model {spec.name!r}: the RPC server {{endpoint}} cannot take it")


def _load(spec: ModelSpec, path: Path, n_seq_max: int, config: Config, progress: ProgressCallback | None) -> Member:
    from specem_local.backend import LlamaModel, WorkerModel, workers_supported

    def report(fraction: float) -> None:
        if progress is not None:
            progress(spec.name, fraction)

    check_rpc_servers(spec)
    isolated = (spec.rpc or spec.isolate) and workers_supported()  # a remote machine that fails costs a worker
    options: dict[str, Any] = {
        "n_ctx": spec.n_ctx,
        "n_seq_max": n_seq_max,
        "n_threads": config.load.threads_per_model,
        "n_gpu_layers": gpu_layers_for(spec, config),
        "progress": report,
        "rpc": spec.rpc,
    }
    try:
        model: LanguageModel
        if isolated:
            model = WorkerModel(path, timeout=config.load.remote_timeout, **options)
        else:
            model = LlamaModel(path, **options)
    except SpecemError as error:
        if spec.ollama is None:
            raise
        raise SpecemError(
            f"{error} (some of Ollama's models, e.g. its gemma3, are made for Ollama's own engine and llama.cpp "
            "cannot load them; use a GGUF of this model from the hub: hf = ..., file = ...)"
        ) from None
    return Member(spec, model, prompt_format_for(spec, model))
