"""What scripts/gpu_check.py found: the checks that failed and the figures
measured, shared by its stages (gpu_check_paths.py, gpu_check_memory.py)."""
import traceback
from typing import Any, Callable, Dict, List, Optional, TypeVar

T = TypeVar("T")

failures: List[str] = []
# Figures by kind, written to --json: rates_gbps, waits_us, gpu_mib, ...
results: Dict[str, Any] = {"rates_gbps": {}, "waits_us": {}, "gpu_mib": {}}


def check(ok: bool, what: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def stage(name: str, fn: Callable[..., T], *args: Any) -> Optional[T]:
    """Runs one stage; an exception fails it and the next stage still runs."""
    print(f"== {name}", flush=True)
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - report and go on
        traceback.print_exc()
        failures.append(f"{name}: {type(e).__name__}: {e}")
        return None
