"""The model families `attnref audit` recognises: one adapter module per family.

An adapter module defines ``FAMILY`` (a :class:`Family`): how to recognise a checkpoint of its
family from its configuration, and how to load it into a :class:`Loaded` model that runs a text
and hands back what the rechecks measure. Adding a family is adding one module here and its name
to :data:`MODULES`; nothing else changes. Hugging Face directories (``config.json`` +
``*.safetensors``, sharded or not) are read block by block by :mod:`attnref.audit.families._hf`;
an adapter of such a family maps the checkpoint's tensor names and configuration onto attnref's
parts (:class:`attnref.audit.families._hf.DecoderSpec`).

Every refusal names what is supported in one form, :func:`supported`, e.g.
``bert (Hugging Face directory); llama (Hugging Face directory or .gguf); …``, and for an
architecture or a feature the audit does not run, the closest supported family.
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
MODULES = ("bert", "llama", "mistral", "qwen2", "qwen3", "gemma3", "gpt2")

#: The formats, as :func:`supported` names them.
HF, GGUF = "huggingface", "gguf"
_FORMAT_NAMES = {HF: "Hugging Face directory", GGUF: ".gguf"}

#: Architectures the audit does not run -> the supported family closest to them (for the refusal).
CLOSEST = {"gemma": "gemma3", "gemma2": "gemma3", "gemma3n": "gemma3", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3",
           "qwen2_vl": "qwen2", "mixtral": "mistral", "ministral": "mistral", "phi3": "llama", "phi": "llama",
           "olmo": "llama", "olmo2": "llama", "granite": "llama", "cohere": "llama", "starcoder2": "mistral",
           "gpt_neox": "gpt2", "gpt_neo": "gpt2", "gptj": "gpt2", "opt": "gpt2", "bloom": "gpt2", "falcon": "llama",
           "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert", "electra": "bert", "deberta": "bert",
           "deberta-v2": "bert", "modernbert": "bert", "t5": "bert", "mamba": "llama"}


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
    name: str                                  # "bert", "llama", "gemma3", …
    description: str                           # for the report
    accepts: Callable[[Path, dict], bool]      # (path, its configuration) -> is it this family?
    load: Callable[..., Loaded]                # (path, configuration, *, dtype=None, device=None) -> Loaded
    formats: tuple[str, ...] = (HF,)           # HF, GGUF: what the family is read from


def families() -> list[Family]:
    return [importlib.import_module(f"{__name__}.{name}").FAMILY for name in MODULES]


def supported() -> str:
    """Every family and the formats it is read from, in one form (every refusal ends with it)."""
    return "; ".join(f"{f.name} ({' or '.join(_FORMAT_NAMES[x] for x in f.formats)})"
                     for f in sorted(families(), key=lambda f: f.name))


def closest(found: str) -> str:
    """The supported family closest to an architecture name (a table, then the longest common prefix)."""
    key = str(found).lower()
    if key in CLOSEST:
        return CLOSEST[key]
    names = [f.name for f in families()]
    for name in names:
        if key.startswith(name) or name.startswith(key):
            return name
    import difflib
    match = difflib.get_close_matches(key, names, n=1, cutoff=0.0)
    return match[0] if match else "llama"


def refuse(path: Path, family: str, what: str, nearest: str | None = None) -> AuditError:
    """The one-line refusal of a feature of a family the audit does not run: ``family`` with ``what``,
    the closest supported family, and :func:`supported`."""
    return AuditError(f"{path.name}: {family} with {what} is not supported; closest supported: "
                      f"{nearest or family}; supported: {supported()}")


def missing_package(error: ImportError, what: str) -> AuditError:
    """A missing optional package named as missing (never as a corrupt file), with the extra to install."""
    from attnref._extras import EXTRAS, missing_message
    top = (getattr(error, "name", None) or "").split(".")[0]
    if top in EXTRAS:
        return AuditError(f"{what}: {missing_message(top, 'attnref audit')}")
    return AuditError(f"{what} needs a package that is not installed ({error}); pip install 'attnref[models]'")


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
                         f"(config.json + *.safetensors) or a .gguf file; supported: {supported()}")
    return {"format": "gguf", **_gguf_metadata(path)}


def _gguf_metadata(path: Path) -> dict:
    """The scalar metadata of a GGUF file (read without loading any tensor)."""
    try:
        import gguf
    except ImportError:
        raise AuditError("reading a .gguf file needs the package 'gguf', which is not installed: "
                         "pip install 'attnref[models]'") from None
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
    kind = config.get("model_type") or config.get("general.architecture") or "unknown"
    raise AuditError(f"{path.name}: unsupported architecture {found}; closest supported: {closest(kind)}; "
                     f"supported: {supported()}")
