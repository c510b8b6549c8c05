"""The trivial engine: ``minibatch`` with its learning rate scaled."""

from __future__ import annotations

from typing import Any

from shoal.engines.minibatch.engine import MinibatchEngine


class TrivialEngine(MinibatchEngine):
    name = "trivial"

    def __init__(self, store, config, ctx) -> None:
        super().__init__(store, config, ctx)
        for group in self.optimizer.param_groups:
            group["lr"] *= self.options.trivial_lr_scale

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "trivial_lr_scale": self.options.trivial_lr_scale}
