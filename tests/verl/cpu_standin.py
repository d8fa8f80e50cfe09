"""verl on this CPU machine: a CPU platform and a scripted generation server, through verl's plugin registries.

Loaded in every verl process through verl's own hook for external modules
(``VERL_USE_EXTERNAL_MODULES=tests.verl.cpu_standin``, imported by ``import verl``), with
``VERL_PLATFORM=cpu``:

- :class:`PlatformCPU`, registered in verl's ``PlatformRegistry`` as ``cpu`` (verl 0.9.1 ships
  CUDA, NPU and ROCm platforms, none for the CPU): torch's ``cpu`` device, the ``gloo`` collective
  backend, and Ray's ``GPU`` resource as the placement unit (Ray is started with
  ``ray_kwargs.ray_init.num_gpus=1``, a logical slot: nothing uses CUDA), so verl's resource pools,
  placement groups and FSDP workers run as they do on a GPU node.
- The generation server, the one stand-in (vLLM needs a GPU): ``rollout.name: vllm`` is
  registered in verl's ``RolloutReplicaRegistry`` as :class:`ScriptedReplica`, whose server actor
  answers verl's token-in-token-out ``generate`` with search-then-answer text (right on every
  other episode, so GRPO groups have a spread of rewards), and in verl's rollout registry
  (``_ROLLOUT_REGISTRY``) as :class:`ScriptedServerAdapter`, the adapter in the trainer's worker
  through which verl syncs the actor's weights to the server (the server counts the tensors).
"""

from __future__ import annotations

import json
import os
import types
from contextlib import contextmanager
from typing import Any

import ray
import torch
from verl.utils import distributed

_initialize_global_process_group_ray = distributed.initialize_global_process_group_ray


def initialize_global_process_group_ray(timeout_second: int | None = None, backend: str | None = None) -> None:
    """verl's process-group start with ``cpu:gloo`` (its default, ``cpu:gloo,<device>:<backend>``, says cpu twice)."""
    _initialize_global_process_group_ray(timeout_second=timeout_second, backend=backend or "cpu:gloo")


# before verl's workers import it (this module is loaded by ``import verl``)
distributed.initialize_global_process_group_ray = initialize_global_process_group_ray

from verl.plugin.platform import PlatformBase, PlatformRegistry  # noqa: E402


class _CPUDevice(types.ModuleType):
    """``torch.cpu`` as verl's device module: what it lacks (memory statistics, caches) is a no-op or 0."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        if name == "mem_get_info":
            return lambda *a, **k: (0, 0)
        if name == "get_device_name":
            return lambda *a, **k: "CPU"
        return lambda *a, **k: 0


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """The CPU as a verl platform: one Ray ``GPU`` slot per worker, tensors on ``cpu``, ``gloo`` collectives."""

    device_name = "cpu"  # type: ignore[assignment]
    vendor_name = "cpu"  # type: ignore[assignment]
    device_module = _CPUDevice("verl_cpu_device")  # type: ignore[assignment]

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return torch.cpu.current_device()  # type: ignore[return-value]  # "cpu", as torch.cpu says (verl hands it to torch)

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Any:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


# verl's engine and rollout modules ask for the platform when imported: after PlatformCPU is registered
from tests.verl.scripted import scripted_turn  # noqa: E402
from verl.workers.engine.base import EngineRegistry  # noqa: E402
from verl.workers.engine.fsdp import transformer_impl  # noqa: E402
from verl.workers.rollout import base as rollout_base  # noqa: E402
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput  # noqa: E402


class ScriptedServer:
    """Stands in for a vLLM server replica: ``generate`` from token ids plays search-then-answer.

    Answers the question right on every other episode; records the sampling parameters it was
    sent, the weight syncs it received and the calls verl made to sleep and wake it, in the JSON file
    ``SEARCHENV_STANDIN_REPORT`` names (rewritten on each call: the actor ends with the run).
    """

    def __init__(self, model_path: str, answers: dict[str, str]) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.answers = answers
        self.answered = 0
        self.params: list[dict[str, Any]] = []
        self.synced: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.global_steps: int | None = None

    def _write(self) -> None:
        path = os.environ.get("SEARCHENV_STANDIN_REPORT")
        if path:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(self.report(), f)
            os.replace(path + ".tmp", path)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        self.params.append(dict(sampling_params))
        self._write()
        text, self.answered = scripted_turn(self.tokenizer.decode(prompt_ids), self.answers, self.answered)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling_params["max_tokens"]]
        # the weight version, as vLLM's server reports it
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), extra_fields={"global_steps": self.global_steps})

    def sync_weights(self, n_tensors: int, checksum: float, global_steps: int | None) -> None:
        self.synced.append({"tensors": n_tensors, "checksum": checksum, "global_steps": global_steps})
        if global_steps is not None:
            self.global_steps = global_steps
        self._write()

    def record(self, call: str) -> None:
        self.calls.append(call)
        self._write()

    def report(self) -> dict[str, Any]:
        return {"params": self.params, "synced": self.synced, "calls": self.calls}

    async def wake_up(self) -> None:
        self.record("wake_up")

    async def sleep(self) -> None:
        self.record("sleep")

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None


def server_name(replica_rank: int) -> str:
    """The Ray actor name of a replica's stand-in server (what the test reads its report from)."""
    return f"searchenv_scripted_server_{replica_rank}"


class ScriptedReplica(RolloutReplica):
    """verl's rollout replica (as ``vLLMReplica`` is) whose server is a :class:`ScriptedServer` actor."""

    async def launch_servers(self) -> None:
        answers = dict(item.split("\t", 1) for item in os.environ["SEARCHENV_STANDIN_ANSWERS"].split("\n"))
        server = ray.remote(ScriptedServer).options(
            name=server_name(self.replica_rank), max_concurrency=self.max_concurrency, num_cpus=0,
        ).remote(self.model_config.path, answers)
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"scripted-{self.replica_rank}"


class ScriptedServerAdapter(rollout_base.BaseRollout):
    """The rollout adapter in the actor's worker: receives the actor's weights, sends the server their number, sum."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        self.replica_rank = max(replica_rank, 0)
        self.rank = int(os.environ.get("RANK", "0"))

    def _server(self) -> Any:
        return ray.get_actor(server_name(self.replica_rank))

    async def resume(self, tags: list[str]) -> None:
        if self.rank == 0:
            await self._server().record.remote(f"resume:{','.join(tags)}")

    async def release(self) -> None:
        if self.rank == 0:
            await self._server().record.remote("release")

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None,
                             **kwargs: Any) -> None:
        n, checksum = 0, 0.0
        for _name, tensor in weights:
            n, checksum = n + 1, checksum + float(tensor.detach().double().abs().sum())
        if self.rank == 0:
            await self._server().sync_weights.remote(n, checksum, global_steps)



class UnpinnedCPUOffloadPolicy(transformer_impl.CPUOffloadPolicy):  # type: ignore[misc]
    """FSDP2's CPU offload without pinned memory (pinning needs an accelerator); verl asks for it pinned."""

    def __init__(self, pin_memory: bool = True) -> None:
        super().__init__(pin_memory=False)


# the offload verl's FSDP engine gives the reference model (forward only) on this platform
transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
# verl's FSDP engine (registered for cuda and npu) for the cpu device, through verl's engine registry
EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(
    transformer_impl.FSDPEngineWithLMHead)
RolloutReplicaRegistry.register("vllm", lambda: ScriptedReplica)
rollout_base._ROLLOUT_REGISTRY[("vllm", "async")] = f"{__name__}.ScriptedServerAdapter"
