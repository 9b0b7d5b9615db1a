"""Memory plans: what a LoRA fine-tune or an evaluation needs per device, from the model's shape alone.

In: a decoder-only transformer's ``Shape`` (from a config.json dict) and the job's settings
(``TrainSetup``, ``ServeSetup``). Out: a ``Plan``, named lines of bytes per device and their total,
and ``knobs``: the single setting changes (or, failing those, one combination) that bring a training
plan under a device's memory. Pure arithmetic, no torch: docs/memory.md derives every term and
benchmarks/lora_step.py --plan-check measures them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

GiB = 2**30
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
# bitsandbytes NF4 with double quantisation: 4 bits per weight, an 8-bit absmax per 64 weights and an
# fp32 constant per 256 absmax blocks.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
RUNTIME_GPU = 1.0 * GiB  # CUDA context, cuBLAS workspaces, allocator slack: an allowance, not a derivation
RUNTIME_CPU = 0.5 * GiB  # python + torch + transformers + peft + lightning imported (measured: 0.45 GiB RSS)
RUNTIME_VLLM = 1.5 * GiB  # the CUDA context, CUDA graphs and sampler buffers of a vLLM engine (allowance)
VLLM_BATCHED_TOKENS = 8192  # tokens in vLLM's profiling forward pass (its max_num_batched_tokens)
HF_PROMPT_TOKENS = 2048  # backend=hf: the prompt length a batch is planned for (a RAG prompt's order)


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer (Llama, Qwen2, Mistral, ... layout): attention with grouped KV heads
    and a gated (SwiGLU) MLP in every layer."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool = False
    max_positions: int | None = None
    dtype: str | None = None

    @classmethod
    def from_config(cls, config: dict) -> Shape:
        """From a config.json dict (its text config for a multimodal model)."""
        if "hidden_size" not in config and isinstance(config.get("text_config"), dict):
            config = config["text_config"]
        heads = config["num_attention_heads"]
        return cls(
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate=config["intermediate_size"],
            vocab=config["vocab_size"],
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
            max_positions=config.get("max_position_embeddings"),
            dtype=config.get("torch_dtype") or config.get("dtype"),
        )

    def linears(self) -> dict[str, tuple[int, int]]:
        """One decoder layer's linear layers: name -> (in features, out features)."""
        h, q, kv, f = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, f),
            "up_proj": (h, f),
            "down_proj": (f, h),
        }

    def layer_linear_parameters(self) -> int:
        return sum(i * o for i, o in self.linears().values())

    def layer_parameters(self) -> int:
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return self.layer_linear_parameters() + bias + 2 * self.hidden  # + the two RMSNorm weights

    def embedding_parameters(self) -> int:
        """Input embedding and, untied, the output head."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.embedding_parameters() + self.hidden

    def kv_bytes_per_token(self, nbytes: int) -> int:
        """Key and value cache of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * nbytes


@dataclass(frozen=True)
class TrainSetup:
    """One LoRA fine-tuning job as the plan sees it (per device)."""

    batch_size: int
    seq_len: int
    checkpointing: bool
    weight_bytes: int  # the frozen base's bytes per parameter (4 float32, 2 float16/bfloat16)
    mixed: bool  # autocast (16-mixed, bf16-mixed): 16-bit matmuls over the base weights
    on_gpu: bool
    r: int = 16
    targets: tuple[str, ...] | str = "all-linear"
    dropout: float = 0.05
    modules_to_save: tuple[str, ...] = ()
    load_in_4bit: bool = False
    devices: int = 1
    strategy: str = "auto"  # auto | ddp | fsdp | deepspeed_stage_2 | ...

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class Plan:
    """Named lines of bytes on one device (``notes`` say what each counts) and what they add up to."""

    title: str
    lines: list[tuple[str, float, str]] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def add(self, name: str, nbytes: float, note: str = "") -> None:
        self.lines.append((name, float(nbytes), note))

    @property
    def total(self) -> float:
        return sum(nbytes for _, nbytes, _ in self.lines)

    def as_dict(self) -> dict:
        lines = [{"name": n, "gib": round(b / GiB, 4), "note": note} for n, b, note in self.lines]
        return {"title": self.title, "lines": lines, "total_gib": round(self.total / GiB, 4), **self.extra}


