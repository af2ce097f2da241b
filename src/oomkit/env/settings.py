"""Which strategy, hardware, variant and features apply, and the vLLM args and env the recipe
implies for them. The layering follows the recipe's own comments: base args, then strategy
args, then hardware overrides, "last wins" per flag; a strategy-level hardware block replaces the
recipe-level block of the same key."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from oomkit.env.hardware import BY_KEY, identify, override_keys
from oomkit.env.model import EnvSnapshot
from oomkit.env.recipe import Override, Pool, Recipe, StrategyOverride
from oomkit.env.strategies import STRATEGIES
from oomkit.errors import UsageError


@dataclass(frozen=True)
class Selection:
    strategy: str
    hardware: str | None  # None: no GPU seen and none named
    hardware_named: bool  # True when --hardware chose it, False when detected or defaulted
    variant: str
    features: tuple[str, ...]


@dataclass(frozen=True)
class Asked:
    """The names the user gave (--strategy, --hardware, --variant, --feature); None: not given."""

    strategy: str | None = None
    hardware: str | None = None
    variant: str | None = None
    features: tuple[str, ...] = ()


def select(recipe: Recipe, snapshot: EnvSnapshot | None, asked: Asked, *, default_hardware: bool = False) -> Selection:
    """Validates the names; `default_hardware` falls back to the recipe's `default_hardware`."""
    strategy, hardware, variant, features = asked.strategy, asked.hardware, asked.variant, asked.features
    names = recipe.strategies()
    chosen = strategy or recipe.default_strategy or (names[0] if names else None)
    if chosen is None:
        raise UsageError(f"{recipe.name}: the recipe lists no strategies", "pass --strategy NAME")
    _known(chosen, names, "strategy", recipe.name)
    if chosen not in STRATEGIES:
        raise UsageError(
            f"strategy {chosen!r} is not one oomkit knows how to lay out", f"known: {', '.join(STRATEGIES)}"
        )
    hw = hardware or detected_hardware(snapshot)
    if hardware:
        _known(hardware, tuple(dict.fromkeys([*recipe.meta.hardware, *BY_KEY])), "hardware", recipe.name)
    if hw is None and default_hardware:
        hw = recipe.meta.default_hardware
    var = variant or ("default" if "default" in recipe.variants or not recipe.variants else next(iter(recipe.variants)))
    if recipe.variants or variant:
        _known(var, tuple(recipe.variants), "variant", recipe.name)
    _check_features(recipe, chosen, features)
    return Selection(chosen, hw, bool(hardware), var, tuple(features))


def _check_features(recipe: Recipe, strategy: str, features: tuple[str, ...]) -> None:
    for feat in features:
        _known(feat, tuple(recipe.features), "feature", recipe.name)
        clash = [f for f in _EXCLUSIVE.findall(recipe.features[feat].description) if f in features]
        if clash:
            raise UsageError(
                f"{recipe.name}: features {feat!r} and {clash[0]!r} are mutually exclusive", "pass only one of them"
            )
        allowed = recipe.features[feat].strategies
        if allowed is not None and strategy not in allowed:
            raise UsageError(
                f"{recipe.name}: feature {feat!r} is not offered for {strategy}",
                f"the recipe allows it for: {', '.join(allowed)}",
            )


def detected_hardware(snapshot: EnvSnapshot | None) -> str | None:
    """The hardware key of the visible GPUs when they are all one known model."""
    if snapshot is None:
        return None
    keys = {g.hardware or identify(g.name) for g in snapshot.visible_gpus}
    return keys.pop() if len(keys) == 1 else None


