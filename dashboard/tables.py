"""Display shaping for the pages: config flattening and diffs, the run table's method / key params /
final metrics, the sweep and TTS tables read from MLflow artifacts, the benchmark table beside the
paper's numbers and the learning-curve metric groups. Pure functions (pandas, no Streamlit), so they are
tested on hand-worked inputs. Nothing here computes a statistic: means and CIs come from the sweep flow.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from envace.config import flatten

ABSENT = "(absent)"

# dotted config keys shown as "key params" in the run table (TrainConfig; missing keys are skipped)
KEY_PARAMS = ("model", "steps", "prompts_per_step", "k", "seed", "reward", "algo.advantage", "algo.use_kl",
              "algo.kl_coef", "optim.lr", "rollout.act.temperature", "rollout.rehearse.temperature")
FINAL_METRICS = ("reward/mean", "act/adv_mean", "rehearse/adv_mean", "act/kl", "act/clip_frac",
                 "rehearse/parse_error_rate", "fidelity/all/field_f1")

# learning-curve charts: title -> pattern over metric keys; one line per (run, matching key)
METRIC_GROUPS: dict[str, str] = {
    "Reward": r"^(reward/mean|act/reward|rehearse/reward)$",
    "Advantage (mean)": r"^(act|rehearse)/adv_mean$",
    "KL to the reference": r"^(act|rehearse)/kl$",
    "Clip fraction": r"^(act|rehearse)/clip_frac$",
    "Rehearse parse-error rate": r"^rehearse/parse_error_rate$",
    "Rehearsal fidelity (field F1, exact match)": r"(^|/)fidelity/all/(field_f1|exact_match)$",
    # the trainer's exploitation monitor (envace.trainers.arms.shadow): a widening gap = the policy fooling Rehearse
    "Rehearsed vs real reward (exploitation monitor)": r"^shadow/(reward_rehearsed|reward_real|gap)$",
    "Rehearsed vs real reward per role": r"^shadow/(act|rehearse)/(reward_rehearsed|reward_real)$",
    # the same monitor's world-model readings: rehearsed answers vs the real world's, per step
    "World model vs the real world (exact match, error recall / precision)":
        r"^shadow/(exact_match|error_recall|error_precision)$",
    "Sampling entropy per role": r"^(act|rehearse)/entropy$",
}


def _show(v: Any) -> str:
    """JSON text, so a string "1" and a number 1 look (and compare) different."""
    if v is ABSENT:
        return ABSENT
    return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)


def config_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> pd.DataFrame:
    """Side-by-side flattened configs: columns key, a, b (values as JSON text), differs."""
    fa, fb = flatten(a or {}), flatten(b or {})
    rows = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, ABSENT), fb.get(key, ABSENT)
        sa, sb = _show(va), _show(vb)
        rows.append({"key": key, "a": sa, "b": sb, "differs": sa != sb})
    return pd.DataFrame(rows, columns=["key", "a", "b", "differs"])


def highlight_diff(df: pd.DataFrame) -> Any:
    """A Styler colouring the rows whose values differ (for st.dataframe)."""
    def colour(row: pd.Series) -> list[str]:
        style = "background-color: #ffe08a; font-weight: bold" if row["differs"] else ""
        return [style] * len(row)

    return df.style.apply(colour, axis=1)


def run_method(config: Mapping[str, Any] | None, tags: Mapping[str, str] | None = None) -> str:
    """"<rollout mode> / <policy>" from the stored config, else from the MLflow tags the trainer sets."""
    c, t = config or {}, tags or {}
    rollout = c.get("rollout") if isinstance(c.get("rollout"), Mapping) else {}
    mode = rollout.get("mode") or t.get("envace.mode")
    policy = c.get("policy") or t.get("envace.policy")
    if mode is None and policy is None:
        return ""
    return f"{mode or '?'} / {policy or '?'}"


def key_params(config: Mapping[str, Any] | None) -> dict[str, Any]:
    flat = flatten(config or {})
    return {k: flat[k] for k in KEY_PARAMS if k in flat}


def final_metrics(metrics: Mapping[str, float] | None) -> dict[str, float]:
    m = metrics or {}
    return {k: m[k] for k in FINAL_METRICS if k in m}


def group_keys(keys: list[str] | set[str], pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return sorted(k for k in keys if rx.search(k))


def read_csv(text: str, artifact: str) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(text))
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"artifact {artifact} is not a readable CSV table ({exc}); "
                         "re-run the flow that logs it") from exc


def _lower_map(df: pd.DataFrame) -> dict[str, str]:
    return {str(c).strip().lower(): c for c in df.columns}


def _ci_text(mean: Any, ci: Any, digits: int) -> str:
    if pd.isna(mean):
        return "—"
    return f"{mean:.{digits}f}" if ci is None or pd.isna(ci) else f"{mean:.{digits}f} ± {ci:.{digits}f}"


def sweep_table(df: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """The ablation table with a "mean ± 95% CI" column.

    Accepts the sweep flow's long table (envace.sweeps.results: axes, group, metric, n, mean, ci95, …,
    display; its `display` text is shown as is), any table with `mean` [+ `ci95`] columns, or per-metric
    column pairs `<metric>_mean` / `<metric>_ci95` (melted to one row per cell and metric). Raises
    ValueError naming the columns found when none of these shapes is there."""
    low = _lower_map(df)
    if "mean" in low:
        out = df.rename(columns={low["mean"]: "mean", **({low["ci95"]: "ci95"} if "ci95" in low else {})})
        if "ci95" not in out:
            out["ci95"] = float("nan")
    else:
        pairs = {m.group(1): c for c in df.columns if (m := re.match(r"^(.+?)[_ ]mean$", str(c).strip(), re.I))}
        if not pairs:
            raise ValueError(f"sweep table has no 'mean' column nor '<metric>_mean' columns (columns: "
                             f"{list(df.columns)}); the sweep flow writes mean and ci95 per cell")
        stat_cols = set(pairs.values())
        cis = {}
        for metric in pairs:
            rx = re.compile(rf"^{re.escape(metric)}[_ ]ci95$", re.I)
            ci = next((c for c in df.columns if rx.match(str(c).strip())), None)
            cis[metric] = ci
            if ci is not None:
                stat_cols.add(ci)
        ids = [c for c in df.columns if c not in stat_cols]
        parts = []
        for metric, col in pairs.items():
            part = df[ids].copy()
            part["metric"] = metric
            part["mean"] = df[col]
            part["ci95"] = df[cis[metric]] if cis[metric] is not None else float("nan")
            parts.append(part)
        out = pd.concat(parts, ignore_index=True)
    out = out.copy()
    if "display" in out.columns:
        out["mean ± 95% CI"] = out["display"].astype(str)
    else:
        out["mean ± 95% CI"] = [_ci_text(m, c, digits) for m, c in zip(out["mean"], out["ci95"])]
    return out


PAIRED_IDS = ("comparison", "kind", "pass", "starts", "seeds", "n", "tasks")
PAIRED_STATS = ("diff", "task_lo", "task_hi", "seed_t_lo", "seed_t_hi", "seed_boot_lo", "seed_boot_hi", "k_improved",
                "p", "p_holm", "verdict", "iqm_a", "iqm_b", "poi")


def paired_metrics(df: pd.DataFrame) -> list[str]:
    """The metrics of the sweep flow's seed-level paired table (envace.sweeps.paired_report): `<m>_verdict`."""
    return [str(c)[:-len("_verdict")] for c in df.columns if str(c).endswith("_verdict")]