def targeted(shape: Shape, targets: tuple[str, ...] | str) -> list[str]:
    """The decoder-layer linears LoRA adapts: all of them for ``all-linear`` (peft leaves the output head
    out), those named (or matched, for a regular expression string) otherwise."""
    names = list(shape.linears())
    if targets == "all-linear":
        return names
    if isinstance(targets, str):
        import re

        return [n for n in names if re.fullmatch(targets, n) or re.search(targets, f"layers.0.{n}")]
    return [n for n in names if n in targets]


def lora_parameters(shape: Shape, setup: TrainSetup) -> int:
    """Trainable parameters: r x (in + out) per adapted linear per layer, plus full copies of
    ``modules_to_save`` (embed_tokens or lm_head: vocab x hidden each)."""
    linears = shape.linears()
    per_layer = sum(setup.r * sum(linears[name]) for name in targeted(shape, setup.targets))
    saved = sum(shape.vocab * shape.hidden for name in setup.modules_to_save if name in ("lm_head", "embed_tokens"))
    return shape.layers * per_layer + saved


def layer_activation_bytes(shape: Shape, setup: TrainSetup, first: bool = False) -> float:
    """Bytes autograd keeps per token for one decoder layer between forward and backward, tensor by tensor
    (measured on a tiny Llama with saved-tensor hooks, docs/memory.md). Frozen base linears keep nothing;
    each adapted linear keeps its LoRA input (peft's fp32 cast, or autocast's 16-bit copy) and its
    dropout mask (bool on CUDA, float on the CPU); ``first``: layer 0 without checkpointing, whose input
    needs no gradient (no input norm, no q/k/v dropout masks)."""
    h, f, r = shape.hidden, shape.intermediate, setup.r
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    compute = 2 if setup.mixed or setup.weight_bytes == 2 or setup.load_in_4bit else 4
    lora_in = 2 if setup.mixed else 4
    mask = 0 if setup.dropout == 0 else (1 if setup.on_gpu else 4)
    norm = h * 4 + 4  # RMSNorm: its fp32 input and the reciprocal root
    total = (1 if first else 2) * norm
    total += compute * (2 * q + 2 * kv) + 4 * shape.heads  # SDPA: q, k, v, output; fp32 log-sum-exp
    total += compute * 3 * f  # SwiGLU: gate (SiLU's input), SiLU's output, up
    names = targeted(shape, setup.targets)
    widths = {name: shape.linears()[name][0] for name in names}
    if setup.dropout == 0 and not setup.mixed and setup.weight_bytes == 4:
        groups = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gu", "up_proj": "gu"}
        shared = {groups.get(name, name): width for name, width in widths.items()}  # one saved input per group
        total += lora_in * sum(shared.values())
    else:
        total += lora_in * sum(widths.values())
    masked = [w for name, w in widths.items() if not (first and name in ("q_proj", "k_proj", "v_proj"))]
    total += mask * sum(masked)
    total += lora_in * r * len(names)  # lora_A's output, kept for lora_B
    return total


def activation_bytes(shape: Shape, setup: TrainSetup, checkpointing: bool) -> float:
    """Activations at the start of backward, the largest moment: every layer's saved tensors (or, with
    checkpointing, each layer's input plus one layer recomputed), the final norm, and one layer's worth
    of gradient buffers. The logits are ``logits_bytes``."""
    tokens = setup.tokens
    layer = layer_activation_bytes(shape, setup) * tokens
    final_norm = (shape.hidden * 4 + 4) * tokens
    if checkpointing:
        stream = 2 if setup.weight_bytes == 2 or setup.load_in_4bit else 4
        return shape.layers * shape.hidden * stream * tokens + 2 * layer + final_norm
    first = layer_activation_bytes(shape, setup, first=True) * tokens
    return first + (shape.layers - 1) * layer + final_norm + layer


