"""The command line of ``attnref audit`` (``python -m attnref.audit`` or ``attnref-audit``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="attnref-audit",
        description="Run the attention-claims book's trained-model rechecks on a checkpoint: a Hugging Face "
                    "model directory (config.json + *.safetensors, sharded or not) of a BERT, Llama, Mistral, "
                    "Qwen2, Qwen3, Gemma 3 or GPT-2 model, or a Llama / Gemma 3 .gguf file.")
    parser.add_argument("path", type=Path, help="the model directory or .gguf file")
    parser.add_argument("--texts", type=Path, default=None,
                        help="a UTF-8 file, one text per line (default: the book's 64 sentences)")
    parser.add_argument("--out", type=Path, default=Path("audit-report"),
                        help="the report folder (report.json, report.html); default audit-report")
    parser.add_argument("--dtype", default="float32", metavar="DTYPE",
                        help="compute precision of the forward pass: float32 (default), float64, bfloat16, float16 "
                             "(the weights are read as stored and converted block by block)")
    parser.add_argument("--device", default="cpu", help="where the blocks run: cpu (default) or cuda / cuda:N")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    from attnref.audit import AuditError, audit, read_texts
    try:
        texts = read_texts(args.texts)
        report = audit(args.path, texts, args.out, progress=not args.quiet, dtype=args.dtype, device=args.device)
    except AuditError as error:
        print(f"attnref audit: {error}", file=sys.stderr)
        return 2
    verdicts = ", ".join(f"{cid} {entry['verdict']}" for cid, entry in report["rechecks"].items())
    print(f"attnref audit: {report['model']['name']} ({report['model']['family']}, {report['compute']['dtype']} on "
          f"{report['compute']['device']}), {report['texts']['count']} texts, "
          f"{report['seconds']} s: {verdicts}. Report: {args.out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
