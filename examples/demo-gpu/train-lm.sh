#!/bin/sh
# The command of the job files beside it (scripts/demo-gpu.sh): examples/torch/train_lm.py under the Python
# that has torch and the tessera package. The daemon resolves a job's relative command against the job
# file's directory, but not the arguments, so the script path is found from here. DEMO_GPU_PYTHON comes
# from the daemon's environment (jobs inherit it, except TESSERA_* variables); default python3.
here=$(cd "$(dirname "$0")" && pwd)
exec "${DEMO_GPU_PYTHON:-python3}" "$here/../torch/train_lm.py" "$@"
