"""What arithmetic this process really gets under the instruction-set caps in its environment (`make test-isa`):
``python tests/isa_report.py`` prints one line: the caps asked for (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY),
torch's kernel capability, esgexp's native-bf16 verdict, the ISA oneDNN dispatches to (from its own verbose log,
read in a child process) and the ISA OpenVINO's CPU plugin reports. A cap above what the CPU
has changes nothing, and this line says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# A convolution large enough that torch hands it to oneDNN, under torch's switch for oneDNN's verbose log.
ONEDNN_PROBE = (
    "import torch\n"
    "with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):\n"
    "    torch.nn.functional.conv2d(torch.ones(1, 32, 64, 64), torch.ones(32, 32, 3, 3))"
)


def onednn_isa() -> str:
    """The ISA oneDNN names in its verbose log (printed on the C side, so read from a child), or what it said."""
    done = subprocess.run([sys.executable, "-c", ONEDNN_PROBE], capture_output=True, text=True, timeout=120)
    found = re.search(r"isa:([^,\n]+)", done.stdout + done.stderr)
    return found.group(1).strip() if found else "not reported (oneDNN printed no isa line)"


def openvino_isa() -> str:
    """OpenVINO's CPU plugin's optimisation capabilities, or why they are unknown."""
    try:
        import openvino
    except ImportError:
        return "openvino not installed"
    return " ".join(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def main() -> None:
    import torch

    from esgexp.models.loading import cpu_has_fast_bf16

    caps = {name: os.environ.get(name, "unset") for name in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    print(
        " | ".join(
            [
                ", ".join(f"{name}={value}" for name, value in caps.items()),
                f"torch kernels: {torch.backends.cpu.get_cpu_capability()}",
                f"esgexp: {cpu_has_fast_bf16()[1]}",
                f"oneDNN: {onednn_isa()}",
                f"OpenVINO CPU: {openvino_isa()}",
            ]
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
