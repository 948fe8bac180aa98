#!/usr/bin/env python3
# tests/ckpt/safetensors_check: loads a shard file with Hugging Face's safetensors (numpy flavour) and prints
# each tensor's dtype, shape and first/last values as JSON, for save_restore_test's HfLibraryReadsShards.
import json
import sys

from safetensors import safe_open

out = {}
with safe_open(sys.argv[1], framework="numpy") as f:
    meta = f.metadata()
    for name in f.keys():
        t = f.get_tensor(name)
        flat = t.reshape(-1)
        out[name] = {"dtype": str(t.dtype), "shape": list(t.shape), "first": float(flat[0]), "last": float(flat[-1])}
print(json.dumps({"tensors": out, "metadata": meta}))
