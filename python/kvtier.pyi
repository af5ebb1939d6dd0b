"""kvtier: KV-cache offload for LLM inference (type stub of the compiled module).

docs/python.md describes the API, the GIL, the exceptions and the lifetimes.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

__version__: str

class Error(Exception):
    """A kvtier error; ``code`` is kvtier's error code, e.g. "invalid_argument"."""

    code: str
    message: str
    def __init__(self, code: str, message: str) -> None: ...

class FailStop(Exception):
    """F7: the engine must stop serving (not a subclass of Error)."""

    reason: str
    def __init__(self, reason: str) -> None: ...

class Match(NamedTuple):
    tokens: int
    ask_later: bool

class ScheduledRequest(NamedTuple):
    id: str
    tokens: Sequence[int]
    num_prompt_tokens: int
    new_blocks: Union[Sequence[int], Sequence[Sequence[int]]]
    num_computed_after_step: int

class LoadFinished(NamedTuple):
    request: str
    num_computed: int
    outcome: str  # "completed" | "failed"

class StepOutcome(NamedTuple):
    loads: List[LoadFinished]
    released: List[str]

class JobVerdict(NamedTuple):
    job: int
    outcome: str  # "completed" | "failed" | "unprovable"
    error: str

class WorkerOutput(NamedTuple):
    rank: int
    finished: List[JobVerdict]
    invalid_blocks: List[List[int]]
    fail_stop: bool
    fail_stop_reason: str

class LookupReply(NamedTuple):
    """CacheClient.lookup's answer."""

    hits: int  # leading keys that are ready in kvtierd
    pending: bool  # the next key is being stored or fetched from a lower tier: ask again
    lock: int  # read lock on the hits (0: none), for retrieve() or release()

class ChunkTransfer(NamedTuple):
    group: int
    blocks: List[int]
    slot: int
    first_block: int

class TransferJob(NamedTuple):
    job: int
    request: str
    chunks: List[ChunkTransfer]

class Layout:
    """The shape of the KV cache one rank holds (the config's layout section)."""

    @property
    def device_layout(self) -> str: ...
    @property
    def layers(self) -> int: ...
    @property
    def kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def dtype_bytes(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def blocks_per_chunk(self) -> int: ...
    @property
    def chunk_tokens(self) -> int: ...
    @property
    def chunk_bytes(self) -> int: ...
    @property
    def block_bytes(self) -> int: ...
    @property
    def groups(self) -> int: ...
    def kv_cache_shape(self, num_blocks: int) -> Tuple[int, ...]:
        """The shape each KV-cache tensor must have."""

class Config:
    """kvtier's configuration; immutable (with_overrides returns a new one)."""

    def __init__(self) -> None:
        """The default configuration."""
    @staticmethod
    def from_yaml(text: str, overrides: Sequence[str] = ...) -> Config:
        """Defaults, one YAML document, then "section.field=value" overrides."""
    @staticmethod
    def load(
        path: Optional[str] = None, overrides: Sequence[str] = ..., environment: bool = False
    ) -> Config:
        """Defaults, the YAML file, KVTIER_* variables (environment=True), the overrides."""
    def with_overrides(self, overrides: Sequence[str]) -> Config: ...
    def get(self, key: str) -> str:
        """One field's value as text, e.g. get("cache.mode") -> "local"."""
    def to_yaml(self) -> str: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def cache_mode(self) -> str: ...
    @property
    def connector_enabled(self) -> bool: ...
    @staticmethod
    def describe() -> List[Dict[str, str]]: ...

class StepMetadata:
    """What the scheduler side tells every worker side for one step (picklable)."""

    @property
    def step(self) -> int: ...
    @property
    def loads(self) -> List[TransferJob]: ...
    @property
    def stores(self) -> List[TransferJob]: ...
    @property
    def flush(self) -> List[int]: ...
    @property
    def empty(self) -> bool: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes) -> StepMetadata: ...

class Scheduler:
    """The connector's scheduler side: one per engine, in its scheduling process."""

    def __init__(
        self,
        config: Config,
        *,
        model: str,
        world_size: int = 1,
        host_slots: Optional[int] = None,
    ) -> None: ...
    def get_num_new_matched_tokens(
        self,
        request_id: str,
        tokens: Sequence[int],
        num_computed: int,
        num_prompt_tokens: Optional[int] = None,
        cache_salt: str = "",
    ) -> Match: ...
    def update_state_after_alloc(
        self,
        request_id: str,
        blocks: Union[Sequence[int], Sequence[Sequence[int]]],
        num_external_tokens: int,
    ) -> None: ...
    def build_step_metadata(self, step: int, requests: Sequence[ScheduledRequest]) -> StepMetadata: ...
    def update_from_worker_output(self, outputs: Sequence[WorkerOutput]) -> StepOutcome:
        """Raises FailStop (F7) when the engine must stop, and at every later call."""
    def request_finished(self, request_id: str) -> bool: ...
    def request_preempted(self, request_id: str) -> None: ...
    def reset_cache(self) -> None: ...
    def take_events(self) -> List[Tuple[str, List[str]]]: ...
    @property
    def degraded(self) -> Optional[str]: ...
    @property
    def fail_stopped(self) -> bool: ...
    @property
    def fail_stop_reason(self) -> str: ...
    @property
    def layout(self) -> Layout: ...
    def counters(self) -> Dict[str, int]: ...
    def cache_counters(self) -> Optional[Dict[str, int]]: ...
    def audit(self) -> None: ...

