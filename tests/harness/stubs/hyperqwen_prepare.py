#!/usr/bin/env python3
"""Stand-in for HyperQwen's `prepare` (docker/prepare.sh in syv-ai/HyperQwen, notes/hyperqwen.md),
run by the sandbox's fake docker for the `prepare` service: idempotent model preparation on the CPU.

- The base model must be complete under /app/models/Qwen3.8-27B-W4A16-AutoRound (config.json, the
  safetensors index and every shard it lists). Missing, it would be downloaded; with NO_DOWNLOAD=1
  (how rigkit runs it) prepare refuses and fails, naming what is missing.
- DFLASH2=1 needs the drafter in Qwen3.8-27B-DFlash2-W4A16, FAST_VARIANT=1 the `-fast` variant;
  under NO_DOWNLOAD=1 a missing one fails too.
- It rewrites files in place (the real one requantizes lm_head/embeddings and rewrites the
  safetensors index): here it adds "prepared" metadata to the index and writes a small
  lm_head.int8.safetensors and a marker. Run again on a prepared model, it changes nothing.

usage: hyperqwen_prepare.py MODELS_DIR   (the host path the container's /app/models is bound to)
"""
import json
import os
import sys

BASE = "Qwen3.8-27B-W4A16-AutoRound"
DRAFTER = "Qwen3.8-27B-DFlash2-W4A16"
MARKER = ".hyperqwen-prepared"


def fail(msg):
    print(f"prepare: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def main():
    models = sys.argv[1]
    no_download = os.environ.get("NO_DOWNLOAD") == "1"
    base = os.path.join(models, BASE)
    index_path = os.path.join(base, "model.safetensors.index.json")
    missing = [p for p in ("config.json", "model.safetensors.index.json") if not os.path.isfile(os.path.join(base, p))]
    if not missing:
        with open(index_path) as fh:
            index = json.load(fh)
        shards = sorted(set(index.get("weight_map", {}).values()))
        missing = [s for s in shards if not os.path.isfile(os.path.join(base, s))]
    if missing:
        if no_download:
            fail(f"base model incomplete in /app/models/{BASE} (missing: {', '.join(missing)}) and NO_DOWNLOAD=1: "
                 "refusing to download")
        fail(f"base model incomplete (missing: {', '.join(missing)}); downloading needs the hub (none in the sandbox)")
    extra = []
    if os.environ.get("DFLASH2", "1") == "1" and not os.path.isdir(os.path.join(models, DRAFTER)):
        extra.append(DRAFTER)
    if os.environ.get("FAST_VARIANT", "1") == "1" and not os.path.isdir(os.path.join(models, BASE + "-fast")):
        extra.append(BASE + "-fast")
    if extra:
        fail(f"missing {', '.join(extra)} and NO_DOWNLOAD=1: refusing to download" if no_download
             else f"missing {', '.join(extra)}; downloading needs the hub (none in the sandbox)")
    if os.path.isfile(os.path.join(base, MARKER)):
        print("prepare: already prepared; nothing to do", flush=True)
        return
    index.setdefault("metadata", {})["hyperqwen_prepared"] = {"lm_head": "int8", "draft_vocab": 40000}
    with open(index_path + ".tmp", "w") as fh:
        json.dump(index, fh, indent=2)
    os.replace(index_path + ".tmp", index_path)
    with open(os.path.join(base, "lm_head.int8.safetensors"), "wb") as fh:
        header = json.dumps({"lm_head.weight": {"dtype": "I8", "shape": [4, 4], "data_offsets": [0, 16]}}).encode()
        fh.write(len(header).to_bytes(8, "little") + header + bytes(16))
    with open(os.path.join(base, MARKER), "w") as fh:
        fh.write("prepared by the sandbox stand-in\n")
    print(f"prepare: requantized {BASE} in place (lm_head int8, draft vocabulary); done", flush=True)


if __name__ == "__main__":
    main()
