"""Training arms of the embedded trainer: their registry (`ARMS`, the one list below), the protocol every arm
implements (`base`: `Arm`, its hooks and their order, `StepContext`, `build_arms`) and one module per arm.

Each arm is registered lazily (`"module:Class"`, imported when a run turns it on or asks its class), with
`switch=` naming the config key of the built-in arms that have their own (users' configs keep them). A new arm
is one module here and one line below; `TrainConfig.arms` then turns it on (docs/extending.md). This module
imports nothing of the arms, so `envace.trainers.config` checks arm names without loading a model stack.
"""

from __future__ import annotations

from typing import Any

from envace.registry import Registry

ARMS: Registry[Any] = Registry("training arm")  # name -> a subclass of envace.trainers.arms.base.Arm

ARMS.add_lazy("dynamic_sampling", "envace.trainers.arms.dynamic_sampling:DynamicSamplingArm",
              switch="dynamic_sampling.enabled")
ARMS.add_lazy("echo", "envace.trainers.arms.echo:EchoArm", switch="algo.echo_coef > 0")
ARMS.add_lazy("flip_advantage_sign", "envace.trainers.arms.flip_sign:FlipSignArm", switch="flip_advantage_sign")
ARMS.add_lazy("grounded", "envace.trainers.arms.grounded:GroundedArm", switch="grounded.fraction > 0")
ARMS.add_lazy("shadow_monitor", "envace.trainers.arms.shadow:ShadowMonitorArm", switch="shadow_monitor")


def configured_arms(cfg: Any) -> list[str]:
    """The names of the arms `cfg` (a TrainConfig) turns on, in hook order: the built-ins whose switch is on
    (sorted by name), then `cfg.arms` in the order listed."""
    switched = [n for n in ARMS.names() if ARMS.info(n).get("switch") and ARMS.get(n).switched_on(cfg)]
    return switched + [n for n in cfg.arms if n not in switched]


def check_arm_names(names: list[str]) -> str | None:
    """Why `TrainConfig.arms` is wrong (an unknown name, a built-in that has its own switch, a repeat), or None."""
    for name in names:
        if name not in ARMS:
            return (f"arms: {name!r} is not a registered training arm (valid names: {', '.join(ARMS.names())}); "
                    "remove it, or register it in envace/trainers/arms/__init__.py")
        switch = ARMS.info(name).get("switch")
        if switch:
            return f"arms: {name!r} is turned on by its own switch ({switch}); remove it from arms and set that"
    if len(set(names)) != len(names):
        return f"arms: {names} names an arm twice; list each once"
    return None


def verl_refusal_message(arm: str, setting: str, fix: str) -> str:
    """The one-line refusal of an arm the verl backend does not run: `<setting>: the <arm> arm <reason>; <fix>`,
    the reason being the arm's own `verl_refusal`. Raises ValueError for an arm verl runs (nothing to refuse)."""
    reason = ARMS.get(arm).verl_refusal
    if reason is None:
        raise ValueError(f"the {arm} arm runs on verl; {setting} needs no refusal")
    return f"{setting}: the {arm} arm {reason}; {fix}"
