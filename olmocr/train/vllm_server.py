"""The vLLM generation server of the GRPO server layout (``trl vllm-serve`` on its own GPU): its command,
and waiting for it to be healthy. Light on imports, so launchers can build the command."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from olmocr.errors import UserError


def vllm_server_command(model_path: str, host: str, port: int, tensor_parallel_size: int = 1,
                        data_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                        max_model_length: int | None = None) -> list[str]:
    """The generation server of the server layout, on its own GPUs (tensor x data parallel of them):
    trl's vLLM server."""
    command = ["trl", "vllm-serve", "--model", model_path, "--host", host, "--port", str(port),
               "--tensor-parallel-size", str(tensor_parallel_size), "--data-parallel-size", str(data_parallel_size),
               "--gpu-memory-utilization", str(gpu_memory_utilization)]
    return command + (["--max-model-len", str(max_model_length)] if max_model_length else [])


def server_command(model_path: str, algo, host: str) -> list[str]:
    """The server command for a GRPO ``algo`` config (a mapping of its keys)."""
    return vllm_server_command(model_path, host, algo["vllm_server_port"], algo["vllm_tensor_parallel_size"],
                               algo["vllm_data_parallel_size"], algo["vllm_gpu_memory_utilization"],
                               algo["vllm_max_model_length"])


def wait_for_server(host: str, port: int, timeout: float, command: list[str]) -> None:
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise UserError(f"vLLM server {url} not healthy after {timeout:.0f}s: start it on its own GPU with "
                            f"`{' '.join(command)}` (algo.vllm_server_host/port say where it is)")
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
