"""The device profile schema: one YAML file per device, validated once at the edge.

Every model forbids unknown keys: a typo in a profile (``accuracy_dorp``) must fail
loudly instead of silently falling back to a default the user did not choose.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Format(str, Enum):
    onnx = "onnx"
    tflite = "tflite"
    openvino = "openvino"
    coreml = "coreml"
    c = "c"


class Precision(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"
    int8 = "int8"


class Device(Strict):
    name: str
    arch: Literal["x86_64", "aarch64", "armv7l", "cortex-m", "arm64-apple"]
    cpu: str = "unknown"
    cores: int = Field(1, ge=1, le=1024)
    ram_mb: int = Field(..., gt=0)
    accelerator: Literal["none", "gpu", "npu", "ane", "dsp", "vpu"] = "none"
    os: Literal["linux", "macos", "ios", "android", "baremetal"] = "linux"


# a DNS name, an IPv4/IPv6 address (optionally [bracketed], %zone) or an ssh_config alias;
# nothing a shell, ssh_config's %-tokens or ProxyCommand could read as more than a name
SSH_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*|\[?[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]?")
SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\$?")


def check_ssh_host(host: str) -> str:
    """``host`` when it is a plain name or address; a ValueError saying what to do if not."""
    if not SSH_HOST.fullmatch(host) or len(host) > 253:
        raise ValueError(
            f"{host!r} is not a host name, an IP address or an ssh_config alias: use a plain "
            "name (letters, digits, '.', '-', '_') or an address; put anything more "
            "elaborate (ProxyCommand, options) in ~/.ssh/config under a Host alias")
    return host


def check_ssh_user(user: str | None) -> str | None:
    if user is not None and not SSH_USER.fullmatch(user):
        raise ValueError(f"{user!r} is not a plain user name: use the login name only "
                         "(letters, digits, '.', '-', '_')")
    return user


class Ssh(Strict):
    host: str = Field(..., description="host name or ~/.ssh/config alias")
    user: str | None = None
    port: int = Field(22, ge=1, le=65535)
    identity: str | None = Field(None, description="private key file; default: agent + ~/.ssh")
    workdir: str = "/tmp/edgesmith"
    host_key: Literal["strict", "accept-new"] = "strict"
    known_hosts: str | None = Field(None, description="default: ~/.ssh/known_hosts")
    connect_timeout_s: float = Field(10.0, gt=0, le=600)
    command_timeout_s: float = Field(600.0, gt=0, le=86400)
    python: str = "python3"

    # refused here, so `profiles validate`, a fleet file and --host all stop it (exit 2)
    # before anything could pass it to ssh_config parsing or a remote shell
    _plain_host = field_validator("host")(check_ssh_host)
    _plain_user = field_validator("user")(check_ssh_user)


class Prune(Strict):
    enabled: bool = False
    ratio: float | None = Field(None, gt=0, lt=1, description="fraction of channels removed")
    macs_reduction: float | None = Field(None, gt=0, lt=1, description="fraction of MACs removed")
    importance: Literal["magnitude", "l2", "bn_scale", "taylor"] = "l2"
    round_to: int | None = Field(None, ge=1, le=256)
    ignored_layers: list[str] | None = Field(None, description="default: the classifier")
    global_pruning: bool = False
    finetune_epochs: int = Field(15, ge=0, le=1000)
    lr: float = Field(0.01, gt=0)

    @model_validator(mode="after")
    def _one_target(self) -> Prune:
        if self.ratio is not None and self.macs_reduction is not None:
            raise ValueError("set either ratio or macs_reduction, not both")
        return self


class Qat(Strict):
    enabled: bool = False
    epochs: int = Field(3, ge=0, le=1000)
    lr: float = Field(1e-3, gt=0)
    preset: Literal["performance", "mixed"] = "performance"
    ignored_scopes: list[str] = Field(default_factory=list)


class Calibration(Strict):
    samples: int = Field(300, ge=1, le=1_000_000)
    method: Literal["minmax", "percentile", "entropy", "mse"] = "minmax"
    percentile: float = Field(99.99, gt=50, le=100)
    per_channel: bool = True


class Train(Strict):
    optimizer: Literal["sgd", "adamw"] = "sgd"
    batch_size: int = Field(64, ge=1, le=65536)
    seed: int = 0
    patience: int = Field(5, ge=1, description="epochs without val gain before early stop")


class Compress(Strict):
    prune: Prune = Prune()
    qat: Qat = Qat()
    calibration: Calibration = Calibration()
    train: Train = Train()


class TargetSpec(Strict):
    format: Format
    precision: Precision = Precision.fp32
    options: dict[str, Any] = Field(
        default_factory=dict, description="format options, validated by the format's module"
    )

    @property
    def name(self) -> str:
        return f"{self.format.value}-{self.precision.value}"


class Budgets(Strict):
    latency_ms: float | None = Field(None, gt=0)
    accuracy_drop: float | None = Field(None, ge=0, le=100, description="top-1 points vs FP32")
    model_kb: float | None = Field(None, gt=0)
    arena_kb: float | None = Field(None, gt=0)
    energy_mj: float | None = Field(
        None, gt=0, description="energy per inference, where the device has a sensor")


_U32 = 0xFFFF_FFFF  # the C runtime keeps microseconds in uint32_t fields


class Power(Strict):
    """Defaults of the generated runtime's scheduled entry point (``model.h``), checked
    here so a value the C side cannot hold is a profile error with its file and line."""

    max_steps: int | None = Field(None, ge=1, le=2**31 - 1,
                                  description="steps per slice of a duty cycle")
    run_us: int | None = Field(None, ge=1, le=_U32, description="time budget per slice")
    sleep_us: int = Field(0, ge=0, le=_U32, description="sleep between slices")
    period_ms: float | None = Field(
        None, ge=0.001, le=3_600_000,
        description="one inference per period, sleeping between (a camera's frame loop)")
    # cpufreq names are at most 15 characters (CPUFREQ_NAME_LEN 16 with the NUL)
    governor: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,15}$")

    @model_validator(mode="after")
    def _slices_to_sleep_between(self) -> Power:
        if self.sleep_us and not (self.max_steps or self.run_us):
            raise ValueError("sleep_us is set, but neither max_steps nor run_us cuts the "
                             "inference into slices to sleep between: add max_steps (steps "
                             "per slice) or run_us (time per slice), or remove sleep_us")
        return self


class CoreMLRuntime(Strict):
    """The deployment target a Core ML model must load on: it caps the spec version."""

    ios: int | None = Field(None, ge=11, le=40)
    macos: int | None = Field(None, ge=10, le=40)


class Runtimes(Strict):
    """The runtime releases the device really has: pip requirement strings where a pip
    package exists (``tflite-runtime==2.14.0``), so the same string can build the isolated
    environment that checks an artifact against exactly that release."""

    tflite: str | None = None
    onnxruntime: str | None = None
    openvino: str | None = None
    coreml: CoreMLRuntime | None = None


class Preprocess(Strict):
    """How a camera frame (HWC uint8, RGB unless ``channel_order`` says BGR) becomes the
    model's input tensor; applied identically on the host, in the device script and in
    the C harness, and recorded in the manifest."""

    resize: list[int] | None = Field(
        None, min_length=2, max_length=2, description="[height, width] before the crop")
    center_crop: list[int] | None = Field(None, min_length=2, max_length=2)
    mean: list[float] | None = Field(None, min_length=1, max_length=4,
                                     description="per channel, in 0..255 units of the frame")
    std: list[float] | None = Field(None, min_length=1, max_length=4)
    channel_order: Literal["rgb", "bgr"] = "rgb"
    layout: Literal["nchw", "nhwc"] = "nchw"
    dtype: Literal["float32", "uint8", "int8"] = "float32"

    @field_validator("std")
    @classmethod
    def _positive_std(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(x <= 0 for x in v):
            raise ValueError("every std must be > 0")
        return v


class Profile(Strict):
    name: str
    description: str = ""
    device: Device
    ssh: Ssh | None = None
    compress: Compress = Compress()
    targets: list[TargetSpec] = Field(..., min_length=1)
    budgets: Budgets = Budgets()
    power: Power = Power()
    runtimes: Runtimes = Runtimes()
    preprocess: Preprocess | None = None

    @model_validator(mode="after")
    def _unique_targets(self) -> Profile:
        seen: set[str] = set()
        for t in self.targets:
            if t.name in seen:
                raise ValueError(f"target {t.name} is listed twice")
            seen.add(t.name)
        return self