def logits_bytes(shape: Shape, tokens: int) -> float:
    """The loss over the vocabulary: the fp32 log-softmax kept for backward, then its gradient and the
    logits' gradient, both fp32 (12 bytes per token and vocabulary entry)."""
    return 12 * shape.vocab * tokens


def autocast_copy_bytes(shape: Shape, setup: TrainSetup) -> float:
    """Autocast over fp32 weights keeps each linear's 16-bit weight copy for backward: every layer's (one at
    a time with checkpointing) and the head's, but not those of layer 0's q/k/v, whose input needs no
    gradient (base and lora_A) without checkpointing."""
    names = targeted(shape, setup.targets)
    lora = sum(setup.r * sum(shape.linears()[name]) for name in names)
    layer = shape.layer_linear_parameters() + lora
    head = shape.vocab * shape.hidden
    if setup.checkpointing:
        return 2 * (layer + head)
    qkv = ("q_proj", "k_proj", "v_proj")
    first = layer - sum(i * o for name, (i, o) in shape.linears().items() if name in qkv)
    first -= sum(setup.r * shape.hidden for name in names if name in qkv)
    return 2 * ((shape.layers - 1) * layer + first + head)


def train_plan(shape: Shape, setup: TrainSetup) -> Plan:
    """Bytes per device of one LoRA training step at its largest moment."""
    sharded = setup.devices if setup.strategy == "fsdp" else 1
    states_sharded = setup.devices if setup.strategy == "fsdp" or setup.strategy.startswith("deepspeed") else 1
    where = f"{setup.devices} devices, {setup.strategy}" if setup.devices > 1 else "1 device"
    plan = Plan(f"LoRA fine-tuning, per device ({where})")
    n_params = shape.parameters()
    if setup.load_in_4bit:
        quantised = shape.layers * shape.layer_linear_parameters()
        # peft's prepare_model_for_kbit_training casts every parameter bitsandbytes leaves unquantised to fp32
        weights = quantised * NF4_BYTES + (n_params - quantised) * 4
        plan.add("weights", weights / sharded, "NF4 (4-bit) layer linears; embeddings, head and norms fp32")
    else:
        plan.add("weights", n_params * setup.weight_bytes / sharded, f"{n_params / 1e9:.2f} B x {setup.weight_bytes} B")
    if setup.mixed and setup.weight_bytes == 4 and not setup.load_in_4bit:
        plan.add(
            "autocast weight copies", autocast_copy_bytes(shape, setup), "16-bit copies of fp32 weights for backward"
        )
    if sharded > 1:
        plan.add("FSDP gathered layers", 2 * shape.layer_parameters() * setup.weight_bytes, "one layer + prefetch")
    trainable = lora_parameters(shape, setup)
    plan.add("LoRA parameters", trainable * 4 / sharded, f"{trainable / 1e6:.1f} M trainable, fp32")
    plan.add("gradients", trainable * 4 / states_sharded, "fp32, trainable only")
    if setup.devices > 1 and setup.strategy == "ddp":
        plan.add("DDP gradient buckets", trainable * 4, "all-reduce copy")
    plan.add("AdamW moments", trainable * 8 / states_sharded, "two fp32 moments per trainable parameter")
    with_ckpt = activation_bytes(shape, setup, True)
    without = activation_bytes(shape, setup, False)
    chosen, other = (with_ckpt, without) if setup.checkpointing else (without, with_ckpt)
    label = "with" if setup.checkpointing else "without"
    plan.add(
        f"activations {label} checkpointing",
        chosen,
        f"{setup.batch_size} x {setup.seq_len} tokens; {'without' if setup.checkpointing else 'with'}: {other / GiB:.2f} GiB",
    )
    plan.add("logits and loss", logits_bytes(shape, setup.tokens), f"vocabulary {shape.vocab:,}, fp32")
    plan.add("runtime", RUNTIME_GPU if setup.on_gpu else RUNTIME_CPU, "CUDA context and slack" if setup.on_gpu else "")
    plan.extra = {
        "trainable_parameters": trainable,
        "parameters": n_params,
        "activations_with_checkpointing_gib": round(with_ckpt / GiB, 4),
        "activations_without_checkpointing_gib": round(without / GiB, 4),
    }
    return plan


