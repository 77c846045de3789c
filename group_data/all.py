"""The rig's declared state: overrides of rigkit's defaults (``rigkit.spec.model.RigSpec``).

Every key is optional — defaults live in the spec models, and nested dicts are deep-merged,
so ``hyperqwen = {"dflash_tokens": 5}`` keeps every other HyperQwen default. Values only the
operator knows stay unset until they are set here; ``rigkit check`` warns about each and
``rigkit deploy`` refuses to start without them. Never put a secret here: the HF token comes
from ``HF_TOKEN`` or hf's token file, the HyperQwen API key is generated on the host.
"""

# The card and its power limit (W). The allowed range is read from the GPU, never assumed.
gpu_power_limit_w = 420
gpu_vram_gib = 24.0

# Driver 610.57 and CUDA 13.3: the series. `rigkit lock` resolves each to the Arch Linux Archive's
# full package versions (a real 610.57 is 610.57.04-1) and the deploy installs only what the lock
# names. An exact pin here wins over the series and is verified by the lock:
# pacman_pins = {"cuda": "13.3.0-1"}
nvidia_driver_version = "610.57"
cuda_version = "13.3"

# Metrics for the dashboard: uncomment to make node_exporter part of the rig (its package pinned by
# `rigkit lock`, its textfile folder and loopback listen address set, its unit enabled), then
# `rigkit lock` and `rigkit deploy` (docs/operating.md, "Metrics for Prometheus: from nothing to a dashboard"):
# metrics_textfile_dir = "/var/lib/prometheus/node-exporter"
# node_exporter = {"listen_address": "127.0.0.1", "port": 9100}

# The unit that once carried Requires=strata.service; the deploy backs it up and retires it.
legacy_units = ["strata.service"]

hyperqwen = {
    "spec": "dflash2",
    "prefix_cache": True,
    "dflash_tokens": 7,  # 15 crashed the engine at 20k context: refused above 7 at long context
    "max_model_len": 65536,
}

# llama-swap members. HyperQwen is staged (in config.staged.yaml for review, not live); to wire it
# in as a member on demand, uncomment the next line, then
# `rigkit wire-in -i inventory/rig.py --host rig --show`, then
# `rigkit wire-in -i inventory/rig.py --host rig --activate`
# (docs/operating.md, "Wiring HyperQwen in"):
# llama_swap = {"members": {"hyperqwen": {"staged": False}}}
