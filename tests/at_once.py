"""A Hydra callback for tests that start several CLI jobs "at the same instant": each job, once Hydra has
composed its config, says it is ready (touches ``ready``) and waits for the test to touch ``go`` before it
goes on to make its run (or sweep) folder. Added on the command line:

    +hydra.callbacks.at_once._target_=at_once.AtOnce +hydra.callbacks.at_once.ready=R +hydra.callbacks.at_once.go=G

(with tests/ on PYTHONPATH)."""

import os
import time

from hydra.experimental.callback import Callback


class AtOnce(Callback):
    def __init__(self, ready: str, go: str, timeout_s: float = 300.0):
        self.ready, self.go, self.timeout_s = ready, go, timeout_s

    def wait(self) -> None:
        open(self.ready, "w").close()
        deadline = time.time() + self.timeout_s
        while not os.path.exists(self.go) and time.time() < deadline:
            time.sleep(0.001)

    def on_run_start(self, config, **kwargs) -> None:
        self.wait()

    def on_multirun_start(self, config, **kwargs) -> None:
        self.wait()