def knobs(shape: Shape, setup: TrainSetup, budget: float) -> list[tuple[str, float]]:
    """Settings that bring ``train_plan`` under ``budget`` bytes: each single change that does (the largest
    batch or sequence length that fits), else the first combination, in the order checkpointing,
    4-bit base, batch size, devices with FSDP, sequence length. [(overrides, bytes)]; [] when nothing does."""

    def total(s: TrainSetup) -> float:
        return train_plan(shape, s).total

    switches = [("train.gradient_checkpointing=true", "checkpointing")]
    if setup.on_gpu:
        switches.append(("model.load_in_4bit=true", "load_in_4bit"))
    switches = [(name, attr) for name, attr in switches if not getattr(setup, attr)]

    def batch(s: TrainSetup) -> tuple[str, TrainSetup] | None:
        for size in halvings(s.batch_size):
            smaller = dataclasses.replace(s, batch_size=size)
            if total(smaller) <= budget:
                return f"train.batch_size={size} trainer.accumulate_grad_batches={s.batch_size // size}", smaller
        return None

    def devices(s: TrainSetup) -> tuple[str, TrainSetup] | None:
        for n in (2, 4, 8):
            more = dataclasses.replace(s, devices=n, strategy="fsdp")
            if total(more) <= budget:
                return f"trainer=fsdp trainer.devices={n}", more
        return None

    def seq_len(s: TrainSetup) -> tuple[str, TrainSetup] | None:
        for length in halvings(s.seq_len, floor=128):
            shorter = dataclasses.replace(s, seq_len=length)
            if total(shorter) <= budget:
                return f"train.max_seq_len={length}", shorter
        return None

    searches = [batch] + ([devices] if setup.on_gpu else []) + [seq_len]
    found = []
    for name, attr in switches:
        changed = total(dataclasses.replace(setup, **{attr: True}))
        if changed <= budget:
            found.append((name, changed))
    for search in searches:
        hit = search(setup)
        if hit:
            found.append((hit[0], total(hit[1])))
    if found:
        return found
    combined, names = setup, []
    for name, attr in switches:
        combined, names = dataclasses.replace(combined, **{attr: True}), [*names, name]
        if total(combined) <= budget:
            return [(" ".join(names), total(combined))]
    for search in searches:
        hit = search(combined)
        if hit:
            return [(" ".join([*names, hit[0]]), total(hit[1]))]
    return []


def halvings(value: int, floor: int = 1) -> list[int]:
    """value/2, value/4, ... down to ``floor``."""
    out = []
    while value // 2 >= floor:
        value //= 2
        out.append(value)
    return out


@dataclass(frozen=True)
class ServeSetup:
    """An evaluation job: a serving engine (``vllm``: backend=vllm, or a vLLM/SGLang server esgexp starts; KV
    cache in the room its memory share leaves) or backend=hf."""

    weight_bytes: int
    on_gpu: bool
    vllm: bool
    tensor_parallel: int = 1
    utilization: float = 0.9
    max_model_len: int | None = None
    batch_size: int = 8
    # How a knob is set on the command line, for the engine's own settings: backend=vllm's keys, or the flags of
    # a server esgexp starts (``{}``: the value)
    knob_max_model_len: str = "backend.max_model_len={}"
    knob_utilization: str = "backend.gpu_memory_utilization={}"
    knob_tensor_parallel: str = "backend.tensor_parallel_size={}"


