"""GRPO's vLLM generation (``algo.vllm``, :class:`VLLMGeneration`): the engine inside each trainer process
(``algo.generation=vllm_colocate``) or the server of the server layout (``trl vllm-serve`` on its own GPUs,
``vllm_server``): its command, and waiting for it to be healthy. Light on imports, so schemas and launchers
read it."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Annotated

from olmocr.config import Range
from olmocr.errors import UserError


@dataclass(kw_only=True)
class VLLMGeneration:
    """``algo.vllm``: how GRPO's vLLM engine runs, colocated or as a server. Its own schema: a key of it is
    a field here, and trl is given each under its ``vllm_`` name."""

    server_host: str = "127.0.0.1"  # the server layout: where the server listens (a launcher sets the leader's)
    server_port: Annotated[int, Range(at_least=1, at_most=65535)] = 8000
    server_timeout: Annotated[float, Range(above=0)] = 240.0  # how long the run waits for it to be healthy
    gpu_memory_utilization: Annotated[float, Range(above=0, at_most=1)] = 0.3
    tensor_parallel_size: Annotated[int, Range(at_least=1)] = 1
    data_parallel_size: Annotated[int, Range(at_least=1)] = 1  # the server's model copies
    # prompt + completion tokens vLLM makes room for
    max_model_length: Annotated[int | None, Range(at_least=1, null="the model's own")] = None

    @property
    def server_gpus(self) -> int:
        """GPUs the server takes: tensor x data parallel."""
        return self.tensor_parallel_size * self.data_parallel_size

    def trl_fields(self, mode: str) -> dict:
        """trl ``GRPOConfig`` fields for ``mode`` (``server`` or ``colocate``)."""
        return dict(vllm_mode=mode, vllm_server_host=self.server_host, vllm_server_port=self.server_port,
                    vllm_server_timeout=self.server_timeout, vllm_gpu_memory_utilization=self.gpu_memory_utilization,
                    vllm_tensor_parallel_size=self.tensor_parallel_size, vllm_max_model_length=self.max_model_length)

    def server_command(self, model_path: str, host: str | None = None) -> list[str]:
        """The server layout's command, listening on ``host`` (default: ``server_host``)."""
        return vllm_server_command(model_path, host or self.server_host, self.server_port, self.tensor_parallel_size,
                                   self.data_parallel_size, self.gpu_memory_utilization, self.max_model_length)

    def wait(self, command: list[str]) -> None:
        wait_for_server(self.server_host, self.server_port, self.server_timeout, command)


def vllm_server_command(model_path: str, host: str, port: int, tensor_parallel_size: int = 1,
                        data_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                        max_model_length: int | None = None) -> list[str]:
    """The generation server of the server layout, on its own GPUs (tensor x data parallel of them):
    trl's vLLM server."""
    command = ["trl", "vllm-serve", "--model", model_path, "--host", host, "--port", str(port),
               "--tensor-parallel-size", str(tensor_parallel_size), "--data-parallel-size", str(data_parallel_size),
               "--gpu-memory-utilization", str(gpu_memory_utilization)]
    return command + (["--max-model-len", str(max_model_length)] if max_model_length else [])


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
                            f"`{' '.join(command)}` (algo.vllm.server_host/server_port say where it is)")
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
