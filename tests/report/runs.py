"""Hand-built run results (the JSON of ``RunResult.to_json``) with known numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_result(
    engine: str = "single",
    *,
    world_size: int = 1,
    seconds: tuple[float, ...] = (2.0, 1.0, 1.5),
    loss: tuple[float, ...] = (1.0, 0.8, 0.6),
    val: tuple[float, ...] = (0.5, 0.6, 0.7),
    comm: bool = False,
    io: bool = True,
    metric: str = "accuracy",
    **top: Any,
) -> dict[str, Any]:
    """A run of ``len(seconds)`` epochs: median epoch ``median(seconds)``, total
    ``sum(seconds) + 0.5`` (evaluation), best validation at the last epoch, test 0.65."""
    history = []
    for e, (s, lo, v) in enumerate(zip(seconds, loss, val, strict=True), 1):
        rec: dict[str, Any] = {
            "epoch": e,
            "loss": lo,
            "train_accuracy": 0.5,
            "seconds": s,
            "time_split": {"sampling": 0.2 * s, "gather": 0.3 * s, "forward_backward": 0.5 * s},
            f"val_{metric}": v,
        }
        if io:
            rec["io"] = {
                "requested": 100,
                "hits": 50 + 10 * e,
                "bytes_read": 4096 * e,
                "cache_hit_rate": (50 + 10 * e) / 100,
            }
        if comm:
            rec["comm"] = {"bytes_sent": 2_000_000, "allreduce_bytes": 500_000}
        history.append(rec)
    d = {
        "engine": engine,
        "world_size": world_size,
        "num_parts": world_size,
        "epochs": len(seconds),
        "best_epoch": len(seconds),
        f"val_{metric}": max(val),
        f"test_{metric}": 0.65,
        "metric": metric,
        "seconds_per_epoch": sum(seconds) / len(seconds),
        "eval_seconds": 0.5,
        "config": {"model": "gcn", "lr": 0.01, "hidden": 16},
        "history": history,
        "graph": "data/cora",
    }
    d.update(top)
    return d


def write_run(path: Path, d: dict[str, Any]) -> Path:
    path.write_text(json.dumps(d))
    return path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