def serve_plan(shape: Shape, setup: ServeSetup, device_bytes: float | None) -> Plan:
    """Bytes per device of serving the model; with ``device_bytes``, the KV-cache room left and the tokens
    it holds (``extra``: kv_tokens, and needed_tokens: vLLM's max_model_len, which it refuses to start
    without room for, or for hf a batch of ``HF_PROMPT_TOKENS``-token prompts)."""
    tp = setup.tensor_parallel if setup.vllm else 1
    where = f" (tensor parallel {tp})" if tp > 1 else ""
    engine = "a serving engine (vLLM, SGLang: paged KV cache)" if setup.vllm else "backend=hf"
    plan = Plan(f"evaluation with {engine}, per device{where}")
    n_params = shape.parameters()
    plan.add("weights", n_params * setup.weight_bytes / tp, f"{n_params / 1e9:.2f} B x {setup.weight_bytes} B")
    if setup.vllm:
        tokens = VLLM_BATCHED_TOKENS
        work = tokens * (4 * shape.hidden + 3 * shape.intermediate / tp) * setup.weight_bytes + 256 * shape.vocab * 4
        plan.add("profiling forward pass", work, f"{tokens} batched tokens, logits of 256 sequences")
        plan.add("runtime", RUNTIME_VLLM, "CUDA context, CUDA graphs (allowance)")
        needed = setup.max_model_len or shape.max_positions
    else:
        plan.add("runtime", RUNTIME_GPU if setup.on_gpu else RUNTIME_CPU)
        needed = setup.batch_size * HF_PROMPT_TOKENS
    per_token = shape.kv_bytes_per_token(setup.weight_bytes) / tp
    plan.extra = {"kv_bytes_per_token": per_token, "needed_tokens": needed}
    if device_bytes is not None:
        budget = device_bytes * (setup.utilization if setup.vllm else 1.0)
        room = max(0.0, budget - plan.total)
        plan.add("KV cache room", room, f"{int(room // per_token):,} tokens at {per_token / 1024:.0f} KiB/token")
        plan.extra |= {"budget_gib": round(budget / GiB, 4), "kv_tokens": int(room // per_token)}
    return plan


def serve_fits(plan: Plan) -> bool:
    return plan.extra.get("kv_tokens", 0) >= (plan.extra["needed_tokens"] or 1)


def serve_knobs(shape: Shape, setup: ServeSetup, device_bytes: float) -> list[tuple[str, int]]:
    """Settings under which ``serve_plan`` holds the tokens it needs: [(overrides, KV tokens then)]."""
    found = []

    def tokens(s: ServeSetup) -> tuple[bool, int]:
        plan = serve_plan(shape, s, device_bytes)
        return serve_fits(plan), plan.extra["kv_tokens"]

    if setup.vllm:
        room = tokens(setup)[1] // 1024 * 1024
        if room >= 1024:
            found.append((setup.knob_max_model_len.format(room), room))
        if setup.utilization < 0.95 and tokens(dataclasses.replace(setup, utilization=0.95))[0]:
            found.append((setup.knob_utilization.format(0.95), tokens(dataclasses.replace(setup, utilization=0.95))[1]))
        for n in (2, 4, 8):
            fits, held = tokens(dataclasses.replace(setup, tensor_parallel=n))
            if n > setup.tensor_parallel and fits:
                found.append((f"{setup.knob_tensor_parallel.format(n)} (and {n} GPUs)", held))
                break
        return found
    if setup.weight_bytes == 4 and tokens(dataclasses.replace(setup, weight_bytes=2))[0]:
        found.append(("model.dtype=bfloat16", tokens(dataclasses.replace(setup, weight_bytes=2))[1]))
    for size in halvings(setup.batch_size):
        fits, held = tokens(dataclasses.replace(setup, batch_size=size))
        if fits:
            found.append((f"trainer.batch_size={size}", held))
            break
    return found