class KvMemory:
    """One KV-cache tensor's bytes in kvtierd's shared memory (a Worker with cache.mode server,
    a CacheClient): a writable buffer, e.g. torch.frombuffer(memory, dtype=torch.float32). The
    memory stays mapped while this object (or a tensor over it) is referenced."""

    def __len__(self) -> int: ...

class Worker:
    """One rank's worker side: over KV caches registered zero-copy (cache.mode local), or over
    shared memory it allocates for kvtierd (cache.mode server: kv_caches=None, num_blocks)."""

    def __init__(
        self,
        config: Config,
        kv_caches: Optional[Sequence[Any]],
        *,
        rank: int = 0,
        world_size: int = 1,
        num_blocks: Optional[int] = None,
        host_slots: Optional[int] = None,
    ) -> None: ...
    def start_load(self, metadata: StepMetadata) -> None: ...
    def wait_for_layer_load(self, layer: int) -> None: ...
    def save_layer(self, layer: int) -> None: ...
    def queue_stores(self, metadata: StepMetadata) -> None: ...
    def take_output(self) -> WorkerOutput: ...
    def drain(self) -> None: ...
    @property
    def fail_stopped(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    def audit(self) -> None: ...
    def stats(self) -> Dict[str, int]: ...
    def fault_counts(self) -> Dict[str, int]: ...
    @property
    def kv_caches(self) -> List[Any]: ...
    @property
    def rank(self) -> int: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def host_slots(self) -> int: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Worker: ...
    def __exit__(self, *args: Any) -> None: ...

def chunk_keys(
    layout: Layout,
    tokens: Sequence[int],
    *,
    model: str,
    group: int = 0,
    cache_salt: str = "",
    rank: Optional[int] = None,
) -> List[str]:
    """The keys (32 hex digits) of every full chunk of `tokens`, as the connector computes them
    for `model`, `cache_salt` and `group`; with `rank`, that rank's share of each chunk, the key
    its worker side stores in kvtierd."""

class CacheClient:
    """A connection to kvtierd (server.endpoint) over KV memory of its own that kvtierd maps.

    Calls that talk to kvtierd release the GIL and return by their deadline (F8). Failures are
    kvtier.Error with kvtier's code ("unavailable" while kvtierd is down: the client is
    degraded and reconnects by itself, H7; "deadline_exceeded" without a reply). A store or
    retrieve ends in a JobVerdict ("completed" | "failed"); an unprovable one raises FailStop
    (F7), and so does every later store or retrieve. Thread-safe."""

    def __init__(self, config: Config, *, num_blocks: int, rank: int = 0, wait: bool = True) -> None:
        """Allocates num_blocks blocks per group of config.layout (zero-filled, in kv_caches) and
        registers them with kvtierd; with `wait`, waits at most server.connect_timeout_s."""
    def health(self) -> Dict[str, Any]:
        """{"state": "ok" | "degraded" | "shutdown", "reason": str, "fail_stopped": bool,
        "server_boot_id": int, "degraded_tiers": List[str]} (the tiers kvtierd says are DOWN)."""
    @property
    def fail_stopped(self) -> bool: ...
    def wait_until_ok(self, timeout_s: float) -> bool: ...
    def lookup(self, keys: Sequence[str], lock_for_s: float = 0.0) -> LookupReply: ...
    def lookup_many(
        self, lookups: Sequence[Sequence[str]], lock_for_s: float = 0.0
    ) -> list[LookupReply]:
        """One reply per lookups[i], as lookup(lookups[i]) would give, in one round trip."""
    def store(self, job: int, keys: Sequence[str], blocks: Sequence[Sequence[int]], group: int = 0) -> JobVerdict:
        """blocks[i]: this client's blocks (of `group`) that hold the chunk keys[i]."""
    def retrieve(
        self,
        job: int,
        keys: Sequence[str],
        blocks: Sequence[Sequence[int]],
        *,
        group: int = 0,
        lock: int = 0,
    ) -> JobVerdict:
        """blocks[i]: this client's blocks (of `group`) the chunk keys[i] is copied into."""
    def release(self, lock: int) -> None: ...
    def stats(self) -> Dict[str, int]:
        """kvtierd's counters (STATS), name -> int (docs/protocol.md)."""
    def tiers(self) -> Dict[str, Dict[str, Union[str, int]]]:
        """kvtierd's lower tiers: name -> {"state": "up" | "down", counter name -> int}."""
    def ping(self) -> Dict[str, int]: ...
    def unregister(self) -> None: ...
    def shutdown_server(self) -> None: ...
    @property
    def kv_caches(self) -> List[List[KvMemory]]:
        """Per group, one KvMemory per tensor of config.layout.kv_cache_shape(num_blocks)."""
    @property
    def rank(self) -> int: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> CacheClient: ...
    def __exit__(self, *args: Any) -> None: ...
