"""The model families `attnref audit` recognises: one adapter module per family.

An adapter module defines ``FAMILY`` (a :class:`Family`): how to recognise a checkpoint of its
family from its configuration, and how to load it into a :class:`Loaded` model that runs a text
and hands back what the rechecks measure. Adding a family is adding one module here and its name
to :data:`MODULES`; nothing else changes.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

Tensor = torch.Tensor

#: The adapter modules, in the order they are asked.
MODULES = ("bert", "llama", "gemma3")


class AuditError(Exception):
    """A problem with the user's input: reported as one line, exit status 2."""


@dataclass
class Run:
    """What one text produced, layer by layer (one text, no batch axis)."""

    hidden: list[Tensor]      # L + 1 tensors (n, d): the residual stream before each block and after the last
    queries: list[Tensor]     # L tensors (h, n, d_k): the queries the scores use
    keys: list[Tensor]        # L tensors (h, n, d_k): the keys the scores use, one per query head
    weights: list[Tensor]     # L tensors (h, n, n): the attention weights


@dataclass
class Loaded:
    """A loaded checkpoint of a supported family."""

    family: str               # the family's name, e.g. "bert"
    name: str                 # the model's own name (config or GGUF metadata), or the file name
    files: list[Path]         # the files whose sha256 the report records
    context: int              # the longest input the model accepts, in tokens
    causal: bool              # a decoder (query i sees keys j ≤ i) or an encoder (all keys)
    scale: float              # the factor of q·k in the scores
    layers: int
    heads: int
    d: int
    d_k: int
    tokenize: Callable[[str], list[int]]
    run: Callable[[list[int]], Run]
    factors: Callable[[], list[tuple[Tensor, Tensor]]]   # per layer (W_Q, W_K), each (h, d, d_k), float64
    details: dict = field(default_factory=dict)           # the configuration, for the report
    #: called once with every text's token ids before the first ``run`` (a loader that reads only
    #: the embedding rows the texts use), or None
    prepare: Callable[[list[list[int]]], None] | None = None
    #: D1's attention-only path: for block ``l``, a function ``(Y, causal) -> Y'`` of token vectors
    #: ``Y (n, d)`` float64 that applies the block's attention branch (its norms, attention and output
    #: projection, everything the residual stream adds) **without** the skip connection, with the
    #: model's causal mask (``causal=True``) or with every token seeing every token (``False``);
    #: None: the family has no causal mask to test (D1's causal recheck is not run)
    attention_branch: Callable[[int], Callable[[Tensor, bool], Tensor]] | None = None


@dataclass(frozen=True)
class Family:
    name: str                                  # "bert", "llama", "gemma3"
    description: str                           # for error messages and the report
    accepts: Callable[[Path, dict], bool]      # (path, its configuration) -> is it this family?
    load: Callable[[Path, dict], Loaded]


def families() -> list[Family]:
    return [importlib.import_module(f"{__name__}.{name}").FAMILY for name in MODULES]


def supported() -> str:
    return "; ".join(f"{f.name} ({f.description})" for f in families())


def read_configuration(path: Path) -> dict:
    """The checkpoint's configuration: ``config.json`` of a model directory, or the metadata of a
    GGUF file (``general.architecture`` and the fields of that architecture)."""
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise AuditError(f"{path.name}: a model directory needs a config.json (a Hugging Face checkpoint); "
                             f"supported: {supported()}")
        try:
            raw = json.loads(config.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise AuditError(f"{path.name}/config.json is not valid JSON ({error.__class__.__name__}: {error})") from None
        if not isinstance(raw, dict):
            raise AuditError(f"{path.name}/config.json does not hold a JSON object")
        return {"format": "huggingface", **raw}
    if path.suffix.lower() != ".gguf":
        raise AuditError(f"{path.name}: not a checkpoint; give a Hugging Face model directory "
                         f"(config.json + model.safetensors) or a .gguf file")
    return {"format": "gguf", **_gguf_metadata(path)}


def _gguf_metadata(path: Path) -> dict:
    """The scalar metadata of a GGUF file (read without loading any tensor)."""
    try:
        import gguf
    except ImportError:
        raise AuditError("reading a .gguf file needs the package gguf: pip install 'attnref[models]'") from None
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as error:            # gguf raises ValueError, struct.error, IndexError … on a bad file
        raise AuditError(f"{path.name}: corrupt or truncated GGUF file ({error.__class__.__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else 'unreadable'})") from None
    out = {}
    for key, value in reader.fields.items():
        if key.startswith("tokenizer."):
            continue
        try:
            contents = value.contents()
        except Exception:                 # an array or type the reader cannot turn into Python
            continue
        if isinstance(contents, (str, int, float, bool)):
            out[key] = contents
    if "general.architecture" not in out:
        raise AuditError(f"{path.name}: the GGUF file has no general.architecture field")
    return out


def detect(path: Path) -> tuple[Family, dict]:
    """The family of the checkpoint at ``path`` and its configuration, or an :class:`AuditError`."""
    if not path.exists():
        raise AuditError(f"{path}: no such file or directory")
    config = read_configuration(path)
    for family in families():
        if family.accepts(path, config):
            return family, config
    found = config.get("model_type") or config.get("general.architecture") or "unknown"
    architectures = config.get("architectures")
    if architectures:
        found = f"{found} ({', '.join(map(str, architectures))})"
    raise AuditError(f"{path.name}: unsupported architecture {found}; supported: {supported()}")
