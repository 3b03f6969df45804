"""The vLLM generation server of the GRPO server layout (``trl vllm-serve`` on its own GPU): its command,
and waiting for it to be healthy. Light on imports, so launchers can build the command."""

from __future__ import annotations

import time
import urllib.error
import urllib.request


def vllm_server_command(model_path: str, host: str, port: int, tensor_parallel_size: int,
                        gpu_memory_utilization: float) -> list[str]:
    """The generation server of the server layout, on its own GPU(s): trl's vLLM server."""
    return ["trl", "vllm-serve", "--model", model_path, "--host", host, "--port", str(port),
            "--tensor-parallel-size", str(tensor_parallel_size),
            "--gpu-memory-utilization", str(gpu_memory_utilization)]


def wait_for_server(host: str, port: int, timeout: float, command: list[str]) -> None:
    url = f"http://{host}:{port}/health/"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise ValueError(f"vLLM server {url} not healthy after {timeout:.0f}s: start it on its own GPU with "
                             f"`{' '.join(command)}` (algo.vllm_server_host/port say where it is)")
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
