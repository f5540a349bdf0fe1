"""``specem models``: list, pull and verify the configured models; scan the disk for models
other tools downloaded, and add one to models.toml."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from specem_local.commands.terminal import config_from_args, print_table
from specem_local.errors import SpecemError
from specem_local.models.config import Config
from specem_local.text import human_count, printable


def _human_size(size: int | None) -> str:
    if size is None:
        return "-"
    scaled = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if scaled < 1000 or unit == "GB":
            return f"{scaled:.0f} {unit}" if unit == "B" else f"{scaled:.1f} {unit}"
        scaled /= 1000
    return "-"


def model_rows(config: Config, checksum: bool = False) -> list[dict[str, Any]]:
    """What ``models list`` shows for each model, read from GGUF headers (no weights loaded)."""
    from specem_local.backend import gpu_offload
    from specem_local.backend.protocol import offloaded_layers, placement
    from specem_local.engine import gpu_layers_for
    from specem_local.models.sources import model_status, source_for

    gpu_build = gpu_offload()
    rows = []
    for spec in config.models:
        source = source_for(spec, config)
        status = model_status(source, checksum=checksum)
        row: dict[str, Any] = {
            "name": spec.name,
            "source": source.describe(),
            "status": status.status,
            "path": str(status.path) if status.path else None,
            "detail": status.detail,
            "architecture": None,
            "parameters": None,
            "quantization": None,
            "vocab_size": None,
            "context_length": None,
            "chat_template": None,
            "file_size": None,
            "role": spec.role,
            "licence": source.licence,
            "runs_on": None,
        }
        header = status.header
        if header is not None:
            row.update(
                architecture=header.architecture,
                parameters=header.parameter_count,
                quantization=header.quantization,
                vocab_size=header.vocab_size,
                context_length=header.context_length,
                chat_template=header.chat_template is not None,
                file_size=header.file_size,
                runs_on=f"RPC {', '.join(spec.rpc)}"
                if spec.rpc
                else placement(offloaded_layers(gpu_layers_for(spec, config), header.layers, gpu_build), header.layers),
            )
        rows.append(row)
    return rows


def build_description() -> dict[str, Any]:
    """What llama.cpp was built with and the devices it sees, for ``models list``."""
    from importlib.metadata import version

    from specem_local.backend import devices, gpu_offload, system_info

    found = devices()
    gpus = [d for d in found if d.kind != "CPU"]
    offload = gpu_offload()
    where = ", ".join(f"{d.name} ({d.description}, {d.free_bytes / 2**30:.1f} GiB free)" for d in gpus)
    info = system_info()
    features = " ".join(re.findall(r"(\w+) = 1\b", info))
    summary = f"llama-cpp-python {version('llama-cpp-python')}; " + (
        f"GPU offload: {where or 'yes'}" if offload else "CPU only (no GPU backend built in)"
    )
    summary += f"; built with {features}" if features else ""
    return {
        "llama_cpp_python": version("llama-cpp-python"),
        "gpu_offload": offload,
        "devices": [d.__dict__ for d in found],
        "system_info": info,
        "summary": summary,
    }


def cmd_models_list(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    rows = model_rows(config)
    build = build_description()
    if args.json:
        print(json.dumps({"config": config.source, "llama_cpp": build, "models": rows}, indent=2))
        return 0
    print(f"config: {config.source}")
    print(f"llama.cpp: {build['summary']}")
    print_table(
        ("NAME", "SOURCE", "ARCH", "PARAMS", "QUANT", "VOCAB", "CTX", "TEMPLATE", "SIZE", "RUNS ON", "STATUS", "PATH"),
        [
            (
                row["name"],
                row["source"],
                row["architecture"] or "-",
                human_count(row["parameters"]),
                row["quantization"] or "-",
                row["vocab_size"] or "-",
                row["context_length"] or "-",
                {True: "yes", False: "no (plain prompt)", None: "-"}[row["chat_template"]],
                _human_size(row["file_size"]),
                row["runs_on"] or "-",
                row["status"],
                row["path"] or "-",
            )
            for row in rows
        ],
    )
    for row in rows:
        if row["status"] != "ready":
            print(printable(f"{row['name']}: {row['detail']}"), file=sys.stderr)
    return 0


def cmd_models_pull(args: argparse.Namespace) -> int:
    from specem_local.models.demo_models import DEMO_MODELS
    from specem_local.models.sources import DemoSource, source_for

    config = config_from_args(args)
    configured = {spec.name: spec for spec in config.models}
    sources = []
    for name in args.names or list(configured):
        if name in configured:
            sources.append((name, source_for(configured[name], config)))
        elif name in DEMO_MODELS:
            sources.append((name, DemoSource(name, DEMO_MODELS[name])))
        else:
            raise SpecemError(
                f"no model {name!r} in {config.source} and no such demo model; "
                f"configured: {', '.join(configured)}; demo models: {', '.join(DEMO_MODELS)}"
            )
    for name, source in sources:
        print(printable(f"{name}: pulling {source.describe()}"), file=sys.stderr)
        print(printable(f"{name}: ready at {source.pull()}"))
    return 0


def cmd_models_verify(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    bad = 0
    for row in model_rows(config, checksum=True):
        detail = f" ({row['detail']})" if row["detail"] else ""
        print(printable(f"{row['name']}: {row['status']}{detail}"))
        bad += row["status"] != "ready"
    return 1 if bad else 0


def cmd_models_scan(args: argparse.Namespace) -> int:
    from specem_local.backend.ram import available_memory_bytes
    from specem_local.models.scan import scan

    found = scan([Path(folder) for folder in args.folders])
    config = config_from_args(args)
    in_use = sum(row["file_size"] or 0 for row in model_rows(config))
    available = available_memory_bytes()
    room = None if available is None else available - in_use
    rows = [_found_row(model, room) for model in found]
    if args.json:
        print(json.dumps({"free_memory_bytes": available, "ensemble_bytes": in_use, "models": rows}, indent=2))
        return 0
    if not rows:
        print(
            "no GGUF models found (looked in Ollama's store, LM Studio's folder, the Hugging Face cache, "
            "llama.cpp's cache and ~/models); name folders to look in: specem models scan FOLDER"
        )
        return 0
    print_table(
        ("NAME", "FROM", "ARCH", "PARAMS", "QUANT", "SIZE", "TEMPLATE", "VOCAB", "FITS", "SOURCE"),
        [
            (
                row["name"],
                row["origin"],
                row["architecture"] or "-",
                human_count(row["parameters"]),
                row["quantization"] or "-",
                _human_size(row["file_size"]),
                {True: "yes", False: "no", None: "-"}[row["chat_template"]],
                row["vocab_size"] or "-",
                {True: "yes", False: "no", None: "-"}[row["fits"]],
                row["source"],
            )
            for row in rows
        ],
    )
    for row in rows:
        if row["problem"]:
            print(f"{row['source']}: {row['problem']}", file=sys.stderr)
    print(f"add one with: specem models add NAME SOURCE (e.g. specem models add {rows[0]['name']} {rows[0]['source']})")
    return 0


def _found_row(model: Any, room: int | None) -> dict[str, Any]:
    header = model.header
    return {
        "name": model.suggested_name,
        "origin": model.origin,
        "source": model.source_text,
        "entry": model.entry,
        "path": str(model.path) if model.path else None,
        "problem": model.problem,
        "architecture": header.architecture if header else None,
        "parameters": model.parameters or None,
        "quantization": header.quantization if header else None,
        "file_size": model.size or None,
        "chat_template": header.chat_template is not None if header else None,
        "vocab_size": header.vocab_size if header else None,
        "fits": None if room is None or header is None else model.size <= room,
    }


def cmd_models_add(args: argparse.Namespace) -> int:
    from specem_local.models.models_file import add_model, file_to_edit, parse_source

    entry = parse_source(args.source)
    path = file_to_edit(args.config)
    created = add_model(path, args.name, entry)
    what = ", ".join(f"{key} = {value!r}" for key, value in entry.items())
    print(f"{'created' if created else 'updated'} {path}: [[models]] name = {args.name!r}, {what}")
    print("check it with: specem models list")
    return 0


def cmd_models_remove(args: argparse.Namespace) -> int:
    from specem_local.models.models_file import file_to_edit, remove_model

    path = file_to_edit(args.config)
    created, entry = remove_model(path, args.name)
    what = ", ".join(f"{key} = {value!r}" for key, value in entry.items())
    print(f"{'created' if created else 'updated'} {path}: [[models]] name = {args.name!r} ({what}) removed")
    print("its file, if any, is where it was: specem never deletes a model file")
    return 0


def add_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    models = commands.add_parser("models", help="list, pull, verify, scan for, add and remove models")
    actions = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="show each model (from its GGUF header)")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=cmd_models_list)
    pull = actions.add_parser(
        "pull", parents=[common], help="download hf models, assemble demo models (or the ones named)"
    )
    pull.add_argument(
        "names", nargs="*", metavar="NAME", help="configured models or demo models (default: all configured)"
    )
    pull.set_defaults(handler=cmd_models_pull)
    actions.add_parser("verify", parents=[common], help="checksum and header-check every model").set_defaults(
        handler=cmd_models_verify
    )

    scan = actions.add_parser(
        "scan", parents=[common], help="find GGUFs other tools downloaded (Ollama, LM Studio, Hugging Face, folders)"
    )
    scan.add_argument("folders", nargs="*", metavar="FOLDER", help="more folders to look in")
    scan.add_argument("--json", action="store_true", help="machine-readable output")
    scan.set_defaults(handler=cmd_models_scan)
    add = actions.add_parser("add", parents=[common], help="add a model to models.toml, keeping its comments")
    add.add_argument("name", metavar="NAME", help="the model's name in the ensemble")
    add.add_argument(
        "source", metavar="SOURCE", help="ollama:NAME, lmstudio:PATH, hf:OWNER/REPO/FILE, demo:NAME or a path"
    )
    add.set_defaults(handler=cmd_models_add)
    remove = actions.add_parser(
        "remove", parents=[common], help="take a model out of models.toml, keeping its comments"
    )
    remove.add_argument("name", metavar="NAME", help="the model's name in the ensemble (specem models list)")
    remove.set_defaults(handler=cmd_models_remove)