def _known(name: str, choices: tuple[str, ...], what: str, recipe: str) -> None:
    if name in choices:
        return
    near = difflib.get_close_matches(name, choices, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UsageError(f"{recipe}: unknown {what} {name!r}", f"{hint}choose one of: {', '.join(choices)}")


_EXCLUSIVE = re.compile(r"[Mm]utually exclusive with `?(\w+)`?")  # K2.5/K3 text_only vs encoder_parallel


@dataclass
class Settings:
    """The args (in order, one value per flag) and env the recipe sets for one selection."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def add(self, args: list[str], env: dict[str, str]) -> None:
        self.args = merge_args(self.args, args)
        self.env.update(env)


def enabled_features(recipe: Recipe, sel: Selection) -> tuple[str, ...]:
    """Features on by default (not opt-in for this hardware) plus the ones asked for,
    kept only where the feature's `strategies` allow this strategy."""
    opt_in = set(recipe.opt_in_features) | set(recipe.hardware_opt_in_features.get(sel.hardware or "", []))
    wanted = [f for f in recipe.features if f not in opt_in] + list(sel.features)
    # "Mutually exclusive with X" in a requested feature's description turns a default X off.
    excluded = {m for f in sel.features for m in _EXCLUSIVE.findall(recipe.features[f].description)}
    out = []
    for name in dict.fromkeys(w for w in wanted if w not in excluded or w in sel.features):
        allowed = recipe.features[name].strategies
        if allowed is None or sel.strategy in allowed:
            out.append(name)
    return tuple(out)


def resolve(recipe: Recipe, sel: Selection, pool: str | None = None) -> Settings:
    """Args and env without the parallel layout flags (see strategies.Layout.parallel_args)."""
    keys = override_keys(sel.hardware) if sel.hardware else ()
    variant = recipe.variants.get(sel.variant)
    strat = recipe.strategy_overrides.get(sel.strategy, StrategyOverride())
    out = Settings()
    out.add(recipe.model.base_args, recipe.model.base_env)
    if variant is not None:
        out.add(variant.extra_args, variant.extra_env)
    out.add(strat.extra_args, {**strat.extra_env, **strat.env})
    pool_cfg = _pool(strat, pool)
    if pool_cfg is not None:
        out.add(pool_cfg.vllm_args, pool_cfg.env)
    for key in keys:
        block = strat.hardware_overrides.get(key) or recipe.hardware_overrides.get(key)
        _add_override(out, block)
        if pool_cfg is not None:
            _add_override(out, pool_cfg.hardware_overrides.get(key))
        if variant is not None:
            _add_override(out, variant.hardware_overrides.get(key))
    for name in enabled_features(recipe, sel):
        feat = recipe.features[name]
        # A feature's hardware block replaces its args (K3 spec_decoding on AMD).
        hw = next((feat.hardware_overrides[k] for k in reversed(keys) if k in feat.hardware_overrides), None)
        out.add(hw.args if hw and hw.args else feat.args, {**feat.env, **(hw.env if hw else {})})
    return out


def _pool(strat: StrategyOverride, pool: str | None) -> Pool | None:
    return getattr(strat, pool) if pool in ("prefill", "decode") else None


def _add_override(out: Settings, block: Override | None) -> None:
    if block is not None:
        out.add(block.extra_args + block.args, {**block.extra_env, **block.env})


def flag_key(token: str) -> str:
    """`--no-enable-x`, `--enable_x=1` and `--enable-x` name the same setting."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        if name.startswith("--no-"):
            name = "--" + name[5:]
    return name


def split_flags(args: list[str]) -> list[list[str]]:
    """Groups a flat arg list into [flag, values...] items."""
    groups: list[list[str]] = []
    for token in args:
        if token.startswith("-") and not _is_number(token) or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def merge_args(first: list[str], later: list[str]) -> list[str]:
    """Later flags replace earlier ones with the same key, in the earlier position."""
    merged = split_flags(first)
    for group in split_flags(later):
        key = flag_key(group[0])
        at = next((i for i, g in enumerate(merged) if flag_key(g[0]) == key), None)
        if at is None:
            merged.append(group)
        else:
            merged[at] = group
    return [tok for g in merged for tok in g]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def min_gpus(recipe: Recipe, strategy: str, hardware: str | None) -> tuple[int | None, str]:
    """The recipe's GPU floor: `strategy_min_gpus` by strategy, raised by a hardware key (h100: 32)."""
    by_strategy = recipe.strategy_min_gpus.get(strategy)
    by_hardware = recipe.strategy_min_gpus.get(hardware) if hardware else None
    if by_hardware and (by_strategy is None or by_hardware > by_strategy):
        return by_hardware, f"strategy_min_gpus.{hardware}"
    if by_strategy:
        return by_strategy, f"strategy_min_gpus.{strategy}"
    return None, ""


def tp_override(recipe: Recipe, sel: Selection) -> int | None:
    """A TP size the recipe pins: per variant, or per strategy (optionally per hardware)."""
    variant = recipe.variants.get(sel.variant)
    if variant is not None and variant.tp:
        return variant.tp
    tp = recipe.strategy_overrides.get(sel.strategy, StrategyOverride()).tp
    if isinstance(tp, dict):
        return tp.get(sel.hardware or "")
    return tp