def _fmt(x: Any, spec: str) -> str:
    return "—" if x is None or pd.isna(x) else format(x, spec)


def paired_frame(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One metric of the paired table as display text: Δ, the task-only / seed-t / seed-boot 95 % intervals,
    k of n runs improved, p, Holm's p, IQM of each side, P(A > B) and the verdict. Raises ValueError naming
    the missing columns (a paired.csv written before the seed-level report has no `pass` nor `<m>_seed_t_lo`)."""
    need = [*PAIRED_IDS, *(f"{metric}_{s}" for s in PAIRED_STATS)]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"paired table lacks column(s) {missing} (columns: {list(df.columns)}); the sweep flow "
                         "writes the seed-level table: run the sweep again (finished cells are cached)")

    def iv(r: Any, name: str) -> str:
        lo, hi = r[f"{metric}_{name}_lo"], r[f"{metric}_{name}_hi"]
        return "—" if pd.isna(lo) or pd.isna(hi) else f"[{lo:+.3f}, {hi:+.3f}]"

    rows = [{"comparison": r["comparison"], "kind": r["kind"], "pass": r["pass"], "starts": r["starts"],
             "seeds": r["seeds"], "tasks": _fmt(r["tasks"], ".0f"), "Δ": _fmt(r[f"{metric}_diff"], "+.3f"),
             "task-only 95%": iv(r, "task"), "seed-t 95%": iv(r, "seed_t"), "seed-boot 95%": iv(r, "seed_boot"),
             "improved": f"{_fmt(r[f'{metric}_k_improved'], '.0f')}/{_fmt(r['n'], '.0f')}",
             "p": _fmt(r[f"{metric}_p"], ".3g"), "p (Holm)": _fmt(r[f"{metric}_p_holm"], ".3g"),
             "IQM A / B": f"{_fmt(r[f'{metric}_iqm_a'], '.3f')} / {_fmt(r[f'{metric}_iqm_b'], '.3f')}",
             "P(A > B)": _fmt(r[f"{metric}_poi"], ".2f"), "verdict": str(r[f"{metric}_verdict"])}
            for _, r in df.iterrows()]
    return pd.DataFrame(rows, columns=["comparison", "kind", "pass", "starts", "seeds", "tasks", "Δ", "task-only 95%",
                                       "seed-t 95%", "seed-boot 95%", "improved", "p", "p (Holm)", "IQM A / B",
                                       "P(A > B)", "verdict"])


def curves_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The sweep flow's per-arm curves (envace.sweeps.curves: group, metric, step, n, mean, low, high), steps as
    integers. Raises ValueError naming the missing columns."""
    missing = [c for c in ("group", "metric", "step", "mean") if c not in df.columns]
    if missing:
        raise ValueError(f"curves table lacks column(s) {missing} (columns: {list(df.columns)}); the sweep flow "
                         "writes group, metric, step, n, mean, low, high")
    out = df.copy()
    out["step"] = out["step"].astype(int)
    for c in ("low", "high"):
        if c not in out.columns:
            out[c] = float("nan")
    return out


def label_column(df: pd.DataFrame) -> str:
    """The column naming a sweep's grid points: the flow's `group`, else `cell` / `method`."""
    return next((c for c in ("group", "cell", "method") if c in df.columns), str(df.columns[0]))


def tts_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Columns N, mode, score[, ci95][, metric].

    Accepts the TTS flow's long table (tts.n, tts.mode[, tts.memory], metric, n = seeds, mean, ci95, …) or a
    plain one (N, mode, score). Where a `mean` column exists, a lowercase `n` is a seed count, never N. With a
    memory-strategy axis each (mode, memory) is a line of its own."""
    low = _lower_map(df)
    score = low.get("score") or low.get("mean")
    n_col = low.get("tts.n") or ("N" if "N" in df.columns else None) or (low.get("n") if "mean" not in low else None)
    mode = low.get("tts.mode") or low.get("mode")
    missing = [name for name, col in (("N", n_col), ("mode", mode), ("score", score)) if col is None]
    if missing:
        raise ValueError(f"TTS table lacks column(s) {missing} (columns: {list(df.columns)}); the TTS sweep "
                         f"writes tts.n, tts.mode, metric, mean, ci95 (or N, mode, score)")
    modes = df[mode].astype(str)
    if "tts.memory" in low:  # "parallel (calls)": " · " parts name the model (tts_lines)
        modes = modes + " (" + df[low["tts.memory"]].astype(str) + ")"
    if "model" in low:  # a base-vs-trained sweep: one line per (model, mode)
        modes = df[low["model"]].astype(str).map(lambda m: Path(m).name or m) + " · " + modes
    out = pd.DataFrame({"N": pd.to_numeric(df[n_col], errors="coerce"), "mode": modes,
                        "score": pd.to_numeric(df[score], errors="coerce")})
    if "ci95" in low:
        out["ci95"] = pd.to_numeric(df[low["ci95"]], errors="coerce")
    if "metric" in low:
        out["metric"] = df[low["metric"]].astype(str)
    out = out.dropna(subset=["N", "score"])
    out["N"] = out["N"].astype(int)
    return out.sort_values(["mode", "N"]).reset_index(drop=True)


def tts_lines(frame: pd.DataFrame) -> dict[str, list[tuple[int, float, float]]]:
    """(N, score, ci95) points per mode. N = 0 (no private rehearsal) is one run shared by every mode,
    and the flow runs it once under the first mode; it starts every mode's line, so each line is
    read against the same baseline."""
    points: dict[str, list[tuple[int, float, float]]] = {}
    for row in frame.itertuples(index=False):
        ci = getattr(row, "ci95", float("nan"))
        points.setdefault(row.mode, []).append((int(row.N), float(row.score), float(ci)))
    def model_of(line: str) -> str:  # "model · mode" lines share the N = 0 run of their model only
        return line.rsplit(" · ", 1)[0] if " · " in line else ""

    for model in {model_of(m) for m in points}:
        lines = {m: ps for m, ps in points.items() if model_of(m) == model}
        base = [p for ps in lines.values() for p in ps if p[0] == 0]
        if len(base) == 1:
            for ps in lines.values():
                if not any(p[0] == 0 for p in ps):
                    ps.insert(0, base[0])
    return {m: sorted(ps) for m, ps in sorted(points.items())}


BENCH_COLUMNS = {"bfcl": "BFCL-v4", "tau2": "τ²-Bench", "vita": "VitaBench", "overall": "Overall"}


def benchmark_table(report: Mapping[str, Any], ours_label: str) -> pd.DataFrame:
    """Rows: the paper's models as the report carries them (`paper`), then ours; columns BFCL-v4, τ²-Bench,
    VitaBench, Overall (percent)."""
    paper = report.get("paper") or {}
    ours = report.get("ours") or {}
    rows = []
    for model, scores in paper.items():
        rows.append({"model": model, **{title: scores.get(k) for k, title in BENCH_COLUMNS.items()}})
    rows.append({"model": ours_label, **{title: ours.get(k) for k, title in BENCH_COLUMNS.items()}})
    return pd.DataFrame(rows, columns=["model", *BENCH_COLUMNS.values()])


def benchmark_details(report: Mapping[str, Any]) -> pd.DataFrame:
    """One row per benchmark run: headline (percent), k, limit and the models that played each part."""
    rows = []
    for name, b in (report.get("benchmarks") or {}).items():
        models = b.get("models") or {}
        overall = b.get("overall")
        rows.append({"benchmark": name, "score (%)": None if overall is None else 100.0 * overall,
                     "k": b.get("k"), "limit": b.get("limit"), "policy": models.get("policy"),
                     "user simulator": models.get("user_simulator"), "judge": models.get("judge"),
                     "departures": len(b.get("departures") or [])})
    return pd.DataFrame(rows, columns=["benchmark", "score (%)", "k", "limit", "policy", "user simulator", "judge",
                                       "departures"])
